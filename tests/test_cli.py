"""The CLI end to end on the local backend: run, resume to extend a finished run, report."""

import json

import numpy as np

from fedray.cli import main
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.tracking import read_scalars


def test_run_then_extend_with_resume_matches_a_longer_run(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "name: cli\ncheckpoint_every: 1\ndata: {dataset: digits}\n"
        "federation: {num_clients: 10, clients_per_round: 5, rounds: 2, architectures: {mlp: 10}}\n"
        "training: {lr: 0.1, batch_size: 16}\nruntime: {backend: local, torch_threads: 1}\n")
    short, long = tmp_path / "short", tmp_path / "long"
    assert main(["run", str(config), "--run-dir", str(short), "--no-progress"]) == 0
    assert main(["resume", str(short), "--rounds", "4", "--no-progress"]) == 0
    assert main(["run", str(config), "federation.rounds=4", "--run-dir", str(long), "--no-progress"]) == 0
    a = read_checkpoint(short / CHECKPOINT)
    b = read_checkpoint(long / CHECKPOINT)
    assert a["round"] == b["round"] == 4
    for name, value in a["strategy"]["models"]["mlp"].items():
        np.testing.assert_array_equal(value, b["strategy"]["models"]["mlp"][name])
    assert [s for s, _ in read_scalars(short)["eval/accuracy"]] == [1, 2, 3, 4]
    assert "rounds: 4" in (short / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["report", str(short), "--target", "0.0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rounds"] == 4 and report["round_reached"] == 1


def test_resume_of_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["resume", str(tmp_path)]) == 2
    assert "is not a fedray run folder" in capsys.readouterr().err


def test_check_names_a_missing_auxiliary_data_set(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("data: {dataset: digits}\naux: {dataset: cifar100, size: 1000, root: " + str(tmp_path) + "}\n"
                      "federation: {num_clients: 4, clients_per_round: 2, architectures: {mlp: 4}}\n"
                      "algorithm: {name: feddf}\n")
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedray: error: aux.dataset cifar100: CIFAR-100 not found")
    assert str(tmp_path) in err and "set aux.root" in err
