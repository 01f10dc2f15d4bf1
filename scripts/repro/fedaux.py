"""FedAUX reproductions on Fashion-MNIST (issue 13): Table I / thesis Table 7.1 scaled, the one-shot
Table III scaled, a privacy sweep over eps, and the Mixed (three architectures) setting.

- **table71**: FedAvg, FedProx, FedDF, FedBE, each from a random init and from the SimCLR-pre-trained
  h_0 ("+P"), and FedAUX, at Dirichlet alpha 0.01 and 100 and C = 0.2 / 0.4 / 0.8, two seeds (the
  model init, the sampling and pre-training; the split is the same); the maximum test accuracy over
  the rounds, mean and spread (half the range) over the seeds.
- **oneshot**: one round, all 20 clients, E = 10 local epochs (the paper: E = 40, 100 clients), alpha
  0.01 / 0.16 / 10.24.
- **privacy**: FedAUX at alpha 0.01, C = 0.4 with eps from 0.01 to non-private.
- **lambda**: FedAUX with the paper's J at alpha 0.01, C = 0.4 for lambda from 0.1 down to 1e-4, at
  eps 0.1 and without noise, two seeds: can the paper's J spread the scores as the authors' code does
  (which is J at lambda / N), and what does the DP noise, which grows as 1/lambda, leave of that?
- **claim**: the issue's claim at alpha 0.01 (FedAUX > FedDF+P > FedDF) with five seeds that vary the
  split (the Dirichlet draw and the auxiliary data) as well as the run, for all three C, with the
  differences paired by seed.
- **mixed**: a third of the clients each on LogReg, the MLP and a one-layer LSTM-64 (FedAUX's Mixed:
  ResNet-8 / MobileNetV2 / ShuffleNet), FedDF, FedDF+P and FedAUX, alpha 0.01 and 100.

FedAUX runs with the public normaliser everywhere (the config's ``normaliser: public``: its privacy
figure is a guarantee; docs/methods.md), and twice: ``regularization: paper`` (w_i minimises the paper's J, the default)
and ``code`` (the authors' code: sklearn C = 1/lambda, J with lambda / N), because the two give very
different scores (see docs/methods.md). Writes docs/records/repro_fedaux.json (every run's rounds; ``--only``
merges into the saved one), then docs/repro_fedaux.md (ours beside the paper's) and .png from it
(scripts/repro/fedaux_page.py). Each experiment runs as a ``fedray sweep`` (``fedray.repro.run_sweep``)
into ``--sweep``/<experiment>, as many trials at once as Ray has CPUs; a stopped grid resumes. Before
the grid, every (seed, architectures, auxiliary split) is pre-trained once into the cache, so trials
at once never pre-train the same model twice.

    python scripts/repro/fedaux.py
    python scripts/repro/fedaux.py --only table71 --rounds 1 --out /tmp/quick --sweep /tmp/quick-runs   # timing check
    python scripts/repro/fedaux.py --only table71 oneshot --methods fedaux fedaux_code   # re-run FedAUX alone
    python scripts/repro/fedaux.py --plot-only
"""

from __future__ import annotations

import math
import sys
import time
from functools import partial
from pathlib import Path

import torch

from fedray.assembly import initial_models, load_data
from fedray.config import load_config
from fedray.models import model_builder
from fedray.repro import Store, grid_arguments, invocation, record_file, report_failed, run_experiments, run_specs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.pages import best, final  # noqa: E402

CONFIG = ROOT / "configs" / "repro_fedaux_table71_fmnist.yaml"

DISTILL = "distill: {optimizer: adam, lr: 0.001, epochs: 1, batch_size: 128}"
NO_P = ["pretrain.epochs=0"]
METHODS = {  # label, overrides (the config's algorithm is FedAUX with the paper's lambda, eps, delta)
    "fedavg": ("FedAvg", ["algorithm={name: fedavg, weighted: true}"] + NO_P),
    "fedprox": ("FedProx", ["algorithm={name: fedprox, mu: 0.01, weighted: true}"] + NO_P),
    "feddf": ("FedDF", [f"algorithm={{name: feddf, weighted: true, {DISTILL}}}"] + NO_P),
    "fedbe": ("FedBE", [f"algorithm={{name: fedbe, samples: 10, weighted: true, {DISTILL}}}"] + NO_P),
    "fedavg_p": ("FedAvg+P", ["algorithm={name: fedavg, weighted: true}"]),
    "fedprox_p": ("FedProx+P", ["algorithm={name: fedprox, mu: 0.01, weighted: true}"]),
    "feddf_p": ("FedDF+P", [f"algorithm={{name: feddf, weighted: true, {DISTILL}}}"]),
    "fedbe_p": ("FedBE+P", [f"algorithm={{name: fedbe, samples: 10, weighted: true, {DISTILL}}}"]),
    "fedaux": ("FedAUX", []),
    "fedaux_code": ("FedAUX (code's C)", ["algorithm.regularization=code"]),
}
ALPHAS = (0.01, 100.0)
RATES = (0.2, 0.4, 0.8)
SEEDS = (0, 1)
NUM_CLIENTS = 20

ONESHOT_ALPHAS = (0.01, 0.16, 10.24)
ONESHOT_METHODS = ("fedavg", "feddf", "fedavg_p", "feddf_p", "fedaux", "fedaux_code")
ONESHOT_EPOCHS = 10

EPSILONS = (0.01, 0.1, 1.0, 10.0, math.inf)
PRIVACY_ALPHA, PRIVACY_RATE = 0.01, 0.4
# the claim experiment is Table I's family at alpha 0.01: both FedAUX variants and every baseline of
# the table that fedray implements, five seeds that vary the split; scripts/repro/claims.py tests each
# FedAUX variant against each baseline on PRIMARY, the paper's measure (Table I: "maximum accuracy
# achieved" over the rounds), and never on another measure
CLAIM_METHODS = tuple(METHODS)
PROPOSED = ("fedaux", "fedaux_code")
PRIMARY = "best"
CLAIM_SEEDS = (0, 1, 2, 3, 4)
LAMBDAS = (0.1, 0.01, 1e-3, 1e-4)
LAMBDA_EPSILONS = (0.1, math.inf)

MIXED = ["federation.architectures={logreg: 7, mlp: 7, lstm: 6}",
         "federation.model_options={lstm: {hidden_size: 64, num_layers: 1}}"]
MIXED_METHODS = ("feddf", "feddf_p", "fedaux", "fedaux_code")


def runs(rounds: int | None) -> list[dict]:
    """Every run: its key fields and config overrides."""
    out = []

    def add(experiment, method, alpha, rate, seed, extra=(), eps=None, lam=None):
        overrides = [f"data.alpha={alpha}", f"federation.clients_per_round={round(rate * NUM_CLIENTS)}",
                     *METHODS[method][1], *extra]
        if eps is not None:
            overrides.append(f"algorithm.eps={'null' if math.isinf(eps) else eps}")
        if lam is not None:
            overrides.append(f"algorithm.lam={lam}")
        if rounds is not None and experiment != "oneshot":
            overrides.append(f"federation.rounds={rounds}")
        out.append({"experiment": experiment, "method": method, "alpha": alpha, "rate": rate, "seed": seed,
                    "eps": eps, **({} if lam is None else {"lam": lam}), "overrides": overrides})

    for seed in SEEDS:
        for alpha in ALPHAS:
            for rate in RATES:
                for method in METHODS:
                    add("table71", method, alpha, rate, seed)
    for alpha in ONESHOT_ALPHAS:
        for method in ONESHOT_METHODS:
            add("oneshot", method, alpha, 1.0, 0, ["federation.rounds=1", f"training.epochs={ONESHOT_EPOCHS}"])
    for eps in EPSILONS:
        for method in ("fedaux", "fedaux_code"):
            add("privacy", method, PRIVACY_ALPHA, PRIVACY_RATE, 0, eps=eps)
    for alpha in ALPHAS:
        for method in MIXED_METHODS:
            add("mixed", method, alpha, 0.4, 0, MIXED)
    for seed in CLAIM_SEEDS:
        for rate in RATES:
            for method in CLAIM_METHODS:
                add("claim", method, 0.01, rate, seed)
    for seed in SEEDS:
        for lam in LAMBDAS:
            for eps in LAMBDA_EPSILONS:
                add("lambda", "fedaux", PRIVACY_ALPHA, PRIVACY_RATE, seed, eps=eps, lam=lam)
    return out


def key(r: dict) -> str:
    eps = "" if r["eps"] is None else f"{r['eps']:g}"
    lam = "" if r.get("lam") is None else f"/{r['lam']:g}"
    return f"{r['experiment']}/{r['method']}/{r['alpha']:g}/{r['rate']:g}/{r['seed']}/{eps}{lam}"


def record(rnd: int, m: dict, config) -> dict:
    """A round's accuracies (overall, per architecture, of the teacher ensemble with and without the
    certainty weights); in round 1 also what FedAUX's scores look like (logged before round 1)."""
    h = {"round": rnd, "accuracy": m.get("eval/accuracy"), "time_s": m["time/round_s"],
         "ensemble": m.get("distill/ensemble_accuracy"), "weighted": m.get("distill/weighted_ensemble_accuracy")}
    for arch in config.federation.architectures:
        h[f"accuracy/{arch}"] = m.get(f"eval/accuracy/{arch}")
    if rnd == 1 and "fedaux/score_mean" in m:
        h["score_auc"] = m.get("fedaux/score_auc")
        h["score_std"] = m["fedaux/score_std"]  # the spread within a client, averaged over the clients
        h["score_mean"] = m["fedaux/score_mean"]
    return h


# the claim's seeds vary the split (the Dirichlet draw and the auxiliary data) with the run; the
# other experiments keep the config's split and vary the run's seed (init, sampling, pre-training)
HOLD = {"claim": ()}


def seed_overrides(experiment: str, seed: int) -> list[str]:
    """What the sweep's seed sets for a trial of ``experiment`` (``fedray.sweeps``)."""
    return [f"seed={seed}"] + ([f"data.seed={seed}", f"aux.seed={seed}"] if "split" not in HOLD.get(experiment, ("split",)) else [])


def variant(spec: dict) -> str:
    """A spec's name without its seed: the sweep's variant (trial folders are named after it)."""
    eps = "" if spec["eps"] is None else f",eps={spec['eps']:g}"
    lam = "" if spec.get("lam") is None else f",lam={spec['lam']:g}"
    return f"{spec['method']},alpha={spec['alpha']:g},C={spec['rate']:g}{eps}{lam}"


def run(args, experiment: str, specs: list[dict]) -> tuple[dict, list]:
    """One experiment's specs as a sweep: a variant per spec without its seed, crossed with the
    experiment's seeds; returns the finished runs by key, and the failed trials."""
    done, failed = run_specs(CONFIG, specs, variant, Path(args.sweep) / experiment, record,
                             hold=HOLD.get(experiment, ("split",)), jobs=args.jobs)
    results = {}
    for spec, r in done:
        out = {k: v for k, v in spec.items() if k != "overrides"}
        out.update({"split_seed": r.config.data.seed, "normaliser": getattr(r.config.algorithm, "normaliser", None),
                    "rounds": r.config.federation.rounds, "architectures": r.config.federation.architectures,
                    "history": r.records, "wall_s": r.wall_s, "privacy": r.summary.get("privacy"),
                    "pretrain": r.summary.get("pretrain"), "provenance": r.summary.get("provenance")})
        results[key(out)] = out
    return results, failed


def warm_cache(specs: list[dict]) -> None:
    """Pre-train every (seed, architectures, auxiliary split) the specs need, once, into the cache."""
    seen = set()
    for spec in specs:
        config = load_config(CONFIG, spec["overrides"] + seed_overrides(spec["experiment"], spec["seed"]))
        archs = tuple(config.federation.architectures)
        if not config.pretrain.epochs or (config.model_seed, archs, config.aux.seed) in seen:
            continue
        seen.add((config.model_seed, archs, config.aux.seed))
        start = time.perf_counter()
        data = load_data(config)
        build = model_builder(config.federation.model_options, data.input_shape, data.num_classes)
        _, info = initial_models(config, list(archs), build, data, torch.device("cpu"))
        print(f"pre-trained seed {config.model_seed}, {', '.join(archs)}: "
              + ", ".join(f"{a} " + ("cached" if i["cached"] else f"{i['seconds']:.0f} s") for a, i in info.items())
              + f" ({time.perf_counter() - start:.0f} s)", flush=True)


def main() -> None:
    from scripts.repro.fedaux_page import write_outputs  # here: fedaux_report reads this grid from this module

    experiments = ["table71", "oneshot", "privacy", "claim", "lambda", "mixed"]
    parser = grid_arguments(__doc__, experiments, ROOT / "docs" / "repro_fedaux")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), help="run only these methods' runs (merged)")
    args = parser.parse_args()
    out = Path(args.out)
    store = Store(record_file(out, ".json"), key=key, field="runs")
    meta = (store.read() or {}).get("meta", {"machine": "2-core CPU dev machine"})
    store.header["meta"] = meta
    if args.plot_only:
        results = store.load()
    else:
        todo = [r for r in runs(args.rounds) if (not args.only or r["experiment"] in args.only)
                and (not args.methods or r["method"] in args.methods)]
        start = time.perf_counter()
        warm_cache(todo)
        warm_s = time.perf_counter() - start
        results, failed = run_experiments(
            todo, partial(run, args), store,
            lambda r: f"{key(r):36} max {best(r):5.1f} final {final(r):5.1f} {r['wall_s']:5.0f} s")
        meta.setdefault("invocations", []).append(invocation(args, [s for s in todo if key(s) in results], results,
                                                             key, start, warm_s=warm_s, sweep=True,
                                                             methods=args.methods or []))
        store.save(results)
    write_outputs(results, meta, out)
    print(f"wrote {out}.md, .json and .png")
    if not args.plot_only:
        report_failed(failed)


if __name__ == "__main__":
    main()
