"""The Ray driver holds no model and no data: ``fedray run`` with torch made unimportable in the
driver still runs to the end (the actors import torch), and a bad method, resolved in the server
actor, is refused in one line with exit status 2 and no run folder. The local Ray it starts is lean
(no autoscaler monitor, no dashboard head, no log monitor) unless ``runtime.actor_output`` asks for the log monitor,
and no process of it outlives the command."""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = ("import json, sys, threading, time, psutil\n"
            "sys.modules['torch'] = None  # any 'import torch' in this process now raises ImportError\n"
            "seen = {}\n"
            "def watch():  # every process this command starts, by pid\n"
            "    while True:\n"
            "        for p in psutil.Process().children(recursive=True):\n"
            "            try:\n"
            "                seen[p.pid] = ' '.join(p.cmdline()[:3])\n"
            "            except psutil.Error:\n"
            "                pass\n"
            "        time.sleep(0.1)\n"
            "threading.Thread(target=watch, daemon=True).start()\n"
            "from fedray.cli import main\n"
            "status = main(sys.argv[1:])\n"
            "print('TORCH', sys.modules.get('torch') is not None)\n"
            "print('SEEN', json.dumps(seen))\n"
            "sys.exit(status)\n")


def started(run: subprocess.CompletedProcess) -> dict[int, str]:
    """The processes the command started, and a check that none of them is left 15 s after it ended."""
    seen = {int(pid): cmd for pid, cmd in json.loads(run.stdout.split("SEEN ", 1)[1].splitlines()[0]).items()}
    deadline = time.time() + 15
    while time.time() < deadline:
        left = []
        for pid, cmd in seen.items():
            try:
                if " ".join(psutil.Process(pid).cmdline()[:3]) == cmd:
                    left.append(cmd)
            except psutil.Error:
                pass
        if not left:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"processes left behind: {left}")


def daemons(seen: dict[int, str]) -> set[str]:
    names = ("gcs_server", "raylet", "monitor.py", "log_monitor.py", "dashboard.py")
    return {n for cmd in seen.values() for part in cmd.split() for n in names if Path(part).name == n}


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
    assert daemons(started(ok)) == {"gcs_server", "raylet"}

    bad = fedray("algorithm.name=nope", "runtime.actor_output=true", "--run-dir", str(tmp_path / "bad"))
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("fedray: error: bad config value algorithm.name = 'nope': valid algorithms "
                                         "are central, cfd,") and "\n" not in bad.stderr.strip()
    assert not (tmp_path / "bad").exists()
    assert daemons(started(bad)) == {"gcs_server", "raylet", "log_monitor.py"}
    # runtime.dashboard starts Ray as ray.init does: the dashboard and both monitors
    shown = fedray("algorithm.name=nope", "runtime.dashboard=true", "--run-dir", str(tmp_path / "bad"))
    assert shown.returncode == 2 and not (tmp_path / "bad").exists()
    assert daemons(started(shown)) == {"gcs_server", "raylet", "dashboard.py", "monitor.py", "log_monitor.py"}
