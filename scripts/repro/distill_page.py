"""The page of the federated distillation reproductions: docs/repro_distill.md (the setup, the tables,
ours beside the papers', and sentences computed from the runs, never notes typed in from an earlier
run) and .png, from the runs scripts/repro/distill.py recorded in docs/records/repro_distill.json
(``--plot-only`` writes them anew from that file alone). The interpretation is in docs/reproductions.md.

A cell of Tables 5.1 and 5.2 shows its one seed's run, or the mean ± std over its seeds (each the run's
seed and the split's) where several are saved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedray.figures import figure, save_figure
from fedray.repro import listing, markdown_table, record_file

from scripts.repro.pages import accuracies, best, command, final, runs_line, setup, wall_time
from scripts.repro.distill import (ALPHAS, ALPHAS51, ALPHAS52, ARCHS, BASELINES51, BASELINES52, COMPARE, LR_CHECK,
                           LR_CHECK_ALPHA, METHODS, METHODS52, MODES, PROPOSED52, TABLE51, TABLE52, TARGETS52)

# Table 5.1: maximum accuracy (%) in 50 rounds, 20 clients, C = 20%; (init previous, init random, dual)
PAPER51 = {"MNIST (LeNet)": {100.0: (98.1, 96.7, 97.8), 1.0: (97.9, 96.4, 97.5), 0.1: (92.6, 90.1, 92.7)},
           "CIFAR-10 (ResNet-8)": {100.0: (70.2, 68.5, 74.9), 1.0: (68.2, 66.0, 72.4), 0.1: (51.1, 48.2, 56.1)}}

# FedAUX Table I: maximum accuracy (%) in 100 rounds, 20 clients, C = 0.4, ResNet-8 on CIFAR-10, STL-10
PAPER_I = {"fedavg": {0.01: 23.6, 100.0: 82.2}, "feddf": {0.01: 27.8, 100.0: 81.4}, "fedbe": {0.01: 25.7, 100.0: 82.0}}
ARCH_LABELS = {"one": "MLP (2NN)", "three": "LogReg / MLP / LSTM-64"}

# Table 5.2, (model, alpha, target %): MB (1e6 bytes, per client: one client's cumulative transfers) up, then
# down, to first reach the target; FA FD CFD-1-32 CFD_delta-1-32 CFD-1-1 CFD_delta-1-1, the round in brackets
# (given for the non-delta columns only). The digest notes that the VGG-16 rows' labels were garbled in the source.
PAPER52 = {
    ("ResNet-18", 100, 71): "760.3(17) 44.8(14) 0.56(17) 0.40 1.36(41) 0.82 / 760.3 44.8 54.4 54.4 1.36 0.39",
    ("ResNet-18", 1, 68): "1028.7(23) 48.0(15) 0.37(13) 0.28 0.64(22) 0.43 / 1028.7 48.0 41.6 41.6 0.72 0.34",
    ("ResNet-18", 0.1, 45): "1520.7(34) 16.0(5) 0.09(7) 0.08 0.52(41) 0.40 / 1520.7 16.0 22.4 22.4 0.99 0.92",
    ("VGG-16", 100, 80): "671.1(11) 32.0(10) 0.40(12) 0.29 0.76(23) 0.47 / 671.1 32.0 38.4 38.4 0.76 0.24",
    ("VGG-16", 1, 78): "1281.3(21) 28.8(9) 0.38(13) 0.28 0.56(19) 0.37 / 1281.3 28.8 41.6 41.6 0.62 0.27",
    ("VGG-16", 0.1, 48): "2928.6(48) 25.6(8) 0.11(9) 0.09 0.43(34) 0.35 / 2928.6 25.6 28.8 28.8 0.77 0.75",
}


# the papers' settings beside our configs (digests thesis.md section 4, fedaux.md), and our deviations with their
# reasons (the configs' comments)
SCALED = "scaled to the 2-core CPU, on the data set at hand"
PAPER51_SETUP = {"data set": "MNIST and CIFAR-10 (Dirichlet alpha 100, 1, 0.1)", "clients": "20",
                 "clients per round": "4", "rounds": "50", "model": "LeNet (MNIST), ResNet-8 (CIFAR-10)",
                 "local training": "adam, lr 0.001", "auxiliary data": "EMNIST (MNIST), STL-10 (CIFAR-10)",
                 "distillation": "adam, lr 0.001"}
DEVIATIONS51 = [("Fashion-MNIST instead of MNIST and CIFAR-10", SCALED),
                ("the 2NN MLP instead of LeNet", "LeNet-5 costs about 18 s a round on the 2-core CPU, the MLP about 1 s"),
                ("5,000 Fashion-MNIST training images, carved out before the split, for distillation", SCALED),
                ("the first 2,000 test images; 30 rounds instead of 50", SCALED)]
PAPER52_SETUP = {"data set": "CIFAR-10 (Dirichlet alpha 100, 1, 0.1)", "clients": "20", "clients per round": "8",
                 "rounds": "50", "model": "ResNet-18, VGG-16 (44.7 / 61.0 MB a transfer)",
                 "local training": "adam, lr 0.001", "auxiliary data": "80,000 STL-10 images",
                 "distillation": "adam, lr 0.001"}
DEVIATIONS52 = [("Fashion-MNIST instead of CIFAR-10 and STL-10", SCALED),
                ("the 2NN MLP (0.8 MB a transfer) instead of ResNet-18 / VGG-16", "as for Table 5.1: LeNet-5 costs "
                 "about 18 s a round on the 2-core CPU, the MLP about 1 s"),
                ("5,000 carved-out images as X^pub instead of 80,000 (a float32 soft-label transfer of 0.2 MB "
                 "instead of 3.2 MB)", SCALED),
                ("the first 2,000 test images; 30 rounds instead of 50", SCALED),
                ("targets chosen after seeing the curves", "the thesis's targets belong to its own models")]
PAPER_I_SETUP = {"data set": "CIFAR-10 (Dirichlet alpha 0.01 to 100)", "clients": "20", "clients per round": "8",
                 "rounds": "100", "model": "ResNet-8; Mixed: ResNet-8 / MobileNetV2 / ShuffleNet",
                 "local training": "adam, lr 0.001, batch 32, 1 epoch",
                 "auxiliary data": "80,000 unlabelled STL-10 images", "distillation": "adam, lr 5e-05, batch 128, "
                 "1 epoch over the auxiliary data"}


def deviations_i(results: dict[str, dict]) -> list[tuple[str, str]]:
    """The comparison's deviations from FedAUX Table I; the distillation lr's reason from the lr check's runs."""
    out = [("Fashion-MNIST with the 2NN MLP (three architectures: 7 LogReg, 7 MLP, 6 LSTM-64) instead of CIFAR-10 "
            "with ResNet-8 (Mixed: ResNet-8 / MobileNetV2 / ShuffleNet)", "models that train fast on the 2-core CPU "
            "(LeNet-5 costs 20 ms a step here, the MLP 1.6 ms)"),
           ("5,000 carved-out Fashion-MNIST training images for distillation instead of STL-10's 80,000", SCALED)]
    checked = {lr: [best(r) for a in ARCHS if (r := results.get(f"lrcheck/feddf/{LR_CHECK_ALPHA:g}/{a}/{lr}"))]
               for lr in LR_CHECK}
    chosen = sorted({r["distill_lr"] for r in results.values() if r["experiment"] == "compare" and r["distill_lr"]})
    if all(checked.values()) and chosen:
        top = {a: max(LR_CHECK, key=lambda lr: checked[lr][i]) for i, a in enumerate(ARCHS)}
        out.append((f"distillation lr {', '.join(f'{c:g}' for c in chosen)} instead of 5e-5",
                    "the lr check below: the highest maximum with " + "; ".join(
                        f"{ARCH_LABELS[a]} at lr {lr:g}" for a, lr in top.items())))
    out.append(("the first 2,000 test images; 20 rounds instead of 100", SCALED))
    return out


# -- summaries ---------------------------------------------------------------------------------------
EXPERIMENTS = {"table51": "Table 5.1", "table52": "Table 5.2", "lrcheck": "the lr check",
               "compare": "FedAUX Table I's protocol"}


def seed_of(r: dict) -> int:
    """A run's seed (runs saved before seeds were kept: 0)."""
    return r.get("seed") or 0


def cell_runs(results: dict[str, dict], experiment: str, method: str, alpha: float) -> list[dict]:
    """The runs of one cell of Table 5.1 or 5.2, one a seed, in seed order."""
    return sorted((r for r in results.values() if r["experiment"] == experiment and r["method"] == method
                   and r["alpha"] == alpha), key=seed_of)


def seeds_text(seeds) -> str:
    """``seed 0``, ``seeds 0-4`` or ``seeds 0 and 2``."""
    seeds = sorted(seeds)
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return f"seeds {listing(map(str, seeds))}"


def f1(v: float) -> str:
    return f"{v:.1f}"


def f2(v: float) -> str:
    return f"{v:.2f}"


def spread(values: list[float], fmt, missing: str = "n.a.") -> str:
    """One seed's value as ``fmt`` writes it; several seeds' mean ± std (a std within rounding of the mean's
    last digits, 0); ``missing`` where none has one."""
    if not values:
        return missing
    if len(values) == 1:
        return fmt(values[0])
    mean, std = float(np.mean(values)), float(np.std(values, ddof=1))
    return f"{fmt(mean)} ± {fmt(std if std > 1e-9 * abs(mean) else 0.0)}"


def rounds_text(rounds: list[int]) -> str:
    """Rounds of several seeds: ``12`` or ``9-14``."""
    return f"{min(rounds)}" if min(rounds) == max(rounds) else f"{min(rounds)}-{max(rounds)}"


def averaged(runs: list[dict]) -> dict | None:
    """A run whose every round holds the mean over ``runs`` (seeds of one cell) of each number recorded in
    all of them: their mean curve; None without runs."""
    if len(runs) < 2:
        return runs[0] if runs else None
    history = []
    for records in zip(*(r["history"] for r in runs)):
        history.append({k: float(np.mean([h[k] for h in records])) for k in records[0]
                        if all(isinstance(h.get(k), (int, float)) for h in records)})
    return {**runs[0], "history": history}


def gain(r: dict, arch: str) -> float | None:
    """Mean over rounds of (accuracy after - before the server distillation), percentage points; only
    rounds in which ``arch`` had participants (otherwise "before" is last round's distilled model, or
    the random init in the first rounds)."""
    d = [h[f"after/{arch}"] - h[f"before/{arch}"] for h in r["history"]
         if h.get(f"after/{arch}") is not None and h.get(f"before/{arch}") is not None
         and h.get(f"participants/{arch}", 1) > 0]
    return 100 * float(np.mean(d)) if d else None


def fmt_gain(r: dict) -> str:
    gains = [(a, gain(r, a)) for a in r["architectures"]]
    return ", ".join(f"{a} {g:+.1f}" for a, g in gains if g is not None) or "-"


def reached(r: dict, target: float) -> dict | None:
    """The first round's record with accuracy >= ``target`` (%), or None."""
    return next((h for h in r["history"] if h.get("accuracy") is not None and 100 * h["accuracy"] >= target), None)


def per_client(r: dict, h: dict, direction: str) -> float:
    """MB (1e6 bytes) one client slot has sent (up) or received (down) up to round ``h``: the total over
    the participants divided by clients_per_round, which is how the thesis counts (one model a round)."""
    return h[f"bytes_{direction}_total"] / r["clients_per_round"] / 1e6


def upload_bytes(r: dict) -> float:
    """Mean bytes of one client's upload."""
    return float(np.mean([h["bytes_up"] / h["participants"] for h in r["history"]]))


def entropy_up(r: dict) -> float | None:
    e = [h["entropy_bits_up"] for h in r["history"] if h.get("entropy_bits_up") is not None]
    return float(np.mean(e)) if e else None


def fmt_x(v: float) -> str:
    """A ratio ("how many times smaller")."""
    return f"{v:.2g}x" if v < 10 else f"{v:,.0f}x"


def fmt_mb(v: float | None) -> str:
    if v is None:
        return "n.a."
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def peak(r: dict) -> int:
    """The round of the maximum accuracy."""
    return r["history"][int(np.argmax(accuracies(r)))]["round"]


def ranking(values: dict[str, float]) -> str:
    """``"A > B = C"``: the labels by value, highest first; ``=`` where the values agree to 0.1."""
    ranked = sorted(values.items(), key=lambda item: -item[1])
    return ranked[0][0] + "".join((" = " if f"{p:.1f}" == f"{v:.1f}" else " > ") + label
                                  for (_, p), (label, v) in zip(ranked, ranked[1:]))


# -- the page -----------------------------------------------------------------------------------------
def seeds_line(results: dict[str, dict]) -> str:
    """How many seeds the cells of each experiment have."""
    seeds: dict[str, set[int]] = {}
    for r in results.values():
        seeds.setdefault(r["experiment"], set()).add(seed_of(r))
    if all(s == {0} for s in seeds.values()):
        return "One seed (0) per cell"
    groups: dict[tuple, list[str]] = {}  # the experiments by their seeds
    for e, label in EXPERIMENTS.items():
        if e in seeds:
            groups.setdefault(tuple(sorted(seeds[e])), []).append(label)
    text = "; ".join(f"{listing(labels)}: " + (f"one seed ({s[0]}) per cell" if len(s) == 1 else
                                                f"{seeds_text(s)} per cell (each the run's seed and the split's), "
                                                "mean ± std over them") for s, labels in groups.items())
    return text[0].upper() + text[1:]


def call_text(i: dict) -> str:
    """A call of the script (``fedray.repro.invocation``): its options, runs and wall time."""
    seeds = f" --seeds {' '.join(map(str, i['seeds']))}`" if i.get("seeds", [0]) != [0] else "`"
    return f"{command(i)[:-1]}{seeds} ({i['runs']} runs) {i['wall_s'] / 60:.1f} min"


def header_lines(meta: dict, results: dict[str, dict]) -> list[str]:
    lines = ["# Federated distillation reproductions (issue 5)", "",
             "Machine: 2-core CPU dev machine, no GPU; `runtime.backend: local`, one torch thread per run, "
             "each run a `fedray sweep` trial, `--jobs` at once (calls before the sweep: a process pool). "
             f"{seeds_line(results)}; the papers report means over 3 runs.", ""]
    return lines + wall_time(meta, call_text, brackets=False)


def table51_lines(results: dict[str, dict]) -> list[str]:
    t51 = [r for r in results.values() if r["experiment"] == "table51"]
    if not t51:
        return []
    rounds = max(r["rounds"] for r in t51)
    runs = {(m, a): cell_runs(results, "table51", m, a) for m in MODES for a in ALPHAS51}
    seeds = sorted({seed_of(r) for r in t51})
    several = len(seeds) > 1
    cells, orders = [], {}
    for a in ALPHAS51:
        vals = [float(np.mean([best(r) for r in runs[m, a]])) if runs[m, a] else None for m in MODES]
        top = max((v for v in vals if v is not None), default=None)
        texts = [spread([best(r) for r in runs[m, a]], f1) for m in MODES]
        cells.append(" / ".join(t if v != top else f"**{t}**" for v, t in zip(vals, texts)))
        if None not in vals:
            orders.setdefault(ranking(dict(zip(MODES.values(), vals))), []).append(f"{a:g}")
    maxima = [["Fashion-MNIST (ours, MLP)", *cells]] + [[f"{data}, thesis"] + [
        " / ".join(f"{v}" for v in rows[a]) for a in ALPHAS51] for data, rows in PAPER51.items()]
    finals = [[label] + [f"{spread([final(r) for r in rs], f1)} (max at {rounds_text([peak(r) for r in rs])})"
                         if rs else "n.a." for rs in (runs[m, a] for a in ALPHAS51)] for m, label in MODES.items()]
    alphas = [f"alpha = {a:g}" for a in ALPHAS51]
    order = "; ".join(f"{o} at alpha = {listing(a)}" for o, a in orders.items())
    return ([f"## Thesis Table 5.1 on Fashion-MNIST: maximum accuracy over {rounds} rounds, %  (`{TABLE51.name}`)",
             "", f"`fd`, 20 clients, C = 20% (4 per round), Dirichlet split, 2NN MLP (the thesis: LeNet on MNIST, "
             f"ResNet-8 on CIFAR-10), Adam 1e-3 for local training and distillation, batch 32, 1 local epoch, 1 "
             f"distillation epoch (batch 128) over 5,000 unlabelled Fashion-MNIST training images carved out before "
             f"the split (the thesis distils on EMNIST / STL-10); {rounds} rounds here, 50 in the thesis. Columns: "
             f"Init Previous / Init Random / Dual Distill"
             + (f"; each the mean ± std over {seeds_text(seeds)} (each the run's seed and the split's)." if several
                else "."), "", "The config as the dual-distillation runs at alpha 1 "
             "use it (the others change `algorithm.mode` and `data.alpha`):", "",
             *setup(TABLE51, [], PAPER51_SETUP, DEVIATIONS51)] + markdown_table(["data", *alphas], maxima)
            + (["", f"Ours, by {'mean ' if several else ''}maximum accuracy: {order}."] if order else [])
            + ["", "Final-round accuracy (ours" + (", mean ± std), and the rounds of the maxima:" if several else
                                                   "), and the round of the maximum:"), ""]
            + markdown_table(["mode", *alphas], finals) + runs_line(t51, "repro_distill.json, Table 5.1"))


def lrcheck_lines(results: dict[str, dict]) -> list[str]:
    lrc = [r for r in results.values() if r["experiment"] == "lrcheck"]
    if not lrc:
        return []
    rows = [[f"{lr:g}", ARCH_LABELS[archs], f"{best(r):.1f}", f"{final(r):.1f}", fmt_gain(r)]
            for archs in ARCHS for lr in LR_CHECK
            if (r := results.get(f"lrcheck/feddf/{LR_CHECK_ALPHA:g}/{archs}/{lr}"))]
    chosen = sorted({r["distill_lr"] for r in results.values() if r["experiment"] == "compare" and r["distill_lr"]})
    return (["", f"## Distillation lr check: FedDF at alpha = {LR_CHECK_ALPHA:g}, {max(r['rounds'] for r in lrc)} "
             "rounds", "", "FedAUX distils with Adam lr 5e-5 for one epoch over 80,000 STL-10 images (625 steps of "
             "batch 128); one epoch over our 5,000 auxiliary images is 40 steps, so a larger lr may be "
             "needed for the distillation to move the student at all. Same setup as the comparison below.", ""]
            + markdown_table(["distill lr", "architectures", "max acc %", "final acc %",
                              "mean distillation gain per round, points"], rows)
            + runs_line(lrc, "repro_distill.json, lr check")
            + (["", f"Chosen for every distillation method below: lr {', '.join(f'{c:g}' for c in chosen)}."]
               if chosen else []))


def compare_lines(results: dict[str, dict]) -> list[str]:
    cmp_ = [r for r in results.values() if r["experiment"] == "compare"]
    if not cmp_:
        return []
    get, alphas = results.get, [f"alpha = {a:g}" for a in ALPHAS]
    maxima = [[label, archs] + [f"{best(r):.1f} / {final(r):.1f}" if r else "n.a."
                                for r in (get(f"compare/{m}/{a:g}/{archs}/") for a in ALPHAS)]
              for archs in ARCHS for m, label in METHODS.items()]
    maxima += [[f"{label}, FedAUX Table I (max)", "ResNet-8, CIFAR-10"]
               + [f"{PAPER_I[m][a]}" if a in PAPER_I[m] else "-" for a in ALPHAS] for m, label in METHODS.items()]
    three = [r for r in cmp_ if r["archs"] == "three"]
    per_arch = [[label, arch] + [f"{best(r, 'accuracy/' + arch):.1f} / {final(r, 'accuracy/' + arch):.1f}" if r
                                 else "n.a." for r in (get(f"compare/{m}/{a:g}/three/") for a in ALPHAS)]
                for arch in (three[0]["architectures"] if three else []) for m, label in METHODS.items()]
    gains = [[METHODS[m], archs] + [gain_cell(get(f"compare/{m}/{a:g}/{archs}/")) for a in ALPHAS]
             for archs in ARCHS for m in ("feddf", "fedbe")]
    return (["", f"## FedAUX Table I protocol on Fashion-MNIST: FedAvg, FedDF, FedBE  (`{COMPARE.name}`)", "",
             f"20 clients, C = 0.4 (8 per round), Dirichlet alpha, Adam 1e-3 batch 32 E = 1; distillation Adam "
             f"batch 128, one epoch over 5,000 unlabelled Fashion-MNIST training images carved out before the "
             f"split; FedAvg |D_i|-weighted; FedBE 10 samples from the diagonal Gaussian (no SWA). "
             f"{max(r['rounds'] for r in cmp_)} rounds here, 100 in FedAUX. **one**: all 20 clients on the 2NN MLP "
             f"(FedAUX: ResNet-8 on CIFAR-10 with STL-10). **three**: 7 LogReg, 7 MLP and 6 one-layer LSTM-64 "
             f"clients (rows as steps), standing in for FedAUX's Mixed setting (a third each of ResNet-8, "
             f"MobileNetV2, ShuffleNet), which is far too slow on this CPU. With three architectures FedAvg "
             f"averages within each architecture only (FedAUX does not run FedAvg there), and `eval/accuracy` is "
             f"the client-weighted mean of the three server models' accuracies (FedAUX evaluates the logit average "
             f"of the three).", "", "The config as FedDF runs it with one architecture at alpha 0.1 (the others change "
             "the algorithm, `data.alpha` and the architectures):", "",
             *setup(COMPARE, [], PAPER_I_SETUP, deviations_i(results)), "Max / final test accuracy, %:", ""]
            + markdown_table(["method", "archs", *alphas], maxima)
            + ["", "Three architectures, each server model's max / final accuracy, %:", ""]
            + markdown_table(["method", "arch", *alphas], per_arch)
            + ["", "What the server distillation adds: mean over rounds of (accuracy after - accuracy before "
               "distillation), percentage points, per architecture, over the rounds in which the architecture had "
               "participants; and the teacher ensemble's maximum test accuracy (ens), %:", ""]
            + markdown_table(["method", "archs", *alphas], gains) + runs_line(cmp_, "repro_distill.json, comparison"))


def gain_cell(r: dict | None) -> str:
    ens = accuracies(r, "ensemble") if r else []
    return f"{fmt_gain(r)}; ens {100 * max(ens):.1f}" if ens else fmt_gain(r) if r else "n.a."


def hits(runs: list[dict], target: float) -> dict[int, tuple[dict, dict]]:
    """The runs (one a seed) that reach ``target`` (%), by seed: each with the first round's record that does."""
    return {seed_of(r): (r, h) for r in runs if (h := reached(r, target))}


def reached_text(rounds: list[int], seeds: int) -> str:
    """The rounds that first reached the target (their range over seeds) and, where not every one of the
    ``seeds`` reached it, how many did; n.r. where none did."""
    if not rounds:
        return "n.r."
    return rounds_text(rounds) + (f"; {len(rounds)} of {seeds} seeds" if len(rounds) < seeds else "")


def mb_rows(results: dict[str, dict]) -> list[list[str]]:
    """Per alpha, our MB per client up and down to the target (the round in brackets), then the thesis's;
    over several seeds, the mean ± std over those that reached it."""
    rows = []
    for a in ALPHAS52:
        up, down = [f"**Fashion-MNIST, MLP, {TARGETS52[a]:g}%, α = {a:g}**", "up"], ["", "down"]
        for runs in (cell_runs(results, "table52", m, a) for m in METHODS52):
            got = hits(runs, TARGETS52[a]).values()
            ups, downs = ([per_client(r, h, d) for r, h in got] for d in ("up", "down"))
            up.append("n.a." if not runs else "n.r." if not got else
                      f"{spread(ups, fmt_mb)} ({reached_text([h['round'] for _, h in got], len(runs))})")
            down.append("n.a." if not runs else spread(downs, fmt_mb, "n.r."))
        rows += [up, down]
        for (model, alpha, acc), cells in PAPER52.items():
            if alpha == a:
                up, down = ([c.replace("(", " (") for c in part.split()] for part in cells.split(" / "))
                rows += [[f"{model}, {acc}%, α = {alpha:g}, thesis", "up", *up], ["", "down", *down]]
    return rows


def run_rows(results: dict[str, dict], cpr: int) -> list[list[str]]:
    """One row per method and alpha (its run, or the mean ± std over its seeds; each ratio paired by seed):
    rounds, MB, accuracy, upload sizes and ratios."""
    rows = []
    for a in ALPHAS52:
        fd, fa = ({seed_of(r): r for r in cell_runs(results, "table52", m, a)} for m in ("fd", "fedavg"))
        fa_hits = hits(list(fa.values()), TARGETS52[a])
        for m, (label, _) in METHODS52.items():
            if not (runs := cell_runs(results, "table52", m, a)):
                continue
            got = hits(runs, TARGETS52[a])
            mb = {d: [per_client(r, h, d) for r, h in got.values()] for d in ("up", "down")}
            entropy = [e for r in runs if (e := entropy_up(r)) is not None]
            than = [spread([upload_bytes(base[seed_of(r)]) / upload_bytes(r) for r in runs if seed_of(r) in base], fmt_x)
                    for base in (fd, fa)]
            rows.append([f"{a:g}, {TARGETS52[a]:g}%", label,
                         reached_text([h["round"] for _, h in got.values()], len(runs)),
                         *(f"{spread(mb[d], fmt_mb)} / {spread([v * cpr for v in mb[d]], fmt_mb)}" if got else "n.r."
                           for d in ("up", "down")),
                         f"{spread([best(r) for r in runs], f1)} ({rounds_text([peak(r) for r in runs])})",
                         spread([upload_bytes(r) for r in runs], lambda v: f"{v:,.0f}"),
                         spread([8 * upload_bytes(r) / r["aux_size"] for r in runs], f2) if m != "fedavg" else "-",
                         spread(entropy, f2, "-"), *than,
                         spread([per_client(*fa_hits[s], "up") / per_client(r, h, "up") for s, (r, h) in got.items()
                                 if s in fa_hits], fmt_x)])
    return rows


def transfer_mb(t52: list[dict], method: str) -> str:
    """MB of one upload of ``method`` (a model for FedAvg, float32 labels for FD), from any of its runs."""
    r = next((r for r in t52 if r["method"] == method), None)
    return f"{upload_bytes(r) / 1e6:.2f} MB" if r else f"n.a. (no {METHODS52[method][0]} run)"


def upload_ratios(results: dict[str, dict]) -> list[str]:
    """How many times smaller a 1-bit upload is than FD's float32 one, without and with delta coding."""
    ranges = []
    for methods in (("cfd_1_32", "cfd_1_1"), ("cfd_delta_1_32", "cfd_delta_1_1")):
        x = [upload_bytes(fd[seed_of(r)]) / upload_bytes(r) for a in ALPHAS52 for m in methods
             if (fd := {seed_of(f): f for f in cell_runs(results, "table52", "fd", a)})
             for r in cell_runs(results, "table52", m, a) if seed_of(r) in fd]
        ranges.append(f"{fmt_x(min(x))[:-1]}-{fmt_x(max(x))}" if x else "n.a.")
    several = len({seed_of(r) for r in results.values() if r["experiment"] == "table52"}) > 1
    return ["", f"Computed from these runs: one 1-bit upload is {ranges[0]} smaller than FD's float32 one without "
            f"Δ coding, and {ranges[1]} with it (mean bytes per upload; the range over the α values"
            + (" and seeds, each run against FD's of its seed)." if several else ").")]


def headroom(t52: list[dict]) -> str:
    """Per alpha, how far the target lies under the methods' maxima (each method's mean over its seeds), in
    points (the lowest to the highest)."""
    parts = []
    for a in ALPHAS52:
        gaps = [float(np.mean([best(r) for r in runs])) - TARGETS52[a] for m in METHODS52
                if (runs := [r for r in t52 if r["alpha"] == a and r["method"] == m])]
        if gaps:
            parts.append(f"{min(gaps):.1f} to {max(gaps):.1f} points at α = {a:g}")
    return "; ".join(parts) or "n.a."


def table52_lines(results: dict[str, dict]) -> list[str]:
    t52 = [r for r in results.values() if r["experiment"] == "table52"]
    if not t52:
        return []
    rounds, cpr = max(r["rounds"] for r in t52), t52[0]["clients_per_round"]
    targets = listing(f"{TARGETS52[a]:g}% at α = {a:g}" for a in ALPHAS52)
    seeds = sorted({seed_of(r) for r in t52})
    several = len(seeds) > 1
    return (["", f"## Thesis Table 5.2 on Fashion-MNIST: MB to reach a target accuracy  (`{TABLE52.name}`)", "",
             f"Compressed federated distillation (thesis Alg. 8): dual distillation with a persistent server "
             f"model, clients re-initialised every round; CFD-b_up-b_down quantises the uploaded soft labels to "
             f"b_up bits and the server's downloaded ones to b_down (32: float32; 1: one-hot), Δ delta-codes the "
             f"uploads against the client's previous upload and 1-bit downloads against what that client "
             f"downloaded last (eq. 5.11); the coded labels are real bitstreams "
             f"(codebook + LZMA, standing in for the thesis's CABAC). FD: the same with float32 both ways. 20 "
             f"clients, C = 40% ({cpr} per round), Dirichlet split, 2NN MLP (a model transfer is "
             f"{transfer_mb(t52, 'fedavg')}; ResNet-18 44.7 MB, VGG-16 61.0 MB), Adam 1e-3 for local training and "
             f"distillation, batch 32, 1 local epoch, 1 distillation epoch (batch 128) over X^pub = "
             f"{t52[0]['aux_size']:,} unlabelled Fashion-MNIST training images (a float32 soft-label transfer is "
             f"{transfer_mb(t52, 'fd')}; the thesis's 80,000 STL-10 images 3.2 MB); {rounds} rounds here, 50 in the "
             f"thesis. Only soft-label traffic is counted for FD/CFD, full models for FedAvg (FA).", "",
             f"**MB** are 1e6 bytes **per client**, as the thesis counts them (its FA 760.3 MB in 17 rounds is "
             f"17 ResNet-18 transfers of 44.7 MB): our total over all participants (`comm/bytes_up_total`, "
             f"`comm/bytes_down_total`) divided by the {cpr} clients per round, i.e. what one client sends and "
             f"receives if it took part in every round; the totals over all {cpr} are {cpr}x these (second "
             f"table). Cumulative up to and including the first round whose accuracy reaches the target; that "
             f"round in brackets. FD/CFD download nothing in round 1 (the initial model comes from the shared "
             f"seed), so their down column counts one transfer fewer than the rounds; the thesis's counts one "
             f"per round. n.r.: target not reached in {rounds} rounds"
             + (f". Over {seeds_text(seeds)} (each the run's seed and the split's), each cell is the mean ± std over "
                "the seeds that reached the target, the round is their range, and where not every seed reached it, "
                "how many did" if several else "") + f". Thesis rows (ResNet-18 and VGG-16 on "
             f"CIFAR-10, 50 rounds, mean of 3 runs) for orientation; it gives the round for the non-Δ columns "
             f"only.", "", f"**Our targets ({targets}) were chosen after seeing the curves**; they are not the "
             f"thesis's, whose targets belong to its own models. Each target's distance under the "
             f"{'mean ' if several else ''}maximum of each method: {headroom(t52)}.", "",
             "The config as CFD-1-32 runs it at alpha 1 (the others change the algorithm and `data.alpha`):", "",
             *setup(TABLE52, [], PAPER52_SETUP, DEVIATIONS52)]
            + markdown_table(["setting", "dir", "FA", *(label for label, _ in list(METHODS52.values())[1:])],
                             mb_rows(results))
            + ["", ("Per method and α, the mean ± std over its seeds (ratios paired by seed; to the target, over the "
                    "seeds that reached it)" if several else "Per run")
               + ": the round the target is first reached; MB up and down up to it per client and in total "
               f"over all {cpr} participants of a round; maximum test accuracy (its round); mean bytes of one "
               f"client's upload, and as bits per X^pub label; mean empirical entropy H(Ỹ) of the quantised "
               f"uploaded labels, bits per label (`distill/entropy_bits_up`; before delta coding); how many times "
               f"smaller one upload is than FD's and FedAvg's; and FA's MB up to the target over the method's.", ""]
            + markdown_table(["α, target", "method", "round", "MB up, client / total", "MB down, client / total",
                              "max acc %", "bytes per upload", "bits per label", "H(Ỹ), bits", "upload vs FD",
                              "upload vs FA", "MB up to target vs FA"], run_rows(results, cpr))
            + runs_line(t52, "repro_distill.json, Table 5.2") + upload_ratios(results))


COLOURS52 = {"fedavg": "tab:blue", "fd": "black", "cfd_1_32": "tab:green", "cfd_delta_1_32": "tab:olive",
             "cfd_1_1": "tab:red", "cfd_delta_1_1": "tab:orange"}


def curve(ax, r: dict | None, **style) -> None:
    """Accuracy by round of run ``r`` (nothing if it did not run)."""
    if r:
        ax.plot([h["round"] for h in r["history"]], accuracies(r), **style)


def plot_accuracy_panels(results: dict[str, dict], axes) -> None:
    """Table 5.1's modes (the mean over their seeds), FedAvg/FedDF/FedBE at each alpha, and the lr check:
    accuracy by round."""
    colours = {"init_previous": "tab:blue", "init_random": "tab:orange", "dual": "tab:red"}
    for m, label in MODES.items():
        for a, ls in zip(ALPHAS51, ("-", "--", ":")):
            curve(axes[0], averaged(cell_runs(results, "table51", m, a)), color=colours[m], ls=ls,
                  label=f"{label}, alpha {a:g}")
    axes[0].set_title("Table 5.1: FD modes (MLP)")
    axes[0].legend(fontsize=6, ncol=3, loc="center", bbox_to_anchor=(0.5, 0.6))
    colours = {"fedavg": "tab:blue", "feddf": "tab:green", "fedbe": "tab:purple"}
    for ax, a in zip(axes[1:5], ALPHAS):
        for m, label in METHODS.items():
            for archs, ls in (("one", "-"), ("three", "--")):
                curve(ax, results.get(f"compare/{m}/{a:g}/{archs}/"), color=colours[m], ls=ls,
                      label=f"{label}, {archs}")
        ax.set_title(f"FedAvg / FedDF / FedBE, alpha {a:g}")
    axes[1].legend(fontsize=7, loc="lower right")
    for archs, ls in (("one", "-"), ("three", "--")):
        for lr, c in zip(LR_CHECK, ("tab:gray", "tab:olive", "tab:green")):
            curve(axes[5], results.get(f"lrcheck/feddf/{LR_CHECK_ALPHA:g}/{archs}/{lr}"), color=c, ls=ls,
                  label=f"lr {lr:g}, {archs}")
    axes[5].set_title(f"FedDF distillation lr, alpha {LR_CHECK_ALPHA:g}")
    axes[5].legend(fontsize=7, loc="lower right")
    for ax in axes[:6]:
        ax.set(xlabel="round", ylabel="test accuracy")
        ax.grid(alpha=0.3)


def plot_table52(results: dict[str, dict], axes) -> None:
    """Accuracy against cumulative MB uploaded per client (the mean over the seeds), one panel per alpha,
    the target dotted."""
    for ax, a in zip(axes, ALPHAS52):
        for m, (label, _) in METHODS52.items():
            r = averaged(cell_runs(results, "table52", m, a))
            if r:
                ax.plot([per_client(r, h, "up") for h in r["history"]], [h["accuracy"] for h in r["history"]],
                        color=COLOURS52[m], ls="--" if "delta" in m else "-", marker=".", ms=3, label=label)
        ax.axhline(TARGETS52[a] / 100, color="gray", lw=0.8, ls=":")
        ax.set(xscale="log", title=f"Table 5.2, alpha {a:g}: acc. vs MB up (dotted: target)",
               xlabel="cumulative MB uploaded per client", ylabel="test accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")


def plot(results: dict[str, dict], path: Path) -> None:
    t52 = any(r["experiment"] == "table52" for r in results.values())
    fig, axes = figure(3 if t52 else 2, 3, figsize=(15, 12 if t52 else 8))
    axes = axes.ravel()
    plot_accuracy_panels(results, axes)
    if t52:
        plot_table52(results, axes[6:])
    seeds = {seed_of(r) for r in results.values() if r["experiment"] in ("table51", "table52")}
    save_figure(fig, path, title="Federated distillation on Fashion-MNIST (solid: one architecture, dashed: three"
                                 + ("; bottom row dashed: delta coding" if t52 else "")
                                 + (f"; Tables 5.1 and 5.2: the mean of {len(seeds)} seeds)" if len(seeds) > 1 else ")"))


def paper52_totals() -> dict[tuple, list[float]]:
    """Table 5.2's MB up + down per client, by row, in METHODS52's order (FedAvg, FD, then the CFD variants)."""
    def values(text: str) -> list[float]:
        return [float(v.split("(")[0]) for v in text.split()]

    return {row: [u + d for u, d in zip(*map(values, text.split(" / ")))] for row, text in PAPER52.items()}


def verdict_lines() -> list[str]:
    """What holds of Tables 5.1 and 5.2 (``scripts/repro/claims.py``), beside the thesis's own cells."""
    from scripts.repro import claims

    modes = list(MODES)
    above51 = {b: sum(cells[modes.index("dual")] > cells[modes.index(b)] for rows in PAPER51.values()
                      for cells in rows.values()) for b in BASELINES51}
    cells51 = sum(len(rows) for rows in PAPER51.values())
    methods = list(METHODS52)
    totals = paper52_totals()
    less52 = sum(t[methods.index(a)] < t[methods.index(b)] for t in totals.values() for a in PROPOSED52
                 for b in BASELINES52)
    return (claims.verdict_lines(claims.distill_family, "Dual Distill against the other two modes at each alpha, on the "
                                 "maximum accuracy", "The thesis has Dual Distill above "
                                 + " and ".join(f"{MODES[b]} in {above51[b]} of its {cells51} cells" for b in BASELINES51)
                                 + " (MNIST and CIFAR-10).")
            + claims.verdict_lines(claims.table52_family, "each CFD variant against FD and FedAvg at each alpha, on the "
                                   "MB to the target", f"In the thesis's Table 5.2 a CFD variant needs fewer MB up and "
                                   f"down than the baseline in {less52} of its {len(totals) * len(PROPOSED52) * len(BASELINES52)} "
                                   "such comparisons (ResNet-18 and VGG-16 on CIFAR-10).", digits=2))


def page(saved: dict) -> str:
    """docs/repro_distill.md from what docs/records/repro_distill.json holds."""
    from scripts.repro.distill import key

    results, meta = {key(r): r for r in saved["runs"]}, saved.get("meta", {})
    header = header_lines(meta, results)
    lines = (header[:2] + verdict_lines() + header[2:] + table51_lines(results) + lrcheck_lines(results) + compare_lines(results)
             + table52_lines(results))
    return "\n".join(lines) + "\n"


def write_outputs(results: dict[str, dict], meta: dict, out: Path) -> None:
    out.with_suffix(".md").write_text(page({"meta": meta, "runs": list(results.values())}))
    plot(results, record_file(out, ".png"))
