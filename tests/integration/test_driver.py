"""The Ray driver holds no model and no data: ``fedray run`` with torch made unimportable in the
driver still runs to the end (the actors import torch), and a bad method, resolved in the server
actor, is refused in one line with exit status 2 and no run folder. The local Ray it starts is lean
(no autoscaler monitor, no dashboard head, no log monitor) unless ``runtime.actor_output`` asks for the
log monitor, and no process of it outlives the command.

Which daemons Ray started is read from what Ray itself records, not from watching processes come
and go: the node that ``ray.init`` starts lists each process it started, by process type
(``ray._private.node.Node.all_processes``, keyed by ``ray_constants.PROCESS_TYPE_*``), all of them
started before ``ray.init`` returns. A poll of the command's children can miss a daemon that a short
run (a refused method) outlives by less than the poll's period."""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = ("import sys\n"
            "sys.modules['torch'] = None  # any 'import torch' in this process now raises ImportError\n"
            "import json, psutil, ray\n"
            "started, ended = {}, {}  # Ray's processes by type; this process's descendants at shutdown\n"
            "def pid_key(pid):  # a pid with its start time, so that a reused pid is not taken for it\n"
            "    try:\n"
            "        return [pid, psutil.Process(pid).create_time()]\n"
            "    except psutil.Error:\n"
            "        return [pid, None]\n"
            "init, shutdown = ray.init, ray.shutdown\n"
            "def recording_init(*args, **kwargs):  # the processes the node started: all are up when init returns\n"
            "    context = init(*args, **kwargs)\n"
            "    node = ray._private.worker._global_node\n"
            "    for kind, infos in (node.all_processes.items() if node is not None else ()):\n"
            "        started[kind] = [pid_key(info.process.pid) for info in infos]\n"
            "    return context\n"
            "def recording_shutdown(*args, **kwargs):  # every process the command has then, the workers included\n"
            "    for p in psutil.Process().children(recursive=True):\n"
            "        try:\n"
            "            ended[p.pid] = [p.create_time(), ' '.join(p.cmdline()[:2])[-100:]]\n"
            "        except psutil.Error:\n"
            "            pass\n"
            "    return shutdown(*args, **kwargs)\n"
            "ray.init, ray.shutdown = recording_init, recording_shutdown\n"
            "from fedray.cli import main\n"
            "status = main(sys.argv[1:])\n"
            "print('TORCH', sys.modules.get('torch') is not None)\n"
            "print('RAY', json.dumps(started))\n"
            "print('ENDED', json.dumps(ended))\n"
            "sys.exit(status)\n")


def line(run: subprocess.CompletedProcess, tag: str):
    return json.loads(run.stdout.split(f"\n{tag} ", 1)[1].splitlines()[0])


def started(run: subprocess.CompletedProcess) -> set[str]:
    """The process types of the Ray node the command started (``ray_constants.PROCESS_TYPE_*``), and a
    check that no process of it, nor any other process the command had when it shut Ray down, is left."""
    ray_processes = line(run, "RAY")
    processes = {(int(pid), created): cmd for pid, (created, cmd) in line(run, "ENDED").items()}
    processes.update({(pid, created): kind for kind, keys in ray_processes.items() for pid, created in keys})
    assert processes, run.stdout
    # ``ray.shutdown`` kills the daemons it recorded and waits for each, but a process that a SIGKILL
    # does not end at once (in a blocking syscall) it leaves after a second; the raylet's workers and
    # agents end after their raylet (or their driver) is gone, not when the command exits. So being
    # gone is a condition that becomes true, waited for up to a generous bound on a loaded machine;
    # it asserts no process outlives the command, never how fast any of them ends.
    deadline = time.monotonic() + 60
    while True:
        left = sorted(what for key, what in processes.items() if alive(*key))
        if not left:
            return set(ray_processes)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left behind: {left}")
        time.sleep(0.5)


def alive(pid: int, created) -> bool:
    """Whether the process with this pid and start time still runs (a zombie has ended)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_the_driver_runs_without_torch_and_refuses_a_bad_method(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("name: driver\ndata: {dataset: fashion_mnist, train_limit: 3000, test_limit: 1000}\n"
                      "federation: {num_clients: 4, clients_per_round: 2, rounds: 2, architectures: {mlp: 4}}\n"
                      "training: {lr: 0.05, batch_size: 32}\nruntime: {actor_cpus: 1}\n")

    def fedray(*args):
        return subprocess.run([sys.executable, "-c", NO_TORCH, "run", str(config), *args, "--no-progress"],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)

    ok = fedray("--run-dir", str(tmp_path / "run"))
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "TORCH False" in ok.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["rounds"] == 2 and result["final"]["eval/accuracy"] > 0.5 and result["server_device"] == "cpu"
    assert result["executor"]["server_hosts_clients"] and result["executor"]["actors"] == 2
    assert started(ok) == {"gcs_server", "raylet"}

    bad = fedray("algorithm.name=nope", "runtime.actor_output=true", "--run-dir", str(tmp_path / "bad"))
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("fedray: error: bad config value algorithm.name = 'nope': valid methods "
                                         "are central, cfd,") and "\n" not in bad.stderr.strip()
    assert not (tmp_path / "bad").exists()
    assert started(bad) == {"gcs_server", "raylet", "log_monitor"}
    # runtime.dashboard starts Ray as ray.init does: the dashboard and both monitors
    shown = fedray("algorithm.name=nope", "runtime.dashboard=true", "--run-dir", str(tmp_path / "bad"))
    assert shown.returncode == 2 and not (tmp_path / "bad").exists()
    assert started(shown) == {"gcs_server", "raylet", "dashboard", "monitor", "log_monitor"}
