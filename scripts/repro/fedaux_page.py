"""The page of the FedAUX reproductions: docs/repro_fedaux.md (the tables, ours beside the paper's, and
sentences computed from the runs) and .png, from the runs scripts/repro/fedaux.py recorded in
docs/records/repro_fedaux.json (``--plot-only`` writes them anew from that file alone). The interpretation is in
docs/reproductions.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedray.figures import figure, save_figure
from fedray.repro import listing, markdown_table, record_file, runs_commit_text, setup_table

from scripts.repro.pages import best, command, final, wall_time
from scripts.repro.fedaux import (ALPHAS, CLAIM_METHODS, CLAIM_SEEDS, CONFIG, EPSILONS, LAMBDA_EPSILONS, LAMBDAS, METHODS,
                          MIXED_METHODS, ONESHOT_ALPHAS, ONESHOT_EPOCHS, ONESHOT_METHODS, PRIVACY_ALPHA, PRIVACY_RATE,
                          RATES, SEEDS)

# FedAUX Table I: max accuracy (%) in 100 rounds, 20 clients, ResNet-8 on CIFAR-10, STL-10; (alpha, C)
PAPER_I = {
    "fedavg": "19.9±0.7 23.6±2.0 28.9±2.0 81.3±0.1 82.2±0.0 82.3±0.1",
    "fedprox": "28.4±2.5 34.0±1.9 42.0±1.0 81.4±0.1 82.3±0.2 82.0±0.3",
    "feddf": "25.0±0.8 27.8±0.8 30.6±0.3 80.8±0.1 81.4±0.3 81.5±0.3",
    "fedbe": "20.9±0.6 25.7±1.4 29.1±0.1 81.4±0.7 82.0±0.1 82.2±0.2",
    "fedavg_p": "30.4±7.9 32.1±2.0 38.4±0.5 89.0±0.1 89.5±0.1 89.6±0.1",
    "fedprox_p": "42.8±2.7 43.1±0.2 49.0±0.7 88.9±0.0 89.1±0.1 89.4±0.0",
    "feddf_p": "28.8±3.0 39.3±3.6 48.1±1.1 88.8±0.0 88.9±0.1 88.9±0.1",
    "fedbe_p": "30.2±2.2 29.8±0.8 37.7±0.0 89.1±0.1 89.5±0.2 89.5±0.0",
    "fedaux": "54.2±0.3 71.2±2.1 78.5±0.0 88.9±0.0 89.0±0.0 89.0±0.1",
}

# Table III, MobileNetV2 (100 clients, E = 40, CIFAR-10): alpha 0.01 / 0.04 / 0.16 / 10.24
PAPER_III = {"fedavg": (10.3, 13.6, 23.6, 30.5), "feddf": (16.8, 29.5, 37.7, 40.4), "fedavg_p": (24.3, 44.0, 57.6, 69.9),
             "feddf_p": (46.7, 61.1, 67.6, 71.2), "fedaux": (64.8, 65.5, 68.2, 71.3)}
PAPER_III_ALPHAS = (0.01, 0.04, 0.16, 10.24)


# -- summaries ---------------------------------------------------------------------------------------
def over_seeds(results: dict, experiment: str, method: str, alpha: float, rate: float,
               seeds: tuple[int, ...] = SEEDS) -> list[float]:
    return [best(r) for s in seeds if (r := results.get(f"{experiment}/{method}/{alpha:g}/{rate:g}/{s}/"))]


def mean_spread(values: list[float]) -> str:
    if not values:
        return "n.a."
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f}±{(max(values) - min(values)) / 2:.1f}"


def compare(a: list[float], b: list[float]) -> str:
    """a's mean minus b's, and whether every seed of a beats every seed of b (or the reverse)."""
    diff = np.mean(a) - np.mean(b)
    apart = min(a) > max(b) or max(a) < min(b)
    return f"{diff:+.1f} ({'seed ranges apart' if apart else 'seed ranges overlap'})"


def first(results: dict, experiment: str, method: str, alpha: float, rate: float) -> dict | None:
    return results.get(f"{experiment}/{method}/{alpha:g}/{rate:g}/0/")


def score_facts(r: dict | None) -> str:
    h = r["history"][0] if r else {}
    if "score_auc" not in h:
        return "n.a."
    return f"AUC {h['score_auc']:.2f}, mean {h['score_mean']:.2f}, std {h['score_std']:.3f}"


# -- the page ------------------------------------------------------------------------------------------
def header_lines(meta: dict, results: dict) -> list[str]:
    lines = ["# FedAUX reproductions on Fashion-MNIST (issue 13)", "",
             f"Machine: {meta.get('machine', '2-core CPU dev machine')}, no GPU; `runtime.backend: local`, one torch "
             f"thread per run, each run a `fedray sweep` trial, `--jobs` at once (calls before the sweep: a process pool). Config `{CONFIG.name}`; "
             "`scripts/repro/fedaux.py` writes this file from its runs; the interpretation is in "
             "[reproductions.md](reproductions.md).", ""]
    lines += wall_time(meta, lambda i: f"{command(i)}, {i['runs']} runs, {i['wall_s'] / 60:.1f} min "
                                       f"(pre-training {i.get('warm_s', 0):.0f} s)", brackets=True)
    norms: dict[str, set] = {}  # FedAUX's normaliser per experiment (runs saved without the field used Alg. 14's)
    for r in results.values():
        if r["method"].startswith("fedaux"):
            norms.setdefault(r.get("normaliser") or "paper", set()).add(r["experiment"])
    if norms:
        said = "; ".join(f"`{n}` in {', '.join(sorted(e))}" for n, e in sorted(norms.items()))
        lines += [f"FedAUX's normaliser: {said}. Under `public` the reported (eps, delta) is a guarantee; under "
                  "`paper` (Alg. 14's gamma_i, from the client's own data) it is not ([methods.md](methods.md), "
                  "FedAUX point 3).", ""]
    pre = [r["pretrain"] for r in results.values() if r.get("pretrain")]
    if pre:
        mlp = [p["mlp"]["loss"][-1] for p in pre if "mlp" in p and p["mlp"]["loss"]]
        lines += [f"SimCLR pre-training: the MLP's NT-Xent loss after 30 epochs {np.mean(mlp):.2f} "
                  "(temperature 0.1; log(2B-1) = 6.2 at chance for batch 256).", ""]
    return lines


def table71_lines(results: dict) -> list[str]:
    t = [r for r in results.values() if r["experiment"] == "table71"]
    if not t:
        return []
    rounds = max(r["rounds"] for r in t)
    cols = [(a, c) for a in ALPHAS for c in RATES]
    rows = []
    for m, (label, _) in METHODS.items():
        rows.append([label, *(mean_spread(over_seeds(results, "table71", m, a, c)) for a, c in cols)])
        if m in PAPER_I:
            rows.append([f"{label}, paper", *PAPER_I[m].split()])
    lines = [f"## The earlier grid: Table I at both α, maximum accuracy over {rounds} rounds, %", "",
             f"20 clients, Dirichlet alpha, C = fraction of clients per round, 2NN MLP, {len(SEEDS)} seeds on one split "
             f"(mean ± half the range), "
             + ("the first 2,000 test images (the config's test_limit then)" if all(not r.get("provenance") for r in t)
                else "the whole test set") + f"; {where(results, 'table71')}. Paper rows: ResNet-8 on CIFAR-10 with STL-10, 100 rounds, mean ± std. "
             "+P: every client starts from the pre-trained h_0 (SimCLR on the 5,000 auxiliary images).", ""]
    lines += markdown_table(["method", *(f"α={a:g}, C={c:g}" for a, c in cols)], rows)
    # the claim of the issue, per C at alpha 0.01: by the means, and whether the seeds' ranges overlap
    claims = []
    for c in RATES:
        vals = {m: v for m in ("fedaux", "fedaux_code", "feddf_p", "feddf")
                if (v := over_seeds(results, "table71", m, 0.01, c))}
        if len(vals) == 4:
            claims.append(f"C = {c:g}: FedAUX − FedDF+P {compare(vals['fedaux'], vals['feddf_p'])}, with the code's C "
                          f"{compare(vals['fedaux_code'], vals['feddf_p'])}; FedDF+P − FedDF "
                          f"{compare(vals['feddf_p'], vals['feddf'])}")
    if claims:
        lines += ["", "At α = 0.01, differences of the means over the seeds, points: " + "; ".join(claims) + "."]
    lines += ["", "Certainty scores (seed 0, α = 0.01, C = 0.4): ROC AUC of a client's scores for test inputs of "
              "the classes it holds against the rest, averaged over clients; the scores' mean and their spread "
              "(std) over the distillation set, averaged over clients:", "",
              f"- paper's J (λ = 0.1): {score_facts(first(results, 'table71', 'fedaux', 0.01, 0.4))}",
              f"- the code's C = 1/λ: {score_facts(first(results, 'table71', 'fedaux_code', 0.01, 0.4))}", ""]
    ens = []
    for m in ("fedaux", "fedaux_code"):
        r = first(results, "table71", m, 0.01, 0.4)
        if r and r["history"][0].get("weighted") is not None:
            ens.append(f"{METHODS[m][0]}: round 1 teacher ensemble {100 * r['history'][0]['ensemble']:.1f}% unweighted, "
                       f"{100 * r['history'][0]['weighted']:.1f}% certainty-weighted; over all rounds "
                       f"{100 * np.mean([h['ensemble'] for h in r['history']]):.1f}% and "
                       f"{100 * np.mean([h['weighted'] for h in r['history']]):.1f}%")
    if ens:
        lines += ["Teacher ensembles at α = 0.01, C = 0.4, seed 0 (`distill/ensemble_accuracy`, "
                  "`distill/weighted_ensemble_accuracy`): " + "; ".join(ens) + ".", ""]
    return lines


def oneshot_lines(results: dict) -> list[str]:
    t = [r for r in results.values() if r["experiment"] == "oneshot"]
    if not t:
        return []
    rows = []
    for m in ONESHOT_METHODS:
        rows.append([METHODS[m][0], *(f"{final(r):.1f}" if (r := first(results, "oneshot", m, a, 1.0)) else "n.a."
                                      for a in ONESHOT_ALPHAS)])
        if m in PAPER_III:
            paper = dict(zip(PAPER_III_ALPHAS, PAPER_III[m]))
            rows.append([f"{METHODS[m][0]}, paper (MobileNetV2)", *(f"{paper[a]}" for a in ONESHOT_ALPHAS)])
    return ([f"## Table III scaled: one-shot, accuracy after the single round, %", "",
             f"One round, all 20 clients, E = {ONESHOT_EPOCHS} local epochs, 2NN MLP, seed 0, "
             f"{where(results, 'oneshot')} (the paper: 100 "
             "clients, E = 40, MobileNetV2 on CIFAR-10; its α = 0.04 column is left out here).", ""]
            + markdown_table(["method", *(f"α={a:g}" for a in ONESHOT_ALPHAS)], rows) + [""])


def exact_spent(r: dict) -> str:
    """The (eps, delta) a run's release really has, exact for the Gaussian mechanism, computed from the
    noise it had: ``mu`` (Delta / sigma at the paper's sensitivity) and N where the run recorded them;
    for a run recorded before, the classical sigma it used, and for the code's C the N of the eps N it
    recorded then. With the code's C the sensitivity is N times the paper's."""
    from fedray.privacy import gaussian_delta, gaussian_epsilon

    p = r.get("privacy") or {}
    eps, delta = r["eps"], p.get("delta", 1e-5)
    if eps is None or math.isinf(eps):
        return "none (no noise)"
    if "mu" in p:
        mu, n = p["mu"], p["n_max"]
    else:  # recorded before the exact figures: the classical sigma, and eps N for the code's C
        mu, n = eps / math.sqrt(2 * math.log(1.25 / 1e-5)), round(p["epsilon"] / eps)
        delta = 1e-5
    if p.get("regularization") == "code":
        spent_eps, spent_delta = gaussian_epsilon(delta, n * mu), delta
    else:
        spent_eps, spent_delta = eps, gaussian_delta(eps, mu)
    if math.isinf(spent_eps) or spent_delta >= 1:
        return "no guarantee"
    return f"({spent_eps:.3g}, {spent_delta:.2g})"


def privacy_lines(results: dict) -> list[str]:
    t = [r for r in results.values() if r["experiment"] == "privacy"]
    if not t:
        return []
    rows = []
    for eps in EPSILONS:
        row = ["∞ (no noise)" if math.isinf(eps) else f"{eps:g}"]
        for m in ("fedaux", "fedaux_code"):
            r = results.get(f"privacy/{m}/{PRIVACY_ALPHA:g}/{PRIVACY_RATE:g}/0/{eps:g}")
            row += [f"{best(r):.1f}" if r else "n.a.",
                    score_facts(r).split(", mean")[0] if r else "n.a.",
                    exact_spent(r) if r else "n.a."]
        rows.append(row)
    return ([f"## Privacy sweep: FedAUX at α = {PRIVACY_ALPHA:g}, C = {PRIVACY_RATE:g}, λ = 0.1, δ = 1e-5, seed 0", "",
             "Max accuracy %, the scores' AUC, and the (ε, δ) the release really has, exact for the Gaussian "
             "mechanism (Balle and Wang 2018, Theorem 8): with the paper's J the configured ε and the δ its noise "
             "gives; with the code's C = 1/λ the sensitivity is N times what the noise is scaled to (N = the largest "
             "|D_i| + |D^-|), so the ε at the configured δ for that sensitivity. "
             "The paper (Fig. 8, ResNet-8 on CIFAR-10, 40 clients, λ = 0.01): 74.6% without noise, 70.8% at "
             "ε = 0.04, δ = 1e-6.", ""]
            + [f"Runs: {where(results, 'privacy')}.", ""]
            + markdown_table(["ε", "paper's J: max %", "AUC", "(ε, δ) spent", "code's C: max %", "AUC", "(ε, δ) spent"],
                             rows)
            + [""])


# the paper's setting beside ours (digest fedaux.md, sections 6 and 9), and every deviation with its reason
PAPER_SETUP = {"data set": "CIFAR-10 (Dirichlet alpha 0.01 and 100)", "clients": "20",
               "clients per round": "C = 0.2 / 0.4 / 0.8 of 20", "rounds": "100", "model": "ResNet-8",
               "local training": "adam, lr 0.001, batch 32, 1 epoch", "test set": "the whole CIFAR-10 test set",
               "auxiliary data": "80,000 unlabelled STL-10 images (20% of them D^-)",
               "distillation": "adam, lr 5e-05, batch 128, 1 epoch over the auxiliary data"}
DEVIATIONS = [
    ("Fashion-MNIST and the 2NN MLP instead of CIFAR-10 and ResNet-8, 15 rounds instead of 100",
     "what two CPU cores run in an hour for the whole family; configs/paper/ holds the paper's scale"),
    ("5,000 Fashion-MNIST training images carved out before the split instead of STL-10",
     "no second image set of Fashion-MNIST's kind is installed here; carved out, no client ever holds them"),
    ("distillation lr 1e-3 instead of 5e-5",
     "the paper's rate is set for 625 steps a round over 80,000 images; 4,000 images give 32 steps"),
    ("alpha 0.01 only", "the family's runs; at alpha 100 every method of the paper lies within 9 points "
     "(its Table I) and the earlier grid below ran both"),
    ("FedAUX's gamma from the public auxiliary data (`normaliser: public`)",
     "so that (eps, delta) is a guarantee (docs/methods.md, FedAUX point 3)")]


def where(results: dict, experiment: str) -> str:
    """The commit an experiment's runs ran at, in words (or why they do not make one table)."""
    return runs_commit_text([r for r in results.values() if r["experiment"] == experiment], experiment)


def verdict_lines() -> list[str]:
    from scripts.repro import claims

    def mean(cell: str) -> float:
        return float(cell.split("±")[0])

    gaps = [mean(PAPER_I["fedaux"].split()[i]) - mean(PAPER_I[m].split()[i])
            for m in PAPER_I if m != "fedaux" for i in range(len(RATES))]  # alpha 0.01's columns
    return claims.verdict_lines(claims.fedaux_family, "each FedAUX variant against each baseline of Table I at each C, "
                                "on the paper's measure (the maximum accuracy)",
                                f"The paper has FedAUX above every baseline at α = 0.01, by {min(gaps):.1f} to "
                                f"{max(gaps):.1f} points.")


def claim_config(rate: float = 0.4):
    """The config of the claim experiment's FedAUX runs at ``rate``, seed 0: the page's setup."""
    from fedray.config import load_config

    from scripts.repro.fedaux import seed_overrides

    return load_config(CONFIG, [f"data.alpha=0.01", f"federation.clients_per_round={round(rate * 20)}"]
                       + seed_overrides("claim", 0))


def claim_lines(results: dict) -> list[str]:
    """Table I at alpha 0.01 from the claims' runs: every method, the seeds varying the split."""
    runs = [r for r in results.values() if r["experiment"] == "claim"]
    if not runs:
        return []
    n = len(CLAIM_SEEDS)
    origin_text = runs_commit_text(runs, "the claim experiment")

    def stat(v: list[float]) -> str:
        return f"{np.mean(v):.1f} ± {np.std(v, ddof=1):.1f}" if len(v) == n else (f"{len(v)} seeds" if v else "n.a.")

    rows = []
    for m in CLAIM_METHODS:
        acc = [over_seeds(results, "claim", m, 0.01, c, CLAIM_SEEDS) for c in RATES]
        if any(acc):
            rows.append([METHODS[m][0], *(stat(a) for a in acc)])
            if m in PAPER_I:
                rows.append([f"{METHODS[m][0]}, paper", *PAPER_I[m].split()[:len(RATES)]])
    varied = all(r.get("split_seed") == r["seed"] for r in runs)
    return ([f"## Table I at α = 0.01: the claims' runs", "",
             f"Maximum accuracy over {max(r['rounds'] for r in runs)} rounds, %, mean ± std over seeds "
             f"{CLAIM_SEEDS[0]}-{CLAIM_SEEDS[-1]}, each seed setting "
             + ("the split, the auxiliary data, the model init, the sampling and pre-training" if varied else
                "the model init, the sampling and pre-training on one split")
             + f"; {origin_text}. Paper rows: ResNet-8 on CIFAR-10 with STL-10, 100 rounds, mean ± std.", ""]
            + markdown_table(["method", *(f"C={c:g}" for c in RATES)], rows) + [""])


def lambda_run(results: dict, lam: float, eps: float, seed: int) -> dict | None:
    return results.get(f"lambda/fedaux/{PRIVACY_ALPHA:g}/{PRIVACY_RATE:g}/{seed}/{eps:g}/{lam:g}")


def lambda_lines(results: dict, meta: dict) -> list[str]:
    if not any(r["experiment"] == "lambda" for r in results.values()):
        return []
    rows = []
    for lam in LAMBDAS:
        row = [f"{lam:g}"]
        for eps in LAMBDA_EPSILONS:
            rs = [r for s in SEEDS if (r := lambda_run(results, lam, eps, s))]
            aucs = [r["history"][0]["score_auc"] for r in rs if r["history"][0].get("score_auc") is not None]
            row += [mean_spread([best(r) for r in rs]),
                    f"{np.mean(aucs):.2f}" if aucs else "n.a.",
                    f"{np.mean([r['history'][0]['score_std'] for r in rs]):.3f}" if rs else "n.a."]
        rows.append(row)
    ref = {m: mean_spread(over_seeds(results, "table71", m, PRIVACY_ALPHA, PRIVACY_RATE))
           for m in ("feddf_p", "fedaux_code")}
    return ([f"## λ sweep: FedAUX with the paper's J at α = {PRIVACY_ALPHA:g}, C = {PRIVACY_RATE:g}, δ = 1e-5", "",
             f"Max accuracy % ({len(SEEDS)} seeds, mean ± half the range), the scores' AUC and their spread (std) over "
             f"the distillation set, both averaged over the clients and the seeds; {where(results, 'lambda')}. A smaller λ lets ||w_i|| grow, but the "
             "noise of Alg. 14 grows as 1/λ too. For reference at the same α and C: FedDF+P "
             f"{ref['feddf_p']}, FedAUX with the code's C = 1/λ (J at λ/N, about 0.1/3,750 = 2.7e-5, "
             f"without the matching noise) {ref['fedaux_code']}.", ""]
            + markdown_table(["λ", "ε = 0.1: max %", "AUC", "score std", "no noise: max %", "AUC", "score std"], rows)
            + [""] + lambda_machine_lines(results, meta))


def lambda_machine_lines(results: dict, meta: dict) -> list[str]:
    """Where the sweep ran, and how its lambda-0.1 row compares with the same runs in the grid."""
    def last_call(experiment: str) -> tuple[int, dict]:  # the last call that ran that experiment's FedAUX runs
        calls = [(n, i) for n, i in enumerate(meta.get("invocations", []))
                 if (not i["only"] or experiment in i["only"]) and (not i.get("methods") or "fedaux" in i["methods"])]
        return calls[-1] if calls else (-1, {})

    (n_here, here), (n_grid, grid) = last_call("lambda"), last_call("table71")
    again = [best(r) for s in SEEDS if (r := lambda_run(results, 0.1, 0.1, s))]
    before = over_seeds(results, "table71", "fedaux", PRIVACY_ALPHA, PRIVACY_RATE)
    same = (f"Its λ = 0.1, ε = 0.1 row repeats the grid's FedAUX at α = {PRIVACY_ALPHA:g}, C = {PRIVACY_RATE:g} with "
            f"the same seeds: {listing([f'{v:.1f}' for v in again])} here against "
            f"{listing([f'{v:.1f}' for v in before])} there.")
    if n_here == n_grid:
        return [f"The sweep and the grid's FedAUX runs come from one call on one machine ({here.get('cpu', 'not recorded')}). "
                + same + " A run repeats bit for bit on one machine.", ""]
    if not here.get("cpu") or here.get("cpu") == grid.get("cpu"):
        return []
    return [f"The sweep ran on another machine ({here['cpu']}) than the grid above ({grid.get('cpu', 'not recorded')}). "
            + same + " A run repeats bit for bit on one machine, but the last "
            "bits of float arithmetic differ between processors; they change h_0 and the first round's teachers, and at "
            "α = 0.01 that moves the maximum by about as much as another seed does.", ""]


def mixed_lines(results: dict) -> list[str]:
    t = [r for r in results.values() if r["experiment"] == "mixed"]
    if not t:
        return []
    archs = list(t[0]["architectures"])
    rows = []
    for m in MIXED_METHODS:
        for a in ALPHAS:
            r = first(results, "mixed", m, a, 0.4)
            rows.append([METHODS[m][0], f"{a:g}", *(f"{best(r, f'accuracy/{x}'):.1f}" if r else "n.a." for x in archs),
                         f"{best(r):.1f}" if r else "n.a."])
    return (["## Mixed: three architectures, max accuracy %", "",
             "7 LogReg, 7 MLP and 6 one-layer LSTM-64 clients (FedAUX: a third each of ResNet-8, MobileNetV2, "
             f"ShuffleNet), C = 0.4, seed 0, {where(results, 'mixed')}; one h_0 and one server model per architecture, every model distilled "
             "from all participants. The paper gives no numbers, only FedAUX ≥ FedDF+P > FedDF. LogReg has no "
             "feature extractor: its h_0 is the identity and it scores on raw pixels. Overall: the client-weighted "
             "mean of the three models' accuracies.", ""]
            + markdown_table(["method", "α", *archs, "overall"], rows) + [""])


COLOURS = {"fedavg": "tab:blue", "fedprox": "tab:cyan", "feddf": "tab:green", "fedbe": "tab:purple",
           "fedaux": "tab:red", "fedaux_code": "black"}


def plot(results: dict, path: Path) -> None:
    fig, axes = figure(2, 4, figsize=(20, 8))
    for ax, (alpha, rate) in zip(axes[0], ((0.01, 0.4), (100.0, 0.4), (0.01, 0.8))):
        for m, (label, _) in METHODS.items():
            r = first(results, "table71", m, alpha, rate)
            if r:
                ax.plot([h["round"] for h in r["history"]], [h["accuracy"] for h in r["history"]],
                        color=COLOURS[m.removesuffix("_p")], ls="--" if m.endswith("_p") else "-", label=label)
        ax.set(title=f"α = {alpha:g}, C = {rate:g}, seed 0", xlabel="round", ylabel="test accuracy")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    ax = axes[1][0]
    for m in ("fedaux", "fedaux_code"):
        pts = [(e, best(r)) for e in EPSILONS
               if (r := results.get(f"privacy/{m}/{PRIVACY_ALPHA:g}/{PRIVACY_RATE:g}/0/{e:g}"))]
        if pts:
            ax.plot([1e3 if math.isinf(e) else e for e, _ in pts], [v for _, v in pts], marker="o",
                    color=COLOURS[m], label=METHODS[m][0])
    ax.set(xscale="log", title="privacy sweep (1e3 = no noise)", xlabel="ε", ylabel="max accuracy %")
    ax.grid(alpha=0.3), ax.legend(fontsize=7)
    ax = axes[1][1]
    for m in ONESHOT_METHODS:
        pts = [(a, final(r)) for a in ONESHOT_ALPHAS if (r := first(results, "oneshot", m, a, 1.0))]
        if pts:
            ax.plot([a for a, _ in pts], [v for _, v in pts], marker="o", color=COLOURS[m.removesuffix("_p")],
                    ls="--" if m.endswith("_p") else "-", label=METHODS[m][0])
    ax.set(xscale="log", title="one-shot (1 round, E = 10)", xlabel="α", ylabel="accuracy %")
    ax.grid(alpha=0.3), ax.legend(fontsize=7)
    ax = axes[1][2]
    for m in ("fedaux", "fedaux_code"):
        r = first(results, "table71", m, 0.01, 0.4)
        if r and r["history"][0].get("weighted") is not None:
            rounds = [h["round"] for h in r["history"]]
            ax.plot(rounds, [h["weighted"] for h in r["history"]], color=COLOURS[m], label=f"{METHODS[m][0]}, weighted")
            ax.plot(rounds, [h["ensemble"] for h in r["history"]], color=COLOURS[m], ls=":", label="unweighted")
    ax.set(title="teacher ensemble, α = 0.01, C = 0.4", xlabel="round", ylabel="test accuracy")
    ax.grid(alpha=0.3), ax.legend(fontsize=7)
    for ax, (what, label) in zip((axes[0][3], axes[1][3]), (("auc", "scores' AUC"), ("acc", "max accuracy %"))):
        for eps, ls in zip(LAMBDA_EPSILONS, ("-", ":")):
            pts = []
            for lam in LAMBDAS:
                rs = [r for s in SEEDS if (r := lambda_run(results, lam, eps, s))]
                if rs:
                    pts.append((lam, np.mean([r["history"][0]["score_auc"] if what == "auc" else best(r) for r in rs])))
            if pts:
                ax.plot(*zip(*pts), marker="o", color=COLOURS["fedaux"], ls=ls,
                        label="no noise" if math.isinf(eps) else f"ε = {eps:g}")
        ref = over_seeds(results, "table71", "feddf_p", PRIVACY_ALPHA, PRIVACY_RATE)
        if what == "acc" and ref:
            ax.axhline(np.mean(ref), color=COLOURS["feddf"], ls="--", label="FedDF+P")
        if pts:
            ax.legend(fontsize=7)
        ax.set(xscale="log", title=f"FedAUX, paper's J: λ sweep, α = 0.01, C = 0.4", xlabel="λ", ylabel=label)
        ax.grid(alpha=0.3)
    save_figure(fig, path, title="FedAUX on Fashion-MNIST (dashed: +P)")


def page(saved: dict) -> str:
    """docs/repro_fedaux.md from what docs/records/repro_fedaux.json holds."""
    from scripts.repro.fedaux import key

    results, meta = {key(r): r for r in saved["runs"]}, saved.get("meta", {})
    setup = ["## Setup of the claims' runs", "", *setup_table(claim_config(), PAPER_SETUP, DEVIATIONS), ""]
    lines = (header_lines(meta, results)[:2] + verdict_lines() + setup + claim_lines(results)
             + header_lines(meta, results)[2:] + table71_lines(results) + oneshot_lines(results)
             + privacy_lines(results) + lambda_lines(results, meta) + mixed_lines(results))
    return "\n".join(lines) + "\n"


def write_outputs(results: dict, meta: dict, out: Path) -> None:
    out.with_suffix(".md").write_text(page({"meta": meta, "runs": list(results.values())}))
    plot(results, record_file(out, ".png"))
