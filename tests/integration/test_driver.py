"""The Ray driver holds no model and no data: ``fedray run`` with torch made unimportable in the
driver still runs to the end (the actors import torch), and a bad method, resolved in the server
actor, is refused in one line with exit status 2 and no run folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = ("import sys\n"
            "sys.modules['torch'] = None  # any 'import torch' in this process now raises ImportError\n"
            "from fedray.cli import main\n"
            "status = main(sys.argv[1:])\n"
            "print('TORCH', sys.modules.get('torch') is not None)\n"
            "sys.exit(status)\n")


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

    bad = fedray("algorithm.name=nope", "--run-dir", str(tmp_path / "bad"))
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("fedray: error: bad config value algorithm.name = 'nope': valid algorithms "
                                         "are central, cfd,") and "\n" not in bad.stderr.strip()
    assert not (tmp_path / "bad").exists()
