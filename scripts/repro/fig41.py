"""Reproduce thesis Fig. 4.1 (scaled): compression methods under iid and non-iid client data.

Runs every method on every split from configs/repro_thesis_fig41.yaml (local backend, about 9
minutes on 2 cores) and writes docs/repro_fig41.md (table), .json (numbers, after every finished run;
a run with the same number of rounds merges into it) and .png (bars).

    python scripts/repro/fig41.py [--rounds-scale 0.1]   # a quick, smaller run
    python scripts/repro/fig41.py --plot-only

The runs are ``fedray sweep`` trials (``fedray.repro.run_specs``) into ``--sweep``/rounds<N>, as
many at once as Ray has CPUs (``--jobs`` caps them); a stopped grid resumes where it stopped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedray.config import load_config
from fedray.figures import figure, save_figure
from fedray.repro import Store, markdown_table, record_file, report_failed, run_specs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.pages import runs_line, setup  # noqa: E402

BASE = ROOT / "configs" / "repro_thesis_fig41.yaml"
OUT = ROOT / "docs" / "repro_fig41"
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
# the thesis's setting of the figure (digest thesis.md, section 3.1)
PAPER_SETUP = {"data set": "MNIST (iid, 2 or 1 classes per client)", "clients": "10", "clients per round": "10",
               "rounds": "100", "model": "logistic regression",
               "local training": "the same lr, batch and gradient evaluations for every method"}
DEVIATIONS = [("Fashion-MNIST instead of MNIST", "MNIST was not available on the machine"),
              ("1,000 iterations per client, one a round (FedAvg: 100 rounds of 10)",
               "the digest gives the figure's 100 rounds but not the local iterations a round; every method gets the "
               "same 1,000")]


def specs(rounds: int) -> list[dict]:
    """Every method on every split, seed 0 (the config's): ``ROUNDS/10``, a tenth of the rounds."""
    out = []
    for method in METHODS:
        for split in SPLITS:
            overrides = SPLITS[split] + METHODS[method]
            n = rounds // 10 if "ROUNDS/10" in overrides else rounds
            out.append({"method": method, "split": split, "seed": 0,
                        "overrides": [o for o in overrides if not o.startswith("ROUNDS")]
                        + [f"federation.rounds={n}", f"federation.eval_every={max(n // 10, 1)}"]})
    return out


def run(rounds: int, sweep: Path, jobs: int | None) -> tuple[dict, list]:
    """The grid as a sweep: final accuracy and MB up/down in all, by (method, split); and the failed trials."""
    done, failed = run_specs(BASE, specs(rounds), lambda s: f"{s['method']},{s['split']}", sweep,
                             lambda rnd, m, config: m, jobs=jobs)
    results = {}
    for spec, r in done:
        last = r.records[-1]
        results[spec["method"], spec["split"]] = {
            "method": spec["method"], "split": spec["split"], "accuracy": last["eval/accuracy"],
            "mb_up": last["comm/bytes_up_total"] / 1e6, "mb_down": last["comm/bytes_down_total"] / 1e6,
            "provenance": r.summary["provenance"]}
    return results, failed


def page(saved: dict) -> str:
    """docs/repro_fig41.md from what docs/records/repro_fig41.json holds."""
    results, rounds = {(r["method"], r["split"]): r for r in saved["results"]}, saved["rounds"]
    rows = [[method] + [f"{results[method, s]['accuracy']:.4f}" for s in SPLITS]
            + [f"{results[method, 'iid'][k]:.2f}" for k in ("mb_up", "mb_down")] for method in METHODS]
    lines = [f"# Thesis Fig. 4.1, scaled (Fashion-MNIST, logistic regression, 10 clients, "
             f"{rounds} iterations per client)", "", f"Paper: {PAPER}", "", "## Setup", "",
             f"`{BASE.name}` as the baseline runs it on the iid split; the other splits give each client "
             "2 or 1 classes (shards), and the other methods change the algorithm (FedAvg: 10 steps a round, a tenth "
             "of the rounds).", "",
             *setup(BASE, specs(rounds)[0]["overrides"], PAPER_SETUP, DEVIATIONS), "## Results", "",
             "Final test accuracy, seed 0:", ""]
    header = ["method"] + [f"{s} acc." for s in SPLITS] + ["MB up (iid)", "MB down (iid)"]
    return "\n".join(lines + markdown_table(header, rows) + runs_line(saved["results"], "repro_fig41.json")) + "\n"


def write_outputs(results: dict[tuple[str, str], dict], rounds: int) -> None:
    OUT.with_suffix(".md").write_text(page({"rounds": rounds, "results": list(results.values())}))
    fig, ax = figure(figsize=(9, 4))
    width = 0.8 / len(METHODS)
    for i, method in enumerate(METHODS):
        ax.bar([j + i * width for j in range(len(SPLITS))], [results[method, s]["accuracy"] for s in SPLITS],
               width, label=method)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(SPLITS))], list(SPLITS))
    ax.set(ylim=(0.5, 0.9), ylabel="final test accuracy (axis from 0.5)",
           title=f"Fig. 4.1 scaled: Fashion-MNIST, logistic regression, 10 clients, {rounds} iterations")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    save_figure(fig, record_file(OUT, ".png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds-scale", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, help="trials at once (default: one per CPU of Ray)")
    parser.add_argument("--sweep", default="runs/repro/repro_fig41", help="the sweep folder: the trials' run folders")
    parser.add_argument("--plot-only", action="store_true", help="redraw from docs/records/repro_fig41.json")
    args = parser.parse_args()
    store = Store(record_file(OUT, ".json"), key=lambda r: (r["method"], r["split"]), match=("rounds",))
    if args.plot_only:
        store.header["rounds"] = store.read()["rounds"]
        write_outputs(store.load(), store.header["rounds"])
        return
    rounds = int(load_config(BASE).federation.rounds * args.rounds_scale)
    store.header["rounds"] = rounds
    results, failed = run(rounds, Path(args.sweep) / f"rounds{rounds}", args.jobs)
    for r in results.values():
        print(f"{r['method']:26} {r['split']:17} acc {r['accuracy']:.4f}  up {r['mb_up']:8.2f} MB  "
              f"down {r['mb_down']:8.2f} MB")
    results = {**store.load(), **results}
    store.save(results)
    write_outputs(results, rounds)
    print("wrote docs/repro_fig41.md, .json and .png")
    report_failed(failed)


if __name__ == "__main__":
    main()
