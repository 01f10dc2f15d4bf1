"""Clustered FL reproductions: thesis Table 6.2 (Fashion-MNIST row) and Fig. 6.8 (permuted labels).

Table 6.2: FL (FedAvg) and robust CFL on 100 clients with 30% Byzantine, noisy or label-flip
adversaries, and without adversaries; the final accuracy of the benign clients, the round by which
every adversary had left the benign cluster, and the splits. Fig. 6.8: FL and CFL on 20 clients in
4 groups with permuted labels. Writes docs/repro_cfl.md (ours beside the paper's), .json (every
round's accuracy, cluster count and adversaries still among the benign clients) and .png.

    python scripts/repro_cfl.py --jobs 2
    python scripts/repro_cfl.py --plot-only
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedray.clients import LocalExecutor  # noqa: E402
from fedray.config import load_config  # noqa: E402
from fedray.federation import Federation  # noqa: E402
from fedray.parameter_tree import id_ranges  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE62 = ROOT / "configs" / "repro_thesis_table62_fmnist.yaml"
FIG68 = ROOT / "configs" / "repro_thesis_fig68_fmnist.yaml"
# Table 6.2, Fashion-MNIST row: final accuracy (%) of FL and CFL after 200 rounds
PAPER62 = {"byzantine": (9.6, 78.0), "noisy": (77.12, 79.7), "label_flip": (60.6, 79.7), "none": (79.9, 80.2)}
SCENARIOS = {"byzantine": "Byzantine", "noisy": "Noisy", "label_flip": "Label-Flip", "none": "Clean"}


def runs() -> list[tuple[str, str, list[str]]]:
    """(experiment, method, overrides) for every run."""
    out = []
    for scenario in SCENARIOS:
        for method in ("FL", "CFL"):
            overrides = [f"data.adversaries={scenario}"] + (["algorithm={name: fedavg}"] if method == "FL" else [])
            out.append((f"table62/{scenario}", method, overrides))
    out += [("fig68", "FL", ["algorithm={name: fedavg}"]), ("fig68", "CFL", [])]
    return out


def run(experiment: str, method: str, overrides: list[str]) -> dict:
    base = FIG68 if experiment == "fig68" else TABLE62
    config = load_config(base, overrides + [f"checkpoint_every={10 ** 6}"])
    history = []
    with tempfile.TemporaryDirectory() as run_dir:
        fed = Federation(config, run_dir, LocalExecutor)
        for _ in range(config.federation.rounds):
            m = fed.run_round().metrics
            history.append({"round": fed.round, "accuracy": m.get("eval/accuracy"),
                            "clusters": m.get("cfl/clusters", 1.0), "splits": m.get("cfl/splits", 0.0),
                            "adversaries_with_benign": m.get("cfl/adversaries_with_benign")})
        adversaries = [c.client_id for c in fed.strategy.ctx.clients if c.role != "benign"]
        summary = fed.finish()
    return {"experiment": experiment, "method": method, "history": history, "adversaries": adversaries,
            "clusters": summary.get("clusters"), "dropped": summary.get("dropped_clients")}


def final_accuracy(result: dict) -> float:
    return [h["accuracy"] for h in result["history"] if h["accuracy"] is not None][-1]


def splits(result: dict) -> list[int]:
    """The rounds with a split (counted from the tree: under eq. 6.50 the cluster count stays 1)."""
    count = [h.get("splits", h["clusters"] - 1) for h in result["history"]]
    return [h["round"] for h, a, b in zip(result["history"], [0.0] + count, count) if b != a]


def cleared(result: dict) -> int | None:
    """The first round after which no adversary shares a cluster with benign clients."""
    return next((h["round"] for h in result["history"] if h["adversaries_with_benign"] == 0), None)


def write_outputs(results: dict[tuple[str, str], dict], out: Path) -> None:
    rounds62 = max((len(r["history"]) for (e, _), r in results.items() if e.startswith("table62")), default=0)
    lines = ["# Clustered FL reproductions (thesis chapter 6)", "",
             f"## Table 6.2, Fashion-MNIST: final accuracy of the benign clients, %  (`{TABLE62.name}`)", "",
             f"100 clients, 30% adversaries, robust CFL with alpha_thresh 0.02; MLP, {rounds62} rounds here, "
             "200 in the thesis (CNN).", "",
             "| method | " + " | ".join(SCENARIOS.values()) + " |", "|---|" + "---|" * len(SCENARIOS)]
    for i, method in enumerate(("FL", "CFL")):
        cells = []
        for s in SCENARIOS:
            r = results.get((f"table62/{s}", method))
            cells.append(f"**{100 * final_accuracy(r):.1f}** (paper {PAPER62[s][i]})" if r else "n.a.")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "| CFL | " + " | ".join(SCENARIOS.values()) + " |", "|---|" + "---|" * len(SCENARIOS)]
    rows = {"splits (at rounds)": lambda r: f"{len(splits(r))} ({id_ranges(splits(r))})" if splits(r) else "none",
            "clients dropped (benign among them)":
                lambda r: f"{len(r['dropped'])} ({len(set(r['dropped']) - set(r['adversaries']))})",
            "adversaries out of the benign cluster by round":
                lambda r: "no adversaries" if not r["adversaries"] else str(cleared(r) or "never")}
    for label, cell in rows.items():
        lines.append(f"| {label} | " + " | ".join(cell(results[(f"table62/{s}", "CFL")])
                                                  if (f"table62/{s}", "CFL") in results else "n.a."
                                                  for s in SCENARIOS) + " |")
    if ("fig68", "CFL") in results:
        fl, cfl = results.get(("fig68", "FL")), results[("fig68", "CFL")]
        lines += ["", f"## Fig. 6.8 on Fashion-MNIST: 20 clients, 4 label permutations  (`{FIG68.name}`)", "",
                  "| | FL | CFL | splits at rounds | final clusters |", "|---|---|---|---|---|",
                  f"| ours | {100 * final_accuracy(fl):.1f} | {100 * final_accuracy(cfl):.1f} | "
                  f"{', '.join(map(str, splits(cfl)))} | {'; '.join(id_ranges(c) for c in cfl['clusters'].values())} |",
                  "| paper (CIFAR-10, 5-layer CNN) | about 20 | close to 60 | 50, 100, 150 | 4 groups |"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")

    panels = [f"table62/{s}" for s in SCENARIOS] + ["fig68"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), sharey=True)
    for ax, experiment in zip(axes, panels):
        for method, colour in (("FL", "tab:blue"), ("CFL", "tab:red")):
            r = results.get((experiment, method))
            if r:
                points = [(h["round"], h["accuracy"]) for h in r["history"] if h["accuracy"] is not None]
                ax.plot(*zip(*points), color=colour, label=method)
                if method == "CFL":
                    for s in splits(r):
                        ax.axvline(s, color=colour, lw=0.5, ls=":")
        ax.set_title(SCENARIOS.get(experiment.split("/")[-1], "Fig. 6.8 permuted labels"))
        ax.set_xlabel("round")
    axes[0].set_ylabel("benign test accuracy")
    axes[0].legend(loc="lower right")
    fig.suptitle("Clustered FL on Fashion-MNIST (dotted: CFL splits)")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--only", nargs="+", help="experiments to run, e.g. table62/none fig68")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved .json")
    args = parser.parse_args()
    out = ROOT / "docs" / "repro_cfl"
    saved = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else []
    results = {(r["experiment"], r["method"]): r for r in saved}
    if not args.plot_only:
        todo = [r for r in runs() if not args.only or r[0] in args.only]
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run, *r) for r in todo]
            for future in as_completed(futures):
                r = future.result()
                results[(r["experiment"], r["method"])] = r
                print(f"{r['experiment']:20} {r['method']:4} final {final_accuracy(r):.4f} splits {splits(r)}",
                      flush=True)
                out.with_suffix(".json").write_text(json.dumps(list(results.values()), indent=1))
    write_outputs(results, out)
    print(f"wrote {out}.md, .json and .png")


if __name__ == "__main__":
    main()
