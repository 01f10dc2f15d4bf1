"""Thesis Table 4.2 (and Fig. 4.5): megabytes up/down each method needs to reach a target accuracy.

Runs the table's methods (baseline, signSGD, FedAvg n = 25/100/400, STC p = 1/25, 1/100, 1/400) on a
base config with the same budget of local iterations (a FedAvg round with delay n counts n), each
until the highest target is reached or the budget is spent. The test set is checked every
``--eval-every`` iterations (every round for FedAvg with n above that), so MB are read at that
resolution. Writes docs/repro_table42_<config>.md (our MB to each target beside the paper's
Fashion-MNIST column), .json (every evaluation: iterations, accuracy, bytes) and .png (accuracy
against iterations and against upload MB, as in Fig. 4.5).

    python scripts/repro_table42.py configs/repro_thesis_table42_lstm.yaml --budget 3000 --jobs 2
    python scripts/repro_table42.py configs/repro_thesis_table42_lstm.yaml --plot-only
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedray.clients import LocalExecutor  # noqa: E402
from fedray.config import load_config  # noqa: E402
from fedray.federation import Federation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# name: (algorithm, local iterations per round, paper's F-MNIST LSTM MB up / down to 0.89)
METHODS = {
    "Baseline": ("{name: fedavg}", 1, (2422.8, 2422.8)),
    "signSGD": ("{name: signsgd, step: SIGN_STEP}", 1, (123.3, 541.6)),
    "FedAvg n=25": ("{name: fedavg}", 25, (174.7, 174.7)),
    "FedAvg n=100": ("{name: fedavg}", 100, (83.9, 83.9)),
    "FedAvg n=400": ("{name: fedavg}", 400, (86.5, 86.5)),
    "STC p=1/25": ("{name: stc, p_up: 0.04, p_down: 0.04}", 1, (8.8, 88.4)),
    "STC p=1/100": ("{name: stc, p_up: 0.01, p_down: 0.01}", 1, (12.1, 121.2)),
    "STC p=1/400": ("{name: stc, p_up: 0.0025, p_down: 0.0025}", 1, (7.9, 79.1)),
}


def run(base: str, name: str, sign_step: float, budget: int, eval_every: int, stop_at: float) -> dict:
    """One method: the evaluations (iterations, accuracy, MB up/down in total) until stop_at or budget."""
    algorithm, steps, _ = METHODS[name]
    rounds = max(budget // steps, 1)
    config = load_config(base, [f"algorithm={algorithm.replace('SIGN_STEP', str(sign_step))}",
                                f"training.steps={steps}", f"federation.rounds={rounds}",
                                f"federation.eval_every={max(1, eval_every // steps)}",
                                f"checkpoint_every={rounds + 1}"])
    evals = []
    with tempfile.TemporaryDirectory() as run_dir:
        fed = Federation(config, run_dir, LocalExecutor)
        for _ in range(rounds):
            m = fed.run_round().metrics
            if "eval/accuracy" in m:
                evals.append({"iterations": fed.round * steps, "accuracy": m["eval/accuracy"],
                              "mb_up": m["comm/bytes_up_total"] / 1e6, "mb_down": m["comm/bytes_down_total"] / 1e6})
                if len(evals) % 10 == 0:
                    print(f"  {name}: {evals[-1]['iterations']} it., accuracy {evals[-1]['accuracy']:.4f}", flush=True)
                if m["eval/accuracy"] >= stop_at:
                    break
        fed.finish()
    return {"method": name, "evals": evals, "clients_per_round": config.federation.clients_per_round}


def first_reaching(evals: list[dict], target: float) -> dict | None:
    return next((e for e in evals if e["accuracy"] >= target), None)


def write_outputs(saved: dict, out: Path) -> None:
    targets, results = saved["targets"], {r["method"]: r for r in saved["results"]}
    slots = next(iter(results.values()))["clients_per_round"]
    lines = [f"# Thesis Table 4.2, our run of `{saved['config']}`",
             "", f"Budget {saved['budget']} local iterations per method, test accuracy every "
             f"{saved['eval_every']} iterations, signSGD step {saved['sign_step']}. Cells: MB up / down to reach the "
             f"target, summed over all clients, then in brackets per client slot (the total divided by the "
             f"{slots} clients of a round) and the iterations it took. Paper: Fashion-MNIST LSTM column, target 0.89.",
             "", "| method | best acc. | " + " | ".join(f"to {t}" for t in targets) + " | paper @0.89 up / down |",
             "|---|---|" + "---|" * len(targets) + "---|"]
    for name, (_, _, paper) in METHODS.items():
        if name not in results:
            continue
        evals, cells = results[name]["evals"], []
        for t in targets:
            e = first_reaching(evals, t)
            cells.append(f"{e['mb_up']:.1f} / {e['mb_down']:.1f} ({e['mb_up'] / slots:.2f} / "
                         f"{e['mb_down'] / slots:.2f}; {e['iterations']} it.)" if e else "n.a.")
        best = max((e["accuracy"] for e in evals), default=math.nan)
        lines.append(f"| {name} | {best:.4f} | " + " | ".join(cells) + f" | {paper[0]} / {paper[1]} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for name in METHODS:
        if name in results:
            evals = results[name]["evals"]
            acc = [e["accuracy"] for e in evals]
            left.plot([e["iterations"] for e in evals], acc, label=name)
            right.plot([e["mb_up"] / slots for e in evals], acc, label=name)
    for t in targets:
        for ax in (left, right):
            ax.axhline(t, color="grey", lw=0.6, ls="--")
    left.set_xlabel("local iterations")
    left.set_ylabel("test accuracy")
    right.set_xscale("log")
    right.set_xlabel("MB uploaded per client slot (log)")
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Table 4.2 / Fig. 4.5 scaled: {saved['config']}")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--targets", type=float, nargs="+",
                        help="accuracies to report MB for (default 0.89); each method stops at the highest; "
                             "with --plot-only, the targets of the redrawn table")
    parser.add_argument("--budget", type=int, default=20000, help="local iterations per method")
    parser.add_argument("--eval-every", type=int, default=50, help="iterations between test evaluations")
    parser.add_argument("--sign-step", type=float, default=0.0002, help="signSGD's delta (thesis: 0.0002)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--jobs", type=int, default=1, help="methods run in parallel processes")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved .json")
    args = parser.parse_args()
    out = ROOT / "docs" / f"repro_table42_{args.config.stem}"
    if args.plot_only:
        saved = json.loads(out.with_suffix(".json").read_text())
        saved["targets"] = sorted(args.targets or saved["targets"])
        write_outputs(saved, out)
        return
    targets = sorted(args.targets or [0.89])
    saved = {"config": str(args.config), "budget": args.budget, "eval_every": args.eval_every,
             "sign_step": args.sign_step, "targets": targets, "results": []}
    # the slowest methods first, so parallel jobs finish together
    order = sorted(args.methods, key=lambda n: (not n.startswith("STC"), METHODS[n][1]))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, str(args.config), name, args.sign_step, args.budget, args.eval_every,
                               targets[-1]) for name in order]
        for future in as_completed(futures):
            result = future.result()
            evals = result["evals"]
            print(f"{result['method']:13} best {max(e['accuracy'] for e in evals):.4f} after "
                  f"{evals[-1]['iterations']} it., {evals[-1]['mb_up']:.1f} MB up in all", flush=True)
            saved["results"].append(result)
            out.with_suffix(".json").write_text(json.dumps(saved, indent=1))  # partial results survive
    write_outputs(saved, out)
    print(f"wrote {out}.md, .json and .png")


if __name__ == "__main__":
    main()
