"""One process at a time in a run folder.

A run (``fedray run``, ``fedray resume``, ``fedray.runner.run_experiment``) holds an exclusive
``flock`` on ``RUN_DIR/.lock`` from before it writes anything until it ends. The kernel drops the
lock when the process ends, however it ends, so a crashed or killed run never leaves its folder
locked. A second process finds the folder in use and is refused in one line before it writes
anything; with the lock held, the folder is checked again (``fedray.preflight``), since what the
first process left there may have changed between the other's checks and its start.

A new run without ``--run-dir`` names its folder NAME-TIMESTAMP; two started in the same second
would share it, so the folder is made with ``mkdir`` (which one process wins) and the loser takes
NAME-TIMESTAMP-2, -3, ...
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fedray.config import ConfigError

LOCK = ".lock"
MAX_SUFFIX = 1000


class FolderInUse(ConfigError):
    """Another process holds the run folder."""


def claim_new_folder(path: Path) -> Path:
    """Make ``path``, or the first of ``path-2``, ``path-3``, ... that no one has made yet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, MAX_SUFFIX + 1):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise ConfigError(f"{path} and {MAX_SUFFIX - 1} numbered folders beside it exist already: name a folder "
                      f"with --run-dir")


def check_free(run_dir: Path) -> None:
    """FolderInUse when another process holds ``run_dir``; creates nothing (the checks before a run).
    Not to be called while this process holds it: a second ``flock`` would find it in use."""
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY)
    except OSError:  # no lock file: never held
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir, fd) from None
        except OSError:  # a file system without locks: nothing to tell
            pass
    finally:
        os.close(fd)


def _in_use(run_dir: Path, fd: int) -> FolderInUse:
    holder = os.read(fd, 300).decode(errors="replace").strip() or "unknown"
    return FolderInUse(f"run folder {run_dir} is in use by another fedray process (pid {holder}): wait for it to "
                       f"end, or name another folder")


@contextmanager
def hold(run_dir: Path, fresh: bool = False) -> Iterator[Path]:
    """Hold ``run_dir`` (made if missing) for this process while in the block; yields the folder.

    ``fresh``: the folder is a new run's default one, made here (``claim_new_folder``), so its name
    may get a suffix. A folder this call made that holds nothing but the lock at the end (the run was
    refused before it wrote anything) is removed again, with the parents made for it.

    Raises:
        FolderInUse: another process holds it (its pid and command in the message).
    """
    run_dir = Path(run_dir)
    missing = [folder for folder in (run_dir, *run_dir.parents) if not folder.exists()]  # made here
    try:
        if fresh:
            run_dir = claim_new_folder(run_dir)
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # checked by ``fedray.preflight``, but the disk may have changed since
        raise ConfigError(f"run folder {run_dir} cannot be written: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir, fd) from None
        except OSError as err:  # a file system without locks (ENOLCK, EOPNOTSUPP): the run goes on unheld
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        try:  # who holds it, for the message of a process refused (a full disk leaves it unsaid)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}: {' '.join(sys.argv)[:200]}\n".encode())
        except OSError:
            pass
        try:
            yield run_dir
        finally:
            if missing or fresh:
                _remove_if_unused(run_dir, missing[1:])
    finally:
        os.close(fd)  # releases the lock


def _remove_if_unused(run_dir: Path, parents: list[Path]) -> None:
    """Remove ``run_dir`` when it holds nothing but the lock, then each of ``parents`` (innermost
    first) that is empty; what another process has put there since stays."""
    try:
        if [p.name for p in run_dir.iterdir()] != [LOCK]:
            return
        (run_dir / LOCK).unlink()
        for folder in [run_dir, *parents]:
            folder.rmdir()
    except OSError:  # not empty (another run's), or gone: leave it
        pass
