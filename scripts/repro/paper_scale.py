"""The papers' headline experiments at their own scale, as GPU sweeps (issue 49): every method of each
headline table that fedray implements, in every scene (column) of the table, over 5 seeds that vary
the split, one trial per run, each trial on a fraction of a GPU.

- ``fedaux`` (``configs/paper/fedaux_table1.yaml``): FedAUX Table I, CIFAR-10 with STL-10, 20
  clients, 100 rounds; FedAvg, FedProx, FedDF, FedBE, each with and without +P (SimCLR
  pre-training), and FedAUX; alpha 0.01 and 100 by C = 0.2, 0.4, 0.8. Before the grid, one short
  trial per seed pre-trains that seed's feature extractor into fedray's cache, so the grid's
  trials never pre-train the same model at once.
- ``cfd`` (``configs/paper/cfd_table52.yaml``): thesis Table 5.2's ResNet-18 rows, CIFAR-10 with
  80,000 STL-10 images, 20 clients, 50 rounds; FedAvg, FD, CFD-1-32, CFD_delta-1-32, CFD-1-1,
  CFD_delta-1-1; alpha 100, 1, 0.1.
- ``fedgen`` (``configs/paper/fedgen_table1.yaml``): FedGen Table 1's MNIST rows, 20 users, 200
  rounds; FedAvg, FedProx, FedEnsemble, FedDistill, FedDistill+, FedDFusion, FedGen; alpha 0.05,
  0.1, 1.
- ``mrtf_mnist``, ``mrtf_svhn`` (``configs/paper/mrtf_fig7_*.yaml``): MrTF Fig. 7's MNIST and SVHN
  rows, K = 100, R = 10%, E = 3, 200 rounds; FedAvg, FedProx, FedMMD, SCAFFOLD, FedAvgM, FedAdam,
  FedDF's AvgLogit (AL), MrTF; split by Dirichlet alpha 1 and 0.1 and by label with C-bar 5 and 3.

The methods' overrides are the Fashion-MNIST reproductions' own (``scripts/repro/fedaux.py``,
``repro/distill.py``, ``repro/fedgen.py``, ``repro/mrtf.py``), imported; where a paper states
another value at its scale, it is set here on top: FedAUX's distillation lr 5e-5 (the Fashion-MNIST
grid uses 1e-3) and FedProx's mu tuned per alpha (FedAUX Table 8). What each config follows and
where it departs from its paper is in its opening comment and in docs/paper-scale.md.

Each paper is one ``fedray sweep`` (``fedray.sweeps.sweep``) of its config into ``--out``/<paper>,
an axis of named variants (method and scene) crossed with the seeds; the seeds set the split
(``data.seed``, ``aux.seed``), the initial model and the sampling. A trial runs on the Ray backend in
a placement group of ``--trial-cpus`` CPUs and ``--trial-gpus`` of a GPU, shared equally by its
server actor and its client actors (``runtime.server_gpus``, ``runtime.actor_gpus``). A stopped
sweep resumes where it stopped when run again with the same options.

    python scripts/repro/paper_scale.py --dry-run                            # the trials; no data, no GPU
    python scripts/repro/paper_scale.py --papers fedgen mrtf_mnist           # on a GPU machine
    python scripts/repro/paper_scale.py --papers fedaux --scenes alpha=0.01,C=0.4 --seeds 0 1 2
    python scripts/repro/paper_scale.py --papers cfd --rounds 2 --out runs/paper-timing   # a timing run
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro import distill as repro_distill  # noqa: E402
from scripts.repro import fedaux as repro_fedaux  # noqa: E402
from scripts.repro import fedgen as repro_fedgen  # noqa: E402
from scripts.repro import mrtf as repro_mrtf  # noqa: E402

from fedray.config import RAY_RESOURCE_STEP, ConfigError  # noqa: E402

CONFIGS = ROOT / "configs" / "paper"
SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Paper:
    """One headline experiment: its config, its methods and scenes (each a list of overrides), and
    overrides that depend on both."""

    name: str
    config: Path
    follows: str
    methods: dict[str, list[str]]
    scenes: dict[str, list[str]]
    extra: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (method, scene) -> overrides
    warm_up: Optional[str] = None  # a method whose short trial per seed fills the pre-training cache

    def variants(self, methods: Optional[list[str]] = None, scenes: Optional[list[str]] = None) -> dict[str, list[str]]:
        """``method,scene`` -> its overrides: the scene's, the method's, then the pair's own."""
        return {f"{m},{s}": [*self.scenes[s], *self.methods[m], *self.extra.get((m, s), [])]
                for s in self.scenes if not scenes or s in scenes
                for m in self.methods if not methods or m in methods}


def _fedaux() -> Paper:
    """FedAUX Table I: the reproduction's methods without the authors'-code variant, its distillation
    at the paper's lr, FedProx's mu as Table 8 tuned it for each alpha."""
    paper_distill = repro_fedaux.DISTILL.replace("lr: 0.001", "lr: 5.0e-05")
    assert paper_distill != repro_fedaux.DISTILL
    methods = {m: [o.replace(repro_fedaux.DISTILL, paper_distill) for o in overrides]
               for m, (_, overrides) in repro_fedaux.METHODS.items() if m != "fedaux_code"}
    scenes = {f"alpha={a:g},C={c:g}": [f"data.alpha={a}", f"federation.clients_per_round={round(c * repro_fedaux.NUM_CLIENTS)}"]
              for a in repro_fedaux.ALPHAS for c in repro_fedaux.RATES}
    mu = {("fedprox", 100.0): 1e-3, ("fedprox_p", 100.0): 1e-4}  # Table 8; 1e-2 (the reproduction's) at 0.01
    extra = {(m, s): [f"algorithm.mu={mu[m, a]}"]
             for (m, a) in mu for s in scenes if s.startswith(f"alpha={a:g},")}
    return Paper("fedaux", CONFIGS / "fedaux_table1.yaml", "FedAUX (TNNLS 2021) Table I", methods, scenes, extra,
                 warm_up="fedaux")


def _cfd() -> Paper:
    methods = {m: list(overrides) for m, (_, overrides) in repro_distill.METHODS52.items()}
    scenes = {f"alpha={a:g}": [f"data.alpha={a}"] for a in repro_distill.ALPHAS52}
    return Paper("cfd", CONFIGS / "cfd_table52.yaml", "thesis Table 5.2 (CFD), ResNet-18 rows", methods, scenes)


def _fedgen() -> Paper:
    methods = {m: list(repro_fedgen.METHODS[m][1]) for m in (*repro_fedgen.BASELINES, "fedgen")}
    scenes = {f"alpha={a:g}": [f"data.alpha={a}"] for a in repro_fedgen.ALPHAS}
    return Paper("fedgen", CONFIGS / "fedgen_table1.yaml", "FedGen (ICML 2021) Table 1, MNIST rows", methods, scenes)


def _mrtf(data: str, row: str) -> Paper:
    methods = {m: list(repro_mrtf.METHODS[m][1]) for m in (*repro_mrtf.BASELINES, "mrtf")}
    scenes = {label.replace(" ", "="): list(overrides) for label, overrides in repro_mrtf.SPLITS.items()}
    return Paper(f"mrtf_{data}", CONFIGS / f"mrtf_fig7_{data}.yaml", f"MrTF Fig. 7, {row} row", methods, scenes)


def papers() -> dict[str, Paper]:
    """Every paper's sweep, by name."""
    return {p.name: p for p in (_fedaux(), _cfd(), _fedgen(), _mrtf("mnist", "MNIST"), _mrtf("svhn", "SVHN"))}


def runtime_overrides(trial_cpus: int, trial_gpus: float) -> list[str]:
    """A trial's server actor and its client actors (one CPU each) share its GPU fraction equally;
    ``trial_gpus`` 0: CPU trials."""
    share = int(trial_gpus / trial_cpus / RAY_RESOURCE_STEP) * RAY_RESOURCE_STEP
    if trial_gpus and share < RAY_RESOURCE_STEP:
        raise ConfigError(f"--trial-gpus {trial_gpus} over {trial_cpus} actors is below Ray's step of "
                          f"{RAY_RESOURCE_STEP:g} a process; give more GPU or fewer --trial-cpus")
    return ["runtime.backend=ray", "runtime.server_cpus=1", "runtime.actor_cpus=1", f"runtime.server_gpus={share:.4f}",
            f"runtime.actor_gpus={share:.4f}", "runtime.server_hosts_clients=false"]


def _arguments(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = list(papers())
    parser.add_argument("--papers", nargs="+", choices=names, default=names, help="which sweeps (default: all)")
    parser.add_argument("--methods", nargs="+", help="only these methods (the variants' first part, e.g. fedaux feddf_p)")
    parser.add_argument("--scenes", nargs="+", help="only these scenes (the variants' second part, e.g. alpha=0.01,C=0.4)")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), help="seeds (default 0-4)")
    parser.add_argument("--rounds", type=int, help="override every trial's rounds (a timing run: use another --out)")
    parser.add_argument("--trial-gpus", type=float, default=0.25,
                        help="GPU fraction of each trial (default 0.25; 0: CPU trials, e.g. for fedgen)")
    parser.add_argument("--trial-cpus", type=int, default=2,
                        help="CPUs of each trial: its server actor and trial-cpus - 1 client actors (default 2)")
    parser.add_argument("--max-concurrent", type=int, help="at most this many trials at once")
    parser.add_argument("--out", default="runs/paper", help="the sweeps' folder: OUT/<paper> (default runs/paper)")
    parser.add_argument("--dry-run", action="store_true", help="print the trials, check their configs, run nothing")
    parser.add_argument("--no-progress", action="store_true", help="no Tune status table")
    args = parser.parse_args(argv)
    if args.trial_cpus < 2:
        parser.error("--trial-cpus must be at least 2: the server actor and one client actor")
    if not 0 <= args.trial_gpus <= 1:
        parser.error("--trial-gpus is a fraction of one GPU, from 0 (CPU trials) to 1")
    return args


def _overrides(args: argparse.Namespace) -> list[str]:
    rounds = [f"federation.rounds={args.rounds}"] if args.rounds else []
    return runtime_overrides(args.trial_cpus, args.trial_gpus) + rounds


def pretrains(paper: Paper, configs: dict) -> bool:
    """Whether the paper's warm-up runs first: it has one, and some chosen variant pre-trains."""
    return paper.warm_up is not None and any(c.pretrain.epochs for c in configs.values())


def dry_run(paper: Paper, variants: dict[str, list[str]], args: argparse.Namespace) -> int:
    """Print the paper's trials and check each variant's config (the schema, and the method and its
    parameters where the config names no code by import path); reads no data, starts nothing."""
    from fedray import api
    from fedray.resolve import resolve
    from fedray.plugins import uses_plugins
    from fedray.sweeps import plan

    base = api.load_config(paper.config, _overrides(args))
    trials = plan({"run": variants}, args.seeds, (), (base.seed, base.init_seed))
    configs = {v: api.load_config(base, o) for v, o in variants.items()}
    for variant, config in configs.items():
        if not uses_plugins(config):
            try:
                resolve(config)
            except ConfigError as err:
                raise ConfigError(f"{paper.name} {variant}: {err}") from None
    f, rt = base.federation, base.runtime
    print(f"{paper.name}: {paper.config.relative_to(ROOT)} ({paper.follows}): {len(paper.methods)} methods, "
          f"{len(paper.scenes)} scenes; {len(variants)} variants x {len(args.seeds)} seeds = {len(trials)} trials "
          f"of {f.rounds} rounds, {base.data.dataset}, {', '.join(f.architectures)}; each trial {args.trial_cpus} CPUs "
          f"and {args.trial_gpus:g} GPU (server {rt.server_gpus:g}, client actors {rt.actor_gpus:g} each)")
    if pretrains(paper, configs):
        print(f"  first: {paper.warm_up} for 1 round per seed ({len(args.seeds)} trials), pre-training each seed's "
              f"feature extractor ({base.pretrain.epochs} epochs) into the cache")
    for t in trials:
        c = configs[t.point["run"]]
        plugin = " (model by import path: built by `fedray check` where it is installed)" if uses_plugins(c) else ""
        split = c.data.alpha if c.data.partition == "dirichlet" else c.data.classes_per_client
        pretrained = ", pre-trained h_0" if c.pretrain.epochs else ""
        print(f"  {t.name}: {c.algorithm.name}{pretrained}, {c.data.partition} {split}, "
              f"{c.federation.clients_per_round}/{c.federation.num_clients} a round, {c.federation.rounds} rounds{plugin}")
    return len(trials)


def run(paper: Paper, variants: dict[str, list[str]], args: argparse.Namespace) -> list[dict]:
    """The paper's sweep (after its pre-training warm-up); prints a line per variant, returns the
    rows of the trials that did not finish."""
    from fedray import api
    from fedray.sweeps import sweep

    out = Path(args.out) / paper.name
    overrides = _overrides(args)
    common = dict(overrides=overrides, trial_cpus=args.trial_cpus, trial_gpus=args.trial_gpus,
                  max_concurrent=args.max_concurrent, progress=not args.no_progress)
    base = api.load_config(paper.config, overrides)
    if pretrains(paper, {v: api.load_config(base, o) for v, o in variants.items()}):
        first, warm = next(iter(paper.variants([paper.warm_up]).items()))
        sweep(paper.config, {"run": {first: [*warm, "federation.rounds=1"]}}, args.seeds, out=out / "pretrain",
              **common)
    result = sweep(paper.config, {"run": variants}, args.seeds, out=out, **common)
    for group in result.groups:
        measures = "; ".join(f"{m.split('_')[0]} {group[m]['mean']:.4f}" for m in ("best_accuracy", "final_accuracy")
                             if m in group)
        print(f"{paper.name} {group['run']}: {len(group['seeds'])} seeds; {measures or 'no finished trial'}", flush=True)
    print(f"{paper.name}: trials in {out / 'sweep.csv'}  (tensorboard --logdir {out / 'trials'})")
    return [row for row in result.rows if row["status"] != "done"]


def main(argv: Optional[list[str]] = None) -> int:
    args = _arguments(argv)
    chosen = [papers()[name] for name in args.papers]
    work = {}
    for paper in chosen:
        variants = paper.variants(args.methods, args.scenes)
        if variants:
            work[paper.name] = (paper, variants)
    if not work:
        print("paper_scale: no paper has those methods and scenes", file=sys.stderr)
        return 2
    try:
        if args.dry_run:
            total = sum(dry_run(paper, variants, args) for paper, variants in work.values())
            print(f"{total} trials in all; nothing was run")
            return 0
        failed = [row for paper, variants in work.values() for row in run(paper, variants, args)]
    except ConfigError as err:
        print(f"paper_scale: error: {err}", file=sys.stderr)
        return 2
    for row in failed:
        print(f"paper_scale: trial {row['trial']} {row['status']}: {row.get('error') or '-'} ({row['run_dir']})",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
