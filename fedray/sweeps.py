"""``fedray sweep``: a grid of fedray runs over seeds, run concurrently by Ray Tune on whatever Ray is
there (a local one it starts, ``runtime.address``/``RAY_ADDRESS``, or the cluster of a ``ray job
submit``), one trial per run.

    result = fedray.sweep("configs/quickstart.yaml", {"algorithm.name": ["fedavg", "fedprox"]},
                          seeds=range(5), out="sweeps/prox")
    result.rows        # one per trial: its overrides, seed, status, final and best accuracy
    result.groups      # one per grid point: mean and 95% interval over the seeds (fedray.stats)

Each trial is an ordinary run into ``OUT/trials/<name>`` (its own event files, with the config as
hparams, so ``tensorboard --logdir OUT/trials`` shows the trials side by side in HPARAMS). The
trials run on the Ray backend's sweeper (``actors.sweep``, named in ``fedray.backends``): Tune
reserves a placement group per trial, bundle 0 for the server actor and one bundle per client
actor, and the trial's actors start inside those bundles, so concurrent trials never share CPUs.
``trial_cpus`` sets a trial's size (default: one client actor's, with the server hosting all
clients: as many trials at once as the cluster has CPUs). This module plans, checks and sums up;
it imports neither Ray nor the backend.

Seeds. A seed sets the split (``data.seed``, ``aux.seed``), the initial model (``init_seed``, which
follows ``seed`` unless set) and the sampling (``seed``: the clients of each round, the batch order
and the rest of the run's randomness). ``hold`` keeps the base config's value of one of them for
every seed: ``"split"`` (comparisons that must see the same clients), ``"init"`` (the same initial
model, the seed then varying sampling and split), ``"sampling"`` (the seed varies the initial model
through ``init_seed``), or ``"run"`` (initial model and sampling both).

A stopped sweep is resumed by running it again with the same ``out``: a trial whose run finished
(``result.json``) or diverged (``diverged.json``, status ``diverged``) is not run again, an
interrupted one resumes from its last checkpoint. A folder grows: the same config with more seeds
or grid values adds their trials beside the finished ones; a trial folder that holds a run of
another config is refused. The table of the call's trials is written to ``OUT/sweep.csv`` and
``OUT/sweep.json`` after every sweep.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import yaml

from fedray.config import Config, ConfigError

HOLDS = ("split", "init", "sampling", "run")
HELD_BY = {"seed": "sampling (or run)", "init_seed": "init (or run)", "data.seed": "split", "aux.seed": "split"}


@dataclass(frozen=True)
class Trial:
    """One run of the sweep: its folder name, the overrides of the base config, and its seed."""

    name: str
    overrides: dict[str, Any]
    point: dict[str, Any]  # the grid point alone (without the seed keys)
    seed: int


def _value_text(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf")).removesuffix("\n...\n").strip()
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "_"


def _variant(axis: str, label: Any, overrides: Any) -> dict[str, Any]:
    """A named variant's overrides as a dict: given as a dict of dotted keys or as ``key=value`` strings
    (values read as YAML, as the CLI reads them)."""
    if isinstance(overrides, Mapping):
        return dict(overrides)
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise ConfigError(f"grid {axis!r}, variant {label!r}: give its overrides as a dict or a list of "
                          f"'key=value' strings, not {overrides!r}")
    items = {}
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise ConfigError(f"grid {axis!r}, variant {label!r}: {item!r} is not 'key=value'")
        items[key.strip()] = yaml.safe_load(value)
    return items


def seed_overrides(seed: int, hold: Sequence[str] = (), base: tuple[int, Optional[int]] = (0, None)) -> dict[str, int]:
    """What a sweep's ``seed`` sets in a trial's config, given what ``hold`` keeps of the base config,
    whose ``(seed, init_seed)`` is ``base``: the split's seeds, ``seed`` and ``init_seed``. The
    initial model follows ``seed`` while neither is held, so ``init_seed`` is set only where the two
    must part (or where the base config sets it)."""
    out = {} if "split" in hold else {"data.seed": seed, "aux.seed": seed}
    sampling_held = "run" in hold or "sampling" in hold
    init_held = "run" in hold or "init" in hold
    if not sampling_held:
        out["seed"] = seed
    if init_held and not sampling_held:
        out["init_seed"] = base[0] if base[1] is None else base[1]  # the base's initial model, pinned
    elif not init_held and (sampling_held or base[1] is not None):
        out["init_seed"] = seed
    return out


def plan(grid: Mapping[str, Any], seeds: Iterable[int], hold: Sequence[str] = (),
         base: tuple[int, Optional[int]] = (0, None)) -> list[Trial]:
    """The trials: every combination of the grid's values (keys in the given order), for every seed.

    A grid entry is a config key with a list of its values (``{"training.lr": [0.05, 0.1]}``), or an
    axis of named variants, each a set of overrides (``{"method": {"fedavg": {"algorithm.name":
    "fedavg"}, "scaffold": ["algorithm={name: scaffold}", "training.momentum=0"]}}``): the trial's
    point then holds the variant's name, and its overrides the variant's.

    Each seed's trial gets ``seed_overrides`` (``base``: the base config's ``seed`` and ``init_seed``).

    Raises:
        ConfigError: an empty grid value list, no seeds, an unknown ``hold``, or a grid key (or a
            variant's key) that the seeds set.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("a sweep needs at least one seed")
    unknown = [h for h in hold if h not in HOLDS]
    if unknown:
        raise ConfigError(f"hold {unknown[0]!r} is not one of {', '.join(HOLDS)}")
    # the keys whose value moves with the seed; a held key's base value may be overridden by the grid
    seeded = {k for k, v in seed_overrides(0, hold, base).items() if seed_overrides(1, hold, base)[k] != v}
    axes: dict[str, list[tuple[Any, dict[str, Any]]]] = {}  # per axis: (point value, its overrides)
    for key, values in grid.items():
        if isinstance(values, Mapping) and values:
            axes[key] = [(label, _variant(key, label, o)) for label, o in values.items()]
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"grid {key!r}: give a non-empty list of values (or a dict of named variants), "
                              f"not {values!r}")
        else:
            axes[key] = [(v, {key: v}) for v in values]
        for label, overrides in axes[key]:
            for set_key in overrides:
                if set_key in seeded:
                    where = f"grid {key!r}" if set_key == key else f"grid {key!r}, variant {label!r}, sets {set_key!r}"
                    raise ConfigError(f"{where}: the sweep's seeds set it; give seeds, or hold {HELD_BY[set_key]}")
    trials = []
    for combo in itertools.product(*axes.values()):
        point = {axis: value for axis, (value, _) in zip(axes, combo)}
        overrides = {k: v for _, o in combo for k, v in o.items()}
        for seed in seeds:
            name = ",".join([f"{k}={_value_text(v)}" for k, v in point.items()] + [f"seed={seed}"])
            keys = seed_overrides(seed, hold, base)
            held = {k: v for k, v in keys.items() if k not in seeded}
            trials.append(Trial(name, {**held, **overrides, **{k: keys[k] for k in seeded}}, point, seed))
    return trials


@dataclass
class SweepResult:
    """What a sweep left in ``out``: one row per trial and one group per grid point."""

    out: Path
    rows: list[dict[str, Any]]
    groups: list[dict[str, Any]] = field(default_factory=list)
    hold: list[str] = field(default_factory=list)  # what the seeds did not vary (``plan``)


def _failure(log: Path) -> str:
    """The one line of a run's last failure, from its ``error.log`` (``fedray.runner``)."""
    heads = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("=== fedray run failed ")]
    return re.sub(r"^=== fedray run failed \S+ \S+: ", "", heads[-1]) if heads else f"see {log}"


def _summarise(trials: list[Trial], out: Path, hold: Sequence[str] = ()) -> SweepResult:
    """The table of the trials from their run folders, and per grid point the seeds' mean final and
    best accuracy with 95% intervals; written to ``sweep.csv`` and ``sweep.json``."""
    from fedray.checkpoint import DIVERGED
    from fedray.stats import interval

    rows = []
    for t in trials:
        run_dir = out / "trials" / t.name
        row: dict[str, Any] = {"trial": t.name, **t.point, "seed": t.seed, "run_dir": str(run_dir)}
        result = run_dir / "result.json"
        if result.exists():
            summary = json.loads(result.read_text())
            row.update(status="done", rounds=summary["rounds"],
                       final_accuracy=summary["final"].get("eval/accuracy"), best_accuracy=summary["best_accuracy"])
        elif (run_dir / DIVERGED).exists():  # a result too: the seeds fix every step, a run again diverges again
            diverged = json.loads((run_dir / DIVERGED).read_text())
            row.update(status="diverged", rounds=diverged["rounds"], error=f"Diverged: {diverged['why']}")
        else:
            log = run_dir / "error.log"
            row.update(status="failed" if log.exists() else "not run", error=_failure(log) if log.exists() else None)
        rows.append(row)
    groups = []
    for point, members in itertools.groupby(rows, key=lambda r: tuple((k, r[k]) for k in trials[0].point)):
        members = [m for m in members if m["status"] == "done" and m["final_accuracy"] is not None]
        group: dict[str, Any] = {**dict(point), "seeds": [m["seed"] for m in members]}
        for measure in ("final_accuracy", "best_accuracy"):
            if members:
                i = interval([m[measure] for m in members])
                group[measure] = {"mean": i.mean, "low": i.low if i.n > 1 else None, "high": i.high if i.n > 1 else None}
        groups.append(group)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    (out / "sweep.json").write_text(json.dumps({"hold": list(hold), "trials": rows, "groups": groups}, indent=2))
    return SweepResult(out, rows, groups, list(hold))


def _other_run(run_dir: Path, config: Config) -> Optional[str]:
    """The first setting in which the run in ``run_dir`` (its ``config.yaml``) differs from ``config``,
    as ``key = saved, not wanted``; None when it agrees or there is no run."""
    from fedray.checkpoint import _flat

    saved_file = run_dir / "config.yaml"
    if not saved_file.exists():
        return None
    saved = yaml.safe_load(saved_file.read_text())
    try:  # a setting added to fedray since that run was saved counts at its default
        saved = Config.model_validate(saved).to_dict()
    except ValueError:
        pass
    saved = _flat(yaml.safe_load(yaml.safe_dump(saved)))
    mine = _flat(yaml.safe_load(yaml.safe_dump(config.to_dict())))
    for key in sorted(set(saved) | set(mine)):
        if saved.get(key, "<unset>") != mine.get(key, "<unset>"):
            return f"{key} = {saved.get(key, '<unset>')!r}, not {mine.get(key, '<unset>')!r}"
    return None


def sweep(source: Union[str, os.PathLike, Mapping, Config], grid: Optional[Mapping[str, Sequence[Any]]] = None,
          seeds: Iterable[int] = (0,), *, out: Union[str, os.PathLike, None] = None, hold: Sequence[str] = (),
          overrides: Any = None, trial_cpus: Optional[float] = None, trial_gpus: float = 0.0,
          max_concurrent: Optional[int] = None, progress: bool = True) -> SweepResult:
    """Run the grid ``grid`` (dotted key -> list of values) of the config ``source`` (with
    ``overrides``) for every seed of ``seeds``, as Ray Tune trials; see the module.

    Raises:
        ConfigError: a bad grid, seed setting or trial config (every trial's config is checked
            before any runs), a trial that does not fit ``trial_cpus``/``trial_gpus``, or a trial
            folder in ``out`` that holds a run of another config.
    """
    from fedray import api, preflight
    from fedray.backends import sweeper
    from fedray.checkpoint import DIVERGED
    from fedray.resolve import resolve

    base = api.load_config(source, overrides)
    trials = plan(dict(grid or {}), seeds, hold, (base.seed, base.init_seed))
    configs = {t.name: api.load_config(base, t.overrides) for t in trials}  # every trial's config is valid
    if base.runtime.backend == "local" and base.runtime.torch_threads is None:
        # a local trial trains in its own process, on the CPUs of its bundle: not the machine's
        threads = max(1, int(trial_cpus or 1))
        configs = {name: api.load_config(c, {"runtime.torch_threads": threads}) for name, c in configs.items()}
    for name, config in configs.items():  # the method and its parameters, as a run resolves them
        try:
            resolve(config)
        except ConfigError as err:
            raise ConfigError(f"trial {name}: {err}") from None
    for config in {c.data.dataset: c for c in configs.values()}.values():
        preflight.check_data(config)
    runner = sweeper()  # the Ray backend's: Ray Tune, a placement group per trial
    resources = {name: runner.trial_bundles(c, trial_cpus, trial_gpus) for name, c in configs.items()}
    out = Path(out if out is not None else Path(base.output_dir) / f"{base.name}-sweep").resolve()
    (out / "trials").mkdir(parents=True, exist_ok=True)
    for t in trials:  # a folder grows by trials; a trial of the same name must be the same run
        problem = _other_run(out / "trials" / t.name, configs[t.name])
        if problem:
            raise ConfigError(f"{out / 'trials' / t.name} holds a run of another config ({problem}): give another "
                              f"out, or the config, grid and hold that made it")
    spec = {"base": base.to_dict(),
            "grid": {k: ({a: _variant(k, a, o) for a, o in v.items()} if isinstance(v, Mapping) else list(v))
                     for k, v in (grid or {}).items()},
            "seeds": sorted({t.seed for t in trials}), "hold": list(hold)}
    (out / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))  # this call's sweep, for the record
    todo = [t for t in trials if not any((out / "trials" / t.name / f).exists() for f in ("result.json", DIVERGED))]
    if todo:
        runner.run_trials(base.runtime, {t.name: configs[t.name] for t in todo}, resources, out, max_concurrent, progress)
    return _summarise(trials, out, hold)


__all__ = ["SweepResult", "Trial", "plan", "sweep"]
