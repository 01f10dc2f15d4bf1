"""``ray job submit`` to a real local head node with token authentication (docs/cluster.md).

A head node is started with ``ray start --head --block`` in its own process group, on fresh ports and
a private temp dir, with a token that lives under ``tmp_path`` (``RAY_AUTH_TOKEN_PATH``), never in
the user's ``~/.ray``. A two-round run goes through the real CLI as a job; its driver joins the head
through the ``RAY_ADDRESS`` that Ray sets for jobs. Then the examples' own method, model and data
set run as a job from an uploaded working directory. Afterwards no process of that head may be left.
"""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RAY = str(BIN / "ray") if (BIN / "ray").exists() else shutil.which("ray")
MARKER = "FEDRAY_TEST_HEAD"  # in the environment of the head's processes (renamed ones hide it)


def free_ports(n):
    """``n`` distinct ports that are free now (all bound at once, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def head_processes(marker, temp_dir, known=()):
    """Live processes of our head: those in ``known``, those that inherited the marker, and those whose
    command line or open files (Ray sends every process's output to its session's log files) name our
    temp dir. Ray renames workers and agents (``ray::IDLE``), which blanks their /proc environ."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if (proc in known or temp_dir in " ".join(proc.info["cmdline"] or [])
                    or proc.environ().get(MARKER) == marker
                    or any(f.path.startswith(temp_dir + os.sep) for f in proc.open_files())):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def stop_head(head, marker, temp_dir):
    """Stop the head as a user would, then make sure: returns what the graceful stop left behind.

    SIGTERM goes to ``ray start --block`` alone: it drains the node, then stops every process it
    started. (SIGTERM to the whole group makes that drain wait out its timeout for a dying GCS.)
    Whatever is left after 10 s is SIGKILLed. Never ``ray stop``: it stops every Ray on the machine.
    """
    try:
        known = [psutil.Process(head.pid), *psutil.Process(head.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        known = []
    known += head_processes(marker, temp_dir)
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.time() + 10
    while (left := head_processes(marker, temp_dir, known)) and time.time() < deadline:
        time.sleep(0.5)
    try:
        os.killpg(head.pid, signal.SIGKILL)  # workers have process groups of their own: found above
    except (ProcessLookupError, PermissionError):
        pass
    head.wait(timeout=10)
    for proc in head_processes(marker, temp_dir, known):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(head_processes(marker, temp_dir, known), timeout=5)
    return left


@pytest.fixture
def ray_head(tmp_path):
    """A local head node with token auth and the dashboard on 127.0.0.1; yields what a client needs."""
    marker = uuid.uuid4().hex
    home = tmp_path / "home"  # `ray get-auth-token --generate` writes $HOME/.ray/auth_token
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in {"RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                        "RAY_AUTH_MODE"}}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    gen = subprocess.run([RAY, "get-auth-token", "--generate"], env={**env, "HOME": str(home)},
                         capture_output=True, text=True, timeout=60)
    token_path = home / ".ray" / "auth_token"
    assert gen.returncode == 0 and token_path.is_file(), gen.stderr
    assert gen.stdout.strip() == token_path.read_text().strip()
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_path), RAY_USAGE_STATS_ENABLED="0")

    (gcs, dashboard, client, agent_http, agent_grpc, runtime_env_agent, metrics, node_manager,
     object_manager) = free_ports(9)
    # Unix socket paths under the temp dir must stay below 107 characters: a short /tmp path.
    temp_dir = tempfile.mkdtemp(prefix="frjob", dir="/tmp")
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={gcs}",
         "--num-cpus=2", "--num-gpus=0", "--object-store-memory=200000000", f"--temp-dir={temp_dir}",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
         f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent_http}",
         f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env_agent}",
         f"--metrics-export-port={metrics}", f"--node-manager-port={node_manager}",
         f"--object-manager-port={object_manager}", "--disable-usage-stats"],
        # SIGTERM makes `ray start --block` drain the node first, 30 s at most by default: 5 s here
        env={**env, MARKER: marker, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "5"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    info = {"env": env, "address": f"http://127.0.0.1:{dashboard}", "gcs_port": gcs,
            "head": head, "marker": marker, "temp_dir": temp_dir, "log": tmp_path / "head.log"}
    try:
        deadline = time.time() + 90
        while not ready(info):  # `ray start` is done and the dashboard answers
            assert head.poll() is None, f"ray start exited: {info['log'].read_text()[-3000:]}"
            assert time.time() < deadline, f"no head after 90 s: {info['log'].read_text()[-3000:]}"
            time.sleep(0.5)
        yield info
    finally:
        stop_head(head, marker, temp_dir)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def ready(head):
    if "Ray runtime started" not in head["log"].read_text():
        return False
    try:
        urllib.request.urlopen(f"{head['address']}/api/version", timeout=2)
    except urllib.error.HTTPError:
        pass  # a 401 without the token is an answer too
    except (urllib.error.URLError, OSError):
        return False
    return True


def ray_cli(head, *args, timeout=60, **env):
    return subprocess.run([RAY, *args], env={**head["env"], **env}, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def submit(head, job_id, working_dir, script):
    """``ray job submit`` of a shell script (Ray shell-quotes each entrypoint word, so one script goes
    through sh -c); its output, or the test fails with the job's logs."""
    try:
        done = ray_cli(head, "job", "submit", "--address", head["address"], "--submission-id", job_id,
                       "--working-dir", str(working_dir), "--", "sh", "-c", script, timeout=300)
        failed = done.returncode != 0 and f"exit status {done.returncode}\n{done.stdout[-3000:]}"
    except subprocess.TimeoutExpired as err:
        failed = f"no end after {err.timeout} s"
    if failed:
        logs = ray_cli(head, "job", "logs", job_id, "--address", head["address"])
        pytest.fail(f"job {job_id} failed: {failed}\n--- ray job logs ---\n{logs.stdout[-6000:]}"
                    f"{logs.stderr[-2000:]}\n--- head ---\n{head['log'].read_text()[-2000:]}")
    assert f"Job '{job_id}' succeeded" in done.stdout, done.stdout[-3000:]
    return done.stdout


def test_job_submit_runs_fedray_and_a_users_code_on_the_head_and_leaves_nothing(ray_head, tmp_path, monkeypatch):
    """One head for both jobs (a head costs about 12 s): fedray's own run, then the examples' code
    from an uploaded working directory; then the head stops without leaving a process."""
    head = ray_head
    # token auth is really on: a wrong token is refused
    refused = ray_cli(head, "job", "list", "--address", head["address"], RAY_AUTH_TOKEN="not-the-token")
    assert refused.returncode != 0 and "AuthenticationError" in refused.stdout + refused.stderr, (
        refused.stdout[-2000:] + refused.stderr[-2000:])

    output_dir = tmp_path / "runs"
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "name": "jobsubmit",
        "seed": 0,
        "output_dir": str(output_dir),
        "data": {"dataset": "fashion_mnist", "train_limit": 3000, "test_limit": 1000},
        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2, "architectures": {"mlp": 4}},
        "training": {"lr": 0.02, "momentum": 0.9, "batch_size": 32, "epochs": 1},
        "runtime": {"actor_cpus": 0.5, "clients_per_actor": "auto"},  # no address: RAY_ADDRESS decides
    }))
    job_id = f"fedray-test-{head['marker'][:8]}"
    stdout = submit(head, job_id, ROOT, f'echo "job RAY_ADDRESS=$RAY_ADDRESS" && '
                                        f"{shlex.quote(sys.executable)} -m fedray.cli run {shlex.quote(str(config))} --no-progress")
    # Ray gives the driver the head's GCS address (the node's IP, not 127.0.0.1) in RAY_ADDRESS
    job_address = re.search(r"^job RAY_ADDRESS=(\S+)$", stdout, re.M)
    assert job_address and job_address[1].endswith(f":{head['gcs_port']}"), stdout[-3000:]

    # the head ran the run's server actor: the driver did not start a Ray of its own
    actors = ray_cli(head, "list", "actors", "--address", head["address"], "--format", "json",
                     "--limit", "1000")
    assert actors.returncode == 0, actors.stderr[-2000:]
    classes = {a["class_name"] for a in json.loads(actors.stdout)}
    assert "ServerActor" in classes, classes

    # the run folder the CLI named (OUTPUT_DIR/NAME-TIMESTAMP), its result.json and TensorBoard events
    run_dirs = list(output_dir.glob("jobsubmit-*"))
    assert len(run_dirs) == 1, run_dirs
    run_dir = run_dirs[0]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["rounds"] == 2, result
    assert result["executor"]["backend"] == "ray", result
    assert result["final"]["eval/accuracy"] > 0.5, result  # measured ~0.7; chance is 0.1
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [1, 2]
    assert [e.step for e in acc.Scalars("eval/accuracy/mlp")] == [1, 2]
    assert acc.Scalars("eval/accuracy")[-1].value == pytest.approx(result["final"]["eval/accuracy"])

    examples_job(head, tmp_path, monkeypatch)

    # stopping the head leaves no process of it behind (and the search does see them all before)
    names = {p.name() for p in head_processes(head["marker"], head["temp_dir"])}
    assert {"gcs_server", "raylet", "ray::DashboardAgent"} <= names, names
    left = stop_head(head["head"], head["marker"], head["temp_dir"])
    assert not left, [(p.pid, p.info["cmdline"]) for p in left]
    time.sleep(3)
    assert not head_processes(head["marker"], head["temp_dir"])


def examples_job(head, tmp_path, monkeypatch):
    """`ray job submit --working-dir examples -- fedray run fednova.yaml`, as examples/README.md says:
    the job runs in Ray's copy of the uploaded folder, and the driver, the server actor and the
    client actors import FedNova, TabularNet and the WDBC loader from there (examples/ is on no
    path of this checkout's). The run ends where the same config and rounds end on the local backend."""
    examples = ROOT / "examples"
    output_dir = tmp_path / "runs"
    rounds = ["federation.rounds=3"]
    job_id = f"fedray-examples-{head['marker'][:8]}"
    script = (f'echo "job cwd=$PWD" && {shlex.quote(sys.executable)} -m fedray.cli run fednova.yaml '
              f"{' '.join(rounds)} output_dir={shlex.quote(str(output_dir))} --no-progress")
    stdout = submit(head, job_id, examples, script)
    job_cwd = re.search(r"^job cwd=(\S+)$", stdout, re.M)
    assert job_cwd and Path(job_cwd[1]) != examples and job_cwd[1].startswith(head["temp_dir"]), stdout[-3000:]

    run_dirs = list(output_dir.glob("fednova-*"))
    assert len(run_dirs) == 1, run_dirs
    result = json.loads((run_dirs[0] / "result.json").read_text())
    assert result["rounds"] == 3 and result["executor"]["backend"] == "ray", result

    import fedray

    monkeypatch.chdir(examples)
    monkeypatch.syspath_prepend(str(examples))
    local = fedray.run("fednova.yaml", [*rounds, "runtime.backend=local", f"output_dir={tmp_path / 'local'}"],
                       progress=False)
    assert result["final"] == local.final  # folded sums: the same models, bit for bit
    assert result["final"]["eval/accuracy"] > 0.8, result  # the majority class is 0.63 of the test split
