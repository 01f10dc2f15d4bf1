"""The reproduction harness (fedray.repro) on tiny digits runs, without Ray: grids, merging, early stop."""

import json
import os
import time

import pytest

from fedray.config import build_config
from fedray.repro import Store, cpu_model, grid_arguments, invocation, listing, markdown_table, run_grid, run_local


def tiny(rounds: int):
    """Four logistic-regression clients on digits; a checkpoint every round unless the harness turns them off."""
    return build_config({"checkpoint_every": 1, "data": {"dataset": "digits"},
                         "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": rounds,
                                        "architectures": {"logreg": 4}},
                         "training": {"lr": 0.1, "batch_size": 16, "epochs": 1},
                         "runtime": {"backend": "local", "torch_threads": 1}})


def record_files(fed, metrics: dict) -> dict:
    """The round, its accuracy, and the files in the run folder after it."""
    return {"round": fed.round, "accuracy": metrics["eval/accuracy"], "run_dir": str(fed.run_dir),
            "files": sorted(p.name for p in fed.run_dir.iterdir())}


def run_spec(spec: dict) -> dict:
    """Module level, so that the worker processes can unpickle it."""
    if spec.get("fail"):
        raise RuntimeError("this run fails")
    done = run_local(tiny(spec["rounds"]), record_files)
    return {**spec, "records": done.records, "rounds_run": done.summary["rounds"], "pid": os.getpid()}


def test_grid_writes_every_result_merges_reruns_and_writes_no_checkpoint(tmp_path, capsys):
    path = tmp_path / "grid.json"
    store = Store(path, key=lambda r: r["name"], header={"budget": 2}, match=("budget",))
    specs = [{"name": "short", "rounds": 1}, {"name": "long", "rounds": 2}]
    run_grid(run_spec, specs, store, jobs=2, cost=lambda s: s["rounds"], line=lambda r: f"done {r['name']}")
    saved = json.loads(path.read_text())
    assert saved["budget"] == 2 and sorted(r["name"] for r in saved["results"]) == ["long", "short"]
    long = next(r for r in saved["results"] if r["name"] == "long")
    assert [h["round"] for h in long["records"]] == [1, 2] and long["rounds_run"] == 2
    assert all(r["pid"] != os.getpid() for r in saved["results"])  # ran in worker processes
    assert sorted(capsys.readouterr().out.split("\n")) == ["", "done long", "done short"]
    assert not any(f.startswith("checkpoint") for r in saved["results"] for h in r["records"] for f in h["files"])
    assert not os.path.exists(long["records"][0]["run_dir"])  # the temporary folder is gone

    results = run_grid(run_spec, [{"name": "short", "rounds": 1, "again": True}], store, jobs=2)
    saved = {r["name"]: r for r in json.loads(path.read_text())["results"]}
    assert saved.keys() == results.keys() == {"short", "long"}
    assert saved["short"]["again"] and saved["long"] == long  # the re-run replaced its own result only
    assert Store(path, key=lambda r: r["name"], header={"budget": 3}, match=("budget",)).load() == {}


def test_grid_starts_the_costliest_first_and_a_partial_grid_survives(tmp_path, capsys):
    store = Store(tmp_path / "grid.json", key=lambda r: r["name"], field=None)
    specs = [{"name": "cheap", "rounds": 1}, {"name": "broken", "fail": True}, {"name": "dear", "rounds": 1}]
    cost = {"dear": 3, "cheap": 2, "broken": 1}
    with pytest.raises(RuntimeError, match="this run fails"):
        run_grid(run_spec, specs, store, jobs=1, cost=lambda s: cost[s["name"]], line=lambda r: r["name"])
    assert capsys.readouterr().out.split() == ["dear", "cheap"]
    assert [r["name"] for r in json.loads(store.path.read_text())] == ["dear", "cheap"]  # field=None: a bare list


def test_run_local_stops_early_and_keeps_only_recorded_rounds():
    done = run_local(tiny(5), record=lambda fed, m: {"round": fed.round} if fed.round % 2 == 0 else None,
                     stop=lambda fed, m: fed.round == 3)
    assert done.records == [{"round": 2}] and done.summary["rounds"] == 3
    assert done.wall_s > 0 and [c.arch for c in done.clients] == ["logreg"] * 4
    assert "eval/accuracy" in run_local(tiny(1)).records[0]  # by default a round's record is its metrics


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
