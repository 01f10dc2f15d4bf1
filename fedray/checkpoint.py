"""The run folder's checkpoint file, readable without torch (the driver checks it before a resume
and reports it after a failure), and data only: reading it never runs code.

The file is a line ``FEDRAY-CHECKPOINT``, a one-line JSON header and the state as a data file
(``fedray.datafile``: a JSON line, then the arrays' bytes)::

    FEDRAY-CHECKPOINT
    {"body_bytes": "...", "config": {...}, "format": 3, "round": 7, "sha256": "..."}
    {"tree": ..., "arrays": [...]}
    <the arrays' bytes>

The header says the file's format, its round (read without reading the state: CFL's cached
updates reach gigabytes), the body's length, the config the run was made with, and a SHA-256 over
the header's other fields and the body (:func:`digest`), so that neither can change unnoticed. A
file that is empty, truncated, foreign, of a newer format, damaged, edited, or that holds anything
but data is refused before any of its state is used, in one line naming the file and what is wrong
(:class:`CheckpointError`), and so is a resume whose config no longer describes the run
(:func:`config_mismatch`). Writes are atomic: the state goes to a temporary file, which replaces the
checkpoint only when it is complete. A state that a data file cannot hold is refused before
anything is written (``fedray.datafile.NotData``, naming its key).

Earlier fedray versions wrote ``checkpoint.pkl``: format 2 (the same header, its SHA-256 over the
body alone, and a pickled state) and format 1 (a pickled round before the pickled state). Those
are read with an allow-listed unpickler (``fedray.datafile.SafeUnpickler``) and checked whole
before a resume starts; the next checkpoint of the resumed run replaces them with this format.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

from fedray.datafile import (DataFileError, NotData, Refused, digest, read_skeleton, read_tree, safe_unpickle,
                             write_file)
from fedray.datafile import read_header as read_file_header

CHECKPOINT = "checkpoint.fedray"
LEGACY_CHECKPOINT = "checkpoint.pkl"  # formats 1 and 2: a pickled state
DIVERGED = "diverged.json"  # a run's result when it diverged (``Federation.diverged``), beside error.log
HISTORY = "history.json"  # a finished run's scalars of every round as computed (``Federation.finish``)
MAGIC = b"FEDRAY-CHECKPOINT\n"
FORMAT = 3  # 2: a pickled state, the SHA-256 over it alone; 1: the round pickled before the state, no checksum
# what may change between a run and its resume: how long it runs and how it is run, not what it is
RESUMABLE = ("name", "output_dir", "checkpoint_every", "runtime", "federation.rounds", "federation.eval_every",
             "federation.eval_batch_size")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from, in one line naming the file."""

    def __init__(self, message: str):  # a header key with a line break in it stays on the line, escaped
        super().__init__(message if message.isprintable() else repr(message)[1:-1])


def checkpoint_file(run_dir: Path) -> Path:
    """The run folder's checkpoint: ``checkpoint.fedray``, else an earlier version's
    ``checkpoint.pkl`` when only that exists (the path of the first when neither does)."""
    path = Path(run_dir) / CHECKPOINT
    legacy = Path(run_dir) / LEGACY_CHECKPOINT
    return legacy if not path.exists() and legacy.exists() else path


def write_checkpoint(path: Path, state: dict[str, Any], config: Optional[dict[str, Any]] = None) -> None:
    """Atomically write ``state`` (which holds its ``round``) behind the header; ``config``: the
    run's config as a dict, recorded so that a resume with another config is refused. A state that
    a data file cannot hold raises NotData (naming the key) before anything is written, and the
    last checkpoint stays."""
    path = Path(path)
    write_file(path, MAGIC, {"format": FORMAT, "round": state["round"], "config": config}, state,
               "checkpoint state")
    legacy = path.with_name(LEGACY_CHECKPOINT)
    if path.name == CHECKPOINT and legacy.exists():  # an earlier version's, of an earlier round
        legacy.unlink()
    # a writer killed mid-write leaves its temporary file (CFL's reach gigabytes); the run folder's
    # lock (fedray.rundir) lets one process write at a time, so any other one is a dead writer's
    for stale in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):
        stale.unlink(missing_ok=True)


def _recorded(header: dict[str, Any], body_sha256: str) -> str:
    """What a header's ``sha256`` holds: format 3's over header and body, format 2's over the body."""
    return digest(header, body_sha256) if header.get("format") == FORMAT else body_sha256


def _known_format(path: Path) -> Callable[[dict[str, Any]], None]:
    def check(header: dict[str, Any]) -> None:
        try:
            int(header["round"])
            fmt = header["format"]
        except (ValueError, KeyError, TypeError, OverflowError):  # e.g. "round": Infinity
            raise DataFileError("has a damaged header") from None
        if fmt not in (2, FORMAT):
            raise DataFileError(f"has format {fmt!r}; this fedray reads formats 1 to {FORMAT}")
    return check


def read_header(path: Path) -> dict[str, Any]:
    """The header of checkpoint ``path``, its body and header checked (length and SHA-256) but the
    state not read; ``offset`` is where the body starts, ``size`` the file's length. Raises
    CheckpointError (one line) for a file that cannot be resumed from."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            start = f.read(len(MAGIC))
            if start[:2] == b"\x80\x05":
                return _legacy_header(f, path)
            if size == 0:
                raise CheckpointError(f"checkpoint {path} is empty (0 bytes)")
            if start != MAGIC:
                raise CheckpointError(f"{path} is not a fedray checkpoint (it does not start with FEDRAY-CHECKPOINT)")
            try:
                return read_file_header(f, size, _recorded, _known_format(path))
            except DataFileError as err:
                raise CheckpointError(f"checkpoint {path} {err}") from None
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err.strerror or err}") from None


def _legacy_header(f, path: Path) -> dict[str, Any]:
    """Format 1: a pickled ``{"round": r}`` before the pickled state, no checksum."""
    f.seek(0)
    try:
        round = int(safe_unpickle(f)["round"])
    except Refused as err:
        raise CheckpointError(f"checkpoint {path} (format 1) was refused unread: {err}; nothing in it was run") \
            from None
    except Exception:  # noqa: BLE001 - whatever a damaged pickle raises: one line
        raise CheckpointError(f"checkpoint {path} (format 1) has a damaged header") from None
    return {"format": 1, "round": round, "config": None, "offset": f.tell(), "size": os.fstat(f.fileno()).st_size}


def _read_state(path: Path, header: dict[str, Any]) -> Any:
    """The state behind ``header``: a data tree (format 3), or a pickle read with the allow-list."""
    with open(path, "rb") as f:
        f.seek(header["offset"])
        if header["format"] == FORMAT:
            try:
                return read_tree(f, header["size"] - header["offset"])
            except DataFileError as err:
                raise CheckpointError(f"checkpoint {path} {err}") from None
        try:
            return safe_unpickle(f)
        except Refused as err:
            raise CheckpointError(f"checkpoint {path} (format {header['format']}) was refused unread: {err}; "
                                  f"nothing in it was run") from None
        except Exception as err:  # noqa: BLE001 - a format-1 file has no checksum to catch damage first
            raise CheckpointError(f"checkpoint {path} cannot be unpickled: {type(err).__name__}: {err}") from None


def _check_round(state: Any, header: dict[str, Any], path: Path) -> None:
    if not isinstance(state, dict) or state.get("round") != header["round"]:
        raise CheckpointError(f"checkpoint {path} holds no fedray state for round {header['round']}")


def read_checkpoint(path: Path, config: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The state ``write_checkpoint`` wrote (or an earlier version's, read as data), after
    ``read_header``'s checks; with ``config``, also refused when that config does not describe the
    run that wrote it (``config_mismatch``)."""
    header = read_header(path)
    problem = config_mismatch(header, config, path)
    if problem:
        raise CheckpointError(problem)
    state = _read_state(path, header)
    _check_round(state, header, path)
    return state


def verify_checkpoint(run_dir: Path, config: Optional[dict[str, Any]] = None) -> int:
    """The round of the run folder's checkpoint, checked before a resume starts: as
    ``read_checkpoint`` checks it, the state's structure included, without building its arrays
    (an earlier version's pickle is read whole, with the allow-list); raises CheckpointError when
    there is none or it cannot be resumed from."""
    path = checkpoint_file(run_dir)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    header = read_header(path)
    problem = config_mismatch(header, config, path)
    if problem:
        raise CheckpointError(problem)
    if header["format"] != FORMAT:
        _check_round(_read_state(path, header), header, path)
        return int(header["round"])
    with open(path, "rb") as f:
        f.seek(header["offset"])
        try:
            skeleton, _ = read_skeleton(f, header["size"] - header["offset"])
        except DataFileError as err:
            raise CheckpointError(f"checkpoint {path} {err}") from None
    tree = skeleton["tree"]
    rounds = [value for key, value in tree.get("dict", ()) if key == "round"] if isinstance(tree, dict) else []
    if rounds != [header["round"]]:
        raise CheckpointError(f"checkpoint {path} holds no fedray state for round {header['round']}")
    return int(header["round"])


def config_mismatch(header: dict[str, Any], config: Optional[dict[str, Any]], path: Path) -> Optional[str]:
    """The first setting in which ``config`` differs from the config the checkpoint was written
    with, outside ``RESUMABLE``, as one line; None when they agree (or either is unknown)."""
    saved = header.get("config")
    if config is None or saved is None:
        return None
    mine, theirs = _flat(json.loads(json.dumps(config))), _flat(saved)
    for key in sorted(set(mine) | set(theirs)):
        if any(key == k or key.startswith(k + ".") for k in RESUMABLE):
            continue
        if mine.get(key, "<unset>") != theirs.get(key, "<unset>"):
            return (f"checkpoint {path} was written with {key} = {theirs.get(key, '<unset>')!r}, but the config "
                    f"says {mine.get(key, '<unset>')!r}: resume with the run's own config (only "
                    f"{', '.join(RESUMABLE)} may change)")
    return None


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def checkpoint_round(run_dir: Path) -> Optional[int]:
    """The round of the run folder's checkpoint (None without one), from the header only; raises
    CheckpointError when the file is damaged."""
    path = checkpoint_file(run_dir)
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        start = f.read(len(MAGIC))
        try:
            if start[:2] == b"\x80\x05":
                f.seek(0)
                return int(safe_unpickle(f)["round"])
            if start == MAGIC:
                return int(json.loads(f.readline(1 << 24))["round"])
        except Exception:  # noqa: BLE001 - a damaged header: one line below
            pass
    raise CheckpointError(f"checkpoint {path} is damaged: its header cannot be read")


__all__ = ["CHECKPOINT", "CheckpointError", "NotData", "checkpoint_file", "checkpoint_round", "read_checkpoint",
           "verify_checkpoint", "write_checkpoint"]
