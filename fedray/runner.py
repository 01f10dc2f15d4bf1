"""Runs an experiment from the driver: step the rounds, draw the progress bar, report a failure.

The round loop is a :class:`fedray.federation.Federation`; the backend ``runtime.backend`` names
(``fedray.backends``) starts it, in this process or in the Ray backend's ServerActor, and this
module steps it with the same calls. Torch is imported only by the local backend: a Ray driver
holds no model and no data, so it stays small.

Whatever stops a run (a failing client, strategy or actor; Ctrl-C; a run folder that cannot be
written) reaches the user as one line that names the cause, the last intact checkpoint and
``RUN_DIR/error.log``, which holds the whole story: the traceback here and every traceback from the
actors it passed through. When the run folder cannot take ``error.log`` (a full disk, the folder
replaced by a file), the story goes to a temporary file, which the line names instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from tqdm.auto import tqdm  # a widget in a Jupyter notebook (text without ipywidgets), else text

from fedray.backends import Stepper, backend
from fedray.checkpoint import CheckpointError, DIVERGED, checkpoint_file, checkpoint_round
from fedray.config import Config, ConfigError
from fedray.messages import one_line

if TYPE_CHECKING:
    from fedray.resolve import Method
    from fedray.observers import Observer

ERROR_LOG = "error.log"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its tracebacks for terminals


class RunFailed(RuntimeError):
    """A run stopped; the message (one line) says why, where the traceback is and how to resume."""

    def __init__(self, message: str):  # a path or cause with a line break in it stays on the line, escaped
        super().__init__(message if message.isprintable() else repr(message)[1:-1])


class RemoteError(RuntimeError):
    """An error raised in an actor: the original exception and the remote traceback as text."""

    def __init__(self, cause: BaseException, trace: str):
        super().__init__(str(cause))
        self.cause, self.trace = cause, trace


class StopSignal:
    """While active (in the main thread): the first SIGINT or SIGTERM asks the run to stop after
    the round under way (``received`` names it), a second one stops it at once (KeyboardInterrupt)."""

    def __init__(self):
        self.received: Optional[str] = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Take the signals back from whatever replaced the handlers since (``ray.init`` installs a
        SIGTERM handler of its core worker that dumps a stack trace and ends the process)."""
        for sig in self._previous:
            signal.signal(sig, self._handle)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        print(f"\nfedray: {self.received}: stopping after this round with a checkpoint (again: stop at once)",
              file=sys.stderr, flush=True)


class Stopped(Exception):
    """The run stopped on a signal, its checkpoint written."""


def run_experiment(config: Config, run_dir: str | Path, resume: bool = False, progress: bool = True,
                   method: Optional[Method] = None, announce: Callable[[Path], None] = lambda run_dir: None,
                   fresh: bool = False, observers: Sequence[Observer] = (), restart: bool = False) -> dict[str, Any]:
    """Run (or resume) an experiment to ``federation.rounds``; return the summary of result.json.

    ``method`` is the resolved method; None resolves it where the round loop runs (in the
    ServerActor for the Ray backend, so the driver never imports torch). ``announce`` is called
    with the run folder once the run has started (its folder exists). The run holds its folder
    for its whole length (``fedray.rundir``); ``fresh``: ``run_dir`` is a new run's default folder,
    which gets a numbered suffix when another run made it first. A resume of a run that stopped
    before its first round ended starts it again from round 1; ``restart`` (with ``resume``) starts
    any run in ``run_dir`` again from round 1, discarding its checkpoint, ``result.json`` and the
    rounds its event files logged (``discard``).

    Raises:
        ConfigError: another process holds the folder, the folder holds a run (a new run) or no
            run to extend (a resume), or the method or its parameters are bad (found before the
            run writes anything).
        RunFailed: with one line naming the failure, ``error.log``, the last checkpoint and the
            resume command.
    """
    from fedray import preflight, rundir

    with rundir.hold(Path(run_dir), fresh) as run_dir:
        if resume:  # checked again now that no other process can write here
            resume = preflight.check_resume(run_dir, config, restart=restart) is not None
            if restart:
                discard(run_dir)
        else:
            preflight.check_new_run_dir(run_dir, f"run folder {run_dir}")
        return _run(config, run_dir, resume, progress, method, announce, observers)


def _run(config: Config, run_dir: Path, resume: bool, progress: bool, method: Optional[Method],
         announce: Callable[[Path], None], observers: Sequence[Observer]) -> dict[str, Any]:
    stepper = None
    try:
        with StopSignal() as stop:
            stepper = backend(config.runtime.backend).start(config, method, run_dir, resume, observers)
            stop.reinstall()
            announce(run_dir)
            note = vectorize_note(config, stepper.cohort_refusal)
            if note:
                print(f"fedray: note: {note}", file=sys.stderr)
            _step_all(stepper, config, progress, stop)
            summary, stepper = stepper.finish(), None
            return summary
    except Stopped as done:
        raise RunFailed(resume_hint(f"stopped by {done}", run_dir)) from None
    except KeyboardInterrupt:
        raise RunFailed(resume_hint("interrupted", run_dir)) from None
    except Exception as err:  # any failure: one line here, the whole story in error.log
        if isinstance(root_cause(err), ConfigError) and not os.path.exists(run_dir / "config.yaml"):
            raise root_cause(err) from None  # found before the run wrote anything
        saved = write_error_log(run_dir, err)
        raise RunFailed(resume_hint(f"{one_line(root_cause(err))} ({saved})", run_dir)) from None
    finally:
        if stepper is not None:  # the run failed or stopped: its actors would hold the CPUs until
            with contextlib.suppress(Exception):  # collected; the line above says what went wrong
                stepper.close()


def run_to_the_end(config: Config, run_dir: Path) -> None:
    """What a sweep run again does with a trial's folder: a new run when it holds none, a resume from
    its checkpoint, and a run again from round 1 when it stopped before its first checkpoint (a
    trial has nothing else to resume from). A finished trial (``result.json``) is not run, nor one
    that diverged (``diverged.json``): a run again diverges again, as its seeds fix every step."""
    if (run_dir / "result.json").exists() or (run_dir / DIVERGED).exists():
        return
    started = (run_dir / "config.yaml").exists()
    run_experiment(config, run_dir, resume=started, restart=started and not checkpoint_file(run_dir).exists(),
                   progress=False)


def discard(run_dir: Path) -> None:
    """Remove what a run that starts again from round 1 in ``run_dir`` replaces: its checkpoint and
    ``result.json`` or ``diverged.json`` (its event files' rounds are purged when the run's first
    events are written)."""
    from fedray.checkpoint import CHECKPOINT, LEGACY_CHECKPOINT

    for name in (CHECKPOINT, LEGACY_CHECKPOINT, "result.json", DIVERGED):
        (run_dir / name).unlink(missing_ok=True)


def vectorize_note(config: Config, refusal: Optional[str]) -> Optional[str]:
    """What to tell a user whose ``runtime.vectorize`` the method refuses (``refusal``: why)."""
    if not config.runtime.vectorize or refusal is None:
        return None
    return f"runtime.vectorize: {config.algorithm.name}'s clients train one after another: {refusal}"


def _step_all(stepper: Stepper, config: Config, progress: bool, stop: StopSignal) -> None:
    """Run the rounds left, with a progress bar; on a stop signal, end the round under way, write
    its checkpoint and raise Stopped."""
    start, total = stepper.current_round(), config.federation.rounds
    with tqdm(total=total, initial=start, desc=config.name, unit="round", disable=not progress,
              dynamic_ncols=True) as bar:
        for done in range(start, total):
            if stop.received:
                if done:
                    stepper.checkpoint()
                raise Stopped(f"{stop.received} after round {done}")
            result = stepper.run_round()
            for line in result.faults.splitlines():  # a lost actor or node: said as it happens, not only in TensorBoard
                tqdm.write(f"fedray: note: {line}", file=sys.stderr)
            bar.set_postfix({k.split("/")[-1]: f"{v:.4f}" for k, v in result.metrics.items()
                             if k in ("eval/accuracy", "train/loss")})
            bar.update(1)


def root_cause(err: BaseException) -> BaseException:
    """The exception that started it, under the wrappers of the actors it passed through."""
    while isinstance(err, RemoteError):
        err = err.cause
    return err


def write_error_log(run_dir: Path, err: BaseException) -> str:
    """Append the failure's whole story to ``run_dir/error.log``: the traceback here, each actor's
    traceback it passed through, and the failing client's own traceback. Where the run folder
    cannot take it (OSError), write it to a temporary file ``fedray-error-*.log`` instead.

    Returns where the story went, for the one line: ``traceback: PATH``, the temporary file and why
    error.log could not be written, or why neither could be written. It never raises OSError.
    """
    text = ANSI.sub("", error_story(err))
    path = run_dir / ERROR_LOG
    try:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # run_dir is a file now: open() below says "Not a directory"
            pass
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        return f"traceback: {path}"
    except OSError as failed:
        why = _reason(failed)
        try:  # an empty error.log left by a write that failed (a full disk) would only mislead
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass
    fd, fallback = None, None
    try:
        fd, fallback = tempfile.mkstemp(prefix="fedray-error-", suffix=".log")
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            fd = None  # the file object closes it
            f.write(f"(written here because {path} cannot be written: {why})\n{text}")
        return f"traceback: {fallback}, as {path} cannot be written: {why}"
    except OSError as also:
        if fd is not None:
            os.close(fd)
        if fallback is not None:
            Path(fallback).unlink(missing_ok=True)
        where = f" in {os.path.dirname(also.filename)}" if also.filename else ""
        return (f"the traceback could not be saved: {path} cannot be written: {why}, nor a temporary file{where}: "
                f"{_reason(also)}")


def error_story(err: BaseException) -> str:
    """The failure's traceback, then each actor's and the failing client's that it does not hold."""
    parts = [f"=== fedray run failed {time.strftime('%Y-%m-%d %H:%M:%S')}: {one_line(root_cause(err))}",
             "".join(traceback.format_exception(err))]
    text = parts[1]
    while isinstance(err, RemoteError):
        if err.trace and err.trace not in text:
            parts.append(f"--- raised in an actor:\n{err.trace}")
        text += err.trace
        err = err.cause
    client_trace = getattr(err, "trace", "")
    if isinstance(client_trace, str) and client_trace and client_trace not in text:
        parts.append(f"--- in the client:\n{client_trace}")
    return "\n".join(p.rstrip("\n") for p in parts) + "\n\n"


def _reason(err: OSError) -> str:
    """An OSError in a few words: its strerror (``No space left on device``), else its message."""
    return err.strerror or one_line(err)


def resume_hint(reason: str, run_dir: Path) -> str:
    """``reason`` and the checkpoint to resume from, one line; never raises on an unreadable folder."""
    try:
        saved = checkpoint_round(run_dir)
    except CheckpointError as err:
        return f"{reason}; {err}"
    except OSError as err:  # e.g. the folder's name is too long, or it cannot be searched
        return f"{reason}; the checkpoint in {run_dir} cannot be read: {_reason(err)}"
    if saved is None and os.path.lexists(run_dir) and not os.path.isdir(run_dir):
        return f"{reason}; {run_dir} is no longer a folder: no checkpoint to resume from there"
    if saved is None:
        return f"{reason}; no checkpoint was written in {run_dir}"
    return f"{reason}; the checkpoint of round {saved} is intact: fedray resume {run_dir}"
