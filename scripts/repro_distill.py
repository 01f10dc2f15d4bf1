"""Federated distillation reproductions (issue 5): thesis Table 5.1 and FedAUX Table I's baselines.

Table 5.1 (thesis section 5.2.4): federated distillation (``fd``) with the client model initialised
from the previous round's distilled model, from a random init, or by dual distillation from a
persistent server model, at Dirichlet alpha 100, 1 and 0.1; the maximum test accuracy over the
rounds. FedAUX Table I: FedAvg, FedDF and FedBE at alpha 0.01, 0.1, 1 and 100 with one
architecture and with three (a third of the clients each, like FedAUX's "Mixed" setting); the
maximum and final accuracy, each architecture's, and what the server distillation itself adds
(accuracy after minus before it). Before that, a short check of the distillation lr for FedDF at
alpha 0.1. Writes docs/repro_distill.md (ours beside the papers'), .json (every round's accuracies)
and .png.

    python scripts/repro_distill.py --jobs 2
    python scripts/repro_distill.py --only table51 --rounds 2 --out /tmp/quick   # timing check
    python scripts/repro_distill.py --plot-only
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedray.clients import LocalExecutor  # noqa: E402
from fedray.config import load_config  # noqa: E402
from fedray.federation import Federation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE51 = ROOT / "configs" / "repro_thesis_table51_fmnist.yaml"
COMPARE = ROOT / "configs" / "repro_fedaux_feddf_fmnist.yaml"

MODES = {"init_previous": "Init Previous", "init_random": "Init Random", "dual": "Dual Distill"}
ALPHAS51 = (100.0, 1.0, 0.1)
# Table 5.1: maximum accuracy (%) in 50 rounds, 20 clients, C = 20%; (init previous, init random, dual)
PAPER51 = {"MNIST (LeNet)": {100.0: (98.1, 96.7, 97.8), 1.0: (97.9, 96.4, 97.5), 0.1: (92.6, 90.1, 92.7)},
           "CIFAR-10 (ResNet-8)": {100.0: (70.2, 68.5, 74.9), 1.0: (68.2, 66.0, 72.4), 0.1: (51.1, 48.2, 56.1)}}

METHODS = {"fedavg": "FedAvg", "feddf": "FedDF", "fedbe": "FedBE"}
ALPHAS = (0.01, 0.1, 1.0, 100.0)
# one architecture, or a third of the clients each on three (FedAUX "Mixed": ResNet-8/MobileNetV2/ShuffleNet)
ARCHS = {"one": ["federation.architectures={mlp: 20}"],
         "three": ["federation.architectures={logreg: 7, mlp: 7, lstm: 6}",
                   "federation.model_options={lstm: {hidden_size: 64, num_layers: 1}}"]}
ARCH_LABELS = {"one": "MLP (2NN)", "three": "LogReg / MLP / LSTM-64"}
# FedAUX Table I: maximum accuracy (%) in 100 rounds, 20 clients, C = 0.4, ResNet-8 on CIFAR-10, STL-10
PAPER_I = {"fedavg": {0.01: 23.6, 100.0: 82.2}, "feddf": {0.01: 27.8, 100.0: 81.4}, "fedbe": {0.01: 25.7, 100.0: 82.0}}

LR_CHECK = (5e-5, 1e-4, 1e-3)
LR_CHECK_ALPHA = 0.1
LR_CHECK_ROUNDS = 8


def runs(rounds: int | None) -> list[dict]:
    """Every run: its key fields and config overrides."""
    out = []
    for alpha in ALPHAS51:
        for mode in MODES:
            out.append({"experiment": "table51", "method": mode, "alpha": alpha, "archs": "one", "lr": None,
                        "overrides": [f"algorithm.mode={mode}", f"data.alpha={alpha}"]})
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
    for r in out:
        if rounds is not None:
            r["overrides"].append(f"federation.rounds={rounds}")
    return out


def key(r: dict) -> str:
    return f"{r['experiment']}/{r['method']}/{r['alpha']:g}/{r['archs']}/{r['lr'] or ''}"


def run(spec: dict) -> dict:
    base = TABLE51 if spec["experiment"] == "table51" else COMPARE
    config = load_config(base, spec["overrides"] + [f"checkpoint_every={10 ** 6}"])
    archs = list(config.federation.architectures)
    history = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        fed = Federation(config, run_dir, LocalExecutor)
        for _ in range(config.federation.rounds):
            m = fed.run_round().metrics
            h = {"round": fed.round, "accuracy": m.get("eval/accuracy"), "time_s": m["time/round_s"],
                 "ensemble": m.get("distill/ensemble_accuracy")}
            sampled = [c.arch for c in fed.strategy.sample_clients(fed.round)]  # deterministic: this round's
            for arch in archs:
                h[f"participants/{arch}"] = sampled.count(arch)
                h[f"accuracy/{arch}"] = m.get(f"eval/accuracy/{arch}")
                h[f"before/{arch}"] = m.get(f"distill/accuracy_before/{arch}")
                h[f"after/{arch}"] = m.get(f"distill/accuracy_after/{arch}")
            history.append(h)
        fed.finish()
    out = {k: v for k, v in spec.items() if k != "overrides"}
    out.update({"rounds": config.federation.rounds, "architectures": config.federation.architectures,
                "distill_lr": getattr(config.algorithm, "distill", {}).get("lr") if config.algorithm.name != "fedavg"
                else None, "history": history, "wall_s": time.perf_counter() - start})
    return out


def cost(spec: dict) -> float:
    """Rough relative run time (measured with --rounds 2), for scheduling the longest runs first."""
    per_round = {"fedbe": 8.0, "feddf": 4.0, "fedavg": 2.0}.get(spec["method"], 1.0) if spec["archs"] == "three" else \
        {"fedbe": 2.5, "feddf": 2.0, "fedavg": 1.5}.get(spec["method"], 1.0)
    rounds = [int(o.split("=")[1]) for o in spec["overrides"] if o.startswith("federation.rounds=")]
    return per_round * (rounds[-1] if rounds else 25)


# -- summaries ---------------------------------------------------------------------------------------
def accuracies(r: dict, tag: str = "accuracy") -> list[float]:
    return [h[tag] for h in r["history"] if h.get(tag) is not None]


def best(r: dict, tag: str = "accuracy") -> float:
    return 100 * max(accuracies(r, tag))


def final(r: dict, tag: str = "accuracy") -> float:
    return 100 * accuracies(r, tag)[-1]


def gain(r: dict, arch: str) -> float | None:
    """Mean over rounds of (accuracy after - before the server distillation), percentage points; only
    rounds in which ``arch`` had participants (otherwise "before" is last round's distilled model, or
    the random init in the first rounds)."""
    d = [h[f"after/{arch}"] - h[f"before/{arch}"] for h in r["history"]
         if h.get(f"after/{arch}") is not None and h.get(f"before/{arch}") is not None
         and h.get(f"participants/{arch}", 1) > 0]
    return 100 * float(np.mean(d)) if d else None


def arch_names(r: dict) -> list[str]:
    return list(r["architectures"])


def fmt_gain(r: dict) -> str:
    gains = [(a, gain(r, a)) for a in arch_names(r)]
    return ", ".join(f"{a} {g:+.1f}" for a, g in gains if g is not None) or "-"


# -- outputs -----------------------------------------------------------------------------------------
def write_outputs(results: dict[str, dict], meta: dict, out: Path) -> None:
    get = results.get
    lines = ["# Federated distillation reproductions (issue 5)", "",
             "Machine: 2-core CPU dev machine, no GPU; `runtime.backend: local`, one torch thread per run, "
             "runs in parallel processes (`--jobs`). One seed (0) per cell; the papers report means over 3 runs.", ""]
    done = [i for i in meta.get("invocations", []) if i.get("rounds") is None]
    if done:
        lines += [f"Wall time: **{sum(i['wall_s'] for i in done) / 60:.1f} min** in all, " + "; ".join(
            f"`--only {' '.join(i['only']) if i['only'] else 'all'} --jobs {i['jobs']}` ({i['runs']} runs) "
            f"{i['wall_s'] / 60:.1f} min" for i in done) +
            f"; {sum(i['run_s'] for i in done) / 60:.1f} min of run time summed over the processes.", ""]

    t51 = [r for r in results.values() if r["experiment"] == "table51"]
    if t51:
        rounds = max(r["rounds"] for r in t51)
        lines += [f"## Thesis Table 5.1 on Fashion-MNIST: maximum accuracy over {rounds} rounds, %  (`{TABLE51.name}`)", "",
                  f"`fd`, 20 clients, C = 20% (4 per round), Dirichlet split, 2NN MLP (the thesis: LeNet on MNIST, "
                  f"ResNet-8 on CIFAR-10; LeNet-5 costs ~18 s a round here), Adam 1e-3 for local training and "
                  f"distillation, batch 32, 1 local epoch, 1 distillation epoch (batch 128) over 5,000 unlabelled "
                  f"Fashion-MNIST training images carved out before the split (the thesis distils on EMNIST / STL-10); "
                  f"{rounds} rounds here, 50 in the thesis. Columns: Init Previous / Init Random / Dual Distill.", "",
                  "| data | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS51) + " |", "|---|" + "---|" * len(ALPHAS51)]
        cells = []
        for a in ALPHAS51:
            row = [get(f"table51/{m}/{a:g}/one/") for m in MODES]
            vals = [best(r) if r else None for r in row]
            top = max(v for v in vals if v is not None) if any(v is not None for v in vals) else None
            cells.append(" / ".join("n.a." if v is None else (f"**{v:.1f}**" if v == top else f"{v:.1f}") for v in vals))
        lines.append("| Fashion-MNIST (ours, MLP) | " + " | ".join(cells) + " |")
        for data, rows in PAPER51.items():
            lines.append(f"| {data}, thesis | " + " | ".join(" / ".join(f"{v}" for v in rows[a]) for a in ALPHAS51) + " |")
        lines += ["", "Final-round accuracy (ours), and the round of the maximum:", "",
                  "| mode | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS51) + " |", "|---|" + "---|" * len(ALPHAS51)]
        for m, label in MODES.items():
            row = []
            for a in ALPHAS51:
                r = get(f"table51/{m}/{a:g}/one/")
                if r:
                    acc = accuracies(r)
                    row.append(f"{final(r):.1f} (max at {r['history'][int(np.argmax(acc))]['round']})")
                else:
                    row.append("n.a.")
            lines.append(f"| {label} | " + " | ".join(row) + " |")

    lrc = [r for r in results.values() if r["experiment"] == "lrcheck"]
    if lrc:
        lines += ["", f"## Distillation lr check: FedDF at alpha = {LR_CHECK_ALPHA:g}, {max(r['rounds'] for r in lrc)} rounds",
                  "", "FedAUX distils with Adam lr 5e-5 for one epoch over 80,000 STL-10 images (625 steps of "
                  "batch 128); one epoch over our 5,000 auxiliary images is 40 steps, so a larger lr may be "
                  "needed for the distillation to move the student at all. Same setup as the comparison below.", "",
                  "| distill lr | architectures | max acc % | final acc % | mean distillation gain per round, points |",
                  "|---|---|---|---|---|"]
        for archs in ARCHS:
            for lr in LR_CHECK:
                r = get(f"lrcheck/feddf/{LR_CHECK_ALPHA:g}/{archs}/{lr}")
                if r:
                    lines.append(f"| {lr:g} | {ARCH_LABELS[archs]} | {best(r):.1f} | {final(r):.1f} | {fmt_gain(r)} |")
        chosen = sorted({r["distill_lr"] for r in results.values() if r["experiment"] == "compare" and r["distill_lr"]})
        if chosen:
            lines += ["", f"Chosen for every distillation method below: lr {', '.join(f'{c:g}' for c in chosen)}."]

    cmp_ = [r for r in results.values() if r["experiment"] == "compare"]
    if cmp_:
        rounds = max(r["rounds"] for r in cmp_)
        lines += ["", f"## FedAUX Table I protocol on Fashion-MNIST: FedAvg, FedDF, FedBE  (`{COMPARE.name}`)", "",
                  f"20 clients, C = 0.4 (8 per round), Dirichlet alpha, Adam 1e-3 batch 32 E = 1; distillation Adam "
                  f"batch 128, one epoch over 5,000 unlabelled Fashion-MNIST training images carved out before the "
                  f"split; FedAvg |D_i|-weighted; FedBE 10 samples from the diagonal Gaussian (no SWA). {rounds} "
                  f"rounds here, 100 in FedAUX. **one**: all 20 clients on the 2NN MLP (FedAUX: ResNet-8 on "
                  f"CIFAR-10 with STL-10). **three**: 7 LogReg, 7 MLP and 6 one-layer LSTM-64 clients (rows as "
                  f"steps), standing in for FedAUX's Mixed setting (a third each of ResNet-8, MobileNetV2, "
                  f"ShuffleNet), which is far too slow on this CPU (LeNet-5 and the McMahan CNN cost 20-55 ms a "
                  f"step). With three architectures FedAvg averages within each architecture only (FedAUX does not "
                  f"run FedAvg there), and `eval/accuracy` is the client-weighted mean of the three server models' "
                  f"accuracies (FedAUX evaluates the logit average of the three).", "",
                  "Max / final test accuracy, %:", "",
                  "| method | archs | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS) + " |",
                  "|---|---|" + "---|" * len(ALPHAS)]
        for archs in ARCHS:
            for m, label in METHODS.items():
                row = []
                for a in ALPHAS:
                    r = get(f"compare/{m}/{a:g}/{archs}/")
                    row.append(f"{best(r):.1f} / {final(r):.1f}" if r else "n.a.")
                lines.append(f"| {label} | {archs} | " + " | ".join(row) + " |")
        for m, label in METHODS.items():
            lines.append(f"| {label}, FedAUX Table I (max) | ResNet-8, CIFAR-10 | " +
                         " | ".join(f"{PAPER_I[m][a]}" if a in PAPER_I[m] else "-" for a in ALPHAS) + " |")
        lines += ["", "Three architectures, each server model's max / final accuracy, %:", "",
                  "| method | arch | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS) + " |",
                  "|---|---|" + "---|" * len(ALPHAS)]
        three = [r for r in cmp_ if r["archs"] == "three"]
        for arch in (arch_names(three[0]) if three else []):
            for m, label in METHODS.items():
                row = []
                for a in ALPHAS:
                    r = get(f"compare/{m}/{a:g}/three/")
                    row.append(f"{best(r, 'accuracy/' + arch):.1f} / {final(r, 'accuracy/' + arch):.1f}" if r else "n.a.")
                lines.append(f"| {label} | {arch} | " + " | ".join(row) + " |")
        lines += ["", "What the server distillation adds: mean over rounds of (accuracy after - accuracy before "
                  "distillation), percentage points, per architecture, over the rounds in which the architecture had "
                  "participants; and the teacher ensemble's maximum test accuracy (ens), %:", "",
                  "| method | archs | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS) + " |",
                  "|---|---|" + "---|" * len(ALPHAS)]
        for archs in ARCHS:
            for m in ("feddf", "fedbe"):
                row = []
                for a in ALPHAS:
                    r = get(f"compare/{m}/{a:g}/{archs}/")
                    ens = accuracies(r, "ensemble") if r else []
                    row.append(f"{fmt_gain(r)}; ens {100 * max(ens):.1f}" if r and ens else (fmt_gain(r) if r else "n.a."))
                lines.append(f"| {METHODS[m]} | {archs} | " + " | ".join(row) + " |")
    if meta.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in meta["notes"]]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(results, out)


def plot(results: dict[str, dict], out: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    axes = axes.ravel()
    ax = axes[0]
    colours = {"init_previous": "tab:blue", "init_random": "tab:orange", "dual": "tab:red"}
    styles = {100.0: "-", 1.0: "--", 0.1: ":"}
    for m, label in MODES.items():
        for a in ALPHAS51:
            r = results.get(f"table51/{m}/{a:g}/one/")
            if r:
                ax.plot([h["round"] for h in r["history"]], accuracies(r), color=colours[m], ls=styles[a],
                        label=f"{label}, alpha {a:g}")
    ax.set_title("Table 5.1: FD modes (MLP)")
    ax.legend(fontsize=6, ncol=3, loc="center", bbox_to_anchor=(0.5, 0.6))
    colours = {"fedavg": "tab:blue", "feddf": "tab:green", "fedbe": "tab:purple"}
    for ax, a in zip(axes[1:5], ALPHAS):
        for m, label in METHODS.items():
            for archs, ls in (("one", "-"), ("three", "--")):
                r = results.get(f"compare/{m}/{a:g}/{archs}/")
                if r:
                    ax.plot([h["round"] for h in r["history"]], accuracies(r), color=colours[m], ls=ls,
                            label=f"{label}, {archs}")
        ax.set_title(f"FedAvg / FedDF / FedBE, alpha {a:g}")
    axes[1].legend(fontsize=7, loc="lower right")
    ax = axes[5]
    for archs, ls in (("one", "-"), ("three", "--")):
        for lr, c in zip(LR_CHECK, ("tab:gray", "tab:olive", "tab:green")):
            r = results.get(f"lrcheck/feddf/{LR_CHECK_ALPHA:g}/{archs}/{lr}")
            if r:
                ax.plot([h["round"] for h in r["history"]], accuracies(r), color=c, ls=ls, label=f"lr {lr:g}, {archs}")
    ax.set_title(f"FedDF distillation lr, alpha {LR_CHECK_ALPHA:g}")
    ax.legend(fontsize=7, loc="lower right")
    for ax in axes:
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    fig.suptitle("Federated distillation on Fashion-MNIST (solid: one architecture, dashed: three)")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--only", nargs="+", choices=["table51", "lrcheck", "compare"], help="experiments to run")
    parser.add_argument("--rounds", type=int, help="override every run's rounds (a quick check)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "repro_distill"), help="output path without suffix")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved .json")
    args = parser.parse_args()
    out = Path(args.out)
    saved = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    results = {key(r): r for r in saved.get("runs", [])}
    meta = saved.get("meta", {"machine": "2-core CPU dev machine", "notes": []})
    if not args.plot_only:
        todo = [r for r in runs(args.rounds) if not args.only or r["experiment"] in args.only]
        todo.sort(key=cost, reverse=True)  # the longest first, so the processes finish together
        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run, r) for r in todo]
            for future in as_completed(futures):
                r = future.result()
                results[key(r)] = r
                print(f"{key(r):32} max {best(r):5.1f} final {final(r):5.1f} gain {fmt_gain(r):28} "
                      f"{r['wall_s']:6.0f} s", flush=True)
                out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": list(results.values())}, indent=1))
        meta.setdefault("invocations", []).append(
            {"only": args.only or [], "jobs": args.jobs, "rounds": args.rounds, "runs": len(todo),
             "wall_s": time.perf_counter() - start, "run_s": sum(results[key(r)]["wall_s"] for r in todo),
             "python": platform.python_version()})
        out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": list(results.values())}, indent=1))
    write_outputs(results, meta, out)
    print(f"wrote {out}.md, .json and .png")


if __name__ == "__main__":
    main()
