"""fedray sweep on a real local Ray through Ray Tune: trials in placement groups, at once, seeded
splits, local-backend trials, the results table, and a stopped sweep resumed without running its
finished trials again."""

import csv
import json
import shutil

import pytest
import yaml

from fedray.cli import main
from fedray.config import ConfigError
from fedray.repro import final_value, run_specs
from fedray.sweeps import sweep
from tests.integration.conftest import small_config

pytestmark = pytest.mark.integration

GRID = {"training.lr": [0.02, 0.05]}


def base():
    return small_config(federation={"num_clients": 6, "clients_per_round": 3, "rounds": 2, "architectures": {"mlp": 6}},
                        data={"dataset": "fashion_mnist", "train_limit": 3000, "test_limit": 1000},
                        runtime={"torch_threads": 1})


def span(run_dir):
    """When a trial's run started (its config written) and ended (its result written)."""
    return (run_dir / "config.yaml").stat().st_mtime, (run_dir / "result.json").stat().st_mtime


def test_a_sweep_runs_its_trials_at_once_in_their_groups_and_resumes(local_ray, tmp_path):
    out = tmp_path / "sweep"
    result = sweep(base(), GRID, seeds=[0, 1], out=out, progress=False)
    assert [r["status"] for r in result.rows] == ["done"] * 4
    trials = {r["trial"]: out / "trials" / r["trial"] for r in result.rows}
    for name, run_dir in trials.items():
        summary = json.loads((run_dir / "result.json").read_text())
        # one 1-CPU bundle per trial, the server hosting the 6 clients inside it
        assert summary["executor"]["actors_per_node"] == {"trial/bundle:0": 1}
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        seed = int(name.rsplit("=", 1)[1])
        assert (cfg["seed"], cfg["data"]["seed"], cfg["aux"]["seed"]) == (seed, seed, seed)
        assert cfg["training"]["lr"] == float(name.split(",")[0].split("=")[1])
    # 1-CPU trials on 2 CPUs: two run at once
    spans = sorted(span(d) for d in trials.values())
    assert any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    # a trial is an ordinary run: the same config as a local-backend trial, whose round loop runs in
    # the trial's own process on one torch thread, gives the same model to the last bit. That trial
    # runs as the reproduction scripts run theirs (fedray.repro.run_specs: a named variant, local
    # backend) and is read back from its event files
    spec = {"lr": 0.05, "seed": 1, "overrides": ["training.lr=0.05"]}
    [(back, alone)], failed = run_specs(base().to_dict(), [spec], lambda s: f"lr{s['lr']}", tmp_path / "local",
                                        lambda rnd, m, c: {"round": rnd, "accuracy": m["eval/accuracy"]},
                                        progress=False)
    run_dir = tmp_path / "local" / "trials" / "run=lr0.05,seed=1"
    assert failed == [] and back == spec and alone.seed == 1 and alone.point == {"run": "lr0.05"}
    assert alone.config.runtime.torch_threads == 1 and alone.config.training.lr == 0.05
    assert (alone.config.seed, alone.config.data.seed) == (1, 1)
    assert alone.summary == json.loads((run_dir / "result.json").read_text())
    assert alone.summary["executor"]["backend"] == "local"
    assert result.rows[3]["trial"] == "training.lr=0.05,seed=1"
    assert result.rows[3]["final_accuracy"] == alone.summary["final"]["eval/accuracy"]
    # its rounds as logged (float32 in the event files), the last one the summary's
    assert [r["round"] for r in alone.records] == [1, 2]
    assert alone.records[-1]["accuracy"] == pytest.approx(alone.summary["final"]["eval/accuracy"], rel=1e-7)
    # the table: a row per trial, a group per grid point with the seeds' mean and interval
    with open(out / "sweep.csv") as f:
        assert [row["trial"] for row in csv.DictReader(f)] == list(trials)
    group = json.loads((out / "sweep.json").read_text())["groups"][1]
    assert group["training.lr"] == 0.05 and group["seeds"] == [0, 1]
    accs = [r["final_accuracy"] for r in result.rows[2:]]
    assert group["final_accuracy"]["mean"] == pytest.approx(sum(accs) / 2)
    assert group["final_accuracy"]["low"] < min(accs) <= max(accs) < group["final_accuracy"]["high"]

    # stopped: one trial never ran, another stopped after its last checkpoint; the rest finished
    shutil.rmtree(trials["training.lr=0.02,seed=0"])
    (trials["training.lr=0.02,seed=1"] / "result.json").unlink()
    untouched = {n: span(d) for n, d in trials.items() if n.startswith("training.lr=0.05")}
    again = sweep(base(), GRID, seeds=[0, 1], out=out, progress=False)
    assert [r["status"] for r in again.rows] == ["done"] * 4
    assert {n: span(trials[n]) for n in untouched} == untouched  # not run again
    assert [r["final_accuracy"] for r in again.rows] == [r["final_accuracy"] for r in result.rows]  # bit for bit
    # the folder grows by trials: a part of the grid is read from the finished trials, nothing runs
    part = sweep(base(), {"training.lr": [0.05]}, seeds=[1], out=out, progress=False)
    assert [r["final_accuracy"] for r in part.rows] == [result.rows[3]["final_accuracy"]]
    assert {n: span(trials[n]) for n in untouched} == untouched
    # a trial folder of another config under the same name is refused before anything runs
    other = base().to_dict()
    other["federation"]["rounds"] = 3
    with pytest.raises(ConfigError, match=r"training.lr=0.02,seed=0 holds a run of another config "
                                          r"\(federation.rounds = 2, not 3\)"):
        sweep(other, GRID, seeds=[0, 1], out=out, progress=False)


def test_a_failed_trial_is_reported_and_the_others_finish(local_ray, tmp_path, capsys):
    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump(base().to_dict()))
    out = tmp_path / "failing"
    status = main(["sweep", str(config), "--grid", "algorithm.name=fedavg,tests.faulty_method:Faulty",
                   "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert status == 1  # a trial failed
    rows = json.loads((out / "sweep.json").read_text())["trials"]
    assert [(r["algorithm.name"], r["status"]) for r in rows] == [("fedavg", "done"),
                                                                ("tests.faulty_method:Faulty", "failed")]
    assert rows[1]["error"].startswith("ClientFailure: client 1 failed in round 1 during upload: ZeroDivisionError")
    assert f"fedray: trial {rows[1]['trial']} failed: ClientFailure: " in captured.err
    assert "Traceback" not in captured.err  # the traceback is in the trial's error.log
    assert captured.out.startswith("algorithm.name=fedavg: 1 seeds; final ")
    assert "algorithm.name=tests.faulty_method:Faulty: 0 seeds; no finished trial" in captured.out


def test_a_bad_trial_config_is_refused_before_anything_runs(local_ray, tmp_path):
    with pytest.raises(ConfigError, match="training.lr"):
        sweep(base(), {"training.lr": [0.05, -1]}, seeds=[0], out=tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()


def test_a_trial_that_diverged_is_a_result_and_is_not_run_again(local_ray, tmp_path):
    specs = [{"method": m, "seed": 0, "overrides": [f"algorithm.name={m}", "federation.rounds=3"]}
             for m in ("fedavg", "tests.faulty_method:DivergesInRound2")]
    record = lambda rnd, m, c: {"round": rnd, "accuracy": m["eval/accuracy"]}  # noqa: E731
    done, failed = run_specs(base().to_dict(), specs, lambda s: s["method"].split(":")[-1], tmp_path, record,
                             progress=False, diverged=True)
    assert failed == []
    (_, fine), (spec, bad) = sorted(done, key=lambda d: d[0]["method"])
    assert spec["method"] == "tests.faulty_method:DivergesInRound2"
    assert [r["round"] for r in fine.records] == [1, 2, 3] and "final" in fine.summary
    # the diverged trial: its one good round, and its diverged.json as the summary
    run_dir = tmp_path / "trials" / "run=DivergesInRound2,seed=0"
    assert bad.summary == json.loads((run_dir / "diverged.json").read_text())
    assert [r["round"] for r in bad.records] == [1]
    assert (bad.summary["round"], bad.summary["rounds"], bad.summary["chance"]) == (2, 1, 0.1)
    assert bad.summary["why"].startswith("round 2: all 3 client updates held NaN or Inf")
    assert bad.summary["provenance"]["commit"] == fine.summary["provenance"]["commit"]
    row = {"history": bad.records, "diverged": bad.summary}
    assert final_value(row) == 0.1 and final_value({"history": fine.records}) == fine.records[-1]["accuracy"]
    rows = json.loads((tmp_path / "sweep.json").read_text())["trials"]
    assert [r["status"] for r in rows] == ["done", "diverged"] and rows[1]["rounds"] == 1
    # run again: nothing runs (a diverged trial is not a stopped one); without diverged=True it is
    # one of the trials that did not finish, with its line
    before = (run_dir / "diverged.json").stat().st_mtime_ns
    again, failed = run_specs(base().to_dict(), specs, lambda s: s["method"].split(":")[-1], tmp_path, record,
                              progress=False)
    assert len(again) == 1 and (run_dir / "diverged.json").stat().st_mtime_ns == before
    assert [(r["status"], r["error"].split(":")[0]) for r in failed] == [("diverged", "Diverged")]
