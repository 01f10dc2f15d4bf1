"""FedNova against FedAvg on the example's clients, through fedray's Python API: paired runs that
differ only in ``algorithm.name``, over splits (``data.seed``) and training seeds (``seed``).

    python compare_fedavg.py                 # 2 splits x 10 seeds x 2 methods, about 5 minutes on 2 cores
    python compare_fedavg.py --seeds 3       # fewer

Each pair shares its split, initial model and batches. Prints each method's mean final test accuracy
and the paired difference FedNova - FedAvg with its 95% t-interval, and writes every run's numbers
to ``compare_fedavg.json`` beside this file, from which examples/README.md's table is taken.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

import fedray

HERE = Path(__file__).resolve().parent
METHODS = ("fednova:FedNova", "fedavg")


def final_accuracy(method: str, split: int, seed: int, out: Path) -> float:
    result = fedray.run("fednova.yaml", {"algorithm.name": method, "data.seed": split, "seed": seed,
                                         "runtime.backend": "local", "output_dir": str(out)}, progress=False)
    return result.final["eval/accuracy"]


def interval(differences: list[float]) -> tuple[float, float, float]:
    """The mean of the paired differences and its 95% t-interval."""
    d = np.asarray(differences)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, default=2, help="data.seed 0 .. splits-1")
    parser.add_argument("--seeds", type=int, default=10, help="seed 0 .. seeds-1")
    args = parser.parse_args()
    os.chdir(HERE)  # the config's modules are found in the current folder
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for split in range(args.splits):
            for seed in range(args.seeds):
                accuracy = {m: final_accuracy(m, split, seed, Path(tmp)) for m in METHODS}
                runs.append({"data.seed": split, "seed": seed, **accuracy})
                print(f"split {split} seed {seed}: " + ", ".join(f"{m} {a:.4f}" for m, a in accuracy.items()), flush=True)
    mean, low, high = interval([r[METHODS[0]] - r[METHODS[1]] for r in runs])
    summary = {m: float(np.mean([r[m] for r in runs])) for m in METHODS}
    summary["difference"] = {"mean": mean, "ci95": [low, high], "pairs": len(runs)}
    (HERE / "compare_fedavg.json").write_text(json.dumps({"runs": runs, "summary": summary}, indent=2) + "\n")
    print(f"final test accuracy over {len(runs)} pairs: FedNova {summary[METHODS[0]]:.4f}, FedAvg "
          f"{summary[METHODS[1]]:.4f}; FedNova - FedAvg {mean:+.4f} (95% interval {low:+.4f} to {high:+.4f})")


if __name__ == "__main__":
    main()
