"""Federated distillation reproductions (issue 5): thesis Tables 5.1 and 5.2 and FedAUX Table I's baselines.

Table 5.1 (thesis section 5.2.4): federated distillation (``fd``) with the client model initialised
from the previous round's distilled model, from a random init, or by dual distillation from a
persistent server model, at Dirichlet alpha 100, 1 and 0.1; the maximum test accuracy over the
rounds. FedAUX Table I: FedAvg, FedDF and FedBE at alpha 0.01, 0.1, 1 and 100 with one
architecture and with three (a third of the clients each, like FedAUX's "Mixed" setting); the
maximum and final accuracy, each architecture's, and what the server distillation itself adds
(accuracy after minus before it). Before that, a short check of the distillation lr for FedDF at
alpha 0.1. Table 5.2 (thesis section 5.4): FedAvg, FD and compressed FD (CFD-1-32, CFD_delta-1-32,
CFD-1-1, CFD_delta-1-1, thesis Alg. 8) at alpha 100, 1 and 0.1; the MB up and down needed to first
reach a target accuracy (soft labels for FD/CFD, full models for FedAvg), at targets chosen after
seeing the curves (the .md says so). Writes docs/records/repro_distill.json (every round's accuracies and
bytes; a run of some experiments, ``--only``, merges into the saved one, keeping the others'
results), then docs/repro_distill.md (ours beside the papers') and .png from it
(scripts/repro/distill_page.py); the interpretation is in docs/reproductions.md.

The claims of Tables 5.1 and 5.2 (``scripts/repro/claims.py``) are declared below before their runs:
Dual Distill against the other two modes on the maximum accuracy, and each CFD variant against FD and
FedAvg on the MB to the target. ``--seeds`` runs Tables 5.1 and 5.2 on those seeds (each the run's
seed and the split's: ``seed``, ``data.seed``, ``aux.seed``; the other experiments run seed 0);
``--family`` runs exactly both families' runs, every mode and method at every alpha on seeds 0-4,
in one call, so that they carry one commit; into a fresh ``--sweep``, since a sweep folder's finished
trials (seed 0's of an earlier commit) are not run again.

    python scripts/repro/distill.py
    python scripts/repro/distill.py --family --sweep runs/repro/repro_distill_family   # the claims' runs
    python scripts/repro/distill.py --only table51 --rounds 2 --out /tmp/quick --sweep /tmp/quick-runs   # timing check
    python scripts/repro/distill.py --only table52
    python scripts/repro/distill.py --plot-only

Each experiment runs as a ``fedray sweep`` (``fedray.repro.run_specs``) of its config into
``--sweep``/<experiment>, as many trials at once as Ray has CPUs; a stopped grid resumes.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path

from fedray.repro import Store, grid_arguments, invocation, record_file, report_failed, run_experiments, run_specs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.pages import best, final  # noqa: E402

TABLE51 = ROOT / "configs" / "repro_thesis_table51_fmnist.yaml"
COMPARE = ROOT / "configs" / "repro_fedaux_feddf_fmnist.yaml"
TABLE52 = ROOT / "configs" / "repro_thesis_table52_fmnist.yaml"
CONFIGS = {"table51": TABLE51, "table52": TABLE52}  # every other experiment: COMPARE

MODES = {"init_previous": "Init Previous", "init_random": "Init Random", "dual": "Dual Distill"}
ALPHAS51 = (100.0, 1.0, 0.1)

METHODS = {"fedavg": "FedAvg", "feddf": "FedDF", "fedbe": "FedBE"}
ALPHAS = (0.01, 0.1, 1.0, 100.0)
# one architecture, or a third of the clients each on three (FedAUX "Mixed": ResNet-8/MobileNetV2/ShuffleNet)
ARCHS = {"one": ["federation.architectures={mlp: 20}"],
         "three": ["federation.architectures={logreg: 7, mlp: 7, lstm: 6}",
                   "federation.model_options={lstm: {hidden_size: 64, num_layers: 1}}"]}


# Table 5.2: label, algorithm overrides (the config's algorithm is cfd, dual distillation)
def _cfd(b_up: int, b_down: int, delta: bool) -> list[str]:
    return [f"algorithm.b_up={b_up}", f"algorithm.b_down={b_down}", f"algorithm.delta={str(delta).lower()}"]


METHODS52 = {"fedavg": ("FedAvg", ["algorithm={name: fedavg, weighted: true}"]),
             "fd": ("FD", ["algorithm.name=fd"] + _cfd(32, 32, False)),
             "cfd_1_32": ("CFD-1-32", _cfd(1, 32, False)),
             "cfd_delta_1_32": ("CFD_Δ-1-32", _cfd(1, 32, True)),
             "cfd_1_1": ("CFD-1-1", _cfd(1, 1, False)),
             "cfd_delta_1_1": ("CFD_Δ-1-1", _cfd(1, 1, True))}
ALPHAS52 = (100.0, 1.0, 0.1)
# the target accuracy per alpha (%): a few points under the maximum of most methods, chosen after seeing seed 0's
# curves (the .md says so)
TARGETS52 = {100.0: 81.0, 1.0: 80.0, 0.1: 63.0}

# the claims (scripts/repro/claims.py), declared before the runs. Table 5.1: Dual Distill, the thesis's proposal,
# against each other init mode at every alpha, on the thesis's measure (the maximum accuracy over the rounds).
PROPOSED51 = ("dual",)
BASELINES51 = ("init_previous", "init_random")
PRIMARY51 = "best"
# Table 5.2: each CFD variant (thesis Alg. 8) against FD and FedAvg at every alpha, on the MB per client up and
# down to first reach TARGETS52's accuracy, compared as log10(MB of the baseline / MB of the variant); the upload
# alone is the secondary measure. A seed in which either side never reaches the target is left out of that pair.
PROPOSED52 = ("cfd_1_32", "cfd_delta_1_32", "cfd_1_1", "cfd_delta_1_1")
BASELINES52 = ("fd", "fedavg")
PRIMARY52, SECONDARY52 = "mb_to_target", "mb_up_to_target"
FAMILY_SEEDS = (0, 1, 2, 3, 4)  # each sets the run's seed, the split and the held-back inputs
SEEDED = ("table51", "table52")  # the experiments that --seeds and --family run on several seeds

LR_CHECK = (5e-5, 1e-4, 1e-3)
LR_CHECK_ALPHA = 0.1
LR_CHECK_ROUNDS = 8


def runs(rounds: int | None, seeds=(0,)) -> list[dict]:
    """Every run: its key fields, seed and config overrides; Tables 5.1 and 5.2 on each of ``seeds``, the
    other experiments on seed 0 (the configs' seed and split)."""
    out = []
    for seed in seeds:
        for alpha in ALPHAS51:
            for mode in MODES:
                out.append({"experiment": "table51", "method": mode, "alpha": alpha, "archs": "one", "lr": None,
                            "seed": seed, "overrides": [f"algorithm.mode={mode}", f"data.alpha={alpha}"]})
    for archs in ARCHS:
        for lr in LR_CHECK:
            out.append({"experiment": "lrcheck", "method": "feddf", "alpha": LR_CHECK_ALPHA, "archs": archs, "lr": lr,
                        "overrides": ARCHS[archs] + [f"data.alpha={LR_CHECK_ALPHA}", f"algorithm.distill.lr={lr}",
                                                     f"federation.rounds={LR_CHECK_ROUNDS}"]})
    for archs in ARCHS:
        for alpha in ALPHAS:
            for method in METHODS:
                algorithm = {"fedavg": ["algorithm={name: fedavg, weighted: true}"],
                             "feddf": [], "fedbe": ["algorithm.name=fedbe", "algorithm.samples=10"]}[method]
                out.append({"experiment": "compare", "method": method, "alpha": alpha, "archs": archs, "lr": None,
                            "overrides": ARCHS[archs] + [f"data.alpha={alpha}"] + algorithm})
    for seed in seeds:
        for alpha in ALPHAS52:
            for method, (_, algorithm) in METHODS52.items():
                out.append({"experiment": "table52", "method": method, "alpha": alpha, "archs": "one", "lr": None,
                            "seed": seed, "overrides": [f"data.alpha={alpha}"] + algorithm})
    for r in out:
        r.setdefault("seed", 0)
        if rounds is not None:
            r["overrides"].append(f"federation.rounds={rounds}")
    return out


def key(r: dict) -> str:
    """A run's identity; seed 0's (and a run saved without a seed) has no seed suffix."""
    seed = r.get("seed") or 0
    name = f"{r['experiment']}/{r['method']}/{r['alpha']:g}/{r['archs']}/{r['lr'] or ''}"
    return name + (f"/seed{seed}" if seed else "")


def record(rnd: int, m: dict, config) -> dict:
    """A round's accuracies, bytes and, per architecture, participants and accuracy before/after distillation."""
    h = {"round": rnd, "accuracy": m.get("eval/accuracy"), "time_s": m["time/round_s"],
         "ensemble": m.get("distill/ensemble_accuracy"), "participants": m["clients/participants"],
         "bytes_up": m["comm/bytes_up"], "bytes_down": m["comm/bytes_down"],
         "bytes_up_total": m["comm/bytes_up_total"], "bytes_down_total": m["comm/bytes_down_total"],
         "entropy_bits_up": m.get("distill/entropy_bits_up")}
    archs = config.federation.architectures
    for arch in archs:
        h[f"participants/{arch}"] = int(m.get(f"clients/participants/{arch}", m["clients/participants"] if len(archs) == 1 else 0))
        h[f"accuracy/{arch}"] = m.get(f"eval/accuracy/{arch}")
        h[f"before/{arch}"] = m.get(f"distill/accuracy_before/{arch}")
        h[f"after/{arch}"] = m.get(f"distill/accuracy_after/{arch}")
    return h


def variant(spec: dict) -> str:
    """A spec's name without its seed: the sweep's variant (trial folders are named after it and the seed)."""
    return f"{spec['method']},alpha={spec['alpha']:g},archs={spec['archs']}" + (f",lr={spec['lr']:g}" if spec["lr"] else "")


def run(args, experiment: str, specs: list[dict]) -> tuple[dict, list]:
    """One experiment's specs as a sweep of its config (a seed sets the run and the split: ``seed``,
    ``data.seed``, ``aux.seed``); returns the finished runs by key, and the failed trials."""
    done, failed = run_specs(CONFIGS.get(experiment, COMPARE), specs, variant, Path(args.sweep) / experiment, record,
                             jobs=args.jobs)
    results = {}
    for spec, r in done:
        config = r.config
        out = {k: v for k, v in spec.items() if k != "overrides"}
        out.update({"rounds": config.federation.rounds, "architectures": config.federation.architectures,
                    "clients_per_round": config.federation.clients_per_round, "aux_size": config.aux.size,
                    "distill_lr": getattr(config.algorithm, "distill", {}).get("lr") if config.algorithm.name != "fedavg"
                    else None, "history": r.records, "wall_s": r.wall_s, "provenance": r.summary.get("provenance")})
        results[key(out)] = out
    return results, failed


def main() -> None:
    from scripts.repro.distill_page import fmt_gain, write_outputs  # here: distill_report reads this grid from this module

    experiments = ["table51", "lrcheck", "compare", "table52"]
    parser = grid_arguments(__doc__, experiments, ROOT / "docs" / "repro_distill")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="table51 and table52: these seeds (merged into the saved results; default 0)")
    parser.add_argument("--family", action="store_true",
                        help="the claims' families of Tables 5.1 and 5.2 (every mode and method, every alpha, "
                             "seeds 0-4) in one call")
    args = parser.parse_args()
    if args.family:
        args.only, args.seeds = list(SEEDED), list(FAMILY_SEEDS)
    out = Path(args.out)
    store = Store(record_file(out, ".json"), key=key, field="runs")
    meta = (store.read() or {}).get("meta", {"machine": "2-core CPU dev machine"})
    for stale in ("notes", "notes52"):  # hand-written notes of earlier versions: not written back
        meta.pop(stale, None)
    store.header["meta"] = meta
    if args.plot_only:
        results = store.load()
    else:
        todo = [r for r in runs(args.rounds, args.seeds) if not args.only or r["experiment"] in args.only]
        start = time.perf_counter()
        results, failed = run_experiments(
            todo, partial(run, args), store,
            lambda r: f"{key(r):38} max {best(r):5.1f} final {final(r):5.1f} gain {fmt_gain(r):28} {r['wall_s']:6.0f} s")
        meta.setdefault("invocations", []).append(invocation(args, [s for s in todo if key(s) in results], results,
                                                             key, start, sweep=True, seeds=args.seeds))
        store.save(results)
    write_outputs(results, meta, out)
    print(f"wrote {out}.md, .json and .png")
    if not args.plot_only:
        report_failed(failed)


if __name__ == "__main__":
    main()
