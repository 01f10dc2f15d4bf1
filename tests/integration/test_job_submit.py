"""``ray job submit`` to a real local head node with token authentication (docs/cluster.md).

A head node is started with ``ray start --head --block`` in its own process group, on fresh ports and
a private temp dir, with a token that lives under ``tmp_path`` (``RAY_AUTH_TOKEN_PATH``), never in
the user's ``~/.ray``. The examples' own method, model and data set (examples/) run through the real
CLI as a job from an uploaded working directory, whose driver joins the head through the
``RAY_ADDRESS`` that Ray sets for jobs; then as a driver that joins the head itself; and a user's
package goes to the head's actors through ``runtime.runtime_env``. Afterwards no process of that
head may be left.
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
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
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


def test_job_submit_runs_a_users_code_on_the_head_and_leaves_nothing(ray_head, tmp_path, monkeypatch):
    """One head for all (a head costs about 12 s).

    - ``ray job submit --working-dir examples -- fedray run fednova.yaml``, as examples/README.md
      says: the job runs in Ray's copy of the uploaded folder, joins the head through the
      ``RAY_ADDRESS`` Ray sets for jobs, and its driver, server actor and client actors import
      FedNova, TabularNet and the WDBC loader from there (examples/ is on no path of this checkout's);
    - the ``fedray`` command (whose own path is its script's folder) from examples/, as a driver
      that joins the head: it finds the modules in its current folder and Ray gives the actors that
      folder; both end where the same config and rounds end on the local backend, bit for bit
      (folded sums);
    - a user's package sent with ``runtime.runtime_env`` (:func:`users_package`);
    - then the head stops without leaving a process.
    """
    head = ray_head
    # token auth is really on: a wrong token is refused
    refused = ray_cli(head, "job", "list", "--address", head["address"], RAY_AUTH_TOKEN="not-the-token")
    assert refused.returncode != 0 and "AuthenticationError" in refused.stdout + refused.stderr, (
        refused.stdout[-2000:] + refused.stderr[-2000:])

    examples = ROOT / "examples"
    output_dir = tmp_path / "runs"
    rounds = ["federation.rounds=3"]
    job_id = f"fedray-examples-{head['marker'][:8]}"
    stdout = submit(head, job_id, examples, f'echo "job RAY_ADDRESS=$RAY_ADDRESS cwd=$PWD" && '
                                            f"{shlex.quote(sys.executable)} -m fedray.cli run fednova.yaml "
                                            f"{' '.join(rounds)} output_dir={shlex.quote(str(output_dir))} --no-progress")
    # Ray gives the driver the head's GCS address (the node's IP, not 127.0.0.1) in RAY_ADDRESS, and
    # runs it in its copy of the working directory
    job = re.search(r"^job RAY_ADDRESS=(\S+) cwd=(\S+)$", stdout, re.M)
    assert job and job[1].endswith(f":{head['gcs_port']}"), stdout[-3000:]
    assert Path(job[2]) != examples and job[2].startswith(head["temp_dir"]), stdout[-3000:]

    # the head ran the run's server actor: the driver did not start a Ray of its own
    actors = ray_cli(head, "list", "actors", "--address", head["address"], "--format", "json",
                     "--limit", "1000")
    assert actors.returncode == 0, actors.stderr[-2000:]
    classes = {a["class_name"] for a in json.loads(actors.stdout)}
    assert "ServerActor" in classes, classes

    # the run folder the CLI named (OUTPUT_DIR/NAME-TIMESTAMP), its result.json and TensorBoard events
    run_dirs = list(output_dir.glob("fednova-*"))
    assert len(run_dirs) == 1, run_dirs
    result = json.loads((run_dirs[0] / "result.json").read_text())
    assert result["rounds"] == 3 and result["executor"]["backend"] == "ray", result
    assert result["final"]["eval/accuracy"] > 0.8, result  # the majority class is 0.63 of the test split
    acc = EventAccumulator(str(run_dirs[0]), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [1, 2, 3]
    assert acc.Scalars("eval/accuracy")[-1].value == pytest.approx(result["final"]["eval/accuracy"])

    address = job[1]  # the head's GCS, as a driver outside a job joins it
    joined = subprocess.run([str(BIN / "fedray"), "run", "fednova.yaml", *rounds, f"runtime.address={address}",
                             "--run-dir", str(tmp_path / "joined"), "--no-progress"],
                            cwd=examples, env=head["env"], capture_output=True, text=True, timeout=300)
    assert joined.returncode == 0, joined.stderr[-3000:]
    driven = json.loads((tmp_path / "joined" / "result.json").read_text())
    assert driven["final"] == result["final"] and driven["executor"]["backend"] == "ray", driven
    import fedray

    monkeypatch.chdir(examples)
    local = fedray.run("fednova.yaml", [*rounds, "runtime.backend=local", f"output_dir={tmp_path / 'local'}"],
                       progress=False)
    assert result["final"] == local.final

    # a sweep submitted as a job: its trials run on the head as Ray Tune trials, each inside its
    # placement group; seed 0's trial is the run above (the same config), seed 1's another split
    sweep_out = tmp_path / "sweep"
    submit(head, f"{job_id}-sweep", examples, f"{shlex.quote(sys.executable)} -m fedray.cli sweep fednova.yaml "
                                              f"{' '.join(rounds)} --seeds 0-1 --out {shlex.quote(str(sweep_out))} "
                                              f"--no-progress")
    rows = json.loads((sweep_out / "sweep.json").read_text())["trials"]
    assert [(r["seed"], r["status"]) for r in rows] == [(0, "done"), (1, "done")], rows
    assert rows[0]["final_accuracy"] == result["final"]["eval/accuracy"], rows
    trial = json.loads((sweep_out / "trials" / rows[0]["trial"] / "result.json").read_text())
    assert trial["executor"]["actors_per_node"] == {"trial/bundle:0": 1}, trial["executor"]

    users_package(head, address, tmp_path)

    # stopping the head leaves no process of it behind (and the search does see them all before)
    names = {p.name() for p in head_processes(head["marker"], head["temp_dir"])}
    assert {"gcs_server", "raylet", "ray::DashboardAgent"} <= names, names
    left = stop_head(head["head"], head["marker"], head["temp_dir"])
    assert not left, [(p.pid, p.info["cmdline"]) for p in left]
    time.sleep(3)
    assert not head_processes(head["marker"], head["temp_dir"])


USER_CODE = """
import numpy as np
from torch import nn

from fedray.methods.fedavg import FedAvg


class Avg(FedAvg):
    name = "user-avg"


def net(num_classes, hidden=32):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def digits(seed=0):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(x))
    return {"train_x": x[order[:1400]], "train_y": d.target[order[:1400]],
            "test_x": x[order[1400:]], "test_y": d.target[order[1400:]]}
"""


def users_package(head, address, tmp_path):
    """A user's package reaches the head's actors through ``runtime.runtime_env``: the head's workers
    know nothing of it, the driver finds it on PYTHONPATH and runs from another folder, so only
    ``py_modules`` can carry it to the server and client actors. Without it the same run stops in one
    line naming the module and how to send it (exit 2, nothing run)."""
    name = f"usercode_{uuid.uuid4().hex[:8]}"
    package = tmp_path / "src" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(USER_CODE))
    elsewhere = tmp_path / "elsewhere"  # the driver's folder: not the package's
    elsewhere.mkdir()
    env = {**head["env"], "PYTHONPATH": str(tmp_path / "src")}

    def run(label, runtime_env):
        tree = {"name": label, "seed": 1,
                "data": {"dataset": f"{name}:digits"},
                "federation": {"num_clients": 6, "clients_per_round": 4, "rounds": 2,
                               "architectures": {f"{name}:net": 6}},
                "training": {"lr": 0.5, "batch_size": 16, "epochs": 2},
                "algorithm": {"name": f"{name}:Avg"},
                "runtime": {"address": address, "actor_cpus": 1, "clients_per_actor": "auto",
                            **({"runtime_env": runtime_env} if runtime_env else {})}}
        path = tmp_path / f"{label}.yaml"
        path.write_text(yaml.safe_dump(tree))
        return subprocess.run([str(BIN / "fedray"), "run", str(path), "--no-progress", "--run-dir",
                               str(tmp_path / "runs" / label)], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=240)

    shipped = run("shipped", {"py_modules": [str(package)]})
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    result = json.loads((tmp_path / "runs" / "shipped" / "result.json").read_text())
    assert result["executor"]["backend"] == "ray" and result["algorithm"] == f"{name}:Avg", result
    assert result["final"]["eval/accuracy"] > 0.5, result  # ten digits: chance is 0.1

    missing = run("missing", None)
    ours = [line for line in missing.stderr.splitlines() if line.startswith("fedray:")]
    assert missing.returncode == 2 and len(ours) == 1, missing.stderr[-3000:]
    assert ours[0] == (f"fedray: error: the run's actors cannot import module {name!r}, which the config names: "
                       f"send it to the cluster's nodes with runtime.runtime_env (e.g. {{py_modules: [{name}]}}) or "
                       f"ray job submit --working-dir (docs/extending.md, where your code runs)")
    assert not (tmp_path / "runs" / "missing" / "config.yaml").exists()
