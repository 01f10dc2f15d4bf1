"""NaN and Inf never reach the global model: bad updates are left out and counted, and a run whose
every update (or whose model) is non-finite stops in one line naming the round and the cause."""

import json

import numpy as np
import pytest

import tests.faulty_method as faulty
from fedray.checkpoint import CHECKPOINT, DIVERGED, read_checkpoint
from fedray.cli import main
from fedray.config import load_config
from fedray.provenance import provenance
from fedray.runner import RunFailed, discard, run_experiment, run_to_the_end
from fedray.tracking import read_scalars
from fedray.weights import all_finite
from tests.test_runner import local_config

pytestmark = pytest.mark.faults


def read_text(run_dir, tag: str) -> str:
    """The text logged under ``tag`` in the run's event files, every step's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return "\n".join(v.decode() for event in acc.Tensors(f"{tag}/text_summary") for v in event.tensor_proto.string_val)


def test_all_finite_looks_into_every_float_of_a_payload():
    good = {"w": np.ones((2, 2), np.float32), "n": np.array([3]), "m": [1.0, (np.zeros(1),)], "b": b"\xff\xff"}
    assert all_finite(good)
    for bad in ({"w": np.array([1.0, np.inf])}, {"m": [1.0, (np.array([np.nan]),)]}, [float("nan")]):
        assert not all_finite(bad)


@pytest.mark.parametrize("fold", [True, False], ids=["folded-on-the-host", "every-update-to-the-server"])
def test_nan_updates_are_left_out_counted_and_the_run_learns(tmp_path, fold):
    config = local_config(federation={"num_clients": 6, "clients_per_round": 6, "rounds": 3,
                                      "architectures": {"mlp": 6}}, training={"lr": 0.1, "batch_size": 16, "epochs": 3},
                          runtime={"backend": "local", "torch_threads": 1, "fold": fold})
    summary = run_experiment(config, tmp_path, progress=False, method=faulty.NAN_CLIENTS)
    scalars = read_scalars(tmp_path)
    assert [v for _, v in scalars["clients/rejected"]] == [2.0, 2.0, 2.0]  # clients 1 and 4, every round
    assert [v for _, v in scalars["clients/participants"]] == [4.0, 4.0, 4.0]  # the aggregated ones
    assert summary["final"]["eval/accuracy"] > 0.85  # digits, 4 honest clients (all 6: 0.95); chance is 0.10
    assert all_finite(read_checkpoint(tmp_path / CHECKPOINT)["strategy"]["models"])
    up = [v for _, v in scalars["comm/bytes_up"]]
    assert up == [up[0]] * 3 and up[0] == 6 * up[0] // 6 > 0  # the rejected clients' uploads count too
    assert "clients [1, 4] held NaN or Inf" in read_text(tmp_path, "clients/rejected")


def test_a_round_of_only_nan_updates_stops_the_run_and_names_the_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(faulty, "POISONED", range(6))
    monkeypatch.setattr(faulty, "POISONED_FROM", 3)
    with pytest.raises(RunFailed) as info:
        run_experiment(local_config(federation={"num_clients": 6, "clients_per_round": 3, "rounds": 5,
                                                "architectures": {"mlp": 6}}),
                       tmp_path, progress=False, method=faulty.NAN_CLIENTS)
    line = str(info.value)
    assert "\n" not in line and line.startswith("Diverged: round 3: all 3 client updates held NaN or Inf")
    assert "the likely cause is the learning rate (training.lr = 0.1)" in line
    assert line.endswith(f"the checkpoint of round 2 is intact: fedray resume {tmp_path}")
    assert read_checkpoint(tmp_path / CHECKPOINT)["round"] == 2
    # the divergence is the run's result: diverged.json, and no result.json
    diverged = json.loads((tmp_path / DIVERGED).read_text())
    assert not (tmp_path / "result.json").exists()
    assert diverged["round"] == 3 and diverged["rounds"] == 2 and diverged["chance"] == 0.1  # digits: 10 classes
    assert line.startswith("Diverged: " + diverged["why"])
    scalars = read_scalars(tmp_path)
    assert diverged["last"]["round"] == 2
    assert diverged["last"]["eval/accuracy"] == pytest.approx(scalars["eval/accuracy"][-1][1], rel=1e-6)  # float32
    assert diverged["provenance"] == provenance(load_config(tmp_path / "config.yaml"))
    # a sweep does not run a diverged trial again (its seeds fix every step), and a restart discards it
    run_to_the_end(load_config(tmp_path / "config.yaml"), tmp_path)
    assert json.loads((tmp_path / DIVERGED).read_text()) == diverged
    discard(tmp_path)
    assert not (tmp_path / DIVERGED).exists()


def test_a_learning_rate_that_diverges_is_one_line_and_exit_status_1(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("name: nan\ndata: {dataset: digits}\n"
                      "federation: {num_clients: 6, clients_per_round: 3, rounds: 4, architectures: {mlp: 6}}\n"
                      "training: {lr: 1.0e+6, batch_size: 16}\nruntime: {backend: local, torch_threads: 1}\n")
    assert main(["run", str(config), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("fedray: run folder")
    assert err[1].startswith("fedray: error: Diverged: round 1: all 3 client updates held NaN or Inf")
    assert "training.lr = 1e+06" in err[1] and err[1].endswith(f"no checkpoint was written in {tmp_path / 'run'}")
