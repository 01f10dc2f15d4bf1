"""One process at a time in a run folder (``fedray.rundir``): a second is refused naming the first,
a killed holder leaves nothing locked, default folders made in the same second get numbered, and a
folder made for a run that wrote nothing is taken away again."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedray.rundir import LOCK, FolderInUse, hold

ROOT = Path(__file__).resolve().parents[1]


def holder(run_dir: Path) -> subprocess.Popen:
    """Another process that holds ``run_dir`` until its stdin closes (or it is killed)."""
    code = ("import sys\nfrom pathlib import Path\nfrom fedray.rundir import hold\n"
            f"with hold(Path({str(run_dir)!r})):\n    print('held', flush=True)\n    sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "--its-command"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.faults
def test_a_folder_held_by_another_process_is_refused_until_it_ends_however_it_ends(tmp_path):
    run_dir = tmp_path / "run"
    other = holder(run_dir)
    try:
        with pytest.raises(FolderInUse) as info:
            with hold(run_dir):
                pass
        assert str(info.value) == (f"run folder {run_dir} is in use by another fedray process (pid {other.pid}: -c "
                                   f"--its-command): wait for it to end, or name another folder")
    finally:
        os.kill(other.pid, signal.SIGKILL)  # a crashed owner: the kernel drops its lock
        other.wait(30)
    with hold(run_dir) as held:
        assert held == run_dir
        assert (run_dir / LOCK).read_text().startswith(f"{os.getpid()}: ")


def test_default_folders_made_in_the_same_second_are_numbered(tmp_path):
    name = tmp_path / "runs" / "exp-20261125-120000"
    with hold(name, fresh=True) as first, hold(name, fresh=True) as second, hold(name, fresh=True) as third:
        assert (first, second, third) == (name, name.with_name(name.name + "-2"), name.with_name(name.name + "-3"))
        (second / "config.yaml").write_text("name: exp\n")
    assert [p.name for p in sorted((tmp_path / "runs").iterdir())] == ["exp-20261125-120000-2"]


def test_a_folder_made_for_a_run_that_wrote_nothing_is_taken_away_with_its_parents(tmp_path):
    with hold(tmp_path / "a" / "b" / "run"):
        pass
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "mine").mkdir()  # a folder the user made stays, empty or not
    with hold(tmp_path / "mine"):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]
