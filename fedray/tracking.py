"""A run's TensorBoard event files: one small writer per run (round metrics, the config as hparams,
figures), and the runs read back: their scalars, the report of ``fedray report`` and the plot of
``fedray plot`` (drawn by :mod:`fedray.figures`).

TensorBoard writes event files in a thread of its own. When a write fails there (a full disk, the
run folder deleted or replaced by a file), the writer raises that error again at its next write,
flush or close, in the run's thread, which reports it in one line like any other failure; the
thread itself stays quiet (``_quiet_writer_threads``) instead of printing its traceback.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import numpy as np
import yaml
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from fedray.figures import curves_figure, plot_file


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}``; values that TensorBoard cannot show become strings."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


WRITER_THREADS = "tensorboard.summary.writer.event_file_writer"  # the module of TensorBoard's writing thread


def _quiet_writer_threads() -> None:
    """Keep the traceback of a failed TensorBoard writing thread off stderr: the thread keeps the
    error, and the writer raises it again in the caller's thread at its next write, flush or close
    (``SummaryWriter.close`` flushes first). Other threads' errors print as usual."""
    previous = threading.excepthook
    if getattr(previous, "fedray_quiet_writers", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__module__ != WRITER_THREADS:
            previous(args)

    hook.fedray_quiet_writers = True
    threading.excepthook = hook


class RunWriter:
    """Writes one run's event files into ``run_dir``.

    Args:
        run_dir: the run's folder.
        purge_step: on resume, the first round not covered by the checkpoint; events of later
            rounds from the interrupted run are dropped so the curves match an uninterrupted run.
    """

    def __init__(self, run_dir: str | Path, purge_step: Optional[int] = None):
        _quiet_writer_threads()
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)

    def log_config(self, config: dict[str, Any], metric_tags: list[str]) -> None:
        self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)
        exp, ssi, sei = hparams(flatten(config), {tag: 0.0 for tag in metric_tags})
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary)

    def log_scalars(self, step: int, metrics: dict[str, float]) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def log_histogram(self, tag: str, values, step: int = 0) -> None:
        """A histogram of ``values`` (TensorBoard's Histograms and Distributions tabs)."""
        self.writer.add_histogram(tag, values, step)

    def log_figure(self, tag: str, figure, step: int = 0) -> None:
        self.writer.add_figure(tag, figure, step)

    def log_image(self, tag: str, image: np.ndarray, step: int = 0) -> None:
        """An (H, W, 3) uint8 image, e.g. a figure drawn elsewhere by :func:`fedray.figures.render`."""
        self.writer.add_image(tag, image, step, dataformats="HWC")

    def log_text(self, tag: str, text: str, step: int = 0) -> None:
        """Text shown in TensorBoard's Text tab (monospaced: indentation is kept)."""
        self.writer.add_text(tag, "    " + text.replace("\n", "\n    "), step)

    def close(self) -> None:
        self.writer.close()


PURGE_NOTE = "Detected out of order event.step"  # TensorBoard's warning as it drops a restart's orphaned events


class _DropPurgeNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(PURGE_NOTE)


@contextmanager
def _no_purge_notes():
    """While TensorBoard reads a run's event files, keep its "Detected out of order event.step ...
    Purging expired events" warning off stderr: a resumed run's event file starts where the
    checkpoint was (a ``purge_step``), below the last rounds the stopped attempt logged, by design,
    and TensorBoard drops those rounds as it warns. Its other messages print as usual."""
    logger = logging.getLogger("tensorboard")  # where TensorBoard's event_accumulator logs
    quiet = _DropPurgeNotes()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in a run's event files, as ``{tag: [(step, value), ...]}`` by step.

    A resumed run adds a second event file. Where both hold a step, the later-written value (the
    resumed run's) wins, whatever order the files are read in. Raises ValueError (one line) for a
    folder that does not exist, a file, or a folder without event files.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = Path(run_dir)
    try:
        if not os.path.lexists(run_dir):
            raise ValueError(f"run folder {run_dir} does not exist")
        if not run_dir.is_dir():
            raise ValueError(f"{run_dir} is a file, not a run folder")
        if not any("tfevents" in name for name in os.listdir(run_dir)):  # the files TensorBoard reads
            raise ValueError(f"{run_dir} holds no TensorBoard event files (events.out.tfevents.*): name the "
                             f"folder of a run")
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        with _no_purge_notes():
            acc.Reload()
    except OSError as err:  # e.g. a folder that cannot be listed, an event file that cannot be read
        raise ValueError(f"run folder {run_dir} cannot be read: {err.strerror or err}") from None
    series = {}
    for tag in acc.Tags()["scalars"]:
        latest: dict[int, tuple[float, float]] = {}
        for e in acc.Scalars(tag):
            if e.step not in latest or e.wall_time >= latest[e.step][0]:
                latest[e.step] = (e.wall_time, e.value)
        series[tag] = [(step, latest[step][1]) for step in sorted(latest)]
    return series


def target_report(run_dir: str | Path, target: Optional[float] = None, tag: str = "eval/accuracy") -> dict[str, Any]:
    """Summary of a run from its event files; with ``target``, the first round whose ``tag`` reaches
    it and the megabytes sent up and down until then (as in thesis Table 4.2)."""
    scalars = read_scalars(run_dir)
    if tag not in scalars:
        raise ValueError(f"{run_dir} has no '{tag}' values; tags there: {', '.join(sorted(scalars)) or 'none'}")
    accuracy = scalars[tag]
    up = dict(scalars.get("comm/bytes_up_total", []))
    down = dict(scalars.get("comm/bytes_down_total", []))
    report: dict[str, Any] = {
        "rounds": max(step for step, _ in accuracy), "final": accuracy[-1][1],
        "best": max(v for _, v in accuracy),
        "mb_up": max(up.values(), default=0.0) / 1e6, "mb_down": max(down.values(), default=0.0) / 1e6,
    }
    if target is not None:
        hit = next((step for step, value in accuracy if value >= target), None)
        report.update({"target": target, "round_reached": hit,
                       "mb_up_to_target": up[hit] / 1e6 if hit else None,
                       "mb_down_to_target": down[hit] / 1e6 if hit else None})
    return report


def plot_runs(run_dirs: list[str | Path], out: str | Path, tag: str = "eval/accuracy",
              x_axis: str = "round", labels: Optional[list[str]] = None) -> Path:
    """Draw ``tag`` of several runs against rounds or cumulative MB uploaded
    (:func:`fedray.figures.curves_figure`) into a PNG, or another format by the suffix of ``out``
    (:func:`fedray.figures.plot_file` checks it); returns the file written."""
    if x_axis not in ("round", "mb_up"):
        raise ValueError(f"x axis must be 'round' or 'mb_up', got {x_axis!r}")
    out = plot_file(out)
    curves = []
    for i, run_dir in enumerate(run_dirs):
        scalars = read_scalars(run_dir)
        if tag not in scalars:
            raise ValueError(f"{run_dir} has no '{tag}' values")
        steps, values = zip(*scalars[tag])
        if x_axis == "mb_up":
            up = dict(scalars["comm/bytes_up_total"])
            steps = [up[s] / 1e6 for s in steps]
        curves.append((labels[i] if labels else Path(run_dir).name, steps, values))
    fig = curves_figure(curves, "round" if x_axis == "round" else "MB uploaded (all clients)", tag)
    fig.savefig(out, dpi=120)
    return out
