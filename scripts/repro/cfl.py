"""Clustered FL reproductions: thesis Table 6.2 (Fashion-MNIST row) and Fig. 6.8 (permuted labels).

Table 6.2: FL (FedAvg) and robust CFL on 100 clients with 30% Byzantine, noisy or label-flip
adversaries, and without adversaries; the final accuracy of the benign clients, the round by which
every adversary had left the benign cluster, and the splits. Fig. 6.8: FL and CFL on 20 clients in
4 groups with permuted labels. Writes docs/repro_cfl.md (ours beside the paper's), .json (every
run's accuracy, cluster count and adversaries still among the benign clients by round, its seed and
commit, and each call of the script) and .png.

Table 6.2's claims (``scripts/repro/claims.py``): CFL above FL in each of its four scenes, on the benign
clients' final accuracy, paired by seed; ``--family`` runs exactly these at seeds 0-4 in one call.
A seed sets the run's seed and the split's (``seed``, ``data.seed``), and so which clients are the
adversaries; Fig. 6.8 runs at seed 0.

    python scripts/repro/cfl.py
    python scripts/repro/cfl.py --family --jobs 2   # Table 6.2's claims' runs, in one call at one commit
    python scripts/repro/cfl.py --only table62/none --seeds 0 1 2
    python scripts/repro/cfl.py --plot-only

The runs are ``fedray sweep`` trials (``fedray.repro.run_specs``), one sweep per config, into
``--sweep`` (default ``runs/repro/repro_cfl``); a stopped grid resumes where it stopped. Runs of a
call merge into the saved ones (a run replaces the saved one of the same experiment, method and seed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from fedray.figures import figure, save_figure
from fedray.parameter_tree import id_ranges
from fedray.repro import (Store, grid_arguments, invocation, listing, markdown_table, record_file, report_failed,
                          run_specs)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.pages import runs_line, setup  # noqa: E402

TABLE62 = ROOT / "configs" / "repro_thesis_table62_fmnist.yaml"
FIG68 = ROOT / "configs" / "repro_thesis_fig68_fmnist.yaml"
# Table 6.2, Fashion-MNIST row: final accuracy (%) of FL and CFL after 200 rounds
PAPER62 = {"byzantine": (9.6, 78.0), "noisy": (77.12, 79.7), "label_flip": (60.6, 79.7), "none": (79.9, 80.2)}
SCENARIOS = {"byzantine": "Byzantine", "noisy": "Noisy", "label_flip": "Label-Flip", "none": "Clean"}
# the thesis's settings (digest thesis.md, sections 5.12-5.13), and our deviations with their reasons
PAPER62_SETUP = {"data set": "Fashion-MNIST (random even split, 30% adversaries)", "clients": "100",
                 "clients per round": "100", "rounds": "200", "model": "a CNN (not given)",
                 "local training": "sgd, batch 100"}
DEVIATIONS62 = [("an MLP (2NN) instead of the CNN", "the thesis does not give its CNN, and a CNN's cached pre-split "
                 "updates would need 8x the memory"),
                ("lr 0.1, one local epoch", "the thesis gives neither"),
                ("alpha_thresh 0.02 as the only split criterion", "the section gives no eps1 or eps2")]
PAPER68_SETUP = {"data set": "CIFAR-10 (random even split, 4 groups, each with its own label permutation)",
                 "clients": "20", "clients per round": "20", "model": "a 5-layer CNN",
                 "local training": "batch 100, 3 epochs"}
DEVIATIONS68 = [("Fashion-MNIST with an MLP (2NN) instead of CIFAR-10 with a 5-layer CNN",
                 "scaled to the 2-core machine, on the data set at hand"),
                ("batch 32 and lr 0.05", "the config's choice (the thesis gives no lr)"),
                ("eps1 a quarter of the largest mean update (the thesis's rule: a tenth), eps2 = 3 eps1",
                 "the run has 60 rounds")]

EXPERIMENTS = [*(f"table62/{s}" for s in SCENARIOS), "fig68"]

# the claims (scripts/repro/claims.py), declared before the runs: robust CFL against FL (FedAvg) in each of
# Table 6.2's four scenes, on PRIMARY (the benign clients' final accuracy: what Table 6.2 reports).
# ``--family`` runs exactly these.
PROPOSED = "CFL"
BASELINES = ("FL",)
PRIMARY = "final_benign"
FAMILY_SEEDS = (0, 1, 2, 3, 4)  # each sets the run's seed and the split's (which clients are adversaries)


def runs(seeds=(0,)) -> list[dict]:
    """Every run: experiment, method, seed and overrides; Table 6.2's at each of ``seeds``, Fig. 6.8's at 0."""
    out = []
    for seed in seeds:
        for scenario in SCENARIOS:
            for method in (PROPOSED, *BASELINES):
                overrides = [f"data.adversaries={scenario}"] + (["algorithm={name: fedavg}"] if method == "FL" else [])
                out.append({"experiment": f"table62/{scenario}", "method": method, "seed": seed,
                            "overrides": overrides})
    out += [{"experiment": "fig68", "method": "FL", "seed": 0, "overrides": ["algorithm={name: fedavg}"]},
            {"experiment": "fig68", "method": "CFL", "seed": 0, "overrides": []}]
    return out


def key(r: dict) -> tuple[str, str, int]:
    """A run's identity: experiment, method and seed (runs saved before seeds were kept are seed 0)."""
    return r["experiment"], r["method"], r.get("seed", 0)


def results_of(saved: list | dict) -> list[dict]:
    """The runs a saved docs/records/repro_cfl.json holds: its ``results``, or the whole file where it is the
    bare list of runs written before seeds, commits and calls were kept (those runs are seed 0)."""
    return saved if isinstance(saved, list) else saved["results"]


def by_run(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """The runs by (experiment, method), each list in seed order."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(results, key=key):
        out.setdefault((r["experiment"], r["method"]), []).append(r)
    return out


def seeds_of(runs: list[dict]) -> list[int]:
    return sorted({r.get("seed", 0) for r in runs})


def record(rnd: int, m: dict, config) -> dict:
    return {"round": rnd, "accuracy": m.get("eval/accuracy"), "clusters": m.get("cfl/clusters", 1.0),
            "splits": m.get("cfl/splits", 0.0), "adversaries_with_benign": m.get("cfl/adversaries_with_benign")}


def run(specs: list[dict], sweep: Path, jobs: int | None) -> tuple[dict, list]:
    """The specs as two sweeps, one per config (Table 6.2's, Fig. 6.8's), each seed crossed with the
    config's variants; returns the finished runs by key, and the failed trials."""
    results, failed = {}, []
    for config, name in ((TABLE62, "table62"), (FIG68, "fig68")):
        mine = [s for s in specs if s["experiment"].split("/")[0] == name]
        if not mine:
            continue
        done, failed_here = run_specs(config, mine, lambda s: f"{s['experiment'].split('/')[-1]},{s['method']}",
                                      sweep / name, record, jobs=jobs)
        failed += failed_here
        for spec, r in done:
            result = {"experiment": spec["experiment"], "method": spec["method"], "seed": spec["seed"],
                      "rounds": r.config.federation.rounds, "history": r.records,
                      "adversaries": r.summary.get("adversaries", []), "clusters": r.summary.get("clusters"),
                      "dropped": r.summary.get("dropped_clients"), "wall_s": r.wall_s,
                      "provenance": r.summary.get("provenance")}
            results[key(result)] = result
    return results, failed


def final_accuracy(result: dict) -> float:
    """The benign clients' final accuracy (Table 6.2's measure), as a fraction."""
    return [h["accuracy"] for h in result["history"] if h["accuracy"] is not None][-1]


def mean_final(runs: list[dict]) -> float:
    """:func:`final_accuracy`'s mean over the runs (the seeds of one cell)."""
    return float(np.mean([final_accuracy(r) for r in runs]))


def spread(values: list[int]) -> str:
    """``28``, or ``25-30`` where the seeds differ."""
    return f"{min(values)}-{max(values)}" if min(values) != max(values) else f"{values[0]}"


def splits(result: dict) -> list[int]:
    """The rounds with a split (counted from the tree: under eq. 6.50 the cluster count stays 1)."""
    count = [h.get("splits", h["clusters"] - 1) for h in result["history"]]
    return [h["round"] for h, a, b in zip(result["history"], [0.0] + count, count) if b != a]


def cleared(result: dict) -> int | None:
    """The first round after which no adversary shares a cluster with benign clients."""
    return next((h["round"] for h in result["history"] if h["adversaries_with_benign"] == 0), None)


# the CFL table's rows: from one run, and from several (a range over the seeds)
CFL_ROWS = {"splits (at rounds)": lambda r: f"{len(splits(r))} ({id_ranges(splits(r))})" if splits(r) else "none",
            "clients dropped (benign among them)":
                lambda r: f"{len(r['dropped'])} ({len(set(r['dropped']) - set(r['adversaries']))})",
            "adversaries out of the benign cluster by round":
                lambda r: "no adversaries" if not r["adversaries"] else str(cleared(r) or "never")}


def never(runs: list[dict]) -> str:
    """The rounds by which the seeds' adversaries were out of the benign cluster, and in how many never."""
    out = [v for v in map(cleared, runs) if v]
    missing = f"never in {len(runs) - len(out)} of {len(runs)}" if len(out) < len(runs) else ""
    return "; ".join(t for t in (spread(out) if out else "", missing) if t)


CFL_SEED_ROWS = {"splits": lambda rs: spread([len(splits(r)) for r in rs]),
                 "clients dropped (benign among them)":
                     lambda rs: f"{spread([len(r['dropped']) for r in rs])} "
                                f"({spread([len(set(r['dropped']) - set(r['adversaries'])) for r in rs])})",
                 "adversaries out of the benign cluster by round":
                     lambda rs: "no adversaries" if not any(r["adversaries"] for r in rs) else never(rs)}


def seeds_text(seeds: list[int]) -> str:
    """``seed 0``, ``seeds 0-4``."""
    return f"seed{'s' if len(seeds) > 1 else ''} {id_ranges(seeds)}"


def accuracy_cell(runs: list[dict], paper: float, seeds: int) -> str:
    """The benign clients' final accuracy, %: one run's, or the mean ± std over the seeds (their
    number where fewer than the table's ``seeds``), beside the thesis's."""
    if not runs:
        return "n.a."
    final = [100 * final_accuracy(r) for r in runs]
    count = f"{len(final)} seed{'s' if len(final) > 1 else ''}; " if len(final) < seeds else ""
    if len(final) == 1:
        return f"**{final[0]:.1f}** ({count}paper {paper})"
    return f"**{np.mean(final):.1f}** ± {np.std(final, ddof=1):.1f} ({count}paper {paper})"


def verdict_lines(table62: list[dict]) -> list[str]:
    """What holds of Table 6.2's claims (``scripts/repro/claims.py``), from these runs."""
    from scripts.repro import claims

    gains = ", ".join(f"{label} {PAPER62[s][1] - PAPER62[s][0]:+.1f}" for s, label in SCENARIOS.items())
    return claims.verdict_lines(lambda: claims.cfl_family(table62), "CFL against FL in each scene, on the benign "
                                "clients' final accuracy", f"The thesis's Fashion-MNIST row (no spread given) has "
                                f"CFL above FL in every scene: {gains} points.")


def table62_lines(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    runs = [r for (e, _), rs in results.items() if e.startswith("table62") for r in rs]
    rounds = "/".join(map(str, sorted({len(r["history"]) for r in runs}))) or "0"
    seeds = seeds_of(runs)
    get = {(s, m): results.get((f"table62/{s}", m), []) for s in SCENARIOS for m in (BASELINES[0], PROPOSED)}
    acc = [[method] + [accuracy_cell(get[s, method], PAPER62[s][i], len(seeds)) for s in SCENARIOS]
           for i, method in enumerate((BASELINES[0], PROPOSED))]
    if len(seeds) > 1:
        cfl = [[label] + [cell(get[s, "CFL"]) if get[s, "CFL"] else "n.a." for s in SCENARIOS]
               for label, cell in CFL_SEED_ROWS.items()]
        which = (f"{seeds_text(seeds)}, each the run's seed and the split's (which clients are adversaries); "
                 "an accuracy is the mean ± std over the seeds, a cell of the CFL table below the range over them")
    else:
        cfl = [[label] + [cell(get[s, "CFL"][0]) if get[s, "CFL"] else "n.a." for s in SCENARIOS]
               for label, cell in CFL_ROWS.items()]
        which = seeds_text(seeds or [0])
    return (["# Clustered FL reproductions (thesis chapter 6)", "",
             *(verdict_lines(runs) if len(seeds) > 1 else []),
             f"## Table 6.2, Fashion-MNIST: final accuracy of the benign clients, %  (`{TABLE62.name}`)", "",
             f"100 clients, 30% adversaries, robust CFL with alpha_thresh 0.02; MLP, {rounds} rounds here, "
             f"200 in the thesis (CNN); {which}. The setup of the label-flip runs (the others change "
             "`data.adversaries`, and FL runs `fedavg`):", "",
             *setup(TABLE62, ["data.adversaries=label_flip"], PAPER62_SETUP, DEVIATIONS62)]
            + markdown_table(["method", *SCENARIOS.values()], acc) + [""]
            + markdown_table(["CFL", *SCENARIOS.values()], cfl) + runs_line(runs, "repro_cfl.json, Table 6.2"))


def fig68_lines(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    fl, cfl = (results.get(("fig68", m), [None])[0] for m in ("FL", "CFL"))
    if not cfl:
        return []
    ours = ["ours", f"{100 * final_accuracy(fl):.1f}" if fl else "n.a.", f"{100 * final_accuracy(cfl):.1f}",
            ", ".join(map(str, splits(cfl))), "; ".join(id_ranges(c) for c in cfl["clusters"].values())]
    paper = ["paper (CIFAR-10, 5-layer CNN)", "about 20", "close to 60", "50, 100, 150", "4 groups"]
    return (["", f"## Fig. 6.8 on Fashion-MNIST: 20 clients, 4 label permutations  (`{FIG68.name}`)", "",
             f"The CFL run's setup (FL runs `fedavg`), {seeds_text([cfl.get('seed', 0)])}; the config splits the "
             "clients into 4 groups of 5, each permuting its training and test labels with its own permutation:", "",
             *setup(FIG68, [], PAPER68_SETUP, DEVIATIONS68)]
            + markdown_table(["", "FL", "CFL", "splits at rounds", "final clusters"], [ours, paper])
            + runs_line([r for r in (fl, cfl) if r], "repro_cfl.json, Fig. 6.8"))


def calls_lines(calls: list[dict]) -> list[str]:
    """Each recorded call of the script: its runs, their seeds, wall time, where and at which commit."""
    if not calls:
        return []
    return ["", "Written by `scripts/repro/cfl.py`: " + "; ".join(
        f"{c['runs']} runs ({'`--family`' if c.get('family') else listing(c['only']) or 'all'}, "
        f"{seeds_text(c['seeds'])}"
        + (f", {c['rounds']} rounds" if c.get("rounds") else "") + f") in {c['wall_s'] / 60:.1f} min with "
        f"{c['jobs']} trial{'s' if c['jobs'] > 1 else ''} at once on {c['cpu']}"
        + (f" at commit `{c['commit'][:9]}`" if c.get("commit") else "") for c in calls) + "."]


def page(saved: list | dict) -> str:
    """docs/repro_cfl.md from what docs/records/repro_cfl.json holds (either form, :func:`results_of`)."""
    results = by_run(results_of(saved))
    calls = [] if isinstance(saved, list) else saved.get("invocations", [])
    return "\n".join(table62_lines(results) + fig68_lines(results) + calls_lines(calls)) + "\n"


def plot(results: dict[tuple[str, str], list[dict]], path: Path) -> None:
    panels = [f"table62/{s}" for s in SCENARIOS] + ["fig68"]
    fig, axes = figure(1, len(panels), figsize=(4 * len(panels), 3.6), sharey=True)
    for ax, experiment in zip(axes, panels):
        for method, colour in (("FL", "tab:blue"), ("CFL", "tab:red")):
            seeds = results.get((experiment, method), [])
            for i, r in enumerate(seeds):  # every seed's run, the splits of the first
                points = [(h["round"], h["accuracy"]) for h in r["history"] if h["accuracy"] is not None]
                ax.plot(*zip(*points), color=colour, label=None if i else method, lw=1 if len(seeds) > 1 else 1.5,
                        alpha=0.6 if len(seeds) > 1 else 1.0)
            for s in splits(seeds[0]) if method == "CFL" and seeds else ():
                ax.axvline(s, color=colour, lw=0.5, ls=":")
        ax.set(title=SCENARIOS.get(experiment.split("/")[-1], "Fig. 6.8 permuted labels"), xlabel="round")
    axes[0].set_ylabel("benign test accuracy")
    axes[0].legend(loc="lower right")
    save_figure(fig, path, title="Clustered FL on Fashion-MNIST (dotted: CFL splits)")


def main() -> None:
    parser = grid_arguments(__doc__, EXPERIMENTS, ROOT / "docs" / "repro_cfl")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="Table 6.2's seeds (each the run's and the split's; merged into the saved results)")
    parser.add_argument("--family", action="store_true",
                        help="Table 6.2's claims (CFL and FL, every scene, seeds 0-4) in one call")
    args = parser.parse_args()
    if args.family:
        args.only, args.seeds = [e for e in EXPERIMENTS if e.startswith("table62/")], list(FAMILY_SEEDS)
    out = Path(args.out)
    store = Store(record_file(out, ".json"), key)
    saved = store.read() or []
    results = {key(r): r for r in results_of(saved)}
    calls = [] if isinstance(saved, list) else saved.get("invocations", [])
    failed = []
    if not args.plot_only:
        start = time.perf_counter()
        todo = [r for r in runs(args.seeds) if not args.only or r["experiment"] in args.only]
        for r in todo:
            r["overrides"] += [f"federation.rounds={args.rounds}"] if args.rounds else []
        new, failed = run(todo, Path(args.sweep), args.jobs)
        for r in new.values():
            print(f"{r['experiment']:20} {r['method']:4} seed {r['seed']} final {final_accuracy(r):.4f} "
                  f"splits {splits(r)} ({r['wall_s']:.0f} s)")
        results.update(new)
        calls = calls + [invocation(args, [s for s in todo if key(s) in new], results, key, start,
                                    seeds=sorted({s["seed"] for s in todo}), family=args.family, sweep=True)]
        store.header = {"invocations": calls}
        store.save(results)
    saved = {"invocations": calls, "results": list(results.values())} if calls else list(results.values())
    out.with_suffix(".md").write_text(page(saved))
    plot(by_run(list(results.values())), record_file(out, ".png"))
    print(f"wrote {out}.md, .json and .png")
    report_failed(failed)


if __name__ == "__main__":
    main()
