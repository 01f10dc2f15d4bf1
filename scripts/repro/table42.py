"""Thesis Table 4.2 (and Fig. 4.5): megabytes up/down each method needs to reach a target accuracy.

Runs the table's methods (baseline, signSGD, FedAvg n = 25/100/400, STC p = 1/25, 1/100, 1/400) on a
base config with the same budget of local iterations (a FedAvg round with delay n counts n), each
for the whole budget, as ``fedray sweep`` trials (``fedray.repro.run_specs``, ``--sweep``), the MB to a
target read at the first evaluation that reaches it. The test set is checked every
``--eval-every`` iterations (every round for FedAvg with n above that), so MB are read at that
resolution. A seed (``--seeds``) sets the run's seed and the split's (``seed``, ``data.seed``). Writes
docs/repro_table42_<config>.md (our MB to each target beside the paper's Fashion-MNIST column, the
mean over the seeds that reach it where several are saved; it says which targets are the paper's and
which were given with ``--targets``), .json (every evaluation: iterations, accuracy, bytes) and .png
(accuracy against iterations and against upload MB, as in Fig. 4.5). A run with the same config,
budget, evaluation interval, signSGD step as the saved .json merges into it (``--methods`` re-runs a
few methods, ``--seeds`` adds seeds).

The claims (``scripts/repro/claims.py``): each STC variant against every other method of the table, in both
configs, on the MB to each config's target (``FAMILY``). ``--family`` runs exactly their runs, both
configs at seeds 0-4, in one call at one commit.

    python scripts/repro/table42.py configs/repro_thesis_table42_lstm.yaml --budget 3000
    python scripts/repro/table42.py configs/repro_thesis_table42_lstm.yaml --budget 3000 --seeds 1 2
    python scripts/repro/table42.py --family --jobs 2   # the claims' runs, in one call at one commit
    python scripts/repro/table42.py configs/repro_thesis_table42_lstm.yaml --plot-only
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from fedray.config import load_config
from fedray.figures import figure, save_figure
from fedray.provenance import source
from fedray.repro import Store, invocation, listing, markdown_table, record_file, report_failed, run_specs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.pages import runs_line, setup  # noqa: E402

# name: (algorithm, local iterations per round, paper's F-MNIST LSTM MB up / down to 0.89)
METHODS = {
    "Baseline": ("{name: fedavg}", 1, (2422.8, 2422.8)),
    "signSGD": ("{name: signsgd, step: SIGN_STEP}", 1, (123.3, 541.6)),
    "FedAvg n=25": ("{name: fedavg}", 25, (174.7, 174.7)),
    "FedAvg n=100": ("{name: fedavg}", 100, (83.9, 83.9)),
    "FedAvg n=400": ("{name: fedavg}", 400, (86.5, 86.5)),
    "STC p=1/25": ("{name: stc, p_up: 0.04, p_down: 0.04}", 1, (8.8, 88.4)),
    "STC p=1/100": ("{name: stc, p_up: 0.01, p_down: 0.01}", 1, (12.1, 121.2)),
    "STC p=1/400": ("{name: stc, p_up: 0.0025, p_down: 0.0025}", 1, (7.9, 79.1)),
}
PAPER_TARGET = 0.89  # Table 4.2's target; any other comes from --targets
# the thesis's setting of the Fashion-MNIST column (digest thesis.md, sections 3.4-3.5)
PAPER_SETUP = {"data set": "Fashion-MNIST (iid, balanced, 10 classes per client)", "clients": "100",
               "clients per round": "10", "rounds": "a budget of 20,000 iterations (a round of FedAvg n counts n)",
               "model": "LSTM, 2 layers of 128 (216,330 parameters)",
               "local training": "sgd, lr 0.04, momentum 0 or 0.9, batch 20, 1 step a round (FedAvg: n)"}

# the claims (scripts/repro/claims.py), declared before the runs: each STC variant (the thesis's proposal)
# against every other method of Table 4.2, in each config, on PRIMARY: the MB up + down to first reach
# the config's target, compared as log10(MB_B / MB_A) (above zero where A needs less); SECONDARY the
# upload alone. A seed in which either side never reaches the target is left out of that pair.
PROPOSED = ("STC p=1/25", "STC p=1/100", "STC p=1/400")
BASELINES = ("Baseline", "signSGD", "FedAvg n=25", "FedAvg n=100", "FedAvg n=400")
PRIMARY, SECONDARY = "mb_to_target", "mb_up_to_target"
# config (configs/<name>.yaml): (budget of local iterations, target). The thesis's 0.89 is out of reach of
# both budgets; each target is one every method reached within the budget in the seed-0 runs (logistic
# regression: signSGD's best was 0.822; LSTM: STC p=1/400's best was 0.693), so that every claim can be tested.
FAMILY = {"repro_thesis_table42_logreg": (5000, 0.82), "repro_thesis_table42_lstm": (3000, 0.65)}
FAMILY_SEEDS = (0, 1, 2, 3, 4)  # each sets the run's seed and the split


def deviations(saved: dict, config) -> list[tuple[str, str]]:
    """The page's deviations from the thesis's column, with the reason (from its runs where they give it)."""
    model = next(iter(config.federation.architectures))
    out = [(f"a budget of {saved['budget']:,} local iterations per method instead of 20,000",
            "to fit the 2-core machine")]
    if model == "lstm":
        out.append(("PyTorch's standard 2x128 LSTM with a linear head, 214,282 parameters",
                    "the thesis does not describe its variant with 216,330 parameters"))
    else:
        out.append((f"{model} instead of the LSTM", "a cheap stand-in that checks the ordering of the methods and "
                                                   "the byte accounting"))
    out.append(("no momentum", "the thesis's default; its one-step methods cannot carry local momentum"))
    results = saved["results"]
    if not any(first_reaching(r["evals"], PAPER_TARGET) for r in results):
        top = max(e["accuracy"] for r in results for e in r["evals"])
        out.append((f"targets below {PAPER_TARGET}", f"no method reaches {PAPER_TARGET} within the budget (the best "
                                                    f"accuracy: {top:.3f})"))
    return out


def specs(sign_step: float, budget: int, eval_every: int, methods: list[str], seeds=(0,)) -> list[dict]:
    """Each method at each seed with the budget of local iterations (a round of delay n counts n); the
    sweep sets a seed's run and split (``seed``, ``data.seed``)."""
    out = []
    for seed in seeds:
        for name in methods:
            algorithm, steps, _ = METHODS[name]
            out.append({"method": name, "seed": seed,
                        "overrides": [f"algorithm={algorithm.replace('SIGN_STEP', str(sign_step))}",
                                      f"training.steps={steps}", f"federation.rounds={max(budget // steps, 1)}",
                                      f"federation.eval_every={max(1, eval_every // steps)}"]})
    return out


def key(r: dict) -> tuple[str, int]:
    """A result's identity: its method and seed (runs saved before seeds were kept are seed 0)."""
    return r["method"], r.get("seed", 0)


def record(rnd: int, m: dict, config) -> dict | None:
    """An evaluation: iterations, accuracy, MB up/down in total (None for a round without one)."""
    if "eval/accuracy" not in m:
        return None
    return {"iterations": rnd * config.training.steps, "accuracy": m["eval/accuracy"],
            "mb_up": m["comm/bytes_up_total"] / 1e6, "mb_down": m["comm/bytes_down_total"] / 1e6}


def run(config: Path, todo: list[dict], sweep: Path, jobs: int | None) -> tuple[dict, list]:
    """The methods as a sweep of ``config``: every evaluation of each, its seed and its commit; and the
    failed trials."""
    done, failed = run_specs(config, todo, lambda s: s["method"], sweep, record, jobs=jobs)
    results = [{"method": spec["method"], "seed": spec["seed"], "evals": r.records,
                "clients_per_round": r.config.federation.clients_per_round, "wall_s": r.wall_s,
                "provenance": r.summary.get("provenance")} for spec, r in done]
    return {key(r): r for r in results}, failed


def first_reaching(evals: list[dict], target: float) -> dict | None:
    return next((e for e in evals if e["accuracy"] >= target), None)


def provenance(targets: list[float], config: str = "") -> str:
    """Which targets are the paper's, which the claims' family's and which were given on the command line."""
    family = FAMILY.get(Path(config).stem, (None, None))[1]
    given = [f"{t}" for t in targets if t not in (PAPER_TARGET, family)]
    parts = [f"{PAPER_TARGET} is the paper's"] if PAPER_TARGET in targets else []
    if family in targets:
        parts.append(f"{family} the claims' (`--family`; reproductions.md's claims table)")
    if given:
        parts.append(f"{listing(given)} {'were' if len(given) > 1 else 'was'} given on the command line (`--targets`)")
    return "Targets: " + "; ".join(parts) + "."


def by_method(results: list[dict]) -> dict[str, list[dict]]:
    """The saved results of each method of the table, in seed order."""
    return {m: sorted((r for r in results if r["method"] == m), key=key) for m in METHODS
            if any(r["method"] == m for r in results)}


def seeds_of(results: list[dict]) -> list[int]:
    return sorted({r.get("seed", 0) for r in results})


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def row(name: str, runs: list[dict], targets: list[float], slots: int) -> list[str]:
    """A method's cells: MB up / down to each target (the mean over the seeds that reach it, and how many
    did, where several seeds are saved), its best accuracy (the mean of each seed's), the paper's."""
    cells = []
    for t in targets:
        first = [e for r in runs if (e := first_reaching(r["evals"], t))]
        up, down, it = (mean(e[k] for e in first) for k in ("mb_up", "mb_down", "iterations")) if first else (0, 0, 0)
        cells.append((f"{up:.1f} / {down:.1f} ({up / slots:.2f} / {down / slots:.2f}; {it:.0f} it."
                      + (f"; {len(first)} of {len(runs)} seeds)" if len(runs) > 1 else ")")) if first else
                     "n.a." if len(runs) == 1 else f"n.a. (0 of {len(runs)} seeds)")
    best = mean(max((e["accuracy"] for e in r["evals"]), default=math.nan) for r in runs)
    paper = METHODS[name][2]
    return [name, f"{best:.4f}", *cells, f"{paper[0]} / {paper[1]}"]


def verdict_lines() -> list[str]:
    """What holds of Table 4.2's family (``scripts/repro/claims.py``: both configs), beside the thesis's column."""
    from scripts.repro import claims

    less = sum(sum(METHODS[a][2]) < sum(METHODS[b][2]) for a in PROPOSED for b in BASELINES)
    return claims.verdict_lines(claims.table42_family, "each STC variant against every other method of the table in "
                                "both configs, on the MB up and down to the target", "In the thesis's Fashion-MNIST "
                                f"column an STC variant needs fewer MB up and down to {PAPER_TARGET} than the other "
                                f"method in {less} of these {len(PROPOSED) * len(BASELINES)} comparisons.", digits=2)


def page(saved: dict) -> str:
    """docs/repro_table42_<config>.md from what its .json holds."""
    targets, results = saved["targets"], by_method(saved["results"])
    slots = saved["results"][0]["clients_per_round"]
    seeds = seeds_of(saved["results"])
    several = (f" Seeds {', '.join(map(str, seeds))}, each the run's seed and the split's: a cell is the mean over the "
               "seeds that reach the target, with how many did, and the best accuracy the mean of each seed's."
               if len(seeds) > 1 else "")
    lines = [f"# Thesis Table 4.2, our run of `{saved['config']}`", "", *verdict_lines(),
             f"Budget {saved['budget']} local iterations per method, test accuracy every "
             f"{saved['eval_every']} iterations, signSGD step {saved['sign_step']}. Cells: MB up / down to reach the "
             f"target, summed over all clients, then in brackets per client slot (the total divided by the "
             f"{slots} clients of a round) and the iterations it took.{several} Paper: Fashion-MNIST LSTM column, "
             f"target {PAPER_TARGET}. {provenance(targets, saved['config'])}", ""]
    header = ["method", "best acc."] + [f"to {t}" for t in targets] + [f"paper @{PAPER_TARGET} up / down"]
    rows = [row(name, runs, targets, slots) for name, runs in results.items()]
    config, overrides = ROOT / saved["config"], specs(saved["sign_step"], saved["budget"], saved["eval_every"],
                                                      ["Baseline"])[0]["overrides"]
    setup_lines = (["## Setup", "", f"`{saved['config']}` as the baseline runs it (`{' '.join(overrides)}`); the other "
                    "methods change the algorithm and, for FedAvg n, the steps a round and the rounds. The paper "
                    "column is the thesis's Fashion-MNIST LSTM column.", ""]
                   + setup(config, overrides, PAPER_SETUP, deviations(saved, load_config(config, overrides))))
    return "\n".join(lines + setup_lines + ["## Results", ""] + markdown_table(header, rows)
                     + runs_line(saved["results"], saved["config"])) + "\n"


def write_outputs(saved: dict, out: Path) -> None:
    """The page, and the figure of each method's first seed."""
    targets, results = saved["targets"], by_method(saved["results"])
    slots = saved["results"][0]["clients_per_round"]
    out.with_suffix(".md").write_text(page(saved))
    fig, (left, right) = figure(1, 2, figsize=(12, 4.5), sharey=True)
    for name, runs in results.items():
        evals = runs[0]["evals"]
        acc = [e["accuracy"] for e in evals]
        left.plot([e["iterations"] for e in evals], acc, label=name)
        right.plot([e["mb_up"] / slots for e in evals], acc, label=name)
    for t in targets:
        for ax in (left, right):
            ax.axhline(t, color="grey", lw=0.6, ls="--")
    left.set(xlabel="local iterations", ylabel="test accuracy")
    right.set(xscale="log", xlabel="MB uploaded per client slot (log)")
    right.legend(fontsize=8, loc="lower right")
    seeds = seeds_of(saved["results"])
    save_figure(fig, record_file(out, ".png"), dpi=110, title=f"Table 4.2 / Fig. 4.5 scaled: {saved['config']}"
                + (f", seed {seeds[0]}" if len(seeds) > 1 else ""))


def table(args: argparse.Namespace, config: str, budget: int, methods: list[str], seeds: list[int],
          targets: list[float] | None, sweep: Path, extra: tuple[float, ...] = ()) -> list:
    """One call's runs of ``config`` (a path from the working folder or the repository's root), merged
    into its saved .json, and its page. Its targets: ``targets``, else the saved page's, else the
    paper's; with ``extra`` (the claims' target). Returns the failed trials."""
    out = args.out / f"repro_table42_{Path(config).stem}"
    header = {"config": config, "budget": budget, "eval_every": args.eval_every, "sign_step": args.sign_step}
    store = Store(record_file(out, ".json"), key=key, header=header, match=tuple(header))
    saved = store.read() or {}
    same = all(saved.get(k) == v for k, v in header.items())
    if args.plot_only:
        write_outputs({**saved, "targets": sorted(targets or saved["targets"])}, out)
        return []
    header["targets"] = sorted({*(targets or (saved.get("targets") if same else None) or [PAPER_TARGET]), *extra})
    start = time.perf_counter()
    path = Path(config) if Path(config).exists() else ROOT / config
    new, failed = run(path, specs(args.sign_step, budget, args.eval_every, methods, seeds), sweep, args.jobs)
    for r in new.values():
        print(f"{r['method']:13} seed {r['seed']}: best {max(e['accuracy'] for e in r['evals']):.4f} in "
              f"{r['evals'][-1]['iterations']} it., {r['evals'][-1]['mb_up']:.1f} MB up in all")
    results = {**store.load(), **new}
    call = invocation(argparse.Namespace(only=None, rounds=None, jobs=args.jobs), list(new.values()), new, key, start,
                      methods=methods, seeds=list(seeds), family=args.family, sweep=True)
    store.header = {**header, "invocations": (saved.get("invocations", []) if same else []) + [call]}
    store.save(results)
    write_outputs({**store.header, "results": list(results.values())}, out)
    print(f"wrote {out}.md, .json and .png")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, nargs="?", help="the base config (with --family: only its part of the "
                                                             "family; default: every config of FAMILY)")
    parser.add_argument("--targets", type=float, nargs="+",
                        help=f"accuracies to report MB for (default: the saved page's, else {PAPER_TARGET}, the "
                             f"paper's); with --plot-only, the targets of the redrawn table")
    parser.add_argument("--budget", type=int, help="local iterations per method (default 20000; --family: FAMILY's)")
    parser.add_argument("--eval-every", type=int, default=50, help="iterations between test evaluations")
    parser.add_argument("--sign-step", type=float, default=0.0002, help="signSGD's delta (thesis: 0.0002)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="seeds, each the run's and the split's (merged into the saved results)")
    parser.add_argument("--family", action="store_true",
                        help="the claims' family: every method at seeds 0-4, with FAMILY's budget and target, for "
                             "each config of FAMILY in one call")
    parser.add_argument("--jobs", type=int, help="trials at once (default: one per CPU of Ray)")
    parser.add_argument("--sweep", type=Path, help="the sweep folder (default runs/repro/table42_<config>/budget<N>; "
                                                   "--family: <sweep>/<config>, default .../family-<commit>)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder of the .json, .md and .png")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved .json")
    args = parser.parse_args()
    failed = []
    if args.family:
        stems = [args.config.stem] if args.config else list(FAMILY)
        if any(s not in FAMILY for s in stems):
            parser.error(f"--family runs {listing(FAMILY)}, not {args.config}")
        commit = (source()["commit"] or "none")[:9]
        for stem in stems:
            budget, target = FAMILY[stem]
            sweep = args.sweep / stem if args.sweep else Path("runs") / "repro" / f"table42_{stem}" / f"family-{commit}"
            failed += table(args, f"configs/{stem}.yaml", budget, [m for m in METHODS if m in (*PROPOSED, *BASELINES)],
                            list(FAMILY_SEEDS), args.targets, sweep, (target,))
    else:
        if args.config is None:
            parser.error("give a config, or --family")
        budget = args.budget or 20000
        sweep = args.sweep or Path("runs") / "repro" / f"table42_{args.config.stem}" / f"budget{budget}"
        failed = table(args, str(args.config), budget, args.methods, args.seeds, args.targets, sweep)
    report_failed(failed)


if __name__ == "__main__":
    main()
