"""Every reproduction number in docs/, generated from the recorded runs' JSON: the one generator.

What it writes:

- each reproduction page (``docs/repro_*.md``), by its script's ``page`` function from the script's
  JSON in ``docs/records/`` (the scripts call the same functions after their runs);
- in ``docs/reproductions.md``, the summary table (the paper's numbers beside ours, ours computed
  here from the JSON, each row with the commit its runs ran at), the notes (every sentence on our
  runs computed here from the JSON: :func:`notes`) and the claims table (``scripts/repro/claims.py``),
  each between its markers.

``tests/test_generated_docs.py`` regenerates all of it and fails where a page differs: a hand-edited
number, or a JSON that changed without its page.

    python scripts/docs/generate.py            # list the pages that differ from their JSON
    python scripts/docs/generate.py --write    # write them
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))  # run as a file, it imports the reproduction scripts as scripts.repro.*

import numpy as np  # noqa: E402

from fedray.repro import RECORDS, final_value, listing, runs_commit_text  # noqa: E402

# page -> (the script's module, its function from the JSON to the page's text, the JSON)
PAGES = {
    "repro_lstm.md": ("scripts.repro.lstm", "page", "repro_lstm.json"),
    "repro_table42_repro_thesis_table42_lstm.md": ("scripts.repro.table42", "page",
                                                   "repro_table42_repro_thesis_table42_lstm.json"),
    "repro_table42_repro_thesis_table42_logreg.md": ("scripts.repro.table42", "page",
                                                     "repro_table42_repro_thesis_table42_logreg.json"),
    "repro_fig41.md": ("scripts.repro.fig41", "page", "repro_fig41.json"),
    "repro_cfl.md": ("scripts.repro.cfl", "page", "repro_cfl.json"),
    "repro_distill.md": ("scripts.repro.distill_page", "page", "repro_distill.json"),
    "repro_fedaux.md": ("scripts.repro.fedaux_page", "page", "repro_fedaux.json"),
    "repro_fedaux_toy.md": ("scripts.repro.fedaux_toy", "page", "repro_fedaux_toy.json"),
    "repro_mrtf_demo.md": ("scripts.repro.mrtf", "demo_page", "repro_mrtf_demo.json"),
    "repro_mrtf.md": ("scripts.repro.mrtf", "compare_page", "repro_mrtf.json"),
    "repro_fedgen.md": ("scripts.repro.fedgen", "page", "repro_fedgen.json"),
    "authors.md": ("scripts.authors.compare", "page", "authors.json"),  # fedray beside the authors' code (issue 50)
}
SUMMARY = "reproductions.md"
SUMMARY_START, SUMMARY_END = "<!-- summary:start (scripts/docs/generate.py --write) -->", "<!-- summary:end -->"


def load(name: str) -> dict | list | None:
    """A recorded file's data (``docs/records/<name>``), or None where it is not there."""
    path = DOCS / RECORDS / name
    return json.loads(path.read_text()) if path.exists() else None


def f1(v: float) -> str:
    return f"{v:.1f}"


def pct(v: float) -> str:
    return f"{100 * v:.1f}"


def seeds_text(counts: set[int]) -> str:
    """``3 seeds``, ``1 seed``, or ``1/3 seeds`` where the cells differ."""
    counts = sorted(c for c in counts if c)
    return f"{'/'.join(map(str, counts))} seed{'' if counts == [1] else 's'}"


def slashed(values) -> str:
    return " / ".join(values)


# -- the summary's "ours" cells, each from its JSON --------------------------------------------------
def lstm_central(d: dict) -> str:
    with_m, without = d["results"]["central, momentum 0.9"], d["results"]["central, momentum 0"]
    acc = [h["accuracy"] for h in with_m["history"]]
    best0 = max(h["accuracy"] for h in without["history"])
    return (f"**{100 * max(acc):.2f}%** maximum, {100 * acc[-1]:.2f}% final, with momentum 0.9; "
            f"{100 * best0:.2f}% maximum without momentum ([repro_lstm.md](repro_lstm.md))")


def lstm_fedavg(d: dict) -> str:
    r = d["results"]["FedAvg n=100, momentum 0.9"]
    h = r["history"]
    acc = [e["accuracy"] for e in h]
    first = next((e for e in h if e["accuracy"] >= 0.89), None)
    head = (f"reaches 0.89 in round {first['round']} after {first['mb_up']:.0f} MB up in all" if first
            else f"does **not reach 0.89** in {r['rounds']} rounds")
    near = next((e for e in h if e["accuracy"] >= 0.87), None)
    return (f"{head}: best {100 * max(acc):.2f}%, final {100 * acc[-1]:.2f}%, {h[-1]['mb_up']:.0f} MB up / "
            f"{h[-1]['mb_down']:.0f} MB down in all" + (f"; 0.87 first in round {near['round']} after "
                                                         f"{near['mb_up']:.0f} MB up" if near else "")
            + " ([repro_lstm.md](repro_lstm.md))")


def table42(page: str) -> Callable[[dict], str]:
    def cell(d: dict) -> str:
        results = table42_results(d)
        order = [m for m in importlib.import_module("scripts.repro.table42").METHODS if m in results]
        slots = next(iter(results.values()))["clients_per_round"]

        def first(m, t):
            return next((e for e in results[m]["evals"] if e["accuracy"] >= t), None)

        best = {m: max(e["accuracy"] for e in results[m]["evals"]) for m in order}
        reached = [t for t in d["targets"] if sum(first(m, t) is not None for m in order) * 2 >= len(order)]
        text = "best accuracy: " + ", ".join(f"{m} {best[m]:.3f}" for m in order)
        if reached:
            t = reached[-1]
            text += (f". MB up per client slot (the total over the {slots} clients of a round / {slots}) to "
                     f"**{t}**: " + ", ".join(f"{m} " + (f"{first(m, t)['mb_up'] / slots:.2f}" if first(m, t) else "n.a.")
                                              for m in order))
        return text + f" ([{page}]({page}))"
    return cell


def fig41(d: dict) -> str:
    mod = importlib.import_module("scripts.repro.fig41")
    res = {(r["method"], r["split"]): r for r in d["results"]}
    return "final accuracy, " + slashed(mod.SPLITS) + ": " + "; ".join(
        f"{m} " + slashed(f"{res[m, s]['accuracy']:.3f}" for s in mod.SPLITS) for m in mod.METHODS) \
        + " ([repro_fig41.md](repro_fig41.md))"


def cfl62(d: list | dict) -> str:
    """Table 6.2's cell: each scene's FL / CFL accuracy (the mean over the seeds where several), the
    round by which every seed's adversaries were out, the splits (their range) and the benign clients
    dropped (in all)."""
    mod = importlib.import_module("scripts.repro.cfl")
    res = mod.by_run(mod.results_of(d))
    parts = []
    for s, label in mod.SCENARIOS.items():
        fl, cfl = res[f"table62/{s}", "FL"], res[f"table62/{s}", "CFL"]
        out = [mod.cleared(r) for r in cfl if r["adversaries"]]
        parts.append(f"{label} **{pct(mod.mean_final(fl))} / {pct(mod.mean_final(cfl))}** ("
                     + (f"adversaries out by round {max(out)}, " if out and None not in out else "")
                     + f"{mod.spread([len(mod.splits(r)) for r in cfl])} splits, "
                       f"{sum(len(set(r['dropped']) - set(r['adversaries'])) for r in cfl)} benign dropped)")
    seeds = mod.seeds_of([r for (e, _), rs in res.items() if e.startswith("table62/") for r in rs])
    return ("FL / CFL final accuracy of the benign clients, %" + (f", mean of {mod.seeds_text(seeds)}" if len(seeds) > 1
                                                                   else "")
            + ": " + "; ".join(parts) + " ([repro_cfl.md](repro_cfl.md))")


def cfl68(d: list | dict) -> str:
    mod = importlib.import_module("scripts.repro.cfl")
    res = mod.by_run(mod.results_of(d))
    fl, cfl = res["fig68", "FL"][0], res["fig68", "CFL"][0]
    return (f"FL **{pct(mod.final_accuracy(fl))}%**, CFL **{pct(mod.final_accuracy(cfl))}%**; splits at rounds "
            f"{', '.join(map(str, mod.splits(cfl)))}, {len(cfl['clusters'])} final clusters ([repro_cfl.md](repro_cfl.md))")


def distill(d: dict) -> dict:
    from scripts.repro.distill import key
    return {key(r): r for r in d["runs"]}


def seeded(res: dict, name: str) -> list[dict]:
    """The runs of one cell of repro_distill.json (``name``: its seed-0 key), every seed saved."""
    return [r for k, r in res.items() if k == name or k.startswith(name + "/seed")]


def seeds_said(runs: list[dict]) -> str:
    seeds = sorted({r.get("seed") or 0 for r in runs})
    return f"mean over seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"


def table51(d: dict) -> str:
    rep, res = importlib.import_module("scripts.repro.distill_page"), distill(d)
    cells, ranks = [], []
    for a in rep.ALPHAS51:
        vals = {label: float(np.mean([rep.best(r) for r in seeded(res, f"table51/{m}/{a:g}/one/")]))
                for m, label in rep.MODES.items()}
        cells.append(f"alpha {a:g}: " + slashed(f1(v) for v in vals.values()))
        ranks.append(rep.ranking(vals))
    order = ranks[0] if len(set(ranks)) == 1 else "; ".join(ranks)
    which = seeds_said([r for k, r in res.items() if k.startswith("table51/")])
    return f"maximum %, {which}, " + "; ".join(cells) + f". Order: {order} ([repro_distill.md](repro_distill.md))"


def table52(d: dict) -> str:
    rep, res = importlib.import_module("scripts.repro.distill_page"), distill(d)
    parts = []
    a = 100.0
    target = rep.TARGETS52[a]
    for m, (label, _) in rep.METHODS52.items():
        r = res.get(f"table52/{m}/{a:g}/one/")
        h = rep.reached(r, target) if r else None
        parts.append(f"{label} " + (f"{rep.fmt_mb(rep.per_client(r, h, 'up'))} / {rep.fmt_mb(rep.per_client(r, h, 'down'))}"
                                    if h else "n.r."))
    return (f"MB per client up / down to {target:g}% at alpha {a:g} (a target chosen after seeing the curves; seed 0): "
            + ", ".join(parts) + " ([repro_distill.md](repro_distill.md))")


def feddf_compare(d: dict) -> str:
    rep, res = importlib.import_module("scripts.repro.distill_page"), distill(d)
    parts = []
    for archs, label in (("one", "One architecture"), ("three", "Three architectures")):
        rows = [f"{name} " + slashed(f1(rep.best(res[f"compare/{m}/{a:g}/{archs}/"])) for a in rep.ALPHAS)
                for m, name in rep.METHODS.items()]
        parts.append(f"{label}, maximum %, alpha " + slashed(f"{a:g}" for a in rep.ALPHAS) + ": " + ", ".join(rows))
    return "; ".join(parts) + " ([repro_distill.md](repro_distill.md))"


def fedaux(d: dict) -> dict:
    from scripts.repro.fedaux import key
    return {key(r): r for r in d["runs"]}


def fedaux_of(d: dict, experiment: str) -> list[dict]:
    """The runs of one FedAUX experiment."""
    return [r for r in d["runs"] if r["experiment"] == experiment]


def present(runs: list[dict], methods) -> list[str]:
    """``methods`` (in their order) that have at least one of ``runs``: a cell names only methods that ran."""
    ran = {r["method"] for r in runs}
    return [m for m in methods if m in ran]


def mean_text(values: list[float]) -> str:
    return f1(float(np.mean(values))) if values else "n.a."


def seeds_of(runs: list[dict]) -> tuple[int, ...]:
    return tuple(sorted({r["seed"] for r in runs}))


def split_text(runs: list[dict]) -> str:
    """Whether the seeds of ``runs`` varied the split (``split_seed`` recorded as the seed) or kept one."""
    return "varying the split" if runs and all(r.get("split_seed") == r["seed"] for r in runs) else "on one split"


def table71(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "table71")
    seeds = seeds_of(runs)
    low = "; ".join(f"{rep.METHODS[m][0]} " + slashed(mean_text(rep.over_seeds(res, "table71", m, 0.01, c, seeds))
                                                       for c in rep.RATES) for m in present(runs, rep.METHODS))
    high = [float(np.mean(v)) for m in present(runs, rep.METHODS) for c in rep.RATES
            if (v := rep.over_seeds(res, "table71", m, 100.0, c, seeds))]
    return (f"maximum %, mean of {len(seeds)} seeds {split_text(runs)}, alpha 0.01, C = "
            + slashed(f"{c:g}" for c in rep.RATES) + f": {low}"
            + (f". alpha 100: every method {min(high):.1f}-{max(high):.1f}" if high else "")
            + " ([repro_fedaux.md](repro_fedaux.md))")


def oneshot(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "oneshot")

    def cell(m, a):
        r = rep.first(res, "oneshot", m, a, 1.0)
        return f1(rep.final(r)) if r else "n.a."
    return "accuracy %, alpha " + slashed(f"{a:g}" for a in rep.ONESHOT_ALPHAS) + ": " + "; ".join(
        f"{rep.METHODS[m][0]} " + slashed(cell(m, a) for a in rep.ONESHOT_ALPHAS)
        for m in present(runs, rep.ONESHOT_METHODS))


def privacy(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "privacy")
    parts = []
    for m in present(runs, ("fedaux", "fedaux_code")):
        vals = []
        for eps in rep.EPSILONS:
            r = res.get(f"privacy/{m}/{rep.PRIVACY_ALPHA:g}/{rep.PRIVACY_RATE:g}/0/{eps:g}")
            if r:
                vals.append(f"{f1(rep.best(r))} at " + ("no noise" if math.isinf(eps) else f"eps {eps:g}"))
        parts.append(f"{rep.METHODS[m][0]}: " + ", ".join(vals))
    return "maximum %, " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def claim(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "claim")
    seeds = seeds_of(runs)
    norm = sorted({r.get("normaliser") or "paper" for r in runs if r["method"].startswith("fedaux")})
    means = "; ".join(f"{rep.METHODS[m][0]} " + slashed(mean_text(rep.over_seeds(res, "claim", m, 0.01, c, seeds))
                                                        for c in rep.RATES) for m in present(runs, rep.CLAIM_METHODS))
    return (f"maximum %, mean of {len(seeds)} seeds {split_text(runs)}"
            + (f", FedAUX with the {' and '.join(norm)} normaliser" if norm else "") + ", C = "
            + slashed(f"{c:g}" for c in rep.RATES) + f": {means}. Paired differences and verdicts: "
            "[claims table](#claims-and-their-statistics)")


def lambdas(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "lambda")
    seeds = seeds_of(runs)
    parts = []
    for eps in rep.LAMBDA_EPSILONS:
        cells = []
        for lam in rep.LAMBDAS:
            mine = [r for s in seeds if (r := rep.lambda_run(res, lam, eps, s))]
            if mine:
                auc = np.mean([r["history"][0]["score_auc"] for r in mine])
                cells.append(f"lambda {lam:g}: {f1(np.mean([rep.best(r) for r in mine]))} (AUC {auc:.2f})")
        if cells:
            parts.append(("without noise" if math.isinf(eps) else f"eps {eps:g}") + ": " + ", ".join(cells))
    return f"maximum %, mean of {len(seeds)} seeds; " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def mixed(d: dict) -> str:
    rep, res, runs = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), fedaux_of(d, "mixed")
    parts = []
    for a in rep.ALPHAS:
        cells = [f"{rep.METHODS[m][0]} {f1(rep.best(r))}" for m in present(runs, rep.MIXED_METHODS)
                 if (r := rep.first(res, "mixed", m, a, 0.4))]
        if cells:
            parts.append(f"alpha {a:g}: " + ", ".join(cells))
    return "maximum % over all clients, " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def mrtf_demo(d: dict) -> str:
    return (f"locals {slashed(f1(v) for v in d['locals'])}%; AvgLogit **{d['avg_logit']}**, AvgProb **{d['avg_prob']}** "
            f"(stabilised {d['avg_prob_stabilised']}); with weights 0.6 / 0.3 / 0.1: {d['avg_logit_skewed']} and "
            f"{d['avg_prob_skewed']}; aggregate {d['aggregate']}, AvgLogit with the previous and aggregated model "
            f"{d['avg_logit_rectified']}, rectified AvgProb **{d['avg_prob_rectified']}** "
            f"([repro_mrtf_demo.md](repro_mrtf_demo.md))")


def mrtf_compare(d: dict) -> str:
    mod = importlib.import_module("scripts.repro.mrtf")
    runs = d["results"]
    cells = []
    for m, (label, _) in mod.METHODS.items():
        per = []
        for s in mod.SPLITS:
            finals = [100 * final_value(r) for r in runs if r["split"] == s and r["method"] == m]
            per.append(f"{np.mean(finals):.1f}" if finals else "n.a.")
        n = {len([r for r in runs if r["split"] == s and r["method"] == m]) for s in mod.SPLITS}
        cells.append(f"{label} {slashed(per)} ({seeds_text(n)})")
    return ("final %, mean over the seeds, " + slashed(mod.SPLITS) + ": " + "; ".join(cells)
            + ". Paired differences: [claims table](#claims-and-their-statistics) ([repro_mrtf.md](repro_mrtf.md))")


def fedgen(d: dict) -> str:
    mod = importlib.import_module("scripts.repro.fedgen")
    runs = [r for r in d["results"] if r["experiment"] == "table1"]
    cells = []
    for m in mod.TABLE1:
        label, per, seeds = mod.METHODS[m][0], [], set()
        for a in mod.ALPHAS:
            mine = [r for r in runs if r["method"] == m and r["alpha"] == a]
            seeds.add(len(mine))
            field = "personal" if m == "feddistill" else "accuracy"  # users' own models, on their labels
            per.append(f"{100 * np.mean([mod.top5(r, field) for r in mine]):.2f}" if mine else "n.a.")
        if any(p != "n.a." for p in per):
            cells.append(f"{label} {slashed(per)} ({seeds_text(seeds)})")
    return ("Table 1, mean of each run's top-5 rounds, %, alpha " + slashed(f"{a:g}" for a in mod.ALPHAS) + ": "
            + "; ".join(cells) + ". Paired differences: [claims table](#claims-and-their-statistics); Tables 2 and 4: "
            "[repro_fedgen.md](repro_fedgen.md)")


def toy(d: dict) -> str:
    iris = {float(e): rows for e, rows in d["iris"].items()}
    first = iris[min(iris)]
    mean = lambda rows, k: 100 * np.mean([r[k] for r in rows])  # noqa: E731
    at_one = [r for r in d["gauss"] if r["eps"] == 1.0]
    return (f"iris ({len(first)} seeds): mean **{f1(mean(first, 'mean'))}%**, Gaussian KDE **{f1(mean(first, 'kde'))}%**, "
            f"DP logistic scores {f1(mean(first, 'logistic'))}% without noise, "
            + ", ".join(f"{f1(mean(rows, 'logistic_dp'))}% at eps {e:g}" for e, rows in sorted(iris.items()))
            + f"; three Gaussians at eps 1: mean {f1(mean(at_one, 'mean'))}%, DP logistic {f1(mean(at_one, 'logistic'))}%, "
              f"true densities {f1(mean(at_one, 'density'))}% ([repro_fedaux_toy.md](repro_fedaux_toy.md))")


# where a row's runs come from: the runs of its JSON that the row's cell reads
def lstm_runs(*names: str) -> Callable[[dict], list[dict]]:
    return lambda d: [d["results"][n] for n in names if n in d["results"]]


def results_of(d: dict) -> list[dict]:
    return d["results"]


def whole(d: dict) -> list[dict]:
    """A JSON that is one result (a demo, a toy): the one run."""
    return [d]


def cfl_runs(experiment: str) -> Callable[[list | dict], list[dict]]:
    return lambda d: [r for r in importlib.import_module("scripts.repro.cfl").results_of(d)
                      if r["experiment"].split("/")[0] == experiment]


def distill_runs(experiment: str) -> Callable[[dict], list[dict]]:
    return lambda d: [r for r in d["runs"] if r["experiment"] == experiment]


def fedaux_runs(experiment: str) -> Callable[[dict], list[dict]]:
    return lambda d: fedaux_of(d, experiment)


def mrtf_tables(d: dict) -> list[dict]:
    """MrTF's runs, each named by its table on repro_mrtf.md: the claims' (Fig. 7) or the ablation's."""
    mod = importlib.import_module("scripts.repro.mrtf")
    family = {*mod.PROPOSED, *mod.BASELINES}
    return [{**r, "experiment": "Fig. 7" if r["method"] in family else "the ablation"} for r in d["results"]]


def fedgen_runs(d: dict) -> list[dict]:
    return [r for r in d["results"] if r["experiment"] == "table1"]


# config | follows | paper | (the JSON, its "ours" cell, its runs)
ROWS = [
    ("`repro_thesis_lstm_central.yaml` + `scripts/repro/lstm.py`",
     "thesis section 4.3, LSTM 2x128 on Fashion-MNIST, central, 20k iterations, lr 0.04, batch 20",
     "90.21% (maximum)", "repro_lstm.json", lstm_central, lstm_runs("central, momentum 0.9", "central, momentum 0")),
    ("`repro_thesis_fedavg_lstm.yaml` + `scripts/repro/lstm.py`",
     "thesis Table 4.2, Fashion-MNIST, FedAvg n = 100, M = 100, C = 0.1, batch 20, target 0.89; 60 rounds",
     "83.9 MB up / 83.9 MB down", "repro_lstm.json", lstm_fedavg, lstm_runs("FedAvg n=100, momentum 0.9")),
    ("`repro_thesis_table42_lstm.yaml` + `scripts/repro/table42.py`",
     "thesis Table 4.2, Fashion-MNIST column: LSTM 2x128, M = 100, C = 0.1, batch 20, lr 0.04, no momentum; "
     "3,000 local iterations per method (thesis: 20,000)",
     "MB up to 0.89: baseline 2422.8, signSGD 123.3, FedAvg n = 25 / 100 / 400: 174.7 / 83.9 / 86.5, STC p = 1/25, "
     "1/100, 1/400: 8.8 / 12.1 / 7.9", "repro_table42_repro_thesis_table42_lstm.json",
     table42("repro_table42_repro_thesis_table42_lstm.md"), results_of),
    ("`repro_thesis_table42_logreg.yaml` + `scripts/repro/table42.py`",
     "the same table with logistic regression in place of the LSTM",
     "as above (0.89, LSTM)", "repro_table42_repro_thesis_table42_logreg.json",
     table42("repro_table42_repro_thesis_table42_logreg.md"), results_of),
    ("`repro_thesis_fig41.yaml` + `scripts/repro/fig41.py`",
     "thesis Fig. 4.1, non-iid robustness, logistic regression, 10 clients, iid / 2 / 1 classes per client "
     "(Fashion-MNIST for MNIST; 1,000 iterations per client)",
     "all comparable on iid data; non-iid: top-k affected least, signSGD plateaus lower, FedAvg degrades",
     "repro_fig41.json", fig41, results_of),
    ("`repro_thesis_table62_fmnist.yaml` + `scripts/repro/cfl.py`",
     "thesis Table 6.2, Fashion-MNIST row: 100 clients, even random split, 30% adversaries, batch 100, 200 rounds, "
     "robust CFL (eq. 6.50) with alpha_thresh 0.02; an MLP (2NN) instead of the CNN",
     "FL / CFL final accuracy of benign clients, %: Byzantine 9.6 / 78.0, noisy 77.12 / 79.7, label-flip 60.6 / "
     "79.7, clean 79.9 / 80.2; all adversaries removed within 34 rounds; clean never splits", "repro_cfl.json", cfl62,
     cfl_runs("table62")),
    ("`repro_thesis_fig68_fmnist.yaml` + `scripts/repro/cfl.py`",
     "thesis Fig. 6.8 on Fashion-MNIST instead of CIFAR-10: 20 clients, 4 groups with their own label permutation, "
     "3 local epochs; MLP, batch 32, 60 rounds",
     "FL stalls near 20%; splits at rounds 50, 100, 150; CFL close to 60%", "repro_cfl.json", cfl68, cfl_runs("fig68")),
    ("`repro_thesis_table51_fmnist.yaml` + `scripts/repro/distill.py`",
     "thesis Table 5.1 on Fashion-MNIST: FD, 20 clients, C = 20%, Dirichlet alpha 100 / 1 / 0.1, Adam 1e-3; the 2NN "
     "MLP instead of LeNet, 5,000 unlabelled training images carved out before the split instead of EMNIST, 30 "
     "rounds instead of 50",
     "maximum accuracy %, Init Previous / Init Random / Dual Distill. MNIST: 98.1 / 96.7 / 97.8, 97.9 / 96.4 / 97.5, "
     "92.6 / 90.1 / 92.7; CIFAR-10: 70.2 / 68.5 / 74.9, 68.2 / 66.0 / 72.4, 51.1 / 48.2 / 56.1",
     "repro_distill.json", table51, distill_runs("table51")),
    ("`repro_thesis_table52_fmnist.yaml` + `scripts/repro/distill.py`",
     "thesis Table 5.2 on Fashion-MNIST: 20 clients, C = 40%, dual distillation, MB per client up / down to a "
     "target; the MLP and 5,000 auxiliary images instead of ResNet-18 and 80,000 STL-10 images; 30 rounds",
     "ResNet-18, alpha 100, 71%: FA 760.3 / 760.3, FD 44.8 / 44.8, CFD-1-32 0.56 / 54.4, CFD_delta-1-32 0.40 / "
     "54.4, CFD-1-1 1.36 / 1.36, CFD_delta-1-1 0.82 / 0.39", "repro_distill.json", table52, distill_runs("table52")),
    ("`repro_fedaux_feddf_fmnist.yaml` + `scripts/repro/distill.py`",
     "FedAUX Table I's protocol on Fashion-MNIST: 20 clients, C = 0.4, Adam 1e-3, E = 1, distillation one epoch of "
     "Adam over 5,000 carved-out images, 20 rounds instead of 100. One architecture (MLP), and three (7 LogReg, 7 "
     "MLP, 6 LSTM-64) for FedAUX's Mixed setting",
     "ResNet-8 on CIFAR-10, maximum %, alpha 0.01 / 100, C = 0.4: FedAvg 23.6 / 82.2, FedDF 27.8 / 81.4, FedBE "
     "25.7 / 82.0", "repro_distill.json", feddf_compare, distill_runs("compare")),
    ("`repro_fedaux_table71_fmnist.yaml` + `scripts/repro/fedaux.py`",
     "FedAUX Table I / thesis Table 7.1 on Fashion-MNIST: 20 clients, Dirichlet alpha 0.01 and 100, C = 0.2 / 0.4 "
     "/ 0.8, the 2NN MLP, 15 rounds instead of 100, 5,000 carved-out auxiliary images (1,000 of them D^-), SimCLR "
     "30 epochs, lambda 0.1, eps 0.1, delta 1e-5; FedAUX under the public normaliser",
     "ResNet-8 on CIFAR-10 with STL-10, maximum %, alpha 0.01: FedAvg 19.9 / 23.6 / 28.9, FedProx 28.4 / 34.0 / "
     "42.0, FedDF 25.0 / 27.8 / 30.6, FedDF+P 28.8 / 39.3 / 48.1, FedAUX **54.2 / 71.2 / 78.5**; alpha 100: "
     "80.8-89.6", "repro_fedaux.json", table71, fedaux_runs("table71")),
    ("the same, `--only oneshot`",
     "FedAUX Table III, one-shot: one round, all clients, many local epochs; here 20 clients, E = 10, alpha 0.01 / "
     "0.16 / 10.24", "MobileNetV2, 100 clients, E = 40: FedDF 16.8 / 37.7 / 40.4, FedDF+P 46.7 / 67.6 / 71.2, "
     "FedAUX **64.8 / 68.2 / 71.3**", "repro_fedaux.json", oneshot, fedaux_runs("oneshot")),
    ("the same, `--only privacy`",
     "FedAUX Fig. 8 / thesis Fig. 7.7: accuracy against eps; here alpha 0.01, C = 0.4, lambda 0.1, eps 0.01 to no "
     "noise, the public normaliser", "40 clients, ResNet-8, lambda 0.01: 74.6% without noise, 70.8% at eps 0.04, "
     "delta 1e-6", "repro_fedaux.json", privacy, fedaux_runs("privacy")),
    ("the same, `--only claim`",
     "Table I's family at alpha 0.01: each FedAUX variant against each of the table's baselines that ran, C = 0.2 / "
     "0.4 / 0.8, differences paired by seed",
     "FedAUX - FedDF+P: +25.4 / +31.9 / +30.4; FedDF+P - FedDF: +3.8 / +11.5 / +17.5", "repro_fedaux.json", claim,
     fedaux_runs("claim")),
    ("the same, `--only lambda`",
     "not in the paper: FedAUX with the paper's J at alpha 0.01, C = 0.4, lambda 0.1 / 0.01 / 1e-3 / 1e-4, at eps "
     "0.1 and without noise", "Fig. 8 says a larger lambda is more robust to the noise and less accurate",
     "repro_fedaux.json", lambdas, fedaux_runs("lambda")),
    ("the same, `--only mixed`",
     "FedAUX's Mixed setting: three architectures, a third of the clients each (7 LogReg, 7 MLP, 6 LSTM-64 for "
     "ResNet-8 / MobileNetV2 / ShuffleNet), C = 0.4", "no numbers; FedAUX >= FedDF+P > FedDF", "repro_fedaux.json",
     mixed, fedaux_runs("mixed")),
    ("`scripts/repro/fedaux_toy.py`",
     "FedAUX Fig. 2 / thesis Fig. 7.2 (iris, three clients) and Fig. 3 (three Gaussians)",
     "iris: mean ensemble 33%, density-weighted 88%", "repro_fedaux_toy.json", toy, whole),
    ("`scripts/repro/mrtf.py` (MrTF's config, 3 clients)",
     "MrTF Fig. 6 demo: 3 clients with 2 classes each, one round; targets on the test inputs (Fashion-MNIST for "
     "MNIST; all samples of 2 of 6 seeded classes per client, MLP, 1 local epoch of SGD at lr 0.01)",
     "locals 17.6 / 19.2 / 20.4%; AvgLogit **33.1** < AvgProb **44.0**; with the aggregated models AvgLogit 39.4, "
     "rectified AvgProb **79.9**", "repro_mrtf_demo.json", mrtf_demo, whole),
    ("`mrtf.yaml` + `scripts/repro/mrtf.py --only compare`",
     "MrTF Fig. 7's four scenes scaled: K = 100, R = 10%, E = 3, split by Dirichlet alpha 1 and 0.1 and by label "
     "with C-bar = 5 and 3; Fashion-MNIST with the MLP instead of the digit sets' nets, 20 rounds instead of 200; "
     "seeds vary the split; FedDF as the paper runs it in TFL (AvgLogit on the test inputs = the ablation's AL)",
     "Fig. 7 and Fig. 11 (plots only): MrTF best in every scene; each ablation step adds accuracy",
     "repro_mrtf.json", mrtf_compare, mrtf_tables),
    ("`fedgen.yaml` + `scripts/repro/fedgen.py`",
     "FedGen Table 1's MNIST rows on Fashion-MNIST: 20 users with half the training data by Dirichlet alpha 0.05 / "
     "0.1 / 1, 10 active, 20 local steps of batch 32 (SGD 0.01), FedGen's CNN, 100 rounds instead of 200; seeds "
     "vary the split",
     "MNIST, mean ± std over seeds of the top-5 rounds: FedAvg 87.70 / 90.16 / 93.84, FedGen **91.30 / 93.03 / "
     "95.52**, FedEnsemble 88.85 / 90.78 / 93.91", "repro_fedgen.json", fedgen, fedgen_runs),
]


# -- the notes of reproductions.md: every sentence on our runs computed from the JSON ---------------
NOTES_START, NOTES_END = "<!-- notes:start (scripts/docs/generate.py --write) -->", "<!-- notes:end -->"


def signed(v: float, digits: int = 1) -> str:
    return f"{v:+.{digits}f}"


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def count_text(k: int, n: int, what: str) -> str:
    """``in all 3 settings``, ``in none of the 3 settings``, ``in 2 of 3 settings``."""
    return f"in all {n} {what}" if k == n else f"in none of the {n} {what}" if k == 0 else f"in {k} of {n} {what}"


def paper_value(cell: str) -> float:
    """A paper's table cell (``87.70±2.07``) as its mean."""
    return float(cell.split("±")[0])


def lstm_notes(d: dict) -> list[str]:
    mod = importlib.import_module("scripts.repro.lstm")
    runs, paper, out = d["results"], mod.PAPER_CENTRAL, []
    peak = {n: 100 * max(h["accuracy"] for h in r["history"]) for n, r in runs.items()}
    if "central, momentum 0.9" in peak and "central, momentum 0" in peak:
        b9, b0 = peak["central, momentum 0.9"], peak["central, momentum 0"]
        iterations = runs["central, momentum 0.9"]["history"][-1]["iterations"]

        def off(b: float) -> str:
            return f"{abs(b - paper):.2f} points {'under' if b < paper else 'over'} it"
        closer = abs(b9 - paper) < abs(b0 - paper)
        text = (f"**LSTM references** (thesis section 4.3; seed 0). The thesis trains with momentum 0 and with 0.9 "
                f"and does not say which gave its central {paper}%. Trained centrally for {iterations:,} iterations, "
                f"our LSTM peaks at {b9:.2f}% with momentum 0.9 ({off(b9)}) and at {b0:.2f}% without ({off(b0)}); "
                + ("the run with momentum 0.9 comes closer, and the two LSTM configs of the summary use 0.9."
                   if closer else "the run without momentum comes closer, although the two LSTM configs of the "
                   "summary use 0.9."))
        fed = runs.get("FedAvg n=100, momentum 0.9")
        if fed:
            target, _ = mod.PAPER_FEDAVG
            best = max(h["accuracy"] for h in fed["history"])
            first = next((h for h in fed["history"] if h["accuracy"] >= target), None)
            text += (f" FedAvg n = 100 with momentum 0.9 peaks at {100 * best:.2f}% in {fed['rounds']} rounds, "
                     + (f"reaching the thesis's target {target} in round {first['round']}" if first else
                        f"short of the thesis's target {target}")
                     + (f", which lies {b9 - 100 * target:.2f} points under our central maximum." if b9 > 100 * target
                        else f", which lies above our central maximum."))
        if b9 < paper and b0 < paper:
            text += (" Initialisation, input scaling and the thesis's 216,330-parameter variant are open ways to close "
                     "the central gap.")
        out.append("- " + text)
    out.append("- The digest gives this LSTM 216,330 parameters; PyTorch's standard 2x128 LSTM with its linear head, "
               "which fedray uses, has 214,282, so one upload is 0.857 MB rather than 0.865 MB.")
    return out


def table42_results(d: dict) -> dict[str, dict]:
    """Each method's seed-0 run: the summary and the notes speak of seed 0 (the page gives the mean over seeds)."""
    return {r["method"]: r for r in d["results"] if r.get("seed", 0) == 0}


def stc_ratio_text(d: dict) -> str:
    results, mod = table42_results(d), importlib.import_module("scripts.repro.table42")
    return listing(f"{r['evals'][-1]['mb_down'] / r['evals'][-1]['mb_up']:.1f} ({m.split(' ', 1)[1]})"
                   for m in mod.METHODS if m.startswith("STC") and (r := results.get(m)))


def table42_counting(lstm: dict | None, logreg: dict | None) -> list[str]:
    text = ("- Table 4.2 counts megabytes per client stream, not summed over the clients. At 0.865 MB an upload, "
            "FedAvg n = 100's 83.9 MB is 97 uploads: summed over the 10 clients of a round that would be about 10 "
            "rounds, 1,000 iterations, while 97 rounds of one client slot, 9,700 iterations, fit the thesis's "
            "20,000-iteration budget. The Table 4.2 pages give the total over all clients and, in brackets, that "
            "total divided by the clients of a round.")
    ratios = [f"{stc_ratio_text(d)} with {name}" for d, name in ((lstm, "the LSTM"), (logreg, "logistic regression"))
              if d is not None and any(m.startswith("STC") for m in table42_results(d))]
    if ratios:
        text += (" The digest checks that STC's download is tau = 1/C = 10 times its upload in the thesis's table; in "
                 "our runs STC's download over its upload, over the whole budget, is " + "; and ".join(ratios) + ".")
    return [text]


def table42_notes(d: dict, name: str, paper: bool) -> list[str]:
    mod = importlib.import_module("scripts.repro.table42")
    results = table42_results(d)
    order = [m for m in mod.METHODS if m in results]
    slots = next(iter(results.values()))["clients_per_round"]
    best = {m: max(e["accuracy"] for e in results[m]["evals"]) for m in order}
    low, high = min(order, key=best.get), max(order, key=best.get)
    reach = [m for m in order if mod.first_reaching(results[m]["evals"], mod.PAPER_TARGET)]
    text = (f"**Table 4.2, {name}** ({d['budget']:,} local iterations per method against the thesis's 20,000, no "
            f"momentum, seed 0). The best accuracy within the budget runs from {best[low]:.3f} ({low}) to "
            f"{best[high]:.3f} ({high}); "
            + ("no method reaches the thesis's target 0.89." if not reach else
               f"{len(reach)} of {len(order)} methods reach the thesis's target 0.89."))
    for t in d["targets"]:
        first = {m: e for m in order if (e := mod.first_reaching(results[m]["evals"], t))}
        if len(first) * 2 < len(order):
            continue
        cheap = sorted(first, key=lambda m: first[m]["mb_up"])
        missing = [m for m in order if m not in first]
        stc = [m for m in cheap if m.startswith("STC")]
        text += (f" To {t}, MB up per client slot, cheapest first: "
                 + ", ".join(f"{m} {first[m]['mb_up'] / slots:.2f}" for m in cheap)
                 + (f"; {listing(missing)} {'does' if len(missing) == 1 else 'do'} not reach it" if missing else "")
                 + (f". STC's places: " + ", ".join(f"{m.split(' ', 1)[1]} {ordinal(cheap.index(m) + 1)}" for m in stc)
                    + f" of {len(cheap)}." if stc else "."))
    if paper:
        ranked = sorted(mod.METHODS, key=lambda m: mod.METHODS[m][2][0])
        text += (f" In the thesis's column at 0.89 the STC variants are "
                 + listing(f"{m.split(' ', 1)[1]} {ordinal(ranked.index(m) + 1)}" for m in ranked if m.startswith("STC"))
                 + f" of {len(ranked)} by MB up.")
    last = d["budget"] * 2 // 3
    gains = {m: 100 * (best[m] - max((e["accuracy"] for e in results[m]["evals"] if e["iterations"] <= last),
                                     default=0.0)) for m in order}
    text += (f" Best accuracy gained after iteration {last:,} (the last third of the budget), points: "
             + ", ".join(f"{m} {signed(gains[m])}" for m in sorted(order, key=lambda m: -gains[m])) + ".")
    return ["- " + text]


def fig41_notes(d: dict) -> list[str]:
    mod = importlib.import_module("scripts.repro.fig41")
    res = {(r["method"], r["split"]): r["accuracy"] for r in d["results"]}
    splits = list(mod.SPLITS)
    methods = [m for m in mod.METHODS if (m, splits[0]) in res and (m, splits[-1]) in res]
    iid = [res[m, splits[0]] for m in methods]
    change = {m: 100 * (res[m, splits[-1]] - res[m, splits[0]]) for m in methods}
    ranked = sorted(methods, key=lambda m: -change[m])
    compressed = [m for m in ranked if not m.startswith("baseline")]
    return [f"- **Fig. 4.1 scaled** (logistic regression, 10 clients, {d['rounds']:,} iterations per client, seed 0). "
            f"On iid data the {len(methods)} methods end {100 * (max(iid) - min(iid)):.1f} points apart "
            f"({min(iid):.3f}-{max(iid):.3f}). From iid to {splits[-1].replace('/client', ' per client')}, the final "
            "accuracy changes by, smallest loss first: " + ", ".join(f"{m} {signed(change[m])}" for m in ranked)
            + f" points; of the methods that compress, {compressed[0]} loses least and {compressed[-1]} most. The "
            "thesis's figure (MNIST) has top-k affected least, signSGD plateauing lower and FedAvg degrading."]


def cfl_notes(d: list | dict) -> list[str]:
    """Table 6.2 (each accuracy the mean over its seeds, the splits their range) and Fig. 6.8."""
    mod = importlib.import_module("scripts.repro.cfl")
    res = mod.by_run(mod.results_of(d))
    out = []
    get = {(s, m): res.get((f"table62/{s}", m)) for s in mod.SCENARIOS for m in ("FL", "CFL")}
    if all(get.values()):
        acc = {k: 100 * mod.mean_final(runs) for k, runs in get.items()}
        adversarial = [s for s in mod.SCENARIOS if s != "none"]
        label = {s: text if s == "byzantine" else text.lower() for s, text in mod.SCENARIOS.items()}
        rounds = max(h["round"] for runs in get.values() for r in runs for h in r["history"])
        seeds = mod.seeds_of([r for runs in get.values() for r in runs])
        cfl = {s: get[s, "CFL"] for s in adversarial}
        cleared = {s: [mod.cleared(r) for r in runs] for s, runs in cfl.items()}
        out_by = {s: None if None in v else max(v) for s, v in cleared.items()}
        benign = sum(len(set(r["dropped"]) - set(r["adversaries"])) for runs in cfl.values() for r in runs)
        higher = sum(acc[s, m] > mod.PAPER62[s][i] for s in mod.SCENARIOS for i, m in enumerate(("FL", "CFL")))
        which = f"{mod.seeds_text(seeds)}" + (", accuracies the means over the seeds, splits their range"
                                              if len(seeds) > 1 else "")
        text = (f"**Table 6.2, Fashion-MNIST row** ({which}, {rounds} rounds; an MLP at lr 0.1, "
                "where the thesis gives neither its CNN nor its learning rate). FL's final accuracy of the benign "
                "clients: " + ", ".join(f"{label[s]} {acc[s, 'FL']:.1f}% (thesis {mod.PAPER62[s][0]})"
                                        for s in ("none", *adversarial)) + ". "
                f"Under Byzantine updates FL ends {acc['byzantine', 'FL'] - 10:.1f} points above the 10% of guessing "
                f"at random. CFL's final accuracy minus its own clean one ({acc['none', 'CFL']:.1f}%): "
                + ", ".join(f"{label[s]} {signed(acc[s, 'CFL'] - acc['none', 'CFL'])}" for s in adversarial)
                + " points (thesis: " + ", ".join(f"{signed(mod.PAPER62[s][1] - mod.PAPER62['none'][1])}"
                                                  for s in adversarial) + "). Splits: "
                + ", ".join(f"{label[s]} {mod.spread([len(mod.splits(r)) for r in get[s, 'CFL']])}"
                            for s in mod.SCENARIOS)
                + ("; every adversary is out of the benign cluster by round "
                   f"{max(out_by.values())} (thesis: within 34 rounds)" if None not in out_by.values() else
                   "; adversaries still share the benign cluster at the end with "
                   + listing(label[s] for s, v in out_by.items() if v is None)
                   + (" (in some seeds)" if len(seeds) > 1 else ""))
                + f"; benign clients dropped: {benign}"
                + (f" in the {sum(map(len, cfl.values()))} runs" if len(seeds) > 1 else "")
                + ". Our accuracies are above the thesis's "
                f"{count_text(higher, 2 * len(mod.SCENARIOS), 'cells')}.")
        out.append("- " + text)
    fl, cfl = (res.get(("fig68", m), [None])[0] for m in ("FL", "CFL"))
    if fl and cfl:
        out.append(f"- **Fig. 6.8 on Fashion-MNIST** ({mod.seeds_text([cfl.get('seed', 0)])}, {len(cfl['history'])} "
                   "rounds). CFL splits at rounds "
                   f"{listing(map(str, mod.splits(cfl)))}, the thesis's CIFAR-10 run at 50, 100 and 150; FL ends at "
                   f"{100 * mod.final_accuracy(fl):.1f}% and CFL at {100 * mod.final_accuracy(cfl):.1f}% with "
                   f"{len(cfl['clusters'])} clusters for the 4 groups (thesis: about 20%, close to 60%). The run "
                   "differs from the thesis's in its data and model (Fashion-MNIST and an MLP for CIFAR-10 and a "
                   "5-layer CNN; the thesis's section 6.5 finds MNIST clusters separable from fewer samples a client "
                   "than CIFAR-10's) and in eps1, a quarter of the largest mean update rather than a tenth, set so for "
                   f"a run of {len(cfl['history'])} rounds.")
    return out


def distill_notes(d: dict) -> list[str]:
    rep, res, out = importlib.import_module("scripts.repro.distill_page"), distill(d), []
    t51 = {(m, a): seeded(res, f"table51/{m}/{a:g}/one/") for m in rep.MODES for a in rep.ALPHAS51}
    if all(t51.values()):
        label = rep.MODES
        vals = {a: {label[m]: float(np.mean([rep.best(r) for r in t51[m, a]])) for m in rep.MODES} for a in rep.ALPHAS51}
        top = [max(v, key=v.get) for v in vals.values()]
        dual = sum(v["Dual Distill"] > v["Init Random"] for v in vals.values())
        paper = []
        for data, rows in rep.PAPER51.items():
            tops = Counter(max(zip(label.values(), row), key=lambda x: x[1])[0] for row in rows.values())
            above = sum(row[2] > row[1] for row in rows.values())
            paper.append(f"{data.split(' (')[0]}: Dual Distill above Init Random at {above} of {len(rows)}, highest "
                         + ", ".join(f"{k} at {n} of {len(rows)}" for k, n in tops.most_common()))
        def jump(r: dict) -> float:
            acc = rep.accuracies(r)
            return max(abs(x - y) for x, y in zip(acc, acc[1:]))
        jumps = {a: 100 * max(jump(r) for m in rep.MODES for r in t51[m, a]) for a in rep.ALPHAS51}
        noisy = min(rep.ALPHAS51)
        spread = max(vals[noisy].values()) - min(vals[noisy].values())
        every = [r for runs in t51.values() for r in runs]
        out.append(f"- **Table 5.1** ({seeds_said(every)} per cell, {every[0]['rounds']} rounds; the "
                   "thesis: means of 3 runs, 50 rounds). By the means, Dual Distill is above Init Random at "
                   f"{dual} of {len(vals)} alphas, and the highest mode is "
                   + ", ".join(f"{k} at {n} of {len(vals)}" for k, n in Counter(top).most_common())
                   + "; in the thesis, " + "; ".join(paper) + ". The largest change of accuracy between consecutive "
                   "rounds, over the three modes and the seeds: " + ", ".join(f"{jumps[a]:.1f} points at alpha {a:g}" for a in
                                                               rep.ALPHAS51)
                   + (f"; at alpha {noisy:g} the three maxima lie {spread:.1f} points apart, less than one such jump."
                      if spread < jumps[noisy] else "."))
    one = {(m, a): res.get(f"compare/{m}/{a:g}/one/") for m in rep.METHODS for a in rep.ALPHAS}
    if all(one.values()):
        diff = {m: [rep.best(one[m, a]) - rep.best(one["fedavg", a]) for a in rep.ALPHAS] for m in ("feddf", "fedbe")}
        gains = [rep.gain(one["feddf", a], "mlp") for a in rep.ALPHAS]
        ens = [100 * max(rep.accuracies(one["feddf", a], "ensemble")) for a in rep.ALPHAS]
        paper = {m: [rep.PAPER_I[m][a] - rep.PAPER_I["fedavg"][a] for a in (0.01, 100.0)] for m in ("feddf", "fedbe")}
        alphas = slashed(f"{a:g}" for a in rep.ALPHAS)
        out.append(f"- **FedAUX Table I's protocol, one architecture** (the MLP, one seed, "
                   f"{one['fedavg', rep.ALPHAS[0]]['rounds']} rounds). The maximum minus FedAvg's, alpha {alphas}: "
                   f"FedDF {slashed(signed(v) for v in diff['feddf'])}, FedBE {slashed(signed(v) for v in diff['fedbe'])}"
                   "; FedAUX's Table I has FedDF " + " and ".join(f"{signed(v)} at alpha {a:g}" for v, a in
                                                                  zip(paper["feddf"], (0.01, 100.0)))
                   + ", FedBE " + " and ".join(f"{signed(v)} at alpha {a:g}" for v, a in zip(paper["fedbe"], (0.01, 100.0)))
                   + f". FedDF's server distillation changes its model's accuracy by "
                   f"{slashed('n.a.' if g is None else signed(g) for g in gains)} points a round on average, and its "
                   f"teacher ensemble (the mean logits of the round's clients) peaks at {slashed(f1(v) for v in ens)}, "
                   f"against FedAvg's {slashed(f1(rep.best(one['fedavg', a])) for a in rep.ALPHAS)}. FedBE's teachers "
                   "are the round's clients, their average and 10 models sampled around it.")
    three = {(m, a): res.get(f"compare/{m}/{a:g}/three/") for m in rep.METHODS for a in rep.ALPHAS}
    if all(three.values()):
        archs = list(three["fedavg", rep.ALPHAS[0]]["architectures"])
        diff = {m: [rep.best(three[m, a]) - rep.best(three["fedavg", a]) for a in rep.ALPHAS] for m in ("feddf", "fedbe")}
        parts = []
        for m in ("feddf", "fedbe"):
            cells = [(arch, a, round(g, 1)) for a in rep.ALPHAS for arch in archs
                     if (g := rep.gain(three[m, a], arch)) is not None]
            negative = [f"{arch} at alpha {a:g} ({signed(g)})" for arch, a, g in cells if g < 0]
            zero = sum(g == 0 for _, _, g in cells)
            parts.append(f"{rep.METHODS[m]}'s is positive in {sum(g > 0 for _, _, g in cells)} of {len(cells)} "
                         "(architecture, alpha) cells" + (f", negative for {listing(negative)}" if negative else "")
                         + (f", 0.0 in {zero}" if zero else ""))
        above = sum(100 * max(rep.accuracies(three["feddf", a], "ensemble"))
                    > max(rep.best(three["fedavg", a], f"accuracy/{arch}") for arch in archs) for a in rep.ALPHAS)
        mix = listing(f"{n} {a}" for a, n in three["fedavg", rep.ALPHAS[0]]["architectures"].items())
        out.append(f"- **Three architectures** ({mix}"
                   f"; FedAvg averages within each architecture). The maximum minus FedAvg's, alpha "
                   f"{slashed(f'{a:g}' for a in rep.ALPHAS)}: FedDF {slashed(signed(v) for v in diff['feddf'])}, FedBE "
                   f"{slashed(signed(v) for v in diff['fedbe'])}. The mean distillation gain per round: "
                   + "; ".join(parts) + ". FedDF's teacher ensemble peaks above every architecture's "
                   f"FedAvg model at {above} of {len(rep.ALPHAS)} alphas.")
    return out


def fedaux_notes(d: dict) -> list[str]:
    rep, res, out = importlib.import_module("scripts.repro.fedaux_page"), fedaux(d), []
    t71 = fedaux_of(d, "table71")
    seeds = seeds_of(t71)
    cols = [(a, c) for a in rep.ALPHAS for c in rep.RATES]
    pairs = [(m, f"{m}_p") for m in ("fedavg", "fedprox", "feddf", "fedbe") if present(t71, (m, f"{m}_p")) == [m, f"{m}_p"]]
    if pairs:
        parts, paper = [], []
        for a in rep.ALPHAS:
            cells = []
            for base, plus in pairs:
                diffs = [np.mean(p) - np.mean(b) for c in rep.RATES
                         if (p := rep.over_seeds(res, "table71", plus, a, c, seeds))
                         and (b := rep.over_seeds(res, "table71", base, a, c, seeds))]
                if len(diffs) == len(rep.RATES):
                    cells.append(f"{rep.METHODS[base][0]} {slashed(signed(v) for v in diffs)}")
            parts.append(f"alpha {a:g}: " + ", ".join(cells))
            pv = [paper_value(rep.PAPER_I[plus].split()[i]) - paper_value(rep.PAPER_I[base].split()[i])
                  for base, plus in pairs for i, col in enumerate(cols) if col[0] == a]
            paper.append(f"{min(pv):+.1f} to {max(pv):+.1f} at alpha {a:g}")
        out.append(f"- **Pre-training** ({len(seeds)} seeds {split_text(t71)}, {max(r['rounds'] for r in t71)} rounds). "
                   f"'+P' minus the same method without it, in points at C = {slashed(f'{c:g}' for c in rep.RATES)}: "
                   + "; ".join(parts) + ". In the paper (ResNet-8 on CIFAR-10) the same differences run from "
                   + " and from ".join(paper) + ". Our SimCLR pre-trains on the 5,000 auxiliary 28x28 images for 30 "
                   "epochs, the paper's on STL-10's 100,000 unlabelled images.")
    claim_runs = fedaux_of(d, "claim")
    cs = seeds_of(claim_runs)
    props = [m for m in present(claim_runs, ("fedaux", "fedaux_code")) if "feddf_p" in present(claim_runs, ("feddf_p",))]
    if props:
        def gap(m: str) -> str:
            return slashed(signed(np.mean(rep.over_seeds(res, "claim", m, 0.01, c, cs))
                                  - np.mean(rep.over_seeds(res, "claim", "feddf_p", 0.01, c, cs))) for c in rep.RATES)
        paper = slashed(signed(paper_value(rep.PAPER_I["fedaux"].split()[i])
                               - paper_value(rep.PAPER_I["feddf_p"].split()[i])) for i in range(len(rep.RATES)))
        out.append(f"- **Table I's claim at alpha 0.01** ({len(cs)} seeds {split_text(claim_runs)}). The mean maximum "
                   "minus FedDF+P's, at C = " + slashed(f"{c:g}" for c in rep.RATES) + ": "
                   + "; ".join(f"{rep.METHODS[m][0]} {gap(m)}" for m in props) + f"; the paper's FedAUX minus "
                   f"FedDF+P: {paper}. These are differences of means; each pair's paired interval and verdict is in "
                   "the [claims table](#claims-and-their-statistics).")
    out.append("- The authors' code regularises the scoring with C = 1/lambda, which is the paper's J with lambda "
               "divided by N = |D_i| + |D^-|. Its noise is then sized for a sensitivity N times smaller than that of "
               "the minimiser it perturbs: at the configured delta the exact eps of its release (Balle and Wang "
               "2018, Theorem 8) is far above the configured one, as the privacy sweep's table on "
               "[repro_fedaux.md](repro_fedaux.md) gives it. N is about 3,750 here (2,750 client images and 1,000 in "
               "D^-) and 22,500 in the paper's setting (20,000 STL-10 images in D^-).")
    scored = {m: [r["history"][0] for r in t71 if r["method"] == m and r["alpha"] == 0.01
                  and r["history"][0].get("score_auc") is not None] for m in ("fedaux", "fedaux_code")}
    facts = [f"{rep.METHODS[m][0]}: mean {np.mean([h['score_mean'] for h in hs]):.2f}, standard deviation "
             f"{np.mean([h['score_std'] for h in hs]):.3f}, AUC {np.mean([h['score_auc'] for h in hs]):.2f}"
             for m, hs in scored.items() if hs]
    if facts:
        out.append("- **Certainty scores** (the Table I runs at alpha 0.01, averaged over clients, rates and seeds; "
                   "the scores over the distillation set): " + "; ".join(facts) + ".")
    priv, text = fedaux_of(d, "privacy"), []
    for m in present(priv, ("fedaux", "fedaux_code")):
        by_eps = {eps: rep.best(r) for eps in rep.EPSILONS
                  if (r := res.get(f"privacy/{m}/{rep.PRIVACY_ALPHA:g}/{rep.PRIVACY_RATE:g}/0/{eps:g}"))}
        upper = [v for eps, v in by_eps.items() if eps >= 0.1]
        if upper:
            text.append(f"{rep.METHODS[m][0]} between {min(upper):.1f}% and {max(upper):.1f}% from eps 0.1 to no noise"
                        + (f", {by_eps[min(by_eps)]:.1f}% at eps {min(by_eps):g}" if min(by_eps) < 0.1 else ""))
    if text:
        out.append(f"- **Privacy sweep** (seed 0, alpha {rep.PRIVACY_ALPHA:g}, C = {rep.PRIVACY_RATE:g}), the maximum: "
                   + "; ".join(text) + ".")
    lam, text = fedaux_of(d, "lambda"), ""
    ls = seeds_of(lam)
    for eps in rep.LAMBDA_EPSILONS:
        cells = {v: [r for s in ls if (r := rep.lambda_run(res, v, eps, s))] for v in rep.LAMBDAS}
        cells = {v: rs for v, rs in cells.items() if rs}
        if len(cells) > 1:
            acc = {v: float(np.mean([rep.best(r) for r in rs])) for v, rs in cells.items()}
            auc = {v: float(np.mean([r["history"][0]["score_auc"] for r in rs])) for v, rs in cells.items()}
            hi, lo = max(acc, key=acc.get), min(acc, key=acc.get)
            text += (f" {'Without noise' if math.isinf(eps) else f'At eps {eps:g}'} the maximum is highest at lambda "
                     f"{hi:g} ({acc[hi]:.1f}%) and lowest at {lo:g} ({acc[lo]:.1f}%); the scores' AUC is "
                     + ", ".join(f"{auc[v]:.2f} at {v:g}" for v in cells) + ".")
    if text:
        out.append(f"- **Lambda sweep** (FedAUX with the paper's J, {len(ls)} seeds, mean over them)." + text)
    fa = [r for r in d["runs"] if r["method"].startswith("fedaux")]
    norms = Counter(r.get("normaliser") or "not recorded" for r in fa)
    if fa:
        out.append("- Normaliser of the FedAUX runs: " + ", ".join(f"{k} {count_text(n, len(fa), 'runs')}"
                                                                 for k, n in norms.most_common())
                   + (". With the public one every eps reported is a guarantee ([methods.md](methods.md), FedAUX point "
                      "3)." if set(norms) == {"public"} else "."))
    return out


# MrTF's ablation (Fig. 11): AL against plain averaging, then each module added: ST, RD, CLR
MRTF_STEPS = (("al", "fedavg"), ("st", "fedavg"), ("st_rd", "st"), ("mrtf", "st_rd"))


def mrtf_notes(d: dict, demo: dict | None) -> list[str]:
    mod, out = importlib.import_module("scripts.repro.mrtf"), []
    runs = d["results"]
    finals: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        finals.setdefault((r["split"], r["method"]), []).append(100 * final_value(r))
    splits = [s for s in mod.SPLITS if any(k[0] == s for k in finals)]
    mean = {k: float(np.mean(v)) for k, v in finals.items()}
    label = {m: lab for m, (lab, _) in mod.METHODS.items()}

    def rank(s: str, m: str) -> int:
        return sorted((v for (sp, _), v in mean.items() if sp == s), reverse=True).index(mean[s, m]) + 1

    variants = [m for m in ("mrtf", "mrtf_nofb", "mrtf_code", "mrtf_code_fb") if all((s, m) in mean for s in splits)]
    if variants:
        n = {s: sum(sp == s for sp, _ in mean) for s in splits}
        low = min(((r, 100 * final_value(r)) for r in runs if r["method"] in variants), key=lambda x: x[1])
        text = (f"**MrTF's variants** ({d.get('rounds', '?')} rounds). Mean final accuracy over each variant's seeds and "
                f"its place among the {max(n.values())} methods' means, {slashed(splits)}: "
                + "; ".join(f"{label[m]} " + slashed(f"{mean[s, m]:.1f} ({ordinal(rank(s, m))})" for s in splits)
                            for m in variants)
                + f". The lowest single run of these: {label[low[0]['method']]}, {low[0]['split']}, seed "
                f"{low[0].get('seed', 0)}, at {low[1]:.1f}%"
                + (f" (diverged in round {low[0]['diverged']['round']}: counted at chance)"
                   if low[0].get("diverged") else "")
                + ". The paper's rules broadcast the refined model; the "
                "authors' code (`feed_back: false`, `configs/mrtf_code.yaml`) broadcasts the plain aggregate.")
        for plain, refined, rules in (("mrtf_nofb", "mrtf", "the paper's"), ("mrtf_code", "mrtf_code_fb", "the code's")):
            if plain in variants and refined in variants:
                text += (f" Plain minus refined broadcast under {rules} rules: "
                         + slashed(signed(mean[s, plain] - mean[s, refined]) for s in splits) + ".")
        out.append("- " + text)
    steps = [(a, b) for a, b in MRTF_STEPS if all((s, a) in mean and (s, b) in mean for s in splits)]
    if steps:
        seeds = {m: sorted({len(finals[s, m]) for s in splits}) for m in dict.fromkeys(x for st in steps for x in st)}
        out.append("- **Ablation** (Fig. 11's steps; differences of the means over each method's own seeds, "
                   f"{slashed(splits)}): "
                   + "; ".join(f"{label[a]} minus {label[b]} " + slashed(signed(mean[s, a] - mean[s, b]) for s in splits)
                               for a, b in steps)
                   + ". Seeds: " + ", ".join(f"{label[m]} {seeds_text(set(v))}" for m, v in seeds.items())
                   + ". The paper has every step adding accuracy; these means are not paired by seed and carry no "
                   "interval.")
    if demo:
        text = (f"- **Fig. 6 demo** (one run): AvgLogit {demo['avg_logit']}% "
                f"{'above' if demo['avg_logit'] > demo['avg_prob'] else 'below'} AvgProb {demo['avg_prob']}% (the paper: "
                "33.1 below 44.0), rectified AvgProb {0}% against the paper's 79.9%. Its three clients hold two classes "
                "each, six of Fashion-MNIST's ten, so a target built only from their models is right on at most 60% of "
                "the balanced test set; a rectified target above 60% needs a global model that knows classes none of "
                "the three holds, and the paper's demo does not say where its 79.9% gets them.").format(
            demo["avg_prob_rectified"])
        out.append(text)
    return out


def fedgen_notes(d: dict) -> list[str]:
    mod, out = importlib.import_module("scripts.repro.fedgen"), []
    t1 = [r for r in d["results"] if r["experiment"] == "table1"]

    def top(m: str, a: float, field: str = "accuracy") -> dict[int, float]:
        return {r["seed"]: 100 * mod.top5(r, field) for r in t1 if r["method"] == m and r["alpha"] == a}

    def paired(m: str, base: str, a: float, field: str = "accuracy") -> tuple[float, int] | None:
        x, y = top(m, a, field), top(base, a, field)
        common = sorted(set(x) & set(y))
        return (float(np.mean([x[s] - y[s] for s in common])), len(common)) if common else None

    methods = [m for m in ("fedgen", "fedgen_code", "fedprox", "fedensemble", "feddistill_plus", "feddfusion")
               if all(paired(m, "fedavg", a) for a in mod.ALPHAS)]
    if methods:
        def gaps(m):
            return [paired(m, "fedavg", a)[0] for a in mod.ALPHAS]
        paper = {m: [paper_value(mod.PAPER[m][i]) - paper_value(mod.PAPER["fedavg"][i]) for i in range(len(mod.ALPHAS))]
                 for m in methods}

        def grows(v: list[float]) -> bool:  # by alpha, ALPHAS ascending: larger at smaller alpha
            return all(x > y for x, y in zip(v, v[1:]))
        out.append(f"- **FedGen Table 1** (the mean of each run's top-5 rounds; each method minus FedAvg over the seeds "
                   f"both ran, alpha {slashed(f'{a:g}' for a in mod.ALPHAS)}, ours, then the paper's MNIST): "
                   + "; ".join(f"{mod.METHODS[m][0]} {slashed(signed(v, 2) for v in gaps(m))} ("
                               + ("the paper's FedGen" if m == "fedgen_code" else "paper")
                               + f" {slashed(signed(v, 2) for v in paper[m])})" for m in methods)
                   + f". Seeds per difference: "
                     f"{seeds_text({paired(m, 'fedavg', a)[1] for m in methods for a in mod.ALPHAS})}."
                   + "".join(f" With {'the code' if m == 'fedgen_code' else 'the paper'}'s rules FedGen's difference "
                             + ("grows" if grows(gaps(m)) else "does not grow steadily") + " as alpha shrinks"
                             + (", as the paper's FedGen's does." if grows(paper[m]) else
                                ", where the paper's FedGen's does not.")
                             for m in ("fedgen", "fedgen_code") if m in methods)
                   + " Verdicts: the [claims table](#claims-and-their-statistics).")
    own = {a: top("feddistill", a, "personal") for a in mod.ALPHAS}
    if all(own.values()):
        ours = [float(np.mean(list(v.values()))) for v in own.values()]
        paper = [paper_value(c) for c in mod.PAPER["feddistill"]]
        out.append("- FedDistill's users keep their own models, scored on the test samples of the labels each holds: "
                   f"{slashed(f'{v:.1f}' for v in ours)} against the paper's {slashed(f'{v:.1f}' for v in paper)}, "
                   f"a difference of {slashed(signed(a - b) for a, b in zip(ours, paper))} points "
                   f"({seeds_text({len(v) for v in own.values()})}).")
    rules = [r for r in d["results"] if r["experiment"] == "rules"]

    def paired_rules(m: str, base: str, a: float) -> tuple[float, int] | None:
        x, y = ({r["seed"]: 100 * mod.top5(r) for r in rules if r["method"] == k and r["alpha"] == a} for k in (m, base))
        common = sorted(set(x) & set(y))
        return (float(np.mean([x[s] - y[s] for s in common])), len(common)) if common else None

    singles = []
    for m in mod.RULES:
        if m not in mod.BASELINE or m == "fedgen":
            continue
        base = mod.BASELINE[m]
        cells = [(a, p) for a in mod.ALPHAS if (p := paired_rules(m, base, a))]
        if cells:
            singles.append(f"{mod.METHODS[m][0]} (against {mod.METHODS[base][0]}): "
                           + ", ".join(f"{signed(p[0], 2)} at alpha {a:g} ({p[1]} seed{'s' if p[1] > 1 else ''})"
                                       for a, p in cells))
    if singles:
        out.append("- The code's rules one at a time on the paper's FedGen (`rules`, its own call; top-5 mean, over "
                   "the seeds both ran): "
                   + "; ".join(singles) + ". The third term (beta) is one the paper does not describe "
                   "([methods.md](methods.md#data-free-distillation-with-a-generator-fedgen)).")
    t4 = [r for r in d["results"] if r["experiment"] == "table4"]
    if t4 and "fedgen" in mod.PAPER_HEAD:
        def head(m, a, field):
            return [100 * mod.top5(r, field) for r in t4 if r["method"] == m and r["alpha"] == a]
        alphas = [a for a in mod.ALPHAS4 if head("fedgen", a, "personal") and head("fedavg", a, "personal")]
        if alphas:
            diff = {f: [np.mean(head("fedgen", a, f)) - np.mean(head("fedavg", a, f)) for a in alphas]
                    for f in ("personal", "accuracy")}
            paper = [paper_value(mod.PAPER_HEAD["fedgen"][mod.ALPHAS4.index(a)])
                     - paper_value(mod.PAPER_HEAD["fedavg"][mod.ALPHAS4.index(a)]) for a in alphas]
            out.append(f"- FedGen Table 4 (only the heads shared), FedGen's mean minus FedAvg's, alpha "
                       f"{slashed(f'{a:g}' for a in alphas)}: {slashed(signed(v) for v in diff['personal'])} on the "
                       f"held labels (the authors' code's measure; paper {slashed(signed(v) for v in paper)}), "
                       f"{slashed(signed(v) for v in diff['accuracy'])} on the whole test set ("
                       f"{seeds_text({len(head(m, a, 'personal')) for m in ('fedgen', 'fedavg') for a in alphas})}).")
    return out


# the notes' topics: heading, the JSON files, and what they give from them (the loaded JSON, in that order)
NOTES = [
    ("Communication (thesis chapter 4)", ("repro_lstm.json",), lambda d: lstm_notes(d)),
    ("", ("repro_table42_repro_thesis_table42_lstm.json", "repro_table42_repro_thesis_table42_logreg.json"),
     lambda a, b: table42_counting(a, b) + (table42_notes(a, "the LSTM", True) if a else [])
     + (table42_notes(b, "logistic regression", False) if b else [])),
    ("", ("repro_fig41.json",), lambda d: fig41_notes(d)),
    ("Clustered FL (thesis chapter 6)", ("repro_cfl.json",), lambda d: cfl_notes(d)),
    ("Federated distillation (thesis chapter 5, FedAUX Table I's baselines)", ("repro_distill.json",),
     lambda d: distill_notes(d)),
    ("FedAUX", ("repro_fedaux.json",), lambda d: fedaux_notes(d)),
    ("MrTF", ("repro_mrtf.json", "repro_mrtf_demo.json"), lambda d, demo: mrtf_notes(d, demo)),
    ("FedGen", ("repro_fedgen.json",), lambda d: fedgen_notes(d)),
]
# every run a JSON holds (for the commit it ran at)
ALL_RUNS = {"repro_lstm.json": lambda d: list(d["results"].values()),
            "repro_cfl.json": lambda d: importlib.import_module("scripts.repro.cfl").results_of(d),
            "repro_distill.json": lambda d: d["runs"], "repro_fedaux.json": lambda d: d["runs"],
            "repro_mrtf_demo.json": whole, "repro_mrtf.json": mrtf_tables}


def table_commits(runs: list[dict[str, Any]], source: str) -> dict[str, list[str]]:
    """The runs grouped by their table (``experiment``): each group's :func:`runs_commit_text`, with the
    tables that share it."""
    experiments: dict[Any, list[dict[str, Any]]] = {}
    for run in runs:
        experiments.setdefault(run.get("experiment"), []).append(run)
    texts: dict[str, list[str]] = {}
    for experiment, mine in experiments.items():
        texts.setdefault(runs_commit_text(mine, f"{source} {experiment}" if experiment else source), []).append(experiment)
    return texts


def notes() -> list[str]:
    """The notes block: where the runs came from, then each topic's sentences, each computed from its JSON."""
    sources = [s for _, files, _ in NOTES for s in files]
    commits: dict[str, list[str]] = {}
    for s in sources:  # per experiment of a file: a file's tables may come from calls at different commits
        data = load(s)
        if data is None:
            continue
        texts = table_commits(ALL_RUNS.get(s, results_of)(data), s)
        for text, names in texts.items():
            commits.setdefault(text, []).append(f"`{s}`" if len(texts) == 1 else f"`{s}` ({', '.join(names)})")
    lines = ["Written by `scripts/docs/generate.py`: every statement about our runs below is computed from the runs' JSON "
             "(the other sentences give the papers' numbers and our settings), and verdicts on one method against "
             "another are left to the claims table. The runs: "
             + "; ".join(f"{listing(files)}: {text}" for text, files in commits.items()) + "."]
    for heading, files, make in NOTES:
        data = [load(f) for f in files]
        if heading:
            lines += ["", f"### {heading}", ""]
        if all(x is None for x in data):
            lines.append(f"- No recorded run: {listing(f'`docs/records/{f}`' for f in files)} missing.")
            continue
        lines += make(*data) if data[0] is not None else [f"- No recorded run: `docs/records/{files[0]}` is missing."]
    return lines


def summary_table() -> list[str]:
    lines = ["| config | follows | paper | ours | runs |", "|---|---|---|---|---|"]
    for config, follows, paper, source, ours, runs in ROWS:
        data = load(source)
        mine = runs(data) if data is not None else []
        cell = (ours(data) if mine else f"no recorded run (`docs/records/{source}` holds none)" if data is not None
                else f"no recorded run (`docs/records/{source}` is missing)")
        texts = table_commits(mine, source)
        commit = ("; ".join(text if len(texts) == 1 else f"{', '.join(names)}: {text}" for text, names in texts.items())
                  if mine else "-")
        lines.append(f"| {config} | {follows} | {paper} | {cell} | {commit} |")
    return lines


def with_block(text: str, start: str, end: str, block: list[str]) -> str:
    first, last = text.index(start), text.index(end) + len(end)
    return text[:first] + "\n".join([start, *block, end]) + text[last:]


def page_text(page: str) -> str | None:
    """A reproduction page's text from its JSON; None when there is no JSON."""
    module, function, source = PAGES[page]
    data = load(source)
    return None if data is None else getattr(importlib.import_module(module), function)(data)


README = ROOT / "README.md"
FIRST_START, FIRST_END = "<!-- first-run:start (scripts/docs/generate.py --write) -->", "<!-- first-run:end -->"


def first_run(d: dict) -> list[str]:
    """The README's numbers of a first run, from docs/records/quickstart.json (scripts/docs/record_quickstart.py)."""
    acc = [(r["round"], r["accuracy"]) for r in d["rounds"]]
    first85 = next((n for n, a in acc if a >= 0.85), None)
    return [f"Recorded with `python scripts/docs/record_quickstart.py` ({runs_commit_text([d], 'the quick-start')}, "
            f"{d['cpu']}): **{100 * acc[-1][1]:.1f}% test accuracy after {acc[-1][0]} rounds**"
            + (f", 85% first in round {first85}" if first85 else "") + f", {d['wall_s']:.0f} s for the run. "
            "Test accuracy by round:", "",
            "| round | " + " | ".join(str(n) for n, _ in acc) + " |", "|---|" + "---|" * len(acc),
            "| acc. | " + " | ".join(f"{a:.3f}".lstrip("0") for _, a in acc) + " |"]


def generated() -> dict[Path, str]:
    """Every generated page's text, by path (only pages whose JSON exists)."""
    out = {}
    for page in PAGES:
        text = page_text(page)
        if text is not None:
            out[DOCS / page] = text
    from scripts.repro import claims

    text = (DOCS / SUMMARY).read_text()
    text = with_block(text, SUMMARY_START, SUMMARY_END, summary_table())
    text = with_block(text, NOTES_START, NOTES_END, notes())
    out[DOCS / SUMMARY] = with_block(text, claims.START, claims.END, claims.table())
    quick = load("quickstart.json")
    if quick is not None:
        out[README] = with_block(README.read_text(), FIRST_START, FIRST_END, first_run(quick))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the pages that differ")
    args = parser.parse_args()
    differ = [(path, text) for path, text in generated().items() if not path.exists() or path.read_text() != text]
    for path, text in differ:
        if args.write:
            path.write_text(text)
        print(f"{'wrote' if args.write else 'differs'}: {path.relative_to(ROOT)}")
    if differ and not args.write:
        sys.exit(1)


if __name__ == "__main__":
    main()
