"""Reproduce thesis Fig. 4.1 (scaled): compression methods under iid and non-iid client data.

Runs every method on every split from configs/repro_thesis_fig41.yaml (local backend, about 9
minutes on 2 cores) and writes docs/repro_fig41.md (table), .json (numbers) and .png (bars).

    python scripts/repro_fig41.py [--rounds-scale 0.1]   # a quick, smaller run
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedray.clients import LocalExecutor  # noqa: E402
from fedray.config import load_config  # noqa: E402
from fedray.federation import Federation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "configs" / "repro_thesis_fig41.yaml"
SPLITS = {"iid": ["data.partition=iid"],
          "2 classes/client": ["data.partition=shards", "data.classes_per_client=2"],
          "1 class/client": ["data.partition=shards", "data.classes_per_client=1"]}
METHODS = {
    "baseline (dense, 1 step)": ["algorithm={name: fedavg}"],
    "top-k p=0.01 (up)": ["algorithm={name: stc, up: topk, p_up: 0.01, down: none}"],
    "STC p=0.01 (up+down)": ["algorithm={name: stc, p_up: 0.01, p_down: 0.01}"],
    "signSGD (majority vote)": ["algorithm={name: signsgd, step: 0.001}"],
    "FedAvg (delay 10)": ["algorithm={name: fedavg}", "training.steps=10", "ROUNDS/10"],
}
PAPER = ("Fig. 4.1 (MNIST logistic regression, 10 clients): all methods comparable on iid data; in the "
         "non-iid cases top-k is affected by far the least (no slowdown at all for logistic regression), "
         "signSGD plateaus lower and FedAvg degrades.")


def run(overrides: list[str], rounds: int) -> dict[str, float]:
    over = [o for o in overrides if not o.startswith("ROUNDS")]
    if "ROUNDS/10" in overrides:
        rounds //= 10
    over += [f"federation.rounds={rounds}", f"federation.eval_every={max(rounds // 10, 1)}"]
    config = load_config(BASE, over)
    with tempfile.TemporaryDirectory() as run_dir:
        fed = Federation(config, run_dir, LocalExecutor)
        metrics = [fed.run_round().metrics for _ in range(rounds)][-1]
        fed.finish()
    return {"accuracy": metrics["eval/accuracy"], "mb_up": metrics["comm/bytes_up_total"] / 1e6,
            "mb_down": metrics["comm/bytes_down_total"] / 1e6}


def write_outputs(results: dict[tuple[str, str], dict[str, float]], rounds: int) -> None:
    lines = [f"# Thesis Fig. 4.1, scaled (Fashion-MNIST, logistic regression, 10 clients, "
             f"{rounds} iterations per client)", "", f"Paper: {PAPER}", "",
             "| method | " + " | ".join(f"{s} acc." for s in SPLITS) + " | MB up (iid) | MB down (iid) |",
             "|---|" + "---|" * (len(SPLITS) + 2)]
    for method in METHODS:
        accs = " | ".join(f"{results[method, s]['accuracy']:.4f}" for s in SPLITS)
        iid = results[method, "iid"]
        lines.append(f"| {method} | {accs} | {iid['mb_up']:.2f} | {iid['mb_down']:.2f} |")
    (ROOT / "docs" / "repro_fig41.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(METHODS)
    for i, method in enumerate(METHODS):
        ax.bar([j + i * width for j in range(len(SPLITS))], [results[method, s]["accuracy"] for s in SPLITS],
               width, label=method)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(SPLITS))], list(SPLITS))
    ax.set_ylim(0.5, 0.9)
    ax.set_ylabel("final test accuracy (axis from 0.5)")
    ax.set_title(f"Fig. 4.1 scaled: Fashion-MNIST, logistic regression, 10 clients, {rounds} iterations")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "repro_fig41.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds-scale", type=float, default=1.0)
    parser.add_argument("--plot-only", action="store_true", help="redraw from docs/repro_fig41.json")
    args = parser.parse_args()
    store = ROOT / "docs" / "repro_fig41.json"
    if args.plot_only:
        saved = json.loads(store.read_text())
        write_outputs({(r["method"], r["split"]): r for r in saved["results"]}, saved["rounds"])
        return
    rounds = int(load_config(BASE).federation.rounds * args.rounds_scale)
    results = {}
    for method, m_over in METHODS.items():
        for split, s_over in SPLITS.items():
            results[method, split] = r = run(s_over + m_over, rounds)
            print(f"{method:26} {split:17} acc {r['accuracy']:.4f}  up {r['mb_up']:8.2f} MB  down {r['mb_down']:8.2f} MB",
                  flush=True)
    store.write_text(json.dumps({"rounds": rounds, "results": [
        {"method": m, "split": s, **r} for (m, s), r in results.items()]}, indent=1))
    write_outputs(results, rounds)
    print("wrote docs/repro_fig41.md, .json and .png")


if __name__ == "__main__":
    main()
