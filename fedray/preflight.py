"""What is checked before a run starts, before its folder is made or Ray is started; each problem is
one :class:`ConfigError` line naming the key, the value and what to do.

- the data: its files are there and whole, their labels in range (``check_dataset``), and its
  training samples, less those carved out as auxiliary data and cut to ``data.train_limit``, give
  every client a sample (and every shard of ``partition: shards``); the sizes come from file
  headers or known counts;
- the run folder: it can be made where it is asked for (nothing is created to find out), and a
  new run does not write into an old one;
- a resume: the checkpoint is intact, unedited, of this config and data only (``check_resume``),
  and a folder that shows progress without a checkpoint is never started over unasked.
What a backend checks besides (for Ray: a cluster answers, the actors fit) is the backend's own
``check`` (``fedray.backends``). This module imports neither torch nor Ray, unless the config names
models of the user's (:func:`check_models` builds them once).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from fedray.checkpoint import CHECKPOINT, LEGACY_CHECKPOINT
from fedray.config import Config, ConfigError, _path_setting, shown
from fedray.plugins import uses_plugins


def check_data(config: Config) -> None:
    """The data set's files (and the auxiliary data set's) are there and whole, and the split can be made."""
    from fedray.data import check_dataset
    from fedray.data.auxiliary import aux_source

    check_dataset(config.data.dataset, config.data.root, **config.data.options)
    if config.aux.size and config.aux.dataset is not None:
        aux_source(check_dataset, config.aux.dataset, config.aux.root, **config.aux.options)
    check_partition(config)
    if uses_plugins(config):  # the config's own models: built once for the data (this imports torch)
        check_models(config)


def check_models(config: Config) -> None:
    """Build each of the config's own architectures once for the data's input shape and classes (the
    data set is loaded to learn them): a function that fails or returns no model, or options it cannot
    take, is one ConfigError line before anything is created. Built-in models need no such check here."""
    from fedray.plugins import first_line, is_import_path

    archs = [a for a in config.federation.architectures if is_import_path(a)]
    if not archs:
        return
    from fedray.data import load_dataset
    from fedray.models import create_model

    d = config.data
    bundle = load_dataset(d.dataset, d.root, **d.options)
    for arch in archs:
        options = config.federation.model_options.get(arch, {})
        try:
            create_model(arch, bundle.input_shape, bundle.num_classes, **options)
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever the user's model raises: one line
            raise ConfigError(f"bad config value federation.architectures: model {arch!r} with options {options} "
                              f"cannot be built for inputs of shape {tuple(bundle.input_shape)} and "
                              f"{bundle.num_classes} classes: {type(err).__name__}: {first_line(err)}") from None


def training_samples(config: Config) -> tuple[int, str]:
    """The number of training samples the clients share (as ``fedray.federation.load_data`` leaves
    them), and where it comes from, e.g. ``"fashion_mnist has 60000, less aux.size = 500"``."""
    from fedray.data import train_size

    d, a = config.data, config.aux
    n = train_size(d.dataset, d.root, **d.options)
    how = f"{d.dataset} has {n}"
    if a.size and a.dataset is None:
        if a.size >= n:
            raise ConfigError(f"bad config value aux.size = {a.size}: the training set of {d.dataset} has only "
                              f"{n} samples, and the clients need some")
        n -= a.size
        how += f", less aux.size = {a.size}"
    elif a.size:
        available = train_size(a.dataset, a.root, **a.options)
        if a.size > available:
            raise ConfigError(f"bad config value aux.size = {a.size}: the auxiliary data set {a.dataset} has only "
                              f"{available} samples")
    if d.train_limit is not None and d.train_limit < n:
        n = d.train_limit
        how += f", cut to data.train_limit = {n}"
    return n, how


def check_partition(config: Config) -> None:
    """Every client gets a sample, and with ``partition: shards`` every shard does: checked on the
    sample count alone, before any per-client list is made (``num_clients`` may be huge)."""
    from fedray.data.partition import check_split

    d, clients = config.data, config.federation.num_clients
    n, how = training_samples(config)
    if clients > n:
        raise ConfigError(f"bad config value federation.num_clients = {clients}: more clients than the {n} training "
                          f"samples ({how}); use at most {n} clients")
    shards = clients * d.classes_per_client
    if d.partition == "shards" and shards > n:
        raise ConfigError(f"bad config value data.classes_per_client = {d.classes_per_client}: partition 'shards' "
                          f"cuts {clients} clients x {d.classes_per_client} = {shards} shards out of {n} training "
                          f"samples ({how}); use at most {n // d.classes_per_client} clients or fewer classes "
                          f"per client")
    if d.partition != "natural":
        try:
            check_split(n, clients, d.partition, d.alpha, d.classes_per_client, d.balancedness)
        except ValueError as err:
            raise ConfigError(f"bad config value federation.num_clients = {clients}: {err}") from None


def check_folder(path: Path, what: str) -> None:
    """``path`` is a folder that can be written, or can be made: its nearest existing ancestor is a
    writable folder. Nothing is created. ``what`` names the setting in the message."""
    path = Path(os.path.abspath(path))
    try:
        _path_setting(str(path))
    except ValueError as err:  # "File name too long" from every call below
        raise ConfigError(f"run folder {shown(str(path))}: {err}; name a shorter one") from None
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what}: {existing} is a file, not a folder; name a folder to write the run in")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {existing} is not writable; name a folder you can write to")


def check_new_run_dir(run_dir: Path, what: str) -> None:
    """``run_dir`` can be made or written, and holds no run that a new one would overwrite."""
    check_folder(run_dir, what)
    held = [name for name in (CHECKPOINT, LEGACY_CHECKPOINT) if (Path(run_dir) / name).exists()]
    if held:
        raise ConfigError(f"{what}: {run_dir} already holds a run ({held[0]}); continue it with "
                          f"`fedray resume {run_dir}` or name another folder")
    if (Path(run_dir) / "config.yaml").exists():
        raise ConfigError(f"{what}: {run_dir} already holds a run that stopped before its first checkpoint; "
                          f"start it again with `fedray resume {run_dir} --restart` or name another folder")


def progress(run_dir: Path) -> list[str]:
    """What a run folder shows of a run's progress, in words: its ``result.json``, the rounds its
    event files logged (pre-training's epochs and round 0 aside), its checkpoint. Empty for a run
    that stopped before its first round ended."""
    from fedray.checkpoint import checkpoint_file

    run_dir = Path(run_dir)
    shown_progress = []
    if (run_dir / "result.json").exists():
        shown_progress.append("result.json")
    if any(run_dir.glob("events.out.tfevents.*")):
        from fedray.tracking import read_scalars

        try:
            steps = {step for tag, series in read_scalars(run_dir).items() if not tag.startswith("pretrain/")
                     for step, _ in series if step >= 1}
        except ValueError:  # event files that cannot be read still show that the run went somewhere
            steps = set()
            shown_progress.append("event files")
        if steps:
            shown_progress.append(f"rounds {min(steps)}-{max(steps)} in its event files" if len(steps) > 1
                                  else f"round {min(steps)} in its event files")
    path = checkpoint_file(run_dir)
    if path.exists():
        shown_progress.append(path.name)
    return shown_progress


def check_resume(run_dir: Path, config: Config, rounds_given: bool = False, restart: bool = False) -> Optional[int]:
    """The round a resume of ``run_dir`` with ``config`` starts from: its checkpoint's (intact,
    written with this config), or None when the run starts again from round 1: with ``restart``
    (the caller discards what the folder holds), or for a run that stopped before its first round
    ended. A folder that shows progress (``progress``) but holds no checkpoint is refused: a resume
    never starts a run over on its own. Refused too when ``federation.rounds`` would not take the
    run past the checkpoint, unless the checkpoint is of the last round and the run has no
    ``result.json`` (it stopped before writing it: the resume only finishes it); ``rounds_given``:
    the count came from ``--rounds``."""
    from fedray.checkpoint import CheckpointError, checkpoint_file, verify_checkpoint

    if not (Path(run_dir) / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a fedray run folder: {Path(run_dir) / 'config.yaml'} is missing")
    if restart:
        return None
    if not checkpoint_file(run_dir).exists():
        shows = progress(run_dir)
        if shows:
            raise ConfigError(f"{run_dir} holds no checkpoint ({CHECKPOINT}) but shows a run's progress "
                              f"({', '.join(shows)}): there is nothing to resume from, and nothing was changed; "
                              f"`fedray resume {run_dir} --restart` runs it again from round 1 and discards that")
        return None
    try:
        saved = verify_checkpoint(run_dir, config.to_dict())
    except CheckpointError as err:
        raise ConfigError(str(err)) from None
    rounds = config.federation.rounds
    if rounds_given and rounds < saved:
        raise ConfigError(f"--rounds {rounds} is below round {saved} of the checkpoint in {run_dir}: a resume only "
                          f"extends a run; give --rounds {saved + 1} or more")
    if saved == rounds and not (Path(run_dir) / "result.json").exists():
        return saved  # it stopped after its last round's checkpoint, before its summary: the resume finishes it
    if saved >= rounds:
        raise ConfigError(f"the run in {run_dir} is already at round {saved}: extend it with --rounds {saved + 1} "
                          f"or more")
    return saved
