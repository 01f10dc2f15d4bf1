"""The Python API: what ``fedray run``, ``resume`` and ``check`` do, as functions for a script or a
notebook; the CLI (``fedray.cli``) is a thin layer over them that formats their results and errors.

::

    import fedray

    result = fedray.run("configs/quickstart.yaml", {"federation.rounds": 5, "runtime.backend": "local"})
    result.final["eval/accuracy"], result.metrics("eval/accuracy")  # [(1, 0.71), (2, 0.76), ...]
    models = result.models()                                          # {"cnn": <a torch model>}
    fedray.resume(result.run_dir, rounds=10)

A config source is a YAML file's path, a dict of the same shape, or a :class:`fedray.config.Config`;
overrides are a dict of dotted keys (``{"federation.rounds": 5}``, any YAML-able values) or the
CLI's ``"key=value"`` strings. Every source goes through ``fedray.config``'s validation, so a bad
config is the same one-line :class:`~fedray.config.ConfigError` as on the command line.

Errors: :class:`~fedray.config.ConfigError` (one line) for anything found before a run starts, when
nothing has been created; :class:`fedray.runner.RunFailed` (one line, naming ``RUN_DIR/error.log``
and the checkpoint to resume from) for a run that fails later. As on the command line, a run prints
its run folder and notes to stderr and draws a progress bar (a widget in a Jupyter notebook).

Importing this module imports no torch: the driver of a Ray run holds no model (the server actor
resolves a built-in method); :meth:`Result.models` and a local run import it when they need it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

import yaml

from fedray import config as _config
from fedray.config import Config, ConfigError, shown
from fedray.runner import RunFailed, run_experiment, vectorize_note

if TYPE_CHECKING:
    import torch

    from fedray.resolve import Method
    from fedray.observers import Observer

Source = Union[str, os.PathLike, Mapping[str, Any], Config]
Overrides = Union[Mapping[str, Any], Sequence[str], None]
DOCUMENT_END = "\n...\n"  # what PyYAML writes after a plain scalar


def load_config(source: Source, overrides: Overrides = None) -> Config:
    """The validated config of ``source`` (a YAML file's path, a dict shaped like the YAML, or a
    Config) with ``overrides`` (``{"federation.rounds": 5}`` or ``["federation.rounds=5"]``) set.

    Raises:
        ConfigError: one line naming the bad key or value, as ``fedray check`` says it.
    """
    items = _override_items(overrides)
    if isinstance(source, (str, os.PathLike)):
        return _config.load_config(source, items)
    if isinstance(source, Config):
        source = source.to_dict()
    if not isinstance(source, Mapping):
        raise ConfigError(f"a config is a YAML file's path, a dict or a fedray.config.Config, not a "
                          f"{type(source).__name__}")
    return _config.build_config(_config.apply_overrides(dict(source), items))


def _override_items(overrides: Overrides) -> list[str]:
    """Overrides as the CLI's ``key=value`` strings: a dict's values written as YAML, which
    ``fedray.config`` reads back as the same values, so both kinds are applied by one code path."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        raise ConfigError(f"overrides are a dict {{'federation.rounds': 5}} or a list of 'key=value' strings, not "
                          f"one string: give [{shown(overrides)}]")
    if not isinstance(overrides, Mapping):
        return [str(item) for item in overrides]
    items = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key or "=" in key:
            raise ConfigError(f"override key {shown(key)} is not a dotted config key, e.g. 'federation.rounds'")
        try:
            text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
        except yaml.YAMLError:
            raise ConfigError(f"override {shown(key)}: {shown(value)} is not a config value (give a str, number, "
                              f"bool, None, or a list or dict of them)") from None
        items.append(f"{key}={text.removesuffix(DOCUMENT_END).strip()}")
    return items


def check(source: Source, overrides: Overrides = None) -> Config:
    """Everything ``fedray check`` checks, creating nothing: the config, its method and parameters,
    the data set's files and split, the default run folder (``output_dir``), and what the backend
    checks (for Ray: the cluster answers, the actors fit). Returns the config; prints to stderr
    the note a run would print when the method refuses ``runtime.vectorize``.

    Raises:
        ConfigError: the first problem, in one line.
    """
    config = load_config(source, overrides)
    method, _ = _preflight(config, "check")
    note = vectorize_note(config, method.cohort_refusal)
    if note:
        print(f"fedray: note: {note}", file=sys.stderr)
    return config


def run(source: Source, overrides: Overrides = None, *, run_dir: Union[str, os.PathLike, None] = None,
        progress: bool = True, observers: Sequence[Observer] = ()) -> Result:
    """Run an experiment, as ``fedray run`` does: checked first (as :func:`check`), then run into
    ``run_dir`` (default: a new ``OUTPUT_DIR/NAME-TIMESTAMP``) to ``federation.rounds``.

    Args:
        source, overrides: the config, as :func:`load_config` takes them.
        run_dir: the run folder; it must not hold a run already.
        progress: draw a progress bar (a widget in a notebook).
        observers: the user's own observers of the round loop (``fedray.observers``).

    Raises:
        ConfigError: a problem found before the run starts; nothing was created.
        RunFailed: the run failed or was interrupted (one line: why, ``error.log``, how to resume).
    """
    config = load_config(source, overrides)
    chosen = Path(run_dir) if run_dir is not None else None
    method, folder = _preflight(config, "run", chosen)
    return _start(config, folder, method, resume=False, progress=progress, observers=observers,
                  fresh=chosen is None)


def resume(run_dir: Union[str, os.PathLike], *, rounds: Optional[int] = None, progress: bool = True,
           observers: Sequence[Observer] = (), restart: bool = False) -> Result:
    """Continue a run from its last checkpoint with its own ``config.yaml``, as ``fedray resume``
    does; ``rounds`` extends it to that many rounds (not below the checkpoint's round). A run that
    stopped before its first round ended starts again from round 1; a folder that shows a run's
    progress but holds no checkpoint is refused, unless ``restart``: then the run starts again
    from round 1 in its folder, discarding its checkpoint, ``result.json`` and the rounds its event
    files logged (a line on stderr says which). A config that names the user's code (import paths)
    is code: a line on stderr names what will be imported before anything is. Raises as :func:`run`."""
    run_dir = Path(run_dir)
    config = _guarded(_resume_config, run_dir, rounds, restart)
    announce_plugins(config, f"resuming {run_dir}")
    method, _ = _preflight(config, "resume", run_dir)
    if restart:
        from fedray.preflight import progress as shown_progress

        shows = shown_progress(run_dir)
        print(f"fedray: --restart: running {run_dir} again from round 1"
              + (f", discarding {', '.join(shows)}" if shows else ""), file=sys.stderr)
    return _start(config, run_dir, method, resume=True, progress=progress, observers=observers, fresh=False,
                  restart=restart)


@dataclass
class Result:
    """A finished run, read from its folder when asked (``Result.load`` opens any finished run).

    Attributes:
        run_dir: the run folder.
        summary: what ``result.json`` holds (``final``, ``best_accuracy``, ``rounds``, the method's own keys).
    """

    run_dir: Path
    summary: dict[str, Any] = field(repr=False)

    @classmethod
    def load(cls, run_dir: Union[str, os.PathLike]) -> Result:
        """The result of the finished run in ``run_dir`` (its ``result.json``); ValueError (one line)
        when there is none."""
        path = Path(run_dir) / "result.json"
        try:
            return cls(Path(run_dir), json.loads(path.read_text()))
        except OSError as err:
            raise ValueError(f"{path} cannot be read ({err.strerror or err}): name the folder of a finished run") \
                from None

    @property
    def final(self) -> dict[str, float]:
        """The last evaluated round's ``eval/*`` metrics (``result.json``'s ``final``)."""
        return self.summary["final"]

    @cached_property
    def history(self) -> dict[str, list[tuple[int, float]]]:
        """Every scalar the run logged, ``{tag: [(round, value), ...]}``: read from its TensorBoard
        event files (``fedray.tracking.read_scalars``; a resumed round counts once), with each
        round's scalars as the run computed them (float64, ``history.json``) where it wrote them:
        the event files keep float32, so only the preparation's and pre-training's values, which
        no round holds, are float32 roundings."""
        from fedray.checkpoint import HISTORY
        from fedray.tracking import read_scalars

        series = {tag: dict(points) for tag, points in read_scalars(self.run_dir).items()}
        path = self.run_dir / HISTORY
        if path.is_file():
            for entry in json.loads(path.read_text()):
                for tag, value in entry.items():
                    if tag != "round":
                        series.setdefault(tag, {})[int(entry["round"])] = float(value)
        return {tag: sorted(points.items()) for tag, points in series.items()}

    def metrics(self, tag: str = "eval/accuracy") -> list[tuple[int, float]]:
        """``[(round, value), ...]`` of one tag, e.g. ``eval/accuracy`` or ``train/loss``, as the run
        computed them (:attr:`history`)."""
        if tag not in self.history:
            raise KeyError(f"{self.run_dir} logged no {tag!r}; its tags: {', '.join(sorted(self.history))}")
        return self.history[tag]

    def models(self) -> dict[str, torch.nn.Module]:
        """The server's final global models from the run's checkpoint (written after the last
        round), each built for the run's data set and in eval mode: ``{arch: model}``.

        That is ``strategy.models``, the models the next round would broadcast, which is what
        ``eval/accuracy`` scores for most methods. The exceptions: ``cfl`` gives one model per
        active cluster, ``{"cluster<v>": model}`` as its ``eval/accuracy/cluster<v>`` tags;
        ``fedensemble`` scores the ensemble of its clients' latest models, here only the averaged
        model (its ``eval/accuracy_global``); ``mrtf`` with ``feed_back: false`` scores its refined
        models, while these are the plain aggregates it broadcasts. The data set is loaded once to
        learn the models' input shape and classes. The checkpoint is read as data (nothing in it
        runs); a config that names the user's code (a data set or model by import path) is code,
        and a line on stderr names what is imported.

        Raises:
            fedray.checkpoint.CheckpointError: the checkpoint is missing, damaged, edited or holds
                anything but data (one line).
        """
        from fedray.checkpoint import checkpoint_file, read_checkpoint
        from fedray.data import load_dataset
        from fedray.models import model_builder
        from fedray.parameter_tree import ParameterTree
        from fedray.weights import set_weights

        config = _config.load_config(self.run_dir / "config.yaml")
        strategy = read_checkpoint(checkpoint_file(self.run_dir))["strategy"]
        announce_plugins(config, f"building the models of {self.run_dir}")
        data = load_dataset(config.data.dataset, config.data.root, **config.data.options)
        build = model_builder(config.federation.model_options, data.input_shape, data.num_classes)
        models = {arch: (arch, values) for arch, values in strategy["models"].items()}
        if "tree" in strategy:  # clustered FL: its clusters' models live in its parameter tree
            tree = ParameterTree([], {})
            tree.load_state_dict(strategy["tree"])
            arch = next(iter(strategy["models"]))
            models = {f"cluster{v}": (arch, values) for v, values in tree.models().items()}
        out = {}
        for name, (arch, values) in models.items():
            model = build(arch)
            set_weights(model, values)
            out[name] = model.eval()
        return out


# -- what run, resume and check share ----------------------------------------------------------------

def _preflight(config: Config, command: str, run_dir: Optional[Path] = None) -> tuple[Optional[Method], Path]:
    """What ``check``, ``run`` and ``resume`` refuse before a run starts, each problem one
    ConfigError line (``fedray.preflight``); returns the method when it is resolved here, and the
    run folder (a new run's default one when ``run_dir`` is None).

    The method is resolved here for ``check``, the local backend and plug-ins; a Ray run of a
    built-in method resolves it in the server actor, so that the driver imports no torch."""
    return _guarded(_checks, config, command, run_dir)


def _checks(config: Config, command: str, run_dir: Optional[Path]) -> tuple[Optional[Method], Path]:
    from fedray import preflight, rundir
    from fedray.backends import backend
    from fedray.plugins import uses_plugins  # the user's own method, models, data or observers

    method = None
    if command == "check" or config.runtime.backend == "local" or uses_plugins(config):
        from fedray.resolve import resolve

        method = resolve(config)
    preflight.check_data(config)
    if command == "resume":
        pass  # checked by ``_resume_config``
    elif run_dir is not None:
        rundir.check_free(run_dir)
        preflight.check_new_run_dir(run_dir, f"--run-dir {run_dir}")
    else:
        run_dir = _default_run_dir(config)
        preflight.check_new_run_dir(run_dir, f"bad config value output_dir = {config.output_dir!r}")
    backend(config.runtime.backend).check(config)  # Ray: the cluster answers, the actors fit
    return method, run_dir


def _guarded(check, *args):
    """``check(*args)``, with what the checks raise besides ConfigError (a missing file, a bad
    value, an unreadable folder) turned into one ConfigError line."""
    try:
        return check(*args)
    except ConfigError:
        raise
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None
    except OSError as err:  # a file or folder the checks read: its name cut
        raise ConfigError(f"{shown(err.filename)}: {err.strerror}") from None


def _default_run_dir(config: Config) -> Path:
    return Path(config.output_dir) / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def announce_plugins(config: Config, doing: str) -> None:
    """One line on stderr naming the user's code the config will have imported (its import paths),
    before any of it is: a run folder's config is code where it names plug-ins."""
    from fedray.plugins import plugin_paths

    named = plugin_paths(config)
    if named:
        print(f"fedray: {doing} imports code its config names: "
              f"{', '.join(f'{key}={shown(path)}' for key, path in named)}", file=sys.stderr)


def _resume_config(run_dir: Path, rounds: Optional[int], restart: bool = False) -> Config:
    """The run's config, with ``rounds``; refused when its checkpoint cannot be resumed from, or
    ``rounds`` would not take the run past the checkpoint's round (``preflight.check_resume``)."""
    from fedray import preflight, rundir

    preflight.check_folder(run_dir, f"run folder {run_dir}")
    rundir.check_free(run_dir)
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a fedray run folder: {path} is missing")
    config = _config.load_config(path, [f"federation.rounds={rounds}"] if rounds is not None else [])
    preflight.check_resume(run_dir, config, rounds_given=rounds is not None, restart=restart)
    return config


def _start(config: Config, run_dir: Path, method: Optional[Method], *, resume: bool, progress: bool,
           observers: Sequence[Observer], fresh: bool, restart: bool = False) -> Result:
    """Run the checked config into ``run_dir``; the folder it ran in (a fresh default one may get a
    numbered suffix) is printed to stderr once the run has started."""
    def announce(folder: Path) -> None:
        nonlocal run_dir
        run_dir = folder
        print(f"fedray: run folder {run_dir}  (tensorboard --logdir {run_dir.parent})", file=sys.stderr)

    summary = run_experiment(config, run_dir, resume=resume, progress=progress, method=method, announce=announce,
                             fresh=fresh, observers=observers, restart=restart)
    return Result(run_dir, summary)


__all__ = ["Config", "ConfigError", "Result", "RunFailed", "check", "load_config", "resume", "run"]
