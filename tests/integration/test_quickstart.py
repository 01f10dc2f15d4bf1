"""The README's quick-start config through the real CLI (2 of its rounds, 5 of its 10 clients a round, which
halves the test's time), read back from TensorBoard."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedray.tracking import read_scalars

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_cli_logs_per_round_accuracy(tmp_path):
    run_dir = tmp_path / "qs"
    out = subprocess.run(
        [sys.executable, "-m", "fedray.cli", "run", "configs/quickstart.yaml", "federation.rounds=2",
         "federation.clients_per_round=5",
         "--run-dir", str(run_dir), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    printed = json.loads(out.stdout)
    accuracy = read_scalars(run_dir)["eval/accuracy/cnn"]
    assert [step for step, _ in accuracy] == [1, 2]
    assert accuracy[-1][1] > 0.70  # chance is 0.10; 0.756 after 2 rounds of 5 clients here
    assert printed["eval/accuracy/cnn"] == pytest.approx(accuracy[-1][1])
    result = json.loads((run_dir / "result.json").read_text())
    assert result["executor"]["backend"] == "ray" and result["executor"]["actors"] >= 1
