"""How a run reports failures and what it needs: one line, error.log with the whole traceback, no Ray
for the local backend, a checkpoint round read without loading the checkpoint."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import tests.faulty_method as faulty
from fedray.checkpoint import CHECKPOINT, checkpoint_round, read_checkpoint
from fedray.cli import main
from fedray.config import build_config
from fedray.methods import METHODS
from fedray.runner import ERROR_LOG, RunFailed, run_experiment
from fedray.tracking import read_scalars
from tests.support import ClientCounter

ROOT = Path(__file__).resolve().parents[1]


def local_config(**extra):
    tree = {"name": "rt", "data": {"dataset": "digits"}, "checkpoint_every": 1,
            "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 2, "architectures": {"mlp": 6}},
            "training": {"lr": 0.1, "batch_size": 16}, "runtime": {"backend": "local", "torch_threads": 1}}
    tree.update(extra)
    return build_config(tree)


def failing_line() -> int:
    lines, start = inspect.getsourcelines(faulty.shares)
    return start + next(i for i, text in enumerate(lines) if faulty.FAILING_LINE in text)


def assert_full_story(log: str) -> None:
    """error.log names the failing file and line, and the method steps on the way there."""
    assert f'File "{faulty.__file__}", line {failing_line()}, in shares' in log
    assert "in scaled" in log and "in upload" in log and "ZeroDivisionError: division by zero" in log


def test_a_client_error_deep_in_a_method_is_one_line_and_error_log_has_its_traceback(tmp_path):
    with pytest.raises(RunFailed) as info:
        run_experiment(local_config(), tmp_path, progress=False, method=faulty.FAULTY)
    line = str(info.value)
    assert "\n" not in line
    assert "failed in round 1 during upload: ZeroDivisionError: division by zero" in line
    assert f"(traceback: {tmp_path / ERROR_LOG})" in line and "no checkpoint was written" in line
    assert_full_story((tmp_path / ERROR_LOG).read_text())


def test_the_cli_prints_one_line_and_keeps_the_checkpoint(tmp_path, capsys, monkeypatch):
    """A failure in round 2 leaves round 1's checkpoint, which the one line names with the resume command."""
    calls = {"n": 0}
    honest = faulty.FaultyClient.upload

    def fail_in_round_two(self, task, theta, local, client):
        calls["n"] += 1
        return local.weights if task.round == 1 else honest(self, task, theta, local, client)

    monkeypatch.setitem(METHODS, "faulty", faulty.Faulty)
    monkeypatch.setattr(faulty.FaultyClient, "upload", fail_in_round_two)
    config = tmp_path / "c.yaml"
    config.write_text("name: rt\ncheckpoint_every: 1\ndata: {dataset: digits}\nalgorithm: {name: faulty}\n"
                      "federation: {num_clients: 6, clients_per_round: 3, rounds: 3, architectures: {mlp: 6}}\n"
                      "runtime: {backend: local, torch_threads: 1}\n")
    run_dir = tmp_path / "run"
    assert main(["run", str(config), "--run-dir", str(run_dir), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("fedray: run folder")  # the folder, then the one error line
    assert err[1].startswith("fedray: error: ClientFailure: client ") and "round 2 during upload" in err[1]
    assert err[1].endswith(f"the checkpoint of round 1 is intact: fedray resume {run_dir}")
    assert_full_story((run_dir / ERROR_LOG).read_text())
    assert read_checkpoint(run_dir / CHECKPOINT)["round"] == 1 and calls["n"] == 4  # 3 in round 1, 1 in round 2


def test_a_local_run_needs_neither_ray_nor_actors(tmp_path):
    """With ray made unimportable, the CLI still runs a local-backend experiment to the end."""
    config = tmp_path / "c.yaml"
    config.write_text("name: noray\ndata: {dataset: digits}\n"
                      "federation: {num_clients: 6, clients_per_round: 3, rounds: 2, architectures: {mlp: 6}}\n"
                      "training: {lr: 0.1, batch_size: 16}\nruntime: {backend: local, torch_threads: 1}\n")
    code = ("import sys\n"
            "sys.modules['ray'] = None  # any 'import ray' now raises ImportError\n"
            "from fedray.cli import main\n"
            f"status = main(['run', {str(config)!r}, '--run-dir', {str(tmp_path / 'run')!r}, '--no-progress'])\n"
            "print('ACTORS', sorted(m for m in sys.modules if m == 'actors' or m.startswith('actors.')))\n"
            "sys.exit(status)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ACTORS []" in out.stdout
    assert (tmp_path / "run" / "result.json").is_file() and checkpoint_round(tmp_path / "run") == 2
    blocked = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None; import actors.driver"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert blocked.returncode != 0 and "import of ray halted" in blocked.stderr  # the block does block


def test_a_users_observer_sees_every_round_logs_its_metric_and_keeps_its_state_across_a_resume(tmp_path):
    """An observer handed to run_experiment runs beside fedray's own: its metric is in the event files
    and result.json's history, its state comes back from the checkpoint on resume, and it adds to
    the summary."""
    first = run_experiment(local_config(), tmp_path, progress=False, observers=[ClientCounter()])
    assert first["client_counter"] == {"total": 6, "rounds": [1, 2]}  # 3 clients a round
    counter = ClientCounter()
    resumed = run_experiment(local_config(federation={"num_clients": 6, "clients_per_round": 3, "rounds": 3,
                                                      "architectures": {"mlp": 6}}),
                             tmp_path, resume=True, progress=False, observers=[counter])
    assert resumed["client_counter"] == {"total": 9, "rounds": [3]} and counter.total == 9
    assert read_scalars(tmp_path)["user/clients_total"] == [(1, 3.0), (2, 6.0), (3, 9.0)]


def test_the_config_schema_imports_no_registry():
    code = ("import sys, fedray.config\n"
            "print(sorted(m for m in sys.modules if m.startswith(('fedray.methods', 'fedray.models', "
            "'fedray.data'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
