"""The harness beside the authors' code (scripts/authors/compare.py): what it hands the authors' FedGen is
fedray's own input, sample for sample (the split, the test set, the clients of each round), in the
layout their loader reads. The authors' code itself is not here; docs/authors.md has its runs."""

from pathlib import Path

import numpy as np
import torch

from fedray.assembly import assemble, load_data
from fedray.config import load_config

from tests.support import script

ROOT = Path(__file__).resolve().parents[1]


def test_the_fedgen_export_is_fedrays_split_test_set_and_schedule(tmp_path):
    adapter, repro = script("authors.fedgen"), script("repro.fedgen")
    spec = repro.spec("table1", "fedavg", 0.1, 3, 4)
    config = load_config(ROOT / "configs" / "fedgen.yaml",
                         [*spec["overrides"], "seed=3", "data.seed=3", "aux.seed=3", "runtime.backend=local"])
    meta = adapter.export(config, tmp_path)
    experiment = assemble(config)
    folder = tmp_path / "data" / "Mnist" / "u20c10-alpha0.1-ratiofedray"
    assert adapter.dataset_name(0.1) == "Mnist-alpha0.1-ratiofedray"  # the loader's name for that folder
    train = torch.load(folder / "train" / "train.pt")
    test = torch.load(folder / "test" / "test.pt")
    # the loader sorts users by name: user i is fedray's client i, holding exactly fedray's samples
    assert sorted(train["users"]) == train["users"] == [f"f_{i:05d}" for i in range(20)]
    reference = load_data(config)
    seen = []
    for name, client in zip(train["users"], experiment.clients):
        user = train["user_data"][name]
        assert torch.equal(user["x"], torch.from_numpy(reference.train_x[client.indices]))
        assert torch.equal(user["y"], torch.from_numpy(reference.train_y[client.indices]))
        seen.append(np.asarray(client.indices))
    assert meta["train_sizes"] == [len(s) for s in seen] and len(np.unique(np.concatenate(seen))) == sum(map(len, seen))
    # the authors' per-user test splits: only the labels a user holds, 1/20 of each such label's
    # test samples, no sample given twice
    for name, client, idx in zip(test["users"], experiment.clients, meta["test_split"]):
        held = set(np.unique(reference.train_y[client.indices]).tolist())
        assert torch.equal(test["user_data"][name]["x"], torch.from_numpy(reference.test_x[idx]))
        labels, counts = np.unique(reference.test_y[idx], return_counts=True)
        assert set(labels.tolist()) == held
        assert all(n == (reference.test_y == label).sum() // 20 for label, n in zip(labels, counts))
    every = np.concatenate([np.asarray(i, dtype=np.int64) for i in meta["test_split"]])
    assert len(np.unique(every)) == len(every) == sum(meta["test_sizes"])
    # fedray's own test set, and the clients fedray's server samples in each round
    whole = torch.load(tmp_path / "fedray_test.pt")
    assert torch.equal(whole["y"], torch.from_numpy(experiment.data.test_y)) and len(whole["y"]) == 10_000
    assert meta["schedule"] == [[c.client_id for c in experiment.strategy.sample_clients(r)] for r in range(1, 5)]
    assert meta["seed"] == 3 and meta["rounds"] == 4


def test_the_primary_measure_is_the_mean_of_the_top_five_rounds():
    adapter = script("authors.fedgen")
    assert adapter.top5([0.1, 0.9, 0.2, 0.8, 0.3, 0.7, 0.4]) == np.mean([0.9, 0.8, 0.7, 0.4, 0.3])


def test_a_row_agrees_only_within_a_point_with_an_interval_that_holds_zero():
    authors = script("authors.compare")
    row = {"diff_mean": 0.4, "diff_ci": [-0.3, 1.1], "cause": ""}
    assert authors.agreement(row) == "agrees"
    assert authors.agreement({**row, "diff_mean": 1.2, "diff_ci": [-0.1, 2.5]}).startswith("open")  # over a point
    assert authors.agreement({**row, "diff_ci": [0.1, 0.7]}).startswith("open")  # the interval excludes 0
    assert authors.agreement({**row, "diff_ci": [0.1, 0.7], "cause": "lr decay"}) == "differs: lr decay"


def test_fedrays_fedgen_runs_take_the_codes_local_lr_decay_and_the_setup_says_so():
    import argparse

    from fedray.repro import setup_rows

    adapter = script("authors.fedgen")
    paper = adapter.Paper(argparse.Namespace(methods=["fedavg", "fedgen_code"], scenes=["0.1"], seeds=[0, 1], rounds=3))
    specs = paper.specs()
    assert len(specs) == 4 and all("training.lr_decay=0.99" in s["overrides"] for s in specs)
    config = load_config(ROOT / "configs" / "fedgen.yaml", specs[0]["overrides"])
    assert config.training.lr_decay == 0.99 and config.federation.rounds == 3
    code = load_config(ROOT / "configs" / "fedgen.yaml", next(s for s in specs if s["method"] == "fedgen_code")["overrides"])
    assert code.algorithm.teacher == "counts_code" and code.algorithm.alpha == 10.0  # the rest of fedgen_code kept
    local = dict((name, ours) for name, ours, _ in setup_rows(config, {}))["local training"]
    assert local.startswith("sgd, lr 0.01 decayed by 0.99 a round of the client's last training, batch 32")


def test_the_page_counts_the_verdicts_and_names_the_settings_that_differ_by_method():
    authors = script("authors.compare")
    base = {"paper": "FedGen", "authors_method": "FedAvg", "scene": "alpha 0.1", "measure": "top-5 mean",
            "authors_repo": "zhuangdizhu/FedGen", "authors_commit": "dd5807c5625404e9", "authors_dirty": False,
            "fedray_commit": "80a9260aaaaaaaaa", "fedray_dirty": False, "seeds": [0, 1], "fedray": [80.0, 82.0],
            "authors": [79.0, 81.5], "diff_mean": 0.75, "diff_ci": [-2.4, 3.9], "fedray_s": 120.0,
            "authors_s": 180.0, "setup": {"rounds": "100", "local training": "20 steps"}, "cause": "",
            "cpu": "AMD EPYC"}
    rows = [{**base, "method": "fedavg"},
            {**base, "method": "fedgen", "authors_method": "FedGen", "diff_mean": 3.0, "diff_ci": [2.0, 4.0],
             "setup": {"rounds": "100", "local training": "20 steps, generator 2 steps"}}]
    text = authors.page(rows)
    assert "**1 of 2 rows agree; 0 differ with a cause written down; 1 differ with no cause found.**" in text
    assert "not corrected for the 2 rows: where both sides compute the same thing, about 0 intervals" in text
    assert "| rounds | 100 |" in text  # one value for every method: said once
    assert "| local training | 20 steps (fedavg); 20 steps, generator 2 steps (fedgen) |" in text
    assert "| fedgen | FedGen | alpha 0.1 | 2 | 81.00 | 80.25 | +3.00 [+2.00, +4.00] | open: no cause found yet | 2.0 / 3.0 |" in text
    caused = authors.page([*rows, {**rows[1], "scene": "alpha 1", "setup": {"rounds": "50", "local training": "20 steps"},
                                   "cause": "the paper's rule"}])
    assert "| fedgen | FedGen | alpha 1 | 2 | 81.00 | 80.25 | +3.00 [+2.00, +4.00] | differs (cause 1) | 2.0 / 3.0 |" in caused
    assert "1. the paper's rule." in caused and "| rounds | 100; 50 (by scene) |" in caused
    assert "`zhuangdizhu/FedGen` at commit `dd5807c56`; fedray at commit `80a9260aa`." in text
    # a paper's rows from two commits: the rarer one names its rows
    later = authors.page([*rows, {**rows[0], "scene": "alpha 1", "fedray_commit": "1234567bbbbbbbbb"}])
    assert "fedray at commits `1234567bb` (alpha 1: fedavg) and `80a9260aa` (the other rows)." in later


def test_a_row_holds_one_fedray_commits_runs_and_the_code_tracker_variant_runs_table_code():
    import argparse

    import pytest

    authors, adapter = script("authors.compare"), script("authors.fedgen")
    paper = adapter.Paper(argparse.Namespace(methods=["feddistill_code"], scenes=["0.1"], seeds=[0, 1], rounds=3))
    config = load_config(ROOT / "configs" / "fedgen.yaml", paper.specs()[0]["overrides"])
    assert config.algorithm.name == "feddistill" and config.algorithm.table == "code"
    a, c = "a" * 40, "c" * 40
    fedray = {("feddistill_code", 0.1, 0): (70.0, 10.0, config, {"commit": a, "dirty": False}),
              ("feddistill_code", 0.1, 1): (72.0, 12.0, config, {"commit": a, "dirty": True})}
    theirs = {k: {"personal": [0.69], "accuracy": [0.5], "authors_accuracy": [0.6], "wall_s": 5.0} for k in fedray}
    (row,) = authors.rows(paper, ("b" * 40, False), fedray, theirs)
    assert row["fedray_commit"] == a and row["fedray_dirty"] and row["authors_method"] == "FedDistill"
    assert row["fedray"] == [70.0, 72.0] and row["authors"] == pytest.approx([69.0, 69.0])  # FedDistill: per-user score
    fedray["feddistill_code", 0.1, 1] = (72.0, 12.0, config, {"commit": c, "dirty": False})
    with pytest.raises(SystemExit, match="commits"):  # runs resumed at another commit make no row
        authors.rows(paper, ("b" * 40, False), fedray, theirs)


def test_causes_rewrites_the_saved_rows_causes_from_causes(tmp_path):
    import json

    authors = script("authors.compare")
    path = tmp_path / "authors.json"
    rows = [{"paper": "MrTF", "method": m, "scene": s, "cause": "stale", "diff_mean": d, "diff_ci": [d - 0.5, d + 0.5]}
            for m, s, d in (("mrtf", "alpha 1", -3.0), ("mrtf_code", "alpha 1", 0.1), ("mrtf", "C-bar 5", 0.2),
                            ("mrtf", "alpha 0.1", -9.0), ("mrtf_code", "alpha 0.1", -3.0), ("mrtf", "C-bar 3", -8.0))]
    path.write_text(json.dumps(rows))
    authors.causes(path)
    saved = {(r["method"], r["scene"]): r for r in json.loads(path.read_text())}
    # the cause says that under the code's rules (mrtf_code) fedray agrees: where that row agrees
    assert saved["mrtf", "alpha 1"]["cause"] == authors.CAUSES["MrTF", "mrtf"]
    assert saved["mrtf_code", "alpha 1"]["cause"] == "" and saved["mrtf", "C-bar 5"]["cause"] == ""  # they agree
    # where mrtf_code differs too, or was not run, the cause would say more than the rows: the row stays open
    assert saved["mrtf", "alpha 0.1"]["cause"] == "" and saved["mrtf", "C-bar 3"]["cause"] == ""
    assert saved["mrtf_code", "alpha 0.1"]["cause"] == ""  # no cause written down for it
    # a setting or file in backquotes is no method: only fedgen_code's row counts, and it must be there
    fedgen = [{"paper": "FedGen", "method": m, "scene": "alpha 0.1", "cause": "", "diff_mean": d, "diff_ci": [d - 0.4, d + 0.4]}
              for m, d in (("fedgen", -5.1), ("fedgen_code", -0.1))]
    assert authors.cause_of(fedgen[0], fedgen) == authors.CAUSES["FedGen", "fedgen"] and "counts" in authors.CAUSES["FedGen", "fedgen"]
    assert authors.cause_of(fedgen[0], fedgen[:1]) == ""
