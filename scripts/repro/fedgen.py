"""FedGen reproductions on Fashion-MNIST: Table 1's MNIST rows and Table 2's generator sizes.

``table1`` (Zhu et al. 2021, Table 1, MNIST rows; ``configs/fedgen.yaml``): 20 users holding half
the training data, split by Dirichlet alpha 0.05, 0.1 and 1; 10 active a round; 20 local steps of
SGD (lr 0.01) with batch 32; FedGen's CNN; ``--rounds`` rounds (default 100; the paper runs 200);
seeds 0-2 (the run's and the split's). Methods: FedAvg, FedProx (mu 1 and weight decay 1e-3, the
authors' code's), FedEnsemble, FedDistill, FedDistill+, FedDFusion (FedDF distilling on 5,000
unlabelled training inputs held back from the users, which every method's split leaves out too),
FedGen, and FedGen with the authors' code's rules (uniform noise, labels uniform over those held,
count-weighted teacher loss, alpha 10 and its third term beta 10 both decayed by 0.98 a round, no
regulariser in the first round, |D_k|-weighted averaging). The paper's number is the mean ± std over seeds of each run's top-5 round accuracies; so is
ours, beside the final round's.

``table2`` (Table 2, EMNIST there): FedGen's generator [d_eps, d_h] at alpha 0.1, seeds 0-2.

``table4`` (Table 4, MNIST): only the last layer shared (``share: head``): FedAvg, FedDistill+
(heads and the logit table), FedDFusion (whole models up, heads down), FedGen and FedGen with the
authors' code's rules at alpha 0.05, 0.1, 1 and 10, seeds 0-2; each round's users are scored with
their own feature extractor under the new global head, on the test samples of the labels it holds
(the authors' code's measure, which made the paper's numbers) and on the whole test set.

``rules`` (Table 1's setting, seeds 0-2): the authors' code's rules one at a time on the paper's
FedGen (``fedgen_weighted``, ``fedgen_alpha10``, ``fedgen_beta``, ``fedgen_counts``,
``fedgen_draws``) beside FedGen and FedAvg, and ``fedavg_weighted``, the baseline of the variant that
averages by |D_k|: a table of its own, run in one call, so that each variant is paired with its
baseline from the same call.

Writes ``docs/repro_fedgen.md`` and ``.json``; runs of a grid merge into the saved results.

    python scripts/repro/fedgen.py --only table1
    python scripts/repro/fedgen.py --family   # the claims' runs, in one call at one commit
    python scripts/repro/fedgen.py --only table1 --alphas 0.1 --methods fedavg fedgen --seeds 0
    python scripts/repro/fedgen.py --only table2
    python scripts/repro/fedgen.py --only table4
    python scripts/repro/fedgen.py --only rules

Each table runs as a ``fedray sweep`` (``fedray.repro.run_specs``) into ``--sweep``/<table>, as many
trials at once as Ray has CPUs; a seed sets the run's seed and the split's (``seed``, ``data.seed``,
``aux.seed``: the held-back unlabelled inputs too). A stopped grid resumes where it stopped.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import numpy as np

from fedray.repro import (Store, grid_arguments, invocation, markdown_table, record_file, report_failed,
                          run_experiments, run_specs, runs_commit_text, setup_table)

ROOT = Path(__file__).resolve().parents[2]
ALPHAS = (0.05, 0.1, 1.0)
PAPER = {  # Table 1, MNIST, T = 20: alpha 0.05 / 0.1 / 1 (mean ± std of the top-5 rounds over 3 seeds)
    "fedavg": ("87.70±2.07", "90.16±0.59", "93.84±0.25"), "fedprox": ("87.49±2.05", "90.10±0.39", "93.83±0.29"),
    "fedensemble": ("88.85±0.68", "90.78±0.39", "93.91±0.28"), "feddistill": ("70.56±1.24", "64.11±1.36", "79.88±0.66"),
    "feddistill_plus": ("86.70±2.27", "90.28±0.89", "94.73±0.15"), "feddfusion": ("90.02±0.96", "91.11±0.43", "93.37±0.40"),
    "fedgen": ("91.30±0.74", "93.03±0.32", "95.52±0.07"), "fedgen_code": ("91.30±0.74", "93.03±0.32", "95.52±0.07")}
METHODS = {"fedavg": ("FedAvg", ["algorithm={name: fedavg}"]),
           "fedprox": ("FedProx", ["algorithm={name: fedprox, mu: 1.0}", "training.weight_decay=0.001"]),
           "fedensemble": ("FedEnsemble", ["algorithm={name: fedensemble}"]),
           "feddistill": ("FedDistill", ["algorithm={name: feddistill}"]),
           "feddistill_plus": ("FedDistill+", ["algorithm={name: feddistill, share_models: true}"]),
           "feddfusion": ("FedDFusion (FedDF)", ["algorithm={name: feddf, log_before: false, log_ensemble: false, "
                                                 "distill: {optimizer: adam, lr: 0.001, steps: 100, batch_size: 128, "
                                                 "schedule: cosine}}"]),
           "fedgen": ("FedGen", ["algorithm={name: fedgen}"]),
           # every rule of the authors' code where it differs from the paper (digest B.2-B.3)
           "fedgen_code": ("FedGen, the authors' code's rules", [
               "algorithm={name: fedgen, noise: uniform, labels: available, teacher: counts, alpha: 10.0, "
               "alpha_decay: 0.98, beta: 10.0, beta_decay: 0.98, start_round: 2, weighted: true}"]),
           # the code's rules one at a time on the paper's FedGen, and FedAvg with the code's averaging
           "fedavg_weighted": ("FedAvg, weighted by n_k", ["algorithm={name: fedavg, weighted: true}"]),
           "fedgen_weighted": ("FedGen + averaging weighted by n_k", ["algorithm={name: fedgen, weighted: true}"]),
           "fedgen_alpha10": ("FedGen + alpha 10 decayed 0.98", ["algorithm={name: fedgen, alpha: 10.0, alpha_decay: 0.98}"]),
           "fedgen_beta": ("FedGen + the code's third term (beta 10 decayed 0.98)",
                           ["algorithm={name: fedgen, beta: 10.0, beta_decay: 0.98}"]),
           "fedgen_counts": ("FedGen + count-weighted teacher loss", ["algorithm={name: fedgen, teacher: counts}"]),
           "fedgen_draws": ("FedGen + uniform noise, labels held, from round 2",
                            ["algorithm={name: fedgen, noise: uniform, labels: available, start_round: 2}"])}
BASELINE = {"fedgen": "fedavg", "fedgen_code": "fedavg", "fedgen_weighted": "fedavg_weighted",  # weighting: see docs/methods.md
            "fedgen_alpha10": "fedavg", "fedgen_beta": "fedavg", "fedgen_counts": "fedavg", "fedgen_draws": "fedavg"}
SIZES = ((64, 256), (32, 256), (32, 128), (16, 128), (32, 64))  # Table 2's [d_eps, d_h]
ALPHAS4 = (0.05, 0.1, 1.0, 10.0)
PAPER_HEAD = {"fedavg": ("59.67±0.76", "58.39±0.74", "74.49±0.57", "86.35±0.60"),  # Table 4, MNIST
              "feddistill_plus": ("58.83±0.62", "56.25±0.98", "74.24±0.60", "86.89±0.26"),
              "feddfusion": ("59.62±0.84", "58.38±0.81", "74.51±0.55", "86.28±0.69"),
              "fedgen": ("63.60±0.63", "65.42±0.29", "79.72±0.52", "87.92±0.46"),
              "fedgen_code": ("63.60±0.63", "65.42±0.29", "79.72±0.52", "87.92±0.46")}
PAPER_SIZES = {(64, 256): "72.01±0.76", (32, 256): "71.61±0.25", (32, 128): "72.09±0.46", (16, 128): "72.43±0.57",
               (32, 64): "70.98±0.85"}  # EMNIST alpha 0.1; FedAvg 66.22±2.58

# the claims (scripts/repro/claims.py), declared before the runs: each FedGen variant against every baseline
# of Table 1, at every alpha, on PRIMARY (Table 1's measure: the mean of a run's top-5 rounds)
PROPOSED = ("fedgen", "fedgen_code")
BASELINES = ("fedavg", "fedprox", "fedensemble", "feddistill", "feddistill_plus", "feddfusion")
TABLE1 = (*BASELINES, *PROPOSED)  # Table 1's methods; the code's rules one at a time are ``rules``'
RULES = ("fedavg", "fedgen", "fedavg_weighted", "fedgen_weighted", "fedgen_alpha10", "fedgen_beta", "fedgen_counts",
         "fedgen_draws")
PRIMARY = "top5"
FAMILY_SEEDS = (0, 1, 2, 3, 4)  # each sets the run's seed, the split and the held-back inputs
# the paper's setting beside ours (digest mrtf_fedgen.md, B.5), and every deviation with its reason
PAPER_SETUP = {"data set": "MNIST (Dirichlet alpha 0.05 / 0.1 / 1 over users for each class)", "clients": "20",
               "clients per round": "10", "rounds": "200", "model": "FedGen's CNN",
               "local training": "sgd, lr 0.01, batch 32, 20 steps", "test set": "the whole MNIST test set",
               "auxiliary data": "none (FedDFusion: unlabelled training samples as proxy)"}
DEVIATIONS = [("Fashion-MNIST instead of MNIST", "MNIST is not installed here; configs/paper/ holds MNIST at 200 rounds"),
              ("100 rounds instead of 200", "the family's 120 runs fit the 2-core budget"),
              ("5,000 unlabelled training inputs held back from every method's split", "FedDFusion's proxy data; "
               "every method leaves them out so that all see the same users")]


def spec(experiment: str, method: str, alpha: float, seed: int, rounds: int, size=None) -> dict:
    overrides = METHODS[method][1] + [f"data.alpha={alpha}", f"federation.rounds={rounds}", "aux.size=5000"]
    if size is not None:
        overrides[0] = f"algorithm={{name: fedgen, noise_dim: {size[0]}, hidden_dim: {size[1]}}}"
    if experiment == "table4":
        overrides.append("algorithm.share=head")
    return {"experiment": experiment, "method": method, "alpha": alpha, "seed": seed,
            "size": list(size) if size else None, "overrides": overrides}


def key(r: dict) -> str:
    size = f"/{r['size'][0]}x{r['size'][1]}" if r.get("size") else ""
    return f"{r['experiment']}/{r['method']}{size}/alpha{r['alpha']}/seed{r['seed']}"


def record(rnd: int, m: dict, config) -> dict:
    return {"round": rnd, "accuracy": m["eval/accuracy"], "personal": m.get("eval/personal_accuracy"),
            "generator": m.get("fedgen/accuracy"), "time_s": m["time/round_s"]}


def variant(s: dict) -> str:
    """A spec's name without its seed: the sweep's variant (trial folders are named after it)."""
    size = f",size={s['size'][0]}x{s['size'][1]}" if s.get("size") else ""
    return f"{s['method']}{size},alpha={s['alpha']:g}"


def run(args, experiment: str, specs: list[dict]) -> tuple[dict, list]:
    """One experiment's specs as a sweep (a seed sets the run and the split: ``seed``, ``data.seed``,
    ``aux.seed``); returns the finished runs by key, and the failed trials."""
    done, failed = run_specs(ROOT / "configs" / "fedgen.yaml", specs, variant, Path(args.sweep) / experiment, record,
                             jobs=args.jobs)
    results = [{**{k: v for k, v in spec.items() if k != "overrides"}, "rounds": r.config.federation.rounds,
                "history": r.records, "wall_s": r.wall_s, "provenance": r.summary.get("provenance")} for spec, r in done]
    return {key(r): r for r in results}, failed


def top5(r: dict, field: str = "accuracy") -> float:
    return float(np.mean(sorted(h[field] for h in r["history"])[-5:]))


def cell(runs: list[dict], field: str = "accuracy") -> str:
    runs = [r for r in runs if r["history"][-1].get(field) is not None]
    if not runs:
        return ""
    best, final = [100 * top5(r, field) for r in runs], [100 * r["history"][-1][field] for r in runs]
    return f"{np.mean(best):.2f}±{np.std(best):.2f} ({np.mean(final):.1f})"


def verdict_lines() -> list[str]:
    from scripts.repro import claims

    return claims.verdict_lines(claims.fedgen_family, "each FedGen variant against each baseline of Table 1 at each "
                                "alpha, on the mean of the top-5 rounds", "The paper has FedGen above every baseline "
                                "on MNIST.", digits=2)


def page(saved: dict) -> str:
    """docs/repro_fedgen.md from what docs/records/repro_fedgen.json holds."""
    done, calls = saved["results"], saved.get("invocations", [])
    from fedray.config import load_config

    setup = load_config(ROOT / "configs" / "fedgen.yaml", spec("table1", "fedgen", 0.1, 0, 100)["overrides"])
    rounds = sorted({r["rounds"] for r in done})
    rows = []
    for method, (label, _) in METHODS.items():
        runs = {a: [r for r in done if r["experiment"] == "table1" and r["method"] == method and r["alpha"] == a]
                for a in ALPHAS} if method in TABLE1 else {}
        if any(runs.values()):
            paper = PAPER[method]
            field = "personal" if method == "feddistill" else "accuracy"  # users' own models, on their labels
            rows.append([label] + [c for i, a in enumerate(ALPHAS) for c in (cell(runs[a], field), paper[i])]
                        + [str(max(len(v) for v in runs.values()))])

    def gains(experiment: str, methods: tuple[str, ...]) -> list[list[str]]:
        """Each method minus its BASELINE, top-5, mean over the seeds both ran in ``experiment``."""
        def of(method: str, a: float) -> dict[int, dict]:
            return {r["seed"]: r for r in done if r["experiment"] == experiment and r["method"] == method
                    and r["alpha"] == a}
        out = []
        for method in methods:
            cells = []
            for a in ALPHAS:
                g, f = of(method, a), of(BASELINE[method], a)
                seeds = sorted(set(g) & set(f))
                diff = [100 * (top5(g[s]) - top5(f[s])) for s in seeds]
                cells.append(f"{np.mean(diff):+.2f} ({len(seeds)})" if seeds else "")
            if any(cells):
                out.append([METHODS[method][0], METHODS[BASELINE[method]][0]] + cells)
        return out

    gaps = gains("table1", PROPOSED)
    rules = [r for r in done if r["experiment"] == "rules"]
    rule_rows = [[METHODS[m][0]] + [cell([r for r in rules if r["method"] == m and r["alpha"] == a]) for a in ALPHAS]
                 + [str(len({r["seed"] for r in rules if r["method"] == m}))]
                 for m in RULES if any(r["method"] == m for r in rules)]
    sizes = []
    for size in SIZES:
        runs = [r for r in done if r["experiment"] == "table2" and r.get("size") == list(size)]
        if runs:
            sizes.append([f"[{size[0]}, {size[1]}]", cell(runs), PAPER_SIZES[size]])
    lines = ["# FedGen against its baselines on Fashion-MNIST (Table 1's MNIST rows, Table 2)", "", *verdict_lines(),
             "## Setup of Table 1's runs", "", *setup_table(setup, PAPER_SETUP, DEVIATIONS), "",
             "## Table 1", "",
             f"Runs: {runs_commit_text([r for r in done if r['experiment'] == 'table1'], 'table1')}. 20 users, half the training data split by Dirichlet alpha, 10 active a round, 20 local steps of "
             f"batch 32, FedGen's CNN, {'/'.join(map(str, rounds))} rounds (paper: 200). Test accuracy %: mean ± std "
             "over seeds of each run's top-5 rounds (the paper's measure), the final round's mean in brackets; beside "
             "it the paper's MNIST number. FedDistill, whose users keep their own models, is scored as the authors' code scores it "
             "(`eval/personal_accuracy`): each user's model on the test samples of the labels it holds, pooled."
             + (" The rows come from calls of this script at different commits (listed at the end). The sweep's "
                "calls seed the held-back unlabelled inputs too (`aux.seed`), the earlier ones kept `aux.seed` 0, so "
                "only seed 0 is the same split in both; the claims table of reproductions.md pairs runs of the same seed and split."
                if any(c.get("sweep") for c in calls) and not all(c.get("sweep") for c in calls) else ""), "",
             *markdown_table(["method", "alpha 0.05", "paper", "alpha 0.1", "paper", "alpha 1", "paper", "seeds"], rows), "",
             "FedGen's gain over FedAvg averaged the same way (points, top-5, mean over the seeds both have; "
             "the seeds in brackets). The paper's MNIST gains: +3.60 / +2.87 / +1.68.", "",
             *markdown_table(["FedGen", "against", "alpha 0.05", "alpha 0.1", "alpha 1"], gaps)]
    if rule_rows:
        lines += ["", "## The authors' code's rules one at a time", "",
                  f"Table 1's setting; runs: {runs_commit_text(rules, 'rules')}. Each rule of the code's FedGen "
                  "(`fedgen_code` above) added alone to the paper's FedGen, beside FedGen and FedAvg of the same call; "
                  "top-5 mean ± std (final round in brackets), %. Not part of the claims.", "",
                  *markdown_table(["method", "alpha 0.05", "alpha 0.1", "alpha 1", "seeds"], rule_rows), "",
                  "Each minus its baseline (points, top-5, mean over the seeds both ran; the seeds in brackets):", "",
                  *markdown_table(["variant", "against", "alpha 0.05", "alpha 0.1", "alpha 1"],
                                  gains("rules", tuple(m for m in RULES if m in BASELINE)))]
    head = []
    for method in PAPER_HEAD:
        runs = {a: [r for r in done if r["experiment"] == "table4" and r["method"] == method and r["alpha"] == a]
                for a in ALPHAS4}
        if any(runs.values()):
            head.append([METHODS[method][0]] + [c for i, a in enumerate(ALPHAS4)
                                                for c in (cell(runs[a], "personal"), cell(runs[a]), PAPER_HEAD[method][i])])
    if head:
        lines += ["", f"Only the last layer shared (Table 4; {runs_commit_text([r for r in done if r['experiment'] == 'table4'], 'table4')}): the round's users, each with its own feature extractor "
                  "under the global head, scored as the authors' code scores them (`eval/personal_accuracy`: each user "
                  "on the test samples of the labels it holds, pooled; the paper's numbers come from that code) and "
                  "on the whole test set (the mean over the users; the paper says it uses all test data).",
                  "", *markdown_table(["method"] + [c for a in ALPHAS4 for c in (f"alpha {a:g}, held labels",
                                                                                  "whole test set", "paper")], head)]
    if sizes:
        lines += ["", f"Generator sizes [d_eps, d_h] at alpha 0.1 (Table 2; the paper's are EMNIST, FedAvg 66.22±2.58; "
                  f"{runs_commit_text([r for r in done if r['experiment'] == 'table2'], 'table2')}):",
                  "", *markdown_table(["[d_eps, d_h]", "ours", "paper (EMNIST)"], sizes)]
    lines += ["", "Written by `scripts/repro/fedgen.py`: " + "; ".join(
        f"{c['runs']} runs ({', '.join(c['only'] or ['all'])}) in {c['wall_s'] / 60:.1f} min with {c['jobs']} "
        f"{'trials at once' if c.get('sweep') else 'processes'} on {c['cpu']}"
        + (f" at commit `{c['commit'][:9]}`" if c.get("commit") else "") for c in calls) + "."]
    return "\n".join(lines) + "\n"


def write(results: dict, path: Path, calls: list[dict]) -> None:
    path.write_text(page({"invocations": calls, "results": list(results.values())}))


def main() -> None:
    parser = grid_arguments(__doc__, ["table1", "table2", "table4", "rules"], ROOT / "docs" / "repro_fedgen")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), help="table1, table4 and rules: only these")
    parser.add_argument("--alphas", nargs="+", type=float, default=list(ALPHAS),
                        help="table1, table4 and rules: only these")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--family", action="store_true",
                        help="table1: the claims' family (PROPOSED and BASELINES, seeds 0-4, every alpha) in one call")
    args = parser.parse_args()
    if args.family:
        args.only, args.methods = ["table1"], [*PROPOSED, *BASELINES]
        args.seeds, args.alphas = list(FAMILY_SEEDS), list(ALPHAS)
    out = Path(args.out)
    store = Store(record_file(out, ".json"), key)
    saved = store.read() or {}
    calls = saved.get("invocations", [])
    store.header = {"invocations": calls}  # kept by every save of the grid, so a stopped grid keeps them
    kept = {k: r for k, r in store.load().items() if r["experiment"] != "table1" or r["method"] in TABLE1}
    if saved and len(kept) < len(saved.get("results", [])):  # the rules' variants, once run in table1: now ``rules``
        store.save(kept)
    if args.plot_only:
        write({key(r): r for r in saved["results"]}, out.with_suffix(".md"), calls)
        return
    rounds = args.rounds or 100
    todo = []
    if not args.only or "table1" in args.only:
        todo += [spec("table1", m, a, s, rounds) for s in args.seeds for a in args.alphas for m in TABLE1
                 if not args.methods or m in args.methods]
    if not args.only or "table2" in args.only:
        todo += [spec("table2", "fedgen", 0.1, s, rounds, size) for s in args.seeds for size in SIZES]
    if not args.only or "table4" in args.only:
        todo += [spec("table4", m, a, s, rounds) for s in args.seeds for a in ALPHAS4 for m in PAPER_HEAD
                 if not args.methods or m in args.methods]
    if not args.only or "rules" in args.only:
        todo += [spec("rules", m, a, s, rounds) for s in args.seeds for a in args.alphas for m in RULES
                 if not args.methods or m in args.methods]
    start = time.perf_counter()
    results, failed = run_experiments(
        todo, partial(run, args), store,
        lambda r: f"{key(r)}: top-5 {100 * top5(r):.1f}%, final {100 * r['history'][-1]['accuracy']:.1f}% ({r['wall_s']:.0f} s)")
    calls = calls + [invocation(args, [s for s in todo if key(s) in results], results, key, start,
                                methods=args.methods or [], alphas=args.alphas, seeds=args.seeds, sweep=True)]
    store.header = {"invocations": calls}
    store.save(results)
    write(results, out.with_suffix(".md"), calls)
    report_failed(failed)


if __name__ == "__main__":
    main()
