"""Fault injection on a real Ray: client actors killed with SIGKILL, a hung actor, a dead server
or tree actor, and a driver stopped by signals. (With tests/test_checkpoint.py, test_divergence.py
and the lost node of test_cluster.py this is the fault suite: ``pytest -m faults``.)"""

import json
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil
import pytest
import ray

from actors.executor import RayExecutor, RoundTimeout
from fedray.checkpoint import CHECKPOINT, checkpoint_round, read_checkpoint
from fedray.cli import main
from fedray.config import load_config, save_config
from fedray.assembly import assemble
from fedray.federation import Federation
from fedray.runner import RunFailed, run_experiment
from fedray.tracking import read_scalars
from tests.integration.conftest import FOUR_ACTORS, small_config

pytestmark = [pytest.mark.integration, pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[2]
STC = {"algorithm": {"name": "stc", "p_up": 0.01, "p_down": 0.01},
       "training": {"lr": 0.02, "momentum": 0.9, "batch_size": 32, "steps": 5}}


def kill_9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    try:
        psutil.Process(pid).wait(10)
    except psutil.NoSuchProcess:  # gone already
        pass


def assert_same_state(a: dict, b: dict) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_state(a[key], b[key])
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def restarted(actor, pid: int) -> int:
    """Wait until Ray has restarted ``actor`` (killed as process ``pid``); its new pid."""
    while True:
        try:
            new = ray.get(actor.pid.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            new = pid  # still restarting
        if new != pid:
            return new
        time.sleep(0.1)


def test_a_client_actor_killed_at_any_moment_changes_nothing(local_ray, tmp_path):
    """STC keeps residuals on the clients. An actor may die at any moment, not only while it trains;
    in one 3-round run, actors are killed with SIGKILL: while their clients are set up (round 1);
    just before a round, with its tasks queued, and idle between rounds, so that Ray has restarted
    it, without clients, by the time it is asked for the round's tasks (round 2); idle until Ray has
    restarted it before its clients' states are read for a checkpoint, and as they are read (3; the
    driver's stop signal asks for a checkpoint between rounds). Each time Ray restarts it, its
    clients get their residuals of the last checkpoint (every round here) and what it lost runs
    again: the run ends exactly where the undisturbed run ends. That one runs in this process (the
    local backend: the same arithmetic as the actors', one torch thread each, to the last bit)."""
    from functools import partial

    from actors.client import ClientPool
    from fedray.executor import LocalExecutor

    def config(**runtime):
        return small_config(**STC, federation={"rounds": 3, "clients_per_round": 10, "architectures": {"mlp": 10}},
                            checkpoint_every=1, runtime=runtime)

    whole = Federation(assemble(config(backend="local", torch_threads=1), LocalExecutor), tmp_path / "whole")
    while not whole.done:
        whole.run_round()
    undisturbed = whole.finish()
    config = config(**FOUR_ACTORS)
    pool = ClientPool(config, config.federation.client_archs())
    assert len(pool.actors) == 4  # every actor has clients in every round: a kill before one costs tasks
    kill_9(ray.get(pool.actors[0].pid.remote()))  # its process is up, its clients not yet
    fed = Federation(assemble(config, partial(RayExecutor, pool=pool)), tmp_path / "killed")
    for round in range(1, 4):
        if round > 1:  # round 2: actors 0 and 1 before the round; 3: actors 2 and 3 before a checkpoint
            idle, busy = fed.executor.actors[2 * round - 4], fed.executor.actors[2 * round - 3]
            pids = ray.get([idle.pid.remote(), busy.pid.remote()])
            kill_9(pids[0])
            restarted(idle, pids[0])
            kill_9(pids[1])
            if round == 3:
                fed.save_checkpoint()
        fed.run_round()
    disturbed = fed.finish()
    assert disturbed["final"] == undisturbed["final"] and disturbed["comm"] == undisturbed["comm"]
    a, b = (read_checkpoint(tmp_path / run / CHECKPOINT) for run in ("whole", "killed"))
    assert any("residual" in state for state in a["clients"].values())
    assert_same_state(a["clients"], b["clients"])  # the residuals survived, exactly
    assert_same_state(a["strategy"]["models"], b["strategy"]["models"])
    scalars = read_scalars(tmp_path / "killed")
    assert scalars["runtime/actor_restarts"] == [(1, 1.0), (2, 2.0), (3, 2.0)]
    assert dict(scalars["runtime/tasks_retried"])[2] >= 1


def test_a_hung_client_actor_ends_the_round_at_its_deadline(local_ray, tmp_path):
    fed = Federation(assemble(small_config(runtime={"round_timeout_s": 3}, federation={"architectures": {"mlp": 10}}), RayExecutor), tmp_path)
    fed.run_round()
    pid = ray.get(fed.executor.actors[1].pid.remote())
    os.kill(pid, signal.SIGSTOP)  # alive but silent
    try:
        start = time.monotonic()
        with pytest.raises(RoundTimeout, match=r"^round 2 did not finish within runtime.round_timeout_s = 3 s: "
                                               r"the client actors running clients \[[\d, ]+\] did not answer$"):
            fed.run_round()
        assert time.monotonic() - start < 60  # at its deadline, not never (a loaded machine adds seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
        fed.executor.shutdown()


@contextmanager
def kill_process_when(title: str, run_dir: Path, round: int):
    """While in the block, kill -9 the Ray worker whose process title starts with ``title`` once the
    run's checkpoint reaches ``round``, however long that takes (on a deadline instead, a loaded
    machine would see it killed before the run got there); nothing if the block ends first. Only
    this test's workers: descendants of this process (its Ray's, or those of a ``fedray`` it
    started), never another Ray's on the machine."""
    ended = threading.Event()

    def watch():
        while (checkpoint_round(run_dir) or 0) < round:
            if ended.wait(0.05):
                return
        for proc in psutil.Process().children(recursive=True):
            try:
                if (proc.cmdline() or [""])[0].startswith(title):
                    proc.kill()
            except psutil.Error:  # ended meanwhile
                pass

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        ended.set()
        thread.join()


@pytest.mark.parametrize("title, tree", [
    ("ray::ServerActor", {}),
    ("ray::ParameterTreeActor", {"algorithm": {"name": "cfl", "eps1_fraction": 0.25, "eps2_factor": 3},
                                 "federation": {"architectures": {"mlp": 10}, "clients_per_round": 10}}),
])
def test_a_dead_server_or_tree_actor_stops_the_run_with_the_resume_command(local_ray, tmp_path, title, tree):
    config = small_config(**{**tree, "federation": {"rounds": 200, "architectures": {"mlp": 10}, **tree.get("federation", {})}}, checkpoint_every=1)
    with kill_process_when(title, tmp_path, 2), pytest.raises(RunFailed) as info:
        run_experiment(config, tmp_path, progress=False)
    line = str(info.value)
    saved = checkpoint_round(tmp_path)
    assert "\n" not in line and saved >= 2
    assert line.endswith(f"the checkpoint of round {saved} is intact: fedray resume {tmp_path}")
    assert line.startswith("ServerActorDied: the server actor died" if "Server" in title
                           else "TreeActorDied: the parameter-tree actor of clustered FL died")


def fedray(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedray.cli", *args], cwd=ROOT, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True, **popen)


def wait_for_start(proc: subprocess.Popen) -> None:
    """Read stderr up to the line that says the run folder exists (the run has started)."""
    for line in proc.stderr:
        if line.startswith("fedray: run folder"):
            return
    raise AssertionError(f"the run did not start: {proc.wait()}")


def wait_for_round(proc: subprocess.Popen, run_dir: Path) -> None:
    """Wait until the run has logged round 1 (round 2 is under way), however long that takes on a
    loaded machine; a run that ends first fails the test."""
    wait_for_start(proc)
    while "eval/accuracy" not in read_scalars(run_dir):
        assert proc.poll() is None, f"the run ended before its first round: {proc.stderr.read()[-2000:]}"
        time.sleep(0.1)


def test_sigterm_to_the_process_group_ends_the_round_and_the_resumed_run_is_identical(local_ray, tmp_path):
    """As ``timeout`` or a scheduler sends it: to the whole process group, Ray's processes included.
    The driver ends the round under way, writes its checkpoint and names it; resumed, the run ends
    bit for bit where an uninterrupted run ends (models and every logged accuracy: this is also the
    suite's test of resume equality on Ray; test_stateful_stc_on_actors_resumes_exactly is the
    stateful one). FedAvg with ``clients_per_actor: auto`` folds by fold group, which no actor
    decides, so the uninterrupted run is the in-process one (``fedray.fold``: the same sums to the
    last bit; one torch thread in both), and the stopped run has one client actor beside the server."""
    def config(rounds: int, **runtime):
        return small_config(federation={"rounds": rounds, "architectures": {"mlp": 10}}, checkpoint_every=1000,
                            runtime={"actor_cpus": 1, "clients_per_actor": "auto", "torch_threads": 1, **runtime})

    path = tmp_path / "c.yaml"
    save_config(config(100), path)
    run_dir = tmp_path / "stopped"
    proc = fedray("run", str(path), "--run-dir", str(run_dir), "--no-progress")
    wait_for_round(proc, run_dir)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    last = err.strip().splitlines()[-1]
    saved = checkpoint_round(run_dir)
    assert saved is not None and 1 <= saved < 100, last  # written at the stop: checkpoint_every is 1000
    assert last == (f"fedray: error: stopped by SIGTERM after round {saved}; the checkpoint of round {saved} "
                    f"is intact: fedray resume {run_dir}")
    resumed = run_experiment(config(saved + 1), run_dir, resume=True, progress=False)
    assert resumed["executor"]["backend"] == "ray" and resumed["executor"]["actors"] == 2
    whole = tmp_path / "whole"
    run_experiment(config(saved + 1, backend="local"), whole, progress=False)
    a, b = (read_checkpoint(d / CHECKPOINT) for d in (whole, run_dir))
    assert a["round"] == b["round"] == saved + 1
    assert_same_state(a["strategy"]["models"], b["strategy"]["models"])
    assert read_scalars(run_dir)["eval/accuracy"] == read_scalars(whole)["eval/accuracy"]


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    config = small_config(federation={"rounds": 10_000}, runtime={"backend": "local", "torch_threads": 1})
    path = tmp_path / "c.yaml"
    save_config(config, path)
    proc = fedray("run", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress")
    wait_for_round(proc, tmp_path / "run")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)  # a round takes a second or two: the second comes in the same round
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    lines = err.strip().splitlines()
    assert proc.returncode == 1
    assert lines[-2] == "fedray: SIGINT: stopping after this round with a checkpoint (again: stop at once)"
    assert lines[-1].startswith("fedray: error: interrupted; ")


def test_a_run_folder_is_held_by_one_process_and_a_crashed_holder_leaves_it_free(tmp_path, capsys):
    """A second run, or a resume, in the folder of a run that is going is refused in one line
    (status 2) and writes nothing; once the run's process is killed (kill -9: no chance to clean up),
    the folder is free and the run resumes from its checkpoint."""
    config = small_config(data={"dataset": "digits", "train_limit": None, "test_limit": None}, checkpoint_every=1,
                          federation={"rounds": 10_000, "architectures": {"mlp": 10}},
                          runtime={"backend": "local", "torch_threads": 1})
    path = tmp_path / "c.yaml"
    save_config(config, path)
    run_dir = tmp_path / "run"
    first = fedray("run", str(path), "--run-dir", str(run_dir), "--no-progress", "seed=0")
    try:
        wait_for_round(first, run_dir)
        # round 1 is logged before its checkpoint is written: wait for the checkpoint too, or the
        # listing below could be taken before the checkpoint first appears
        while not (run_dir / CHECKPOINT).is_file():
            assert first.poll() is None, first.stderr.read()[-2000:]
            time.sleep(0.05)
        # the running run writes a checkpoint every round, through a temporary file (atomic): that
        # file comes and goes with the run, not with the refused commands
        def listing():
            return sorted(p.name for p in run_dir.iterdir() if not p.name.endswith(".tmp"))

        names = listing()
        for argv in (["run", str(path), "--run-dir", str(run_dir), "seed=1"], ["resume", str(run_dir)]):
            capsys.readouterr()
            assert main([*argv, "--no-progress"]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(
                f"fedray: error: run folder {run_dir} is in use by another fedray process (pid {first.pid}: "), err
            assert err.endswith("wait for it to end, or name another folder\n")
        assert load_config(run_dir / "config.yaml").seed == 0 and listing() == names
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
    saved = checkpoint_round(run_dir)
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--rounds", str(saved + 1), "--no-progress"]) == 0
    assert checkpoint_round(run_dir) == saved + 1 and json.loads(capsys.readouterr().out)["run_dir"] == str(run_dir)


def test_a_plain_cli_run_starts_its_own_ray_and_survives_a_client_actor_killed_between_rounds(tmp_path):
    """As an operator would run it. Without runtime.address or RAY_ADDRESS, ray.init() would join
    the Ray named in Ray's ``ray_current_cluster`` file: here one long gone (an address where
    nothing answers), where it hung for minutes; the run starts a Ray of its own. Once round 1 is
    checkpointed, every ``ray::ClientActor`` is killed with kill -9, whatever it is doing (idle, or
    training round 2). The run ends (status 0) with every round, records the restarts, and Ray's
    long "A worker died" line does not reach the console."""
    temp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        (temp / "ray").mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            gone = s.getsockname()[1]
        (temp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{gone}")
        config = small_config(federation={"rounds": 3, "architectures": {"mlp": 10}}, checkpoint_every=1,
                              runtime={"server_hosts_clients": False})
        path = tmp_path / "c.yaml"
        save_config(config, path)
        run_dir = tmp_path / "run"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        with kill_process_when("ray::ClientActor", run_dir, 1):
            run = fedray("run", str(path), "--run-dir", str(run_dir), "--no-progress",
                         env={**env, "RAY_TMPDIR": str(temp)})
            out, err = run.communicate(timeout=600)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert run.returncode == 0, err
    # "fedray: run folder ...", then a note per actor restarted, as it happens; nothing of Ray's
    lines = err.strip().splitlines()
    assert "worker died" not in err.lower() and lines[0].startswith("fedray: run folder"), err
    assert lines[1:] and all(re.match(r"fedray: note: round [23]: client actor \d+ .*restarted", ln) for ln in lines[1:]), err
    assert json.loads(out)["run_dir"] == str(run_dir)
    scalars = read_scalars(run_dir)
    assert [s for s, _ in scalars["eval/accuracy"]] == [1, 2, 3]
    assert sum(v for _, v in scalars["runtime/actor_restarts"]) >= 1
