"""A run whose folder cannot be written still ends in one line: the whole story goes to a temporary
file when ``RUN_DIR/error.log`` cannot be written, and the line says so (or why neither could be).
The failures are real: the run folder replaced by a file while the run writes in it, a full small
file system where one can be mounted, a folder where ``result.json`` should be."""

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fedray.checkpoint import CHECKPOINT
from fedray.config import build_config
from fedray.runner import ERROR_LOG, RunFailed, resume_hint, run_experiment, write_error_log

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ("name: full\ncheckpoint_every: 1\ndata: {dataset: digits}\n"
          "federation: {num_clients: 4, clients_per_round: 2, rounds: 1000, architectures: {mlp: 4}}\n"
          "runtime: {backend: local, torch_threads: 1}\n")
FALLBACK = re.compile(r"\(traceback: (\S+/fedray-error-\w+\.log), as (\S+) cannot be written: ([^)]+)\)")


def start_run(tmp_path: Path, run_dir: Path, *wrapper: str) -> subprocess.Popen:
    """``fedray run`` of 1000 rounds into ``run_dir`` (it fails long before), temporary files in tmp_path/tmp."""
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    (tmp_path / "tmp").mkdir()
    command = [sys.executable, "-m", "fedray.cli", "run", str(config), "--run-dir", str(run_dir), "--no-progress"]
    return subprocess.Popen([*wrapper, *command], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def the_error_line(run: subprocess.Popen, run_dir: Path) -> str:
    """The one error line of a failed run, after checking its exit status 1 and that stderr holds
    nothing else but the line that names the run folder."""
    out, err = run.communicate(timeout=600)
    lines = err.splitlines()
    assert run.returncode == 1 and out == "", err[-3000:]
    assert len(lines) == 2 and lines[0].startswith(f"fedray: run folder {run_dir}  (tensorboard"), err[-3000:]
    assert lines[1].startswith("fedray: error: ")
    return lines[1][len("fedray: error: "):]


@pytest.mark.faults
def test_a_run_folder_replaced_by_a_file_mid_run_is_one_line_naming_a_log_with_the_traceback(tmp_path):
    run_dir, moved = tmp_path / "run", tmp_path / "moved"
    run = start_run(tmp_path, run_dir)
    while run.poll() is None and not (run_dir / CHECKPOINT).exists():  # round 1 is written
        time.sleep(0.05)
    assert run.poll() is None, run.communicate()[1][-3000:]
    run_dir.rename(moved)
    run_dir.write_text("not a folder\n")
    line = the_error_line(run, run_dir)
    # whatever write came first (an event, the checkpoint), it found no folder: a file in its place,
    # or, on a busy machine, nothing yet between the rename and the file (the swap is two steps)
    first = "NotADirectoryError: [Errno 20] Not a directory: ", "FileNotFoundError: [Errno 2] No such file or directory: "
    assert line.startswith(first), line
    assert line.endswith(f"; {run_dir} is no longer a folder: no checkpoint to resume from there"), line
    log, unwritable, why = FALLBACK.search(line).groups()
    assert (unwritable, why) == (str(run_dir / ERROR_LOG), "Not a directory")
    assert Path(log).parent == tmp_path / "tmp"
    story = Path(log).read_text()
    assert story.startswith(f"(written here because {run_dir / ERROR_LOG} cannot be written: Not a directory)\n"
                            f"=== fedray run failed ")
    assert "Traceback (most recent call last):" in story and line.split(":")[0] in story
    assert not (moved / ERROR_LOG).exists() and (moved / CHECKPOINT).exists()  # the run's own folder, untouched


def small_file_system() -> bool:
    """Whether this user may mount a tmpfs in a mount namespace of its own (``unshare -rm``)."""
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.faults
@pytest.mark.skipif(not small_file_system(), reason="needs `unshare -rm` to mount a small tmpfs without root")
def test_a_full_disk_is_one_line_naming_a_log_with_the_traceback(tmp_path):
    """A 16 kB tmpfs holds the config and the first events, not round 1: TensorBoard's writing thread
    fails first, and the run reports it in one line, without the thread's own traceback."""
    disk = tmp_path / "disk"
    disk.mkdir()
    run_dir = disk / "run"
    mount = f'mount -t tmpfs -o size=16k tmpfs "{disk}" && exec "$@"'
    line = the_error_line(start_run(tmp_path, run_dir, "unshare", "-rm", "sh", "-c", mount, "sh"), run_dir)
    assert line.startswith("OSError: [Errno 28] No space left on device"), line
    log, unwritable, why = FALLBACK.search(line).groups()
    assert (unwritable, why) == (str(run_dir / ERROR_LOG), "No space left on device")
    story = Path(log).read_text()
    assert "Traceback (most recent call last):" in story and "OSError: [Errno 28] No space left on device" in story
    assert "event_file_writer.py" in story  # raised in TensorBoard's thread, then again in the run's


def failure() -> Exception:
    """A real exception with its traceback."""
    try:
        1 / 0
    except ZeroDivisionError as err:
        return err


def test_when_neither_error_log_nor_a_temporary_file_can_be_written_the_line_says_why(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(afile))  # the temporary folder is a file, too
    assert write_error_log(afile / "run", failure()) == (
        f"the traceback could not be saved: {afile / 'run' / ERROR_LOG} cannot be written: Not a directory, nor a "
        f"temporary file in {afile}: Not a directory")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    saved = write_error_log(afile / "run", failure())
    log = Path(re.fullmatch(r"traceback: (\S+), as \S+ cannot be written: Not a directory", saved).group(1))
    assert log.parent == tmp_path and log.name.startswith("fedray-error-") and log.suffix == ".log"
    assert "ZeroDivisionError: division by zero" in log.read_text()


def test_a_failure_writing_result_json_is_one_line_with_the_traceback(tmp_path):
    (tmp_path / "result.json").mkdir()  # where finish() writes the run's summary
    config = build_config({"name": "fin", "checkpoint_every": 1, "data": {"dataset": "digits"},
                           "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1,
                                          "architectures": {"mlp": 4}},
                           "runtime": {"backend": "local", "torch_threads": 1}})
    with pytest.raises(RunFailed) as info:
        run_experiment(config, tmp_path, progress=False)
    assert str(info.value) == (
        f"IsADirectoryError: [Errno 21] Is a directory: '{tmp_path / 'result.json'}' (traceback: "
        f"{tmp_path / ERROR_LOG}); the checkpoint of round 1 is intact: fedray resume {tmp_path}")
    assert "in finish\n" in (tmp_path / ERROR_LOG).read_text()


def test_the_resume_hint_of_a_folder_that_cannot_be_looked_up_is_one_line(tmp_path):
    run_dir = tmp_path / ("x" * 300)  # stat() fails: File name too long
    assert resume_hint("stopped", run_dir) == f"stopped; the checkpoint in {run_dir} cannot be read: File name too long"
