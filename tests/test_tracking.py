"""Reading event files back: a resumed run's values win over the interrupted run's, in any file order,
and TensorBoard says nothing about it; a failed write reaches the run, not the terminal."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from fedray.tracking import RunWriter, flatten, read_scalars


def test_resumed_values_win_whatever_order_the_files_are_read(tmp_path):
    resumed = SummaryWriter(str(tmp_path), purge_step=3, filename_suffix=".a")  # created (and named) first
    time.sleep(1.1)
    interrupted = SummaryWriter(str(tmp_path), filename_suffix=".b")
    for step, value in [(1, 0.1), (2, 0.2), (3, 0.3)]:  # written before the crash, round 3 not checkpointed
        interrupted.add_scalar("eval/accuracy", value, step, walltime=100.0 + step)
    for step, value in [(3, 0.33), (4, 0.44)]:  # written after resuming from the round-2 checkpoint
        resumed.add_scalar("eval/accuracy", value, step, walltime=200.0 + step)
    interrupted.close(), resumed.close()
    series = read_scalars(tmp_path)["eval/accuracy"]
    assert [step for step, _ in series] == [1, 2, 3, 4]
    assert [value for _, value in series] == pytest.approx([0.1, 0.2, 0.33, 0.44])  # float32 in the file


def test_report_and_plot_of_a_resumed_run_print_no_tensorboard_warning(tmp_path):
    """As a resume writes them (``fedray.observers``): the stopped attempt logged rounds 1-3, its
    checkpoint holds round 2, and the resumed run's event file starts at round 3 (``purge_step``).
    TensorBoard drops the stopped attempt's round 3 as it reads the second file and warns about it
    ("Detected out of order event.step"); ``fedray report`` and ``fedray plot`` print none of it."""
    stopped = RunWriter(tmp_path)
    for step in (1, 2, 3):
        stopped.log_scalars(step, {"eval/accuracy": step / 10})
    stopped.close()
    resumed = RunWriter(tmp_path, purge_step=3)  # its file's name sorts after the first's
    for step in (3, 4):
        resumed.log_scalars(step, {"eval/accuracy": step / 10 + 0.03})
    resumed.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    root = Path(__file__).resolve().parents[1]
    for command in (["report", str(tmp_path)], ["plot", str(tmp_path), "--out", str(tmp_path / "acc.png")]):
        done = subprocess.run([sys.executable, "-m", "fedray.cli", *command], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    series = read_scalars(tmp_path)["eval/accuracy"]
    assert [step for step, _ in series] == [1, 2, 3, 4]
    assert [value for _, value in series] == pytest.approx([0.1, 0.2, 0.33, 0.43])


def test_flatten_for_hparams():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": None}) == \
        {"a.b": 1, "a.c.d": "x", "e": "[1, 2]", "f": "None"}


def test_a_failed_event_write_reaches_the_run_and_the_writing_thread_stays_quiet(tmp_path, monkeypatch):
    """TensorBoard writes in a thread of its own; when the run folder is gone, that thread's error is
    raised in the run's thread at the next flush and at close, and its traceback is not printed."""
    printed = []
    monkeypatch.setattr(threading, "excepthook", printed.append)  # what prints a thread's traceback
    run_dir = tmp_path / "run"
    writer = RunWriter(run_dir)
    writer.log_scalars(1, {"eval/accuracy": 0.5})
    run_dir.rename(tmp_path / "moved")
    run_dir.write_text("")  # the run folder is a file now
    with pytest.raises(NotADirectoryError):
        writer.log_scalars(2, {"eval/accuracy": 0.6})
    with pytest.raises(NotADirectoryError):
        writer.close()
    assert printed == []
    other = threading.Thread(target=lambda: 1 / 0)
    other.start(), other.join()
    assert [type(args.exc_value) for args in printed] == [ZeroDivisionError]  # other threads' errors still print
    assert read_scalars(tmp_path / "moved")["eval/accuracy"] == [(1, 0.5)]
