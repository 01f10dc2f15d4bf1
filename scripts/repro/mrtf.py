"""MrTF reproductions on Fashion-MNIST: the Fig. 6 demo, and MrTF against its baselines and ablations.

``demo`` (Fig. 6, section 3.2): why AvgProb and the aggregated models help. Three clients hold all training samples of two classes each (six classes drawn with the seed), train an MLP from
the same initial model for one round, and the server forms distillation targets on the 10-class test
inputs from their logits. Printed and written to ``docs/repro_mrtf_demo.md``: each local model's
accuracy, then the targets' accuracy (argmax) for AvgLogit (eq. 3) and AvgProb (eq. 4; and eq. 7
with eq. 6's stabilised teachers) with uniform weights and with weights (0.6, 0.3, 0.1), and after
adding the previous and the aggregated model (eq. 10; for AvgLogit their logits join the mean).
The paper's numbers (MNIST): locals 17.6 / 19.2 / 20.4%, AvgLogit 33.1%, AvgProb 44.0%, with the
aggregated models 39.4% and 79.9%.

``compare`` (Fig. 7's setting, scaled): K = 100, R = 10%, E = 3 (``configs/mrtf.yaml``: MLP, local SGD
with momentum 0.9, batch 64), split by Dirichlet alpha 1 and 0.1 and by label with C-bar = 5 and 3
(Fig. 7's four scenes), ``--rounds``
rounds (default 20; the paper runs 200). Methods: FedAvg (= PA), FedProx (mu 0.01), FedMMD (lam 0.1),
SCAFFOLD (with plain local SGD, which its control variates assume), FedAvgM and FedAdam (FedOpt),
MrTF's ablation AL (FedDF's AvgLogit on the test inputs, as the paper runs FedDF in TFL), ST, ST+RD
and MrTF, and MrTF with the authors' code's rules (``configs/mrtf_code.yaml``). Writes ``docs/repro_mrtf.md`` and ``.json``; the paper
gives Fig. 7 and Fig. 11 as plots only, so the table states its ordering.

    python scripts/repro/mrtf.py --only demo
    python scripts/repro/mrtf.py --only compare --seeds 0 1 2 3 4
    python scripts/repro/mrtf.py --only compare --splits "alpha 1" "C-bar 5"   # merged into the saved
    python scripts/repro/mrtf.py --only compare --methods mrtf al fedavg --seeds 0 1 2 3 4
    python scripts/repro/mrtf.py --only compare --family   # the claims' runs, in one call at one commit

The grid runs as a ``fedray sweep`` (``fedray.repro.run_sweep``): one trial per split, method and
seed, as many at once as Ray has CPUs (``--jobs`` caps them), each an ordinary run folder under
``--sweep`` (default ``runs/repro/repro_mrtf/compare``); a stopped grid resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from fedray.assembly import load_data
from fedray.config import load_config
from fedray.distill import aggregate_teachers
from fedray.distill.ensemble import predict_logits
from fedray.distill.refinery import local_share, rectified_target, stabilised_probs
from fedray.models import create_model
from fedray.provenance import source
from fedray.repro import (Store, cpu_model, diverged_text, final_value, grid_arguments, invocation, markdown_table,
                          record_file, report_failed, run_sweep, runs_commit_text, setup_table)
from fedray.training import local_train, set_torch_threads
from fedray.weights import get_weights, set_weights, weighted_mean

ROOT = Path(__file__).resolve().parents[2]
PAPER = {"locals": "17.6 / 19.2 / 20.4", "avg_logit": 33.1, "avg_prob": 44.0, "avg_logit_rectified": 39.4,
         "avg_prob_rectified": 79.9}


def demo(epochs: int, seed: int, lr: float, momentum: float) -> dict:
    config = load_config(ROOT / "configs" / "mrtf.yaml", [
        "federation.num_clients=3", "federation.clients_per_round=3", "federation.architectures={mlp: 3}",
        "data.classes_per_client=2",
        f"training.epochs={epochs}", f"training.lr={lr}", f"training.momentum={momentum}", f"seed={seed}"])
    set_torch_threads(config.runtime.torch_threads or 2)
    data = load_data(config)
    # six of the ten classes, drawn with the seed; each client holds all training samples of two
    classes = np.random.default_rng(seed).permutation(data.num_classes)[:6].reshape(3, 2)
    splits = [np.flatnonzero(np.isin(data.train_y, pair)) for pair in classes]
    x_all, y_all = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
    test_x, test_y = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
    torch.manual_seed(seed)
    model = create_model("mlp", data.input_shape, data.num_classes)
    initial = get_weights(model)
    local, losses = [], []
    for i, idx in enumerate(splits):
        set_weights(model, initial)
        idx = torch.from_numpy(idx)
        stats = local_train(model, x_all[idx], y_all[idx], config.training, torch.Generator().manual_seed(seed + i))
        local.append(get_weights(model))
        losses.append(stats["loss"])
    aggregate = weighted_mean(local, [1, 1, 1])

    def logits_of(weights):
        set_weights(model, weights)
        return predict_logits(model, test_x)

    f_local = torch.stack([logits_of(w) for w in local])
    f_prev, f_new = logits_of(initial), logits_of(aggregate)

    def accuracy(scores):
        return round(100 * float((scores.argmax(dim=1) == test_y).float().mean()), 1)

    skewed = torch.tensor([0.6, 0.3, 0.1])[:, None].expand(3, len(test_y))
    raw = torch.softmax(f_local, dim=-1)
    stable = stabilised_probs(f_local)
    u = local_share(float(np.mean(losses)), data.num_classes)
    out = {
        "locals": [accuracy(f) for f in f_local],
        "classes": [sorted(np.unique(data.train_y[s]).tolist()) for s in splits],
        "local_loss": losses, "u": u, "logit_max": [float(f.max()) for f in f_local],
        "avg_logit": accuracy(aggregate_teachers(f_local, "mean_logits")),
        "avg_prob": accuracy(raw.mean(dim=0)),
        "avg_prob_stabilised": accuracy(stable.mean(dim=0)),
        "avg_logit_skewed": accuracy(aggregate_teachers(f_local, "mean_logits", skewed)),
        "avg_prob_skewed": accuracy((skewed[..., None] * raw).sum(dim=0)),
        "avg_prob_stabilised_skewed": accuracy((skewed[..., None] * stable).sum(dim=0)),
        "aggregate": accuracy(f_new),
        "avg_logit_rectified": accuracy(aggregate_teachers(torch.cat([f_local, f_prev[None], f_new[None]]), "mean_logits")),
        "avg_prob_rectified": accuracy(rectified_target(stable, stabilised_probs(f_prev), stabilised_probs(f_new), u)),
    }
    return out


def demo_page(result: dict) -> str:
    """docs/repro_mrtf_demo.md from what docs/records/repro_mrtf_demo.json holds."""
    r = result
    rows = [["local models", PAPER["locals"], " / ".join(f"{a}" for a in r["locals"])],
            ["AvgLogit, uniform (eq. 3)", f"{PAPER['avg_logit']}", f"{r['avg_logit']}"],
            ["AvgProb, uniform (eq. 4)", f"{PAPER['avg_prob']}", f"{r['avg_prob']}"],
            ["AvgProb of stabilised teachers, uniform (eq. 6-7)", "", f"{r['avg_prob_stabilised']}"],
            ["AvgLogit, weights 0.6 / 0.3 / 0.1", "worse than uniform", f"{r['avg_logit_skewed']}"],
            ["AvgProb, weights 0.6 / 0.3 / 0.1", "stable", f"{r['avg_prob_skewed']}"],
            ["AvgProb of stabilised teachers, weights 0.6 / 0.3 / 0.1", "", f"{r['avg_prob_stabilised_skewed']}"],
            ["aggregated model (FedAvg)", "", f"{r['aggregate']}"],
            ["AvgLogit with the previous and the aggregated model", f"{PAPER['avg_logit_rectified']}",
             f"{r['avg_logit_rectified']}"],
            ["rectified AvgProb (eq. 10)", f"{PAPER['avg_prob_rectified']}", f"{r['avg_prob_rectified']}"]]
    lines = ["# MrTF demo (Fig. 6) on Fashion-MNIST", "",
             f"Three clients with two classes each ({r['classes']}), an MLP trained one round from the same "
             f"initial model ({r['epochs']} local epochs of SGD, lr {r['lr']}, momentum {r['momentum']}, seed {r['seed']}); targets on the 10,000 test inputs. "
             f"Paper: MNIST. Accuracy of each target's argmax, %. Local logit maxima: "
             f"{', '.join(f'{m:.1f}' for m in r['logit_max'])}; u_t = {r['u']:.3f}.", "",
             *markdown_table(["target", "paper (MNIST)", "ours (Fashion-MNIST)"], rows), "",
             f"Written by `scripts/repro/mrtf.py --only demo`; {runs_commit_text([r], 'the demo')}."]
    return "\n".join(lines) + "\n"


SPLITS = {"alpha 1": ["data.partition=dirichlet", "data.alpha=1.0"],
          "alpha 0.1": ["data.partition=dirichlet", "data.alpha=0.1"],
          "C-bar 5": ["data.partition=shards", "data.classes_per_client=5"],
          "C-bar 3": ["data.partition=shards", "data.classes_per_client=3"]}
MRTF = "algorithm={name: mrtf, distill: {optimizer: adam, lr: 0.0003, steps: 500, batch_size: 64}"
METHODS = {"fedavg": ("FedAvg (PA)", ["algorithm={name: fedavg}"]),
           "fedprox": ("FedProx", ["algorithm={name: fedprox, mu: 0.01}"]),
           "fedmmd": ("FedMMD", ["algorithm={name: fedmmd, lam: 0.1}"]),
           "scaffold": ("SCAFFOLD (local momentum 0)", ["algorithm={name: scaffold}", "training.momentum=0"]),
           "fedavgm": ("FedAvgM", ["algorithm={name: fedopt, optimizer: momentum, server_lr: 0.1, beta1: 0.9}"]),
           "fedadam": ("FedAdam", ["algorithm={name: fedopt, optimizer: adam, server_lr: 0.01}"]),
           "al": ("AL (FedDF)", [MRTF + ", teachers: avg_logit, rectify: false, cluster: false}"]),
           "st": ("ST", [MRTF + ", rectify: false, cluster: false}"]),
           "st_rd": ("ST+RD", [MRTF + ", cluster: false}"]),
           "mrtf": ("MrTF (ST+RD+CLR)", [MRTF + "}"]),
           # configs/mrtf_code.yaml's rules: the authors' code, where it differs from the paper
           "mrtf_code": ("MrTF, the authors' code's rules", [
               "algorithm={name: mrtf, tau: 1.0, std: batch, std_batch_size: 320, weights: code, ema: true, "
               "cluster_tau: 8.0, cluster_after: 0, feed_back: false, distill: {optimizer: adam, lr: 0.001, "
               "weight_decay: 0.000001, schedule: cosine, clip_norm: 100, steps: 500, batch_size: 64}}",
               "training.batch_size=32", "training.weight_decay=0.00001"]),
           # which of the code's rules matter: the paper's with the code's broadcast, and the reverse
           "mrtf_nofb": ("MrTF, the paper's rules, plain aggregate broadcast", [MRTF + ", feed_back: false}"]),
           "mrtf_code_fb": ("MrTF, the code's rules, refined model broadcast", [
               "algorithm={name: mrtf, tau: 1.0, std: batch, std_batch_size: 320, weights: code, ema: true, "
               "cluster_tau: 8.0, cluster_after: 0, feed_back: true, distill: {optimizer: adam, lr: 0.001, "
               "weight_decay: 0.000001, schedule: cosine, clip_norm: 100, steps: 500, batch_size: 64}}",
               "training.batch_size=32", "training.weight_decay=0.00001"])}


# the claims (scripts/repro/claims.py), declared before the runs: each MrTF variant against every baseline of
# Fig. 7 that fedray implements, in every scene, on PRIMARY (the final round's accuracy: Fig. 7 plots
# accuracy over the rounds and Table 2 reports the final one). ``--family`` runs exactly these.
PROPOSED = ("mrtf", "mrtf_code")
BASELINES = ("fedavg", "fedprox", "fedmmd", "scaffold", "fedavgm", "fedadam", "al")
PRIMARY = "final"
FAMILY_SEEDS = (0, 1, 2, 3, 4)  # each sets the run's seed and the split's


def key(r: dict) -> str:
    seed = r.get("seed", 0)
    return f"{r['split']}/{r['method']}" + (f"/seed{seed}" if seed else "")


def record(rnd: int, m: dict, config) -> dict:
    return {"round": rnd, "accuracy": m.get("eval/accuracy"), "aggregate": m.get("mrtf/accuracy_aggregate"),
            "targets": m.get("mrtf/accuracy_targets"), "time_s": m["time/round_s"]}


def run_compare(args, rounds: int, splits: list[str], methods: list[str]) -> tuple[dict, list]:
    """The grid as a sweep: every split and method for every seed, a seed setting the run's seed and
    the split's (``seed``, ``data.seed``); returns the finished runs by key, and the failed trials."""
    grid = {"split": {s: SPLITS[s] for s in splits}, "method": {m: METHODS[m][1] for m in methods}}
    done, failed = run_sweep(ROOT / "configs" / "mrtf.yaml", grid, args.seeds, Path(args.sweep) / "compare", record,
                             overrides=[f"federation.rounds={rounds}"], jobs=args.jobs, diverged=True)
    results = [{"split": r.point["split"], "method": r.point["method"], "seed": r.seed, "rounds": rounds,
                "history": r.records, "wall_s": r.wall_s, "provenance": r.summary.get("provenance"),
                **({"diverged": {k: r.summary[k] for k in ("round", "why", "chance")}} if "why" in r.summary else {})}
               for r in done]
    return {key(r): r for r in results}, failed


# the paper's setting beside ours (digest mrtf_fedgen.md, A.10-A.11), and every deviation with its reason
PAPER_SETUP = {"data set": "MNIST, MNIST-M, SVHN, CIFAR-10 (C-bar 5 and 3, alpha 1 and 0.1)", "clients": "100",
               "clients per round": "10", "rounds": "200 (digits)", "model": "the data sets' nets (MLPNet for MNIST)",
               "local training": "sgd, lr from {0.1, 0.05, 0.01}, momentum 0.9, batch 64, 3 epochs",
               "test set": "the whole test set (its inputs are also the refinery's)",
               "distillation": "adam, lr 0.0003, batch 64, 500 steps"}
DEVIATIONS = [("Fashion-MNIST with the MLP instead of the digit sets", "the 2-core budget; configs/paper/ holds the "
               "digit sets at the paper's scale"),
              ("20 rounds instead of 200", "the family's 180 runs fit in about an hour and a quarter on two cores"),
              ("one data set with Fig. 7's four split rules, instead of four data sets", "as above"),
              ("the baselines' hyperparameters (FedProx mu 0.01, FedMMD lambda 0.1, FedAvgM / FedAdam server rates)",
               "the paper gives none; SCAFFOLD runs with plain local SGD, which its control variates assume")]


def family_config():
    """The config of the family's MrTF runs (alpha 1, seed 0): the page's setup."""
    return load_config(ROOT / "configs" / "mrtf.yaml", SPLITS["alpha 1"] + ["federation.rounds=20"] + METHODS["mrtf"][1])


def verdict_lines() -> list[str]:
    from scripts.repro import claims

    return claims.verdict_lines(claims.mrtf_family, "each MrTF variant against each baseline of Fig. 7 in each scene, on "
                                "the final accuracy", "The paper (Fig. 7, plots only) has MrTF best in every scene.")


def compare_page(saved: dict) -> str:
    """docs/repro_mrtf.md from what docs/records/repro_mrtf.json holds."""
    results, calls, rounds = {key(r): r for r in saved["results"]}, saved["invocations"], saved["rounds"]

    def runs_of(split: str, method: str) -> list[dict]:
        return sorted((r for r in results.values() if r["split"] == split and r["method"] == method),
                      key=lambda r: r.get("seed", 0))

    def cell(runs: list[dict]) -> str:
        final = [100 * final_value(r) for r in runs]
        if not final:
            return "n.a."
        text = f"{np.mean(final):.1f} ± {np.std(final, ddof=1):.1f}" if len(final) > 1 else f"{final[0]:.1f}"
        if any(r.get("diverged") for r in runs):
            text += f" ({sum(bool(r.get('diverged')) for r in runs)} diverged)"
        return text if len(final) == len(FAMILY_SEEDS) else f"{text} ({len(final)} seed{'s' if len(final) > 1 else ''})"

    def named(r: dict) -> str:
        return f"{METHODS[r['method']][0]} at {r['split']}, seed {r.get('seed', 0)}"

    family = [*PROPOSED, *BASELINES]
    fam_runs = [r for r in results.values() if r["method"] in family and r.get("seed", 0) in FAMILY_SEEDS]
    rows = [[METHODS[m][0], *(cell(runs_of(s, m)) for s in SPLITS)] for m in family]
    others = [m for m in METHODS if m not in family and any(r["method"] == m for r in results.values())]
    other_rows = [[METHODS[m][0], *(cell(runs_of(s, m)) for s in SPLITS)] for m in others]
    gains = []
    for split in SPLITS:
        d = [h["accuracy"] - h["aggregate"] for r in runs_of(split, "mrtf") for h in r["history"]
             if h.get("aggregate") is not None]
        if d:
            gains.append(f"{split}: {100 * float(np.mean(d)):+.1f} points a round on average")
    lines = ["# MrTF against its baselines on Fashion-MNIST", "", *verdict_lines(),
             "## Setup of the claims' runs", "", *setup_table(family_config(), PAPER_SETUP, DEVIATIONS), "",
             "## Fig. 7's comparison: the claims' runs", "",
             f"Final test accuracy after {rounds} rounds, %, mean ± std over seeds "
             f"{FAMILY_SEEDS[0]}-{FAMILY_SEEDS[-1]} (each the run's seed and the split's); {runs_commit_text(fam_runs, 'the family')}. "
             "FedDF is the paper's TFL FedDF: AvgLogit targets on the test inputs (the ablation's AL).", "",
             *markdown_table(["method", *SPLITS], rows), "",
             *([text, ""] if (text := diverged_text(fam_runs, named)) else []),
             "MrTF's refinement over the round's plain aggregate (refined minus aggregate accuracy, over its runs and "
             "rounds): " + ("; ".join(gains) or "-") + "."]
    if other_rows:
        other_runs = [r for r in results.values() if r["method"] in others]
        lines += ["", "## The ablation (Fig. 11) and variants of the rules", "",
                  f"Final accuracy %, mean ± std over the seeds run; "
                  f"{runs_commit_text(other_runs, 'the ablation')}. Not part of the claims' family.", "",
                  *markdown_table(["method", *SPLITS], other_rows)]
        if text := diverged_text(other_runs, named):
            lines += ["", text]
    lines += ["", "Written by `scripts/repro/mrtf.py --only compare`: "
              + "; ".join(f"{m['runs']} runs ({', '.join(m['methods'] + m.get('splits', [])) or 'all'}"
                          f"{', seeds ' + ' '.join(map(str, m['seeds'])) if m.get('seeds', [0]) != [0] else ''}) in "
                          f"{m['wall_s'] / 60:.1f} min with {m['jobs']} "
                          f"{'trials at once' if m.get('sweep') else 'processes'} on {m['cpu']}"
                          + (f" at commit `{m['commit'][:9]}`" if m.get("commit") else "") for m in calls) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = grid_arguments(__doc__, ["demo", "compare"], ROOT / "docs" / "repro_mrtf")
    parser.add_argument("--epochs", type=int, default=1, help="demo: local epochs")
    parser.add_argument("--seed", type=int, default=0, help="demo: seed")
    parser.add_argument("--lr", type=float, default=0.01, help="demo: local lr (logit maxima 12-14, near the paper's 9-20)")
    parser.add_argument("--momentum", type=float, default=0.0, help="demo: local momentum")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), help="compare: only these (merged into the saved results)")
    parser.add_argument("--splits", nargs="+", choices=list(SPLITS), help="compare: only these (merged into the saved results)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="compare: seeds (merged into the saved results)")
    parser.add_argument("--family", action="store_true",
                        help="compare: the claims' family (PROPOSED and BASELINES, seeds 0-4, every split) in one call")
    args = parser.parse_args()
    if args.family:
        args.methods, args.seeds, args.splits = [*PROPOSED, *BASELINES], list(FAMILY_SEEDS), None
    out = Path(args.out)
    if (not args.only or "demo" in args.only) and not args.plot_only:
        result = {**demo(args.epochs, args.seed, args.lr, args.momentum), "epochs": args.epochs, "seed": args.seed,
                  "lr": args.lr, "momentum": args.momentum, "provenance": source()}
        print(json.dumps(result, indent=2))
        demo_out = out.with_name(out.name + "_demo")
        record_file(demo_out, ".json").write_text(json.dumps(result, indent=2))
        demo_out.with_suffix(".md").write_text(demo_page(result))
    if args.plot_only:  # the compare table again, from the saved results
        out.with_suffix(".md").write_text(compare_page(Store(record_file(out, ".json"), key).read()))
        return
    if not args.only or "compare" in args.only:
        rounds = args.rounds or 20
        start = time.perf_counter()
        store = Store(record_file(out, ".json"), key, header={"rounds": rounds}, match=("rounds",))
        saved = store.read() or {}
        earlier = saved.get("invocations", []) if (args.methods or args.splits or args.seeds != [0]) and saved.get("rounds") == rounds else []
        new, failed = run_compare(args, rounds, args.splits or list(SPLITS), args.methods or list(METHODS))
        results = {**store.load(), **new}
        calls = earlier + [invocation(args, list(new.values()), results, key, start, methods=args.methods or [],
                                      splits=args.splits or [], seeds=args.seeds, sweep=True)]
        store.header = {"rounds": rounds, "invocations": calls}
        store.save(results)
        out.with_suffix(".md").write_text(compare_page({"rounds": rounds, "invocations": calls,
                                                        "results": list(results.values())}))
        report_failed(failed)


if __name__ == "__main__":
    main()
