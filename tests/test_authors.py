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


def test_a_check_with_fedray_batches_gives_a_cause_only_where_fedray_is_no_further_from_the_code_than_the_code_from_itself():
    import pytest

    authors = script("authors.compare")
    table = {"paper": "FedAUX", "method": "feddf_code", "scene": "alpha 0.01, C = 0.8", "cause": "",
             "diff_mean": -2.8, "diff_ci": [-4.7, -0.9]}
    # two seeds, three rounds: fedray equals the code for 2 and 1 rounds (to the image, 0.005 points)
    check = {**table, "batch_order": "fedray", "seeds": [0, 1], "fedray": [48.0, 56.0], "authors": [50.0, 60.0],
             "control": [49.0, 62.0],
             "diff_mean": -1.0, "diff_ci": [-5.0, 3.0],
             "fedray_rounds": [[20.0, 40.004, 41.0], [30.0, 35.0, 50.0]],
             "authors_rounds": [[20.0, 40.0, 42.0], [30.0, 36.0, 51.0]],
             "control_rounds": [[20.5, 38.0, 40.0], [30.0, 37.0, 49.0]]}
    assert [authors.equal_rounds(f, t) for f, t in zip(check["fedray_rounds"], check["authors_rounds"])] == [2, 1]
    gap, control = authors.drift(check)
    assert gap == pytest.approx((0.004 + 1 + 1 + 1) / 6) and control == pytest.approx((0.5 + 2 + 2 + 1 + 2) / 6)
    cause = authors.cause_of(table, [table, check])
    assert cause.startswith("no difference in arithmetic found") and "first 1 rounds on every seed" in cause
    assert "(a mean gap of 0.50 points a round against 1.25)" in cause
    assert "a seed moves by 3.00 points between fedray and the code and by 1.50 between the code and itself" in cause
    assert authors.cause_of(check, [table, check]) == ""  # a check row has no verdict of its own in the table
    further = {**check, "control_rounds": check["authors_rounds"]}  # the code equal to itself: fedray further
    assert authors.cause_of(table, [table, further]) == ""
    # a paper-rule row whose cause names feddf_code counts that row where its check explains it
    paper = {**table, "method": "feddf", "diff_mean": -17.8, "diff_ci": [-19.8, -15.7]}
    assert authors.cause_of(paper, [paper, table, check]) == authors.CAUSES["FedAUX", "feddf"]
    assert authors.cause_of(paper, [paper, table, further]) == ""
    # the page keeps the check out of the table's counts and shows it apart, by round
    base = {"authors_method": "FedDF", "measure": "maximum", "authors_repo": "fedl-repo/fedaux",
            "authors_commit": "9700c8b0a" * 4, "authors_dirty": False, "fedray_commit": "1" * 40,
            "fedray_dirty": False, "seeds": [0, 1], "fedray": [48.0, 56.0], "authors": [50.0, 60.0],
            "fedray_s": 60.0, "authors_s": 60.0, "setup": {"rounds": "3"}, "cpu": "AMD EPYC"}
    rows = [{**base, **table, "cause": cause}, {**base, **check}]
    text = authors.page(rows)
    assert "**0 of 1 rows agree; 1 differ with a cause written down; 0 differ with no cause found.**" in text
    assert "| feddf_code | alpha 0.01, C = 0.8 | 2 | 52.00 | 55.00 | -1.00 [-5.00, +3.00] | -0.50 [-19.56, +18.56] " \
           "| 2, 1 | 0, 1 | 0.50 / 1.25 |" in text
    assert "| 2 | 0.50 / 1.50 |" in text  # round 2: gaps 0.004 and -1 (size 0.50), the control's 2 and 1
    assert "fedray at commit `111111111`." in text
    # after the check, what it leaves apart (the adapter's CHECK_NOTES); a paper without a check has none
    notes = "What the check leaves apart, and what it does:\n\n- " + script("authors.fedaux").CHECK_NOTES[0] + "."
    assert notes in text and "What the check leaves apart" not in authors.page(rows[:1])


def test_the_check_feeds_the_authors_loaders_fedrays_batches_in_fedrays_order():
    import torch

    from fedray.methods.base import task_seed
    from fedray.training import batch_indices

    adapter = script("authors.fedaux")
    now = {"round": 3}
    sampler = adapter.fedray_order(10, 7, 2**40, lambda: now["round"])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(10)), batch_size=4,
                                         sampler=sampler)
    two_passes = [b for _ in range(2) for (b,) in loader]  # the code's epochs loop over its loader
    fedray = list(batch_indices(10, 4, 6, torch.Generator().manual_seed(task_seed(7, 3, 2**40))))
    assert [b.tolist() for b in two_passes] == [b.tolist() for b in fedray]
    assert sorted(torch.cat(two_passes[:3]).tolist()) == list(range(10))  # a pass is a permutation
    now["round"] = 4  # a new round: the stream seeded anew, as fedray's next task
    (first, *_) = [b for (b,) in loader]
    assert first.tolist() == next(batch_indices(10, 4, 3, torch.Generator().manual_seed(task_seed(7, 4, 2**40)))).tolist()


def test_the_check_feeds_the_codes_scorer_fedrays_privacy_noise():
    # the code's scorer (fl_devices.py:84-113): labels own 0 / public 1, C = 1/lambda with an intercept,
    # coefficients then intercept noised by numpy's `random.normal`, the score the probability of class 0;
    # sklearn's default tol on float32 features. Fed fedray_noise, it releases what fedray's fedaux_code
    # client releases
    from sklearn.linear_model import LogisticRegression

    from fedray.methods.base import task_seed
    from fedray.privacy import SCORERS
    from fedray.privacy.certainty import XI, dp_sigma

    adapter = script("authors.fedaux")
    data = np.random.default_rng(0)
    own = data.normal(0.5, 1.0, size=(40, 6)).astype(np.float32)
    negatives = data.normal(0.0, 1.0, size=(60, 6)).astype(np.float32)
    lam, eps, delta, seed, client = 0.1, 0.1, 1e-5, 3, 5
    x = np.vstack([own, negatives])
    gamma = np.linalg.norm(x, axis=1).max()
    code = LogisticRegression(C=1 / lam, max_iter=1000).fit(x / gamma, np.r_[np.zeros(40), np.ones(60)])
    assert code.coef_.dtype == np.float32
    noise, sigma = adapter.fedray_noise(seed, client), dp_sigma(lam, eps, delta, 100)
    code.coef_ = code.coef_ + sigma * noise.normal(size=code.coef_.shape)
    code.intercept_ = code.intercept_ + sigma * noise.normal(size=code.intercept_.shape)
    ours = SCORERS["logistic"](own, negatives, np.random.default_rng(task_seed(seed, 0, client)), lam, eps, delta,
                               "code", "paper", True, 1e-4, "float32")
    probe = data.normal(0.3, 1.0, size=(30, 6))
    theirs = code.predict_proba(probe / gamma)[:, 0] + XI
    assert theirs.std() > 0.05  # the noise leaves scores that rank
    np.testing.assert_allclose(ours.score(probe), theirs, atol=1e-7)


def test_what_a_comparison_says_of_the_reproduction_is_shown_only_while_its_code_rules_agree_everywhere():
    authors = script("authors.compare")
    text = "under the paper's rules (`fedaux`), and under the code's (fedaux_code, `scorer_dtype: float32`)"
    row = {"paper": "FedAUX", "method": "fedaux_code", "cause": "", "diff_mean": 0.1, "diff_ci": [-1.0, 1.2]}
    far = {**row, "diff_mean": 1.5, "diff_ci": [-0.5, 3.5]}  # within its interval, but more than a point
    check = {**far, "batch_order": "fedray"}  # a check has no verdict of its own
    assert authors.unsettled(text, [row, {**row, "scene": "b"}, check]) == []
    assert authors.unsettled(text, [row, far]) == ["fedaux_code"]
    assert authors.unsettled(text, [{**row, "method": "fedaux"}]) == ["fedaux_code"]  # never run: not settled
