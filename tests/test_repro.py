"""The reproduction harness (fedray.repro) without Ray: results merged, runs read back from their event
files, the scripts' arguments and records (its sweeps run on Ray in tests/integration/test_sweep.py)."""

import json
import time
from pathlib import Path

import pytest

from fedray.repro import (Store, cpu_model, diverged_text, final_value, grid_arguments, invocation, listing,
                          markdown_table, round_metrics, run_experiments, run_specs)


def test_store_merges_results_and_drops_a_file_of_another_header(tmp_path):
    path = tmp_path / "grid.json"
    store = Store(path, key=lambda r: r["name"], header={"budget": 2}, match=("budget",))
    store.save({"short": {"name": "short", "v": 1}, "long": {"name": "long", "v": 2}})
    saved = json.loads(path.read_text())
    assert saved["budget"] == 2 and [r["name"] for r in saved["results"]] == ["short", "long"]
    store.save({**store.load(), "short": {"name": "short", "v": 3}})  # a re-run replaces its own result only
    assert store.load() == {"short": {"name": "short", "v": 3}, "long": {"name": "long", "v": 2}}
    assert Store(path, key=lambda r: r["name"], header={"budget": 3}, match=("budget",)).load() == {}
    bare = Store(tmp_path / "bare.json", key=lambda r: r["name"], field=None)
    bare.save({"a": {"name": "a"}})
    assert json.loads(bare.path.read_text()) == [{"name": "a"}]  # field=None: a bare list


def test_round_metrics_reads_a_runs_rounds_from_its_event_files(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path)) as w:
        w.add_scalar("fedaux/score_mean", 0.25, 0)  # before round 1: joins round 1
        for epoch in range(1, 6):
            w.add_scalar("pretrain/loss/mlp", 1.0 / epoch, epoch)  # by pre-training epoch: left out
        for rnd in (1, 2, 3):
            w.add_scalar("time/round_s", 0.5 * rnd, rnd)
            if rnd != 2:
                w.add_scalar("eval/accuracy", 0.125 * rnd, rnd)
    rounds = round_metrics(tmp_path)
    assert rounds == {1: {"fedaux/score_mean": 0.25, "time/round_s": 0.5, "eval/accuracy": 0.125},
                      2: {"time/round_s": 1.0}, 3: {"time/round_s": 1.5, "eval/accuracy": 0.375}}
    assert list(rounds) == [1, 2, 3]


def test_run_specs_refuses_specs_that_are_not_a_grid_over_their_seeds(tmp_path):
    specs = [{"m": "a", "seed": 0, "overrides": []}, {"m": "b", "seed": 0, "overrides": []},
             {"m": "a", "seed": 1, "overrides": []}]  # b lacks seed 1
    with pytest.raises(ValueError, match="the specs are not every variant for every seed"):
        run_specs(tmp_path / "c.yaml", specs, lambda s: s["m"], tmp_path / "out", lambda r, m, c: m)
    assert not (tmp_path / "out").exists()  # refused before any sweep


def test_run_experiments_saves_after_each_experiment_and_gathers_the_failed(tmp_path, capsys):
    store = Store(tmp_path / "grid.json", key=lambda r: r["name"])
    store.save({"old": {"name": "old"}})
    specs = [{"experiment": "a", "n": 1}, {"experiment": "b", "n": 2}, {"experiment": "a", "n": 3}]
    saved_before = []

    def run(experiment, mine):
        saved_before.append(sorted(store.load()))
        return {f"{experiment}{s['n']}": {"name": f"{experiment}{s['n']}"} for s in mine}, [{"trial": experiment}]

    results, failed = run_experiments(specs, run, store, lambda r: f"done {r['name']}")
    assert saved_before == [["old"], ["a1", "a3", "old"]]  # experiment a saved before b ran
    assert sorted(results) == sorted(store.load()) == ["a1", "a3", "b2", "old"]
    assert failed == [{"trial": "a"}, {"trial": "b"}]
    assert capsys.readouterr().out.split("\n") == ["done a1", "done a3", "done b2", ""]


def test_markdown_table_and_listing():
    assert markdown_table(["", "FL", "CFL"], [["ours", "31.5", ""], ["paper", "about 20", "60"]]) == [
        "| | FL | CFL |", "|---|---|---|", "| ours | 31.5 | |", "| paper | about 20 | 60 |"]
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
    assert markdown_table(["weights"], [["|D_k|"]])[2] == "| \\|D_k\\| |"  # one cell, not three
    assert [listing(x) for x in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a and b", "a, b and c"]


def test_grid_arguments_take_only_the_scripts_experiments(tmp_path, capsys):
    parser = grid_arguments("Runs a grid.\n\nMore text.", ["table71", "mixed"], tmp_path / "out")
    args = parser.parse_args(["--only", "mixed", "--jobs", "2"])
    assert (args.only, args.jobs, args.rounds, args.plot_only) == (["mixed"], 2, None, False)
    assert args.out == str(tmp_path / "out")
    assert parser.description == "Runs a grid."
    with pytest.raises(SystemExit):
        parser.parse_args(["--only", "table51"])
    assert "invalid choice: 'table51'" in capsys.readouterr().err


def test_invocation_sums_the_runs_it_made_and_names_the_machine(tmp_path):
    args = grid_arguments("Runs a grid.", ["a", "b"], tmp_path / "out").parse_args(["--only", "a", "--jobs", "2"])
    results = {"x": {"wall_s": 2.0}, "y": {"wall_s": 3.5}, "old": {"wall_s": 100.0}}
    done = invocation(args, [{"k": "x"}, {"k": "y"}], results, key=lambda s: s["k"], start=time.perf_counter() - 4,
                      warm_s=1.0)
    assert (done["only"], done["jobs"], done["runs"], done["run_s"], done["warm_s"]) == (["a"], 2, 2, 5.5, 1.0)
    assert 4 <= done["wall_s"] < 60 and done["cpu"] == cpu_model() != ""


def _run(commit="a" * 40, dirty=False, split=0, aux=0):
    return {"provenance": {"commit": commit, "dirty": dirty, "seeds": {"run": 0, "init": 0, "split": split, "aux": aux}}}


def test_a_table_comes_from_one_clean_commit_or_refuses_to_build():
    from fedray.repro import MixedRuns, check_pairing, commit_text, origin

    assert origin([_run(), _run()], "t") == "a" * 40 and commit_text("a" * 40) == "commit `aaaaaaaaa`"
    assert origin([{}, {"provenance": None}], "t") is None and "not recorded" in commit_text(None)
    with pytest.raises(MixedRuns, match=r"^Table 1: the runs ran at 2 commits \(aaaaaaaaa, bbbbbbbbb\); re-run them"):
        origin([_run(), _run("b" * 40)], "Table 1")
    with pytest.raises(MixedRuns, match=r"^t: 1 of 2 runs carry no commit"):
        origin([_run(), {}], "t")
    with pytest.raises(MixedRuns, match="differs from its commit"):
        origin([_run(), _run(dirty=True)], "t")
    with pytest.raises(MixedRuns, match="differs from its commit"):  # outside a checkout: no commit to name
        origin([_run(commit=None, dirty=None)], "t")
    check_pairing(_run(split=3, aux=3), _run(split=3, aux=3), "t")
    check_pairing(_run(), {}, "t")  # unrecorded runs are not checked (and give no verdict)
    with pytest.raises(MixedRuns, match=r"paired runs saw different aux seeds \(0 and 2\)"):
        check_pairing(_run(split=2, aux=0), _run(split=2, aux=2), "t")


def test_the_setup_table_is_read_from_the_config():
    from fedray.config import load_config
    from fedray.repro import setup_table

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "repro_fedaux_table71_fmnist.yaml",
                         ["data.test_limit=2000", "federation.rounds=7"])
    lines = setup_table(config, {"rounds": "100", "model": "ResNet-8"}, [("the MLP", "two cores")])
    assert "| rounds | 7 | 100 |" in lines and "| model | mlp | ResNet-8 |" in lines
    assert "| test set | the first 2,000 test samples | - |" in lines
    assert "| distillation | adam, lr 0.001, batch 128, 1 epoch over the auxiliary data | - |" in lines
    assert lines[-1] == "- the MLP: two cores"


def test_a_run_that_diverged_scores_chance_and_is_named():
    ok = {"method": "a", "history": [{"round": 1, "accuracy": 0.5}, {"round": 2, "accuracy": None}]}
    bad = {"method": "b", "history": [{"round": 1, "accuracy": 0.6}],
           "diverged": {"round": 2, "why": "round 2: all 10 client updates held NaN or Inf", "chance": 0.1}}
    assert final_value(ok) == 0.5 and final_value(bad) == 0.1  # not its last good round's 0.6
    assert diverged_text([ok], lambda r: r["method"]) == ""
    assert diverged_text([ok, bad], lambda r: r["method"]) == (
        "Runs that diverged, each counted at chance as its final accuracy: b, in round 2 (all 10 client updates "
        "held NaN or Inf), counted as 10.0%.")
