"""Every reproduction number in docs/, generated from the recorded runs' JSON: the one generator.

What it writes:

- each reproduction page (``docs/repro_*.md``), by its script's ``page`` function from the script's
  JSON in ``docs/`` (the scripts call the same functions after their runs);
- in ``docs/reproductions.md``, the summary table (the paper's numbers beside ours, ours computed
  here from the JSON) and the claims table (``scripts/claims.py``), each between its markers.

``tests/test_generated_docs.py`` regenerates all of it and fails where a page differs: a hand-edited
number, or a JSON that changed without its page.

    python scripts/docs.py            # list the pages that differ from their JSON
    python scripts/docs.py --write    # write them
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import numpy as np  # noqa: E402

# page -> (module in scripts/, its function from the JSON to the page's text, the JSON)
PAGES = {
    "repro_lstm.md": ("repro_lstm", "page", "repro_lstm.json"),
    "repro_table42_repro_thesis_table42_lstm.md": ("repro_table42", "page", "repro_table42_repro_thesis_table42_lstm.json"),
    "repro_table42_repro_thesis_table42_logreg.md": ("repro_table42", "page",
                                                     "repro_table42_repro_thesis_table42_logreg.json"),
    "repro_fig41.md": ("repro_fig41", "page", "repro_fig41.json"),
    "repro_cfl.md": ("repro_cfl", "page", "repro_cfl.json"),
    "repro_distill.md": ("distill_report", "page", "repro_distill.json"),
    "repro_fedaux.md": ("fedaux_report", "page", "repro_fedaux.json"),
    "repro_fedaux_toy.md": ("repro_fedaux_toy", "page", "repro_fedaux_toy.json"),
    "repro_mrtf_demo.md": ("repro_mrtf", "demo_page", "repro_mrtf_demo.json"),
    "repro_mrtf.md": ("repro_mrtf", "compare_page", "repro_mrtf.json"),
    "repro_fedgen.md": ("repro_fedgen", "page", "repro_fedgen.json"),
}
SUMMARY = "reproductions.md"
SUMMARY_START, SUMMARY_END = "<!-- summary:start (scripts/docs.py --write) -->", "<!-- summary:end -->"


def load(name: str) -> dict | list | None:
    path = DOCS / name
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
        results = {r["method"]: r for r in d["results"]}
        order = [m for m in importlib.import_module("repro_table42").METHODS if m in results]
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
    mod = importlib.import_module("repro_fig41")
    res = {(r["method"], r["split"]): r for r in d["results"]}
    return "final accuracy, " + slashed(mod.SPLITS) + ": " + "; ".join(
        f"{m} " + slashed(f"{res[m, s]['accuracy']:.3f}" for s in mod.SPLITS) for m in mod.METHODS) \
        + " ([repro_fig41.md](repro_fig41.md))"


def cfl62(d: list) -> str:
    mod = importlib.import_module("repro_cfl")
    res = {(r["experiment"], r["method"]): r for r in d}
    parts = []
    for s, label in mod.SCENARIOS.items():
        fl, cfl = res[f"table62/{s}", "FL"], res[f"table62/{s}", "CFL"]
        out = mod.cleared(cfl) if cfl["adversaries"] else None
        parts.append(f"{label} **{pct(mod.final_accuracy(fl))} / {pct(mod.final_accuracy(cfl))}** ("
                     + (f"adversaries out by round {out}, " if out else "")
                     + f"{len(mod.splits(cfl))} splits, {len(set(cfl['dropped']) - set(cfl['adversaries']))} benign "
                       f"dropped)")
    return "FL / CFL final accuracy of the benign clients, %: " + "; ".join(parts) + " ([repro_cfl.md](repro_cfl.md))"


def cfl68(d: list) -> str:
    mod = importlib.import_module("repro_cfl")
    res = {(r["experiment"], r["method"]): r for r in d}
    fl, cfl = res["fig68", "FL"], res["fig68", "CFL"]
    return (f"FL **{pct(mod.final_accuracy(fl))}%**, CFL **{pct(mod.final_accuracy(cfl))}%**; splits at rounds "
            f"{', '.join(map(str, mod.splits(cfl)))}, {len(cfl['clusters'])} final clusters ([repro_cfl.md](repro_cfl.md))")


def distill(d: dict) -> dict:
    from repro_distill import key
    return {key(r): r for r in d["runs"]}


def table51(d: dict) -> str:
    rep, res = importlib.import_module("distill_report"), distill(d)
    cells, ranks = [], []
    for a in rep.ALPHAS51:
        vals = {label: rep.best(res[f"table51/{m}/{a:g}/one/"]) for m, label in rep.MODES.items()}
        cells.append(f"alpha {a:g}: " + slashed(f1(v) for v in vals.values()))
        ranks.append(rep.ranking(vals))
    order = ranks[0] if len(set(ranks)) == 1 else "; ".join(ranks)
    return "maximum %, " + "; ".join(cells) + f". Order: {order} ([repro_distill.md](repro_distill.md))"


def table52(d: dict) -> str:
    rep, res = importlib.import_module("distill_report"), distill(d)
    parts = []
    a = 100.0
    target = rep.TARGETS52[a]
    for m, (label, _) in rep.METHODS52.items():
        r = res.get(f"table52/{m}/{a:g}/one/")
        h = rep.reached(r, target) if r else None
        parts.append(f"{label} " + (f"{rep.fmt_mb(rep.per_client(r, h, 'up'))} / {rep.fmt_mb(rep.per_client(r, h, 'down'))}"
                                    if h else "n.r."))
    return (f"MB per client up / down to {target:g}% at alpha {a:g} (a target chosen after seeing the curves): "
            + ", ".join(parts) + " ([repro_distill.md](repro_distill.md))")


def feddf_compare(d: dict) -> str:
    rep, res = importlib.import_module("distill_report"), distill(d)
    parts = []
    for archs, label in (("one", "One architecture"), ("three", "Three architectures")):
        rows = [f"{name} " + slashed(f1(rep.best(res[f"compare/{m}/{a:g}/{archs}/"])) for a in rep.ALPHAS)
                for m, name in rep.METHODS.items()]
        parts.append(f"{label}, maximum %, alpha " + slashed(f"{a:g}" for a in rep.ALPHAS) + ": " + ", ".join(rows))
    return "; ".join(parts) + " ([repro_distill.md](repro_distill.md))"


def fedaux(d: dict) -> dict:
    from repro_fedaux import key
    return {key(r): r for r in d["runs"]}


def table71(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    low = "; ".join(f"{rep.METHODS[m][0]} " + slashed(f1(np.mean(rep.over_seeds(res, 'table71', m, 0.01, c)))
                                                       for c in rep.RATES)
                    for m in ("fedavg", "fedprox", "feddf", "feddf_p", "fedaux", "fedaux_code"))
    high = [np.mean(rep.over_seeds(res, "table71", m, 100.0, c)) for m in rep.METHODS for c in rep.RATES]
    return (f"maximum %, mean of {len(rep.SEEDS)} seeds, alpha 0.01, C = " + slashed(f"{c:g}" for c in rep.RATES)
            + f": {low}. alpha 100: every method {min(high):.1f}-{max(high):.1f} ([repro_fedaux.md](repro_fedaux.md))")


def oneshot(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    return "accuracy %, alpha " + slashed(f"{a:g}" for a in rep.ONESHOT_ALPHAS) + ": " + "; ".join(
        f"{rep.METHODS[m][0]} " + slashed(f1(rep.final(rep.first(res, 'oneshot', m, a, 1.0))) for a in rep.ONESHOT_ALPHAS)
        for m in rep.ONESHOT_METHODS)


def privacy(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    parts = []
    for m in ("fedaux", "fedaux_code"):
        vals = []
        for eps in rep.EPSILONS:
            r = res[f"privacy/{m}/{rep.PRIVACY_ALPHA:g}/{rep.PRIVACY_RATE:g}/0/{eps:g}"]
            vals.append(f"{f1(rep.best(r))} at " + ("no noise" if math.isinf(eps) else f"eps {eps:g}"))
        parts.append(f"{rep.METHODS[m][0]}: " + ", ".join(vals))
    return "maximum %, " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def claim(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    runs = [r for r in res.values() if r["experiment"] == "claim"]
    seeds = sorted({r["seed"] for r in runs})
    split = "varying the split" if all(r.get("split_seed") == r["seed"] for r in runs) else "on one split"
    norm = sorted({r.get("normaliser") or "paper" for r in runs if r["method"].startswith("fedaux")})
    means = "; ".join(f"{rep.METHODS[m][0]} " + slashed(f1(np.mean(rep.over_seeds(res, 'claim', m, 0.01, c, tuple(seeds))))
                                                        for c in rep.RATES) for m in rep.CLAIM_METHODS)
    return (f"maximum %, mean of {len(seeds)} seeds {split}, FedAUX with the {' and '.join(norm)} normaliser, C = "
            + slashed(f"{c:g}" for c in rep.RATES) + f": {means}. Paired differences and what holds: "
            "[claims table](#claims-and-their-statistics)")


def lambdas(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    parts = []
    for eps in rep.LAMBDA_EPSILONS:
        cells = []
        for lam in rep.LAMBDAS:
            runs = [r for s in rep.SEEDS if (r := rep.lambda_run(res, lam, eps, s))]
            auc = np.mean([r["history"][0]["score_auc"] for r in runs])
            cells.append(f"lambda {lam:g}: {f1(np.mean([rep.best(r) for r in runs]))} (AUC {auc:.2f})")
        parts.append(("without noise" if math.isinf(eps) else f"eps {eps:g}") + ": " + ", ".join(cells))
    return f"maximum %, mean of {len(rep.SEEDS)} seeds; " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def mixed(d: dict) -> str:
    rep, res = importlib.import_module("fedaux_report"), fedaux(d)
    parts = []
    for a in rep.ALPHAS:
        parts.append(f"alpha {a:g}: " + ", ".join(
            f"{rep.METHODS[m][0]} {f1(rep.best(rep.first(res, 'mixed', m, a, 0.4)))}" for m in rep.MIXED_METHODS))
    return "maximum % over all clients, " + "; ".join(parts) + " ([repro_fedaux.md](repro_fedaux.md))"


def mrtf_demo(d: dict) -> str:
    return (f"locals {slashed(f1(v) for v in d['locals'])}%; AvgLogit **{d['avg_logit']}**, AvgProb **{d['avg_prob']}** "
            f"(stabilised {d['avg_prob_stabilised']}); with weights 0.6 / 0.3 / 0.1: {d['avg_logit_skewed']} and "
            f"{d['avg_prob_skewed']}; aggregate {d['aggregate']}, AvgLogit with the previous and aggregated model "
            f"{d['avg_logit_rectified']}, rectified AvgProb **{d['avg_prob_rectified']}** "
            f"([repro_mrtf_demo.md](repro_mrtf_demo.md))")


def mrtf_compare(d: dict) -> str:
    mod = importlib.import_module("repro_mrtf")
    runs = d["results"]
    cells = []
    for m, (label, _) in mod.METHODS.items():
        per = []
        for s in mod.SPLITS:
            finals = [100 * r["history"][-1]["accuracy"] for r in runs if r["split"] == s and r["method"] == m]
            per.append(f"{np.mean(finals):.1f}" if finals else "n.a.")
        n = {len([r for r in runs if r["split"] == s and r["method"] == m]) for s in mod.SPLITS}
        cells.append(f"{label} {slashed(per)} ({seeds_text(n)})")
    return ("final %, mean over the seeds, " + slashed(mod.SPLITS) + ": " + "; ".join(cells)
            + ". Paired differences: [claims table](#claims-and-their-statistics) ([repro_mrtf.md](repro_mrtf.md))")


def fedgen(d: dict) -> str:
    mod = importlib.import_module("repro_fedgen")
    runs = [r for r in d["results"] if r["experiment"] == "table1"]
    cells = []
    for m, (label, _) in mod.METHODS.items():
        per, seeds = [], set()
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


# config | follows | paper | (the JSON, its "ours" cell)
ROWS = [
    ("`repro_thesis_lstm_central.yaml` + `scripts/repro_lstm.py`",
     "thesis section 4.3, LSTM 2x128 on Fashion-MNIST, central, 20k iterations, lr 0.04, batch 20",
     "90.21% (maximum)", "repro_lstm.json", lstm_central),
    ("`repro_thesis_fedavg_lstm.yaml` + `scripts/repro_lstm.py`",
     "thesis Table 4.2, Fashion-MNIST, FedAvg n = 100, M = 100, C = 0.1, batch 20, target 0.89; 60 rounds",
     "83.9 MB up / 83.9 MB down", "repro_lstm.json", lstm_fedavg),
    ("`repro_thesis_table42_lstm.yaml` + `scripts/repro_table42.py`",
     "thesis Table 4.2, Fashion-MNIST column: LSTM 2x128, M = 100, C = 0.1, batch 20, lr 0.04, no momentum; "
     "3,000 local iterations per method (thesis: 20,000)",
     "MB up to 0.89: baseline 2422.8, signSGD 123.3, FedAvg n = 25 / 100 / 400: 174.7 / 83.9 / 86.5, STC p = 1/25, "
     "1/100, 1/400: 8.8 / 12.1 / 7.9", "repro_table42_repro_thesis_table42_lstm.json",
     table42("repro_table42_repro_thesis_table42_lstm.md")),
    ("`repro_thesis_table42_logreg.yaml` + `scripts/repro_table42.py`",
     "the same table with logistic regression on Fashion-MNIST, so that every method reaches a target",
     "as above (0.89, LSTM)", "repro_table42_repro_thesis_table42_logreg.json",
     table42("repro_table42_repro_thesis_table42_logreg.md")),
    ("`repro_thesis_fig41.yaml` + `scripts/repro_fig41.py`",
     "thesis Fig. 4.1, non-iid robustness, logistic regression, 10 clients, iid / 2 / 1 classes per client "
     "(Fashion-MNIST for MNIST; 1,000 iterations per client)",
     "all comparable on iid data; non-iid: top-k affected least, signSGD plateaus lower, FedAvg degrades",
     "repro_fig41.json", fig41),
    ("`repro_thesis_table62_fmnist.yaml` + `scripts/repro_cfl.py`",
     "thesis Table 6.2, Fashion-MNIST row: 100 clients, even random split, 30% adversaries, batch 100, 200 rounds, "
     "robust CFL (eq. 6.50) with alpha_thresh 0.02; an MLP (2NN) instead of the CNN",
     "FL / CFL final accuracy of benign clients, %: Byzantine 9.6 / 78.0, noisy 77.12 / 79.7, label-flip 60.6 / "
     "79.7, clean 79.9 / 80.2; all adversaries removed within 34 rounds; clean never splits", "repro_cfl.json", cfl62),
    ("`repro_thesis_fig68_fmnist.yaml` + `scripts/repro_cfl.py`",
     "thesis Fig. 6.8 on Fashion-MNIST instead of CIFAR-10: 20 clients, 4 groups with their own label permutation, "
     "3 local epochs; MLP, batch 32, 60 rounds",
     "FL stalls near 20%; splits at rounds 50, 100, 150; CFL close to 60%", "repro_cfl.json", cfl68),
    ("`repro_thesis_table51_fmnist.yaml` + `scripts/repro_distill.py`",
     "thesis Table 5.1 on Fashion-MNIST: FD, 20 clients, C = 20%, Dirichlet alpha 100 / 1 / 0.1, Adam 1e-3; the 2NN "
     "MLP instead of LeNet, 5,000 unlabelled training images carved out before the split instead of EMNIST, 30 "
     "rounds instead of 50",
     "maximum accuracy %, Init Previous / Init Random / Dual Distill. MNIST: 98.1 / 96.7 / 97.8, 97.9 / 96.4 / 97.5, "
     "92.6 / 90.1 / 92.7; CIFAR-10: 70.2 / 68.5 / 74.9, 68.2 / 66.0 / 72.4, 51.1 / 48.2 / 56.1",
     "repro_distill.json", table51),
    ("`repro_thesis_table52_fmnist.yaml` + `scripts/repro_distill.py`",
     "thesis Table 5.2 on Fashion-MNIST: 20 clients, C = 40%, dual distillation, MB per client up / down to a "
     "target; the MLP and 5,000 auxiliary images instead of ResNet-18 and 80,000 STL-10 images; 30 rounds",
     "ResNet-18, alpha 100, 71%: FA 760.3 / 760.3, FD 44.8 / 44.8, CFD-1-32 0.56 / 54.4, CFD_delta-1-32 0.40 / "
     "54.4, CFD-1-1 1.36 / 1.36, CFD_delta-1-1 0.82 / 0.39", "repro_distill.json", table52),
    ("`repro_fedaux_feddf_fmnist.yaml` + `scripts/repro_distill.py`",
     "FedAUX Table I's protocol on Fashion-MNIST: 20 clients, C = 0.4, Adam 1e-3, E = 1, distillation one epoch of "
     "Adam over 5,000 carved-out images, 20 rounds instead of 100. One architecture (MLP), and three (7 LogReg, 7 "
     "MLP, 6 LSTM-64) for FedAUX's Mixed setting",
     "ResNet-8 on CIFAR-10, maximum %, alpha 0.01 / 100, C = 0.4: FedAvg 23.6 / 82.2, FedDF 27.8 / 81.4, FedBE "
     "25.7 / 82.0", "repro_distill.json", feddf_compare),
    ("`repro_fedaux_table71_fmnist.yaml` + `scripts/repro_fedaux.py`",
     "FedAUX Table I / thesis Table 7.1 on Fashion-MNIST: 20 clients, Dirichlet alpha 0.01 and 100, C = 0.2 / 0.4 "
     "/ 0.8, the 2NN MLP, 15 rounds instead of 100, 5,000 carved-out auxiliary images (1,000 of them D^-), SimCLR "
     "30 epochs, lambda 0.1, eps 0.1, delta 1e-5; two seeds on one split, FedAUX under the public normaliser",
     "ResNet-8 on CIFAR-10 with STL-10, maximum %, alpha 0.01: FedAvg 19.9 / 23.6 / 28.9, FedProx 28.4 / 34.0 / "
     "42.0, FedDF 25.0 / 27.8 / 30.6, FedDF+P 28.8 / 39.3 / 48.1, FedAUX **54.2 / 71.2 / 78.5**; alpha 100: "
     "80.8-89.6", "repro_fedaux.json", table71),
    ("the same, `--only oneshot`",
     "FedAUX Table III, one-shot: one round, all clients, many local epochs; here 20 clients, E = 10, alpha 0.01 / "
     "0.16 / 10.24", "MobileNetV2, 100 clients, E = 40: FedDF 16.8 / 37.7 / 40.4, FedDF+P 46.7 / 67.6 / 71.2, "
     "FedAUX **64.8 / 68.2 / 71.3**", "repro_fedaux.json", oneshot),
    ("the same, `--only privacy`",
     "FedAUX Fig. 8 / thesis Fig. 7.7: accuracy against eps; here alpha 0.01, C = 0.4, lambda 0.1, eps 0.01 to no "
     "noise, the public normaliser", "40 clients, ResNet-8, lambda 0.01: 74.6% without noise, 70.8% at eps 0.04, "
     "delta 1e-6", "repro_fedaux.json", privacy),
    ("the same, `--only claim`",
     "the claim at alpha 0.01 (FedAUX > FedDF+P > FedDF), C = 0.2 / 0.4 / 0.8, differences paired by seed",
     "FedAUX - FedDF+P: +25.4 / +31.9 / +30.4; FedDF+P - FedDF: +3.8 / +11.5 / +17.5", "repro_fedaux.json", claim),
    ("the same, `--only lambda`",
     "not in the paper: FedAUX with the paper's J at alpha 0.01, C = 0.4, lambda 0.1 / 0.01 / 1e-3 / 1e-4, at eps "
     "0.1 and without noise, two seeds", "Fig. 8 says a larger lambda is more robust to the noise and less accurate",
     "repro_fedaux.json", lambdas),
    ("the same, `--only mixed`",
     "FedAUX's Mixed setting: three architectures, a third of the clients each (7 LogReg, 7 MLP, 6 LSTM-64 for "
     "ResNet-8 / MobileNetV2 / ShuffleNet), C = 0.4", "no numbers; FedAUX >= FedDF+P > FedDF", "repro_fedaux.json",
     mixed),
    ("`scripts/repro_fedaux_toy.py`",
     "FedAUX Fig. 2 / thesis Fig. 7.2 (iris, three clients) and Fig. 3 (three Gaussians)",
     "iris: mean ensemble 33%, density-weighted 88%", "repro_fedaux_toy.json", toy),
    ("`scripts/repro_mrtf.py` (MrTF's config, 3 clients)",
     "MrTF Fig. 6 demo: 3 clients with 2 classes each, one round; targets on the test inputs (Fashion-MNIST for "
     "MNIST; all samples of 2 of 6 seeded classes per client, MLP, 1 local epoch of SGD at lr 0.01)",
     "locals 17.6 / 19.2 / 20.4%; AvgLogit **33.1** < AvgProb **44.0**; with the aggregated models AvgLogit 39.4, "
     "rectified AvgProb **79.9**", "repro_mrtf_demo.json", mrtf_demo),
    ("`mrtf.yaml` + `scripts/repro_mrtf.py --only compare`",
     "MrTF Fig. 7's four scenes scaled: K = 100, R = 10%, E = 3, split by Dirichlet alpha 1 and 0.1 and by label "
     "with C-bar = 5 and 3; Fashion-MNIST with the MLP instead of the digit sets' nets, 20 rounds instead of 200; "
     "seeds vary the split; FedDF as the paper runs it in TFL (AvgLogit on the test inputs = the ablation's AL)",
     "Fig. 7 and Fig. 11 (plots only): MrTF best in every scene; each ablation step adds accuracy",
     "repro_mrtf.json", mrtf_compare),
    ("`fedgen.yaml` + `scripts/repro_fedgen.py`",
     "FedGen Table 1's MNIST rows on Fashion-MNIST: 20 users with half the training data by Dirichlet alpha 0.05 / "
     "0.1 / 1, 10 active, 20 local steps of batch 32 (SGD 0.01), FedGen's CNN, 100 rounds instead of 200; seeds "
     "vary the split",
     "MNIST, mean ± std over seeds of the top-5 rounds: FedAvg 87.70 / 90.16 / 93.84, FedGen **91.30 / 93.03 / "
     "95.52**, FedEnsemble 88.85 / 90.78 / 93.91", "repro_fedgen.json", fedgen),
]


def summary_table() -> list[str]:
    lines = ["| config | follows | paper | ours |", "|---|---|---|---|"]
    for config, follows, paper, source, ours in ROWS:
        data = load(source)
        cell = ours(data) if data is not None else f"no recorded run (`docs/{source}` is missing)"
        lines.append(f"| {config} | {follows} | {paper} | {cell} |")
    return lines


def with_block(text: str, start: str, end: str, block: list[str]) -> str:
    first, last = text.index(start), text.index(end) + len(end)
    return text[:first] + "\n".join([start, *block, end]) + text[last:]


def page_text(page: str) -> str | None:
    """A reproduction page's text from its JSON; None when there is no JSON."""
    module, function, source = PAGES[page]
    data = load(source)
    return None if data is None else getattr(importlib.import_module(module), function)(data)


def generated() -> dict[Path, str]:
    """Every generated page's text, by path (only pages whose JSON exists)."""
    out = {}
    for page in PAGES:
        text = page_text(page)
        if text is not None:
            out[DOCS / page] = text
    import claims

    text = (DOCS / SUMMARY).read_text()
    text = with_block(text, SUMMARY_START, SUMMARY_END, summary_table())
    out[DOCS / SUMMARY] = with_block(text, claims.START, claims.END, claims.table())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the pages that differ")
    args = parser.parse_args()
    differ = [(path, text) for path, text in generated().items() if path.read_text() != text]
    for path, text in differ:
        if args.write:
            path.write_text(text)
        print(f"{'wrote' if args.write else 'differs'}: {path.relative_to(ROOT)}")
    if differ and not args.write:
        sys.exit(1)


if __name__ == "__main__":
    main()
