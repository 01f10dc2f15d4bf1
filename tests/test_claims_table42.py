"""Thesis Table 4.2 as a family of claims (scripts/repro/claims.py's table42_family): each STC variant against
every other method of the table, in both configs, on the MB to each config's target compared as
log10(MB_B / MB_A); a seed where either side never reaches the target is left out of that pair.
Exact values on hand-made runs, and the seeds and the ``--family`` call of scripts/repro/table42.py."""

import json
import math
import sys

import pytest
from scipy.stats import t as t_dist

from tests.support import script

COMMIT = "c" * 40


def _evals(reach: float | None, up: float, down: float, target: float) -> list[dict]:
    """A run's test evaluations: below the target, then (where ``reach`` is set) ``reach`` at up / down MB in all."""
    out = [{"iterations": 50, "accuracy": target - 0.1, "mb_up": up / 2, "mb_down": down / 2}]
    if reach is not None:
        out += [{"iterations": 100, "accuracy": reach, "mb_up": up, "mb_down": down},
                {"iterations": 150, "accuracy": reach + 0.01, "mb_up": 2 * up, "mb_down": 2 * down}]
    else:
        out += [{"iterations": 100, "accuracy": target - 0.05, "mb_up": up, "mb_down": down}]
    return out


def _run(method: str, seed: int, evals: list[dict], commit: str = COMMIT) -> dict:
    return {"method": method, "seed": seed, "evals": evals, "clients_per_round": 10, "wall_s": 1.0,
            "provenance": {"commit": commit, "dirty": False, "seeds": {"run": seed, "init": seed, "split": seed,
                                                                       "aux": seed}}}


def _save(folder, stem: str, runs: list[dict]) -> None:
    """The runs as a docs folder's record of the config ``stem`` (``folder/records/``)."""
    (folder / "records").mkdir(exist_ok=True)
    (folder / "records" / f"repro_table42_{stem}.json").write_text(json.dumps(
        {"config": f"configs/{stem}.yaml", "budget": 100, "eval_every": 50, "sign_step": 0.0002, "targets": [0.89],
         "results": runs}))


def _family(tmp_path, monkeypatch, cost, seeds=(0, 1, 2)):
    """The family from hand-made runs of both configs: ``cost(stem, method, seed)`` gives a run's MB up and
    down to the config's target, or None where it never reaches it."""
    claims, mod = script("repro.claims"), script("repro.table42")
    for stem, (_, target) in mod.FAMILY.items():
        runs = []
        for m in mod.METHODS:
            for s in seeds:
                c = cost(stem, m, s)
                runs.append(_run(m, s, _evals(None if c is None else target, *(c or (1.0, 1.0)), target)))
        _save(tmp_path, stem, runs)
    monkeypatch.setattr(claims, "DOCS", tmp_path)
    return claims, mod, claims.test(claims.table42_family())


def test_the_measure_is_the_log_ratio_of_the_mb_to_the_target():
    claims, mod = script("repro.claims"), script("repro.table42")
    target = 0.8
    # A (STC) first reaches 0.8 after 2 MB up and 18 down; B after 100 up and 100 down: 10 times A's total
    a = claims.table42_runs({"results": [_run("STC p=1/25", 0, _evals(0.81, 2.0, 18.0, target))]}, target)[0]
    b = claims.table42_runs({"results": [_run("Baseline", 0, _evals(0.8, 100.0, 100.0, target))]}, target)[0]
    primary, secondary = claims.MEASURES[mod.PRIMARY][1], claims.MEASURES[mod.SECONDARY][1]
    # log10(1 / MB) per client slot: the 10 clients of a round share the total
    assert primary(a, "accuracy") == pytest.approx(-math.log10(20 / 10))
    assert primary(a, "accuracy") - primary(b, "accuracy") == pytest.approx(1.0)  # log10(200 / 20)
    assert secondary(a, "accuracy") - secondary(b, "accuracy") == pytest.approx(math.log10(100 / 2))
    # the first evaluation at or above the target counts, as on the page; none: no value
    assert mod.first_reaching(a_evals := _evals(0.81, 2.0, 18.0, target), target) == a_evals[1]
    never = claims.table42_runs({"results": [_run("Baseline", 0, _evals(None, 5.0, 5.0, target))]}, target)[0]
    assert primary(never, "accuracy") is None


def test_the_family_is_every_stc_variant_against_every_other_method_in_both_configs(tmp_path, monkeypatch):
    # every run reaches the target; STC's total is a tenth of every other method's in every seed but the
    # last, where it is a fifth
    def cost(stem, m, s):
        return (1.0, 9.0) if m.startswith("STC") else (50.0, 50.0 if s < 4 else 0.0)

    claims, mod, t = _family(tmp_path, monkeypatch, cost, seeds=range(5))
    assert mod.PROPOSED == ("STC p=1/25", "STC p=1/100", "STC p=1/400")
    assert set(mod.PROPOSED) | set(mod.BASELINES) == set(mod.METHODS) and mod.FAMILY_SEEDS == (0, 1, 2, 3, 4)
    assert t.commit == COMMIT and not t.refused
    assert len(t.rows) == 3 * 5 * 2 and t.level == 1 - 0.05 / 30
    pairs = {(c.a, c.b, c.scene) for c, *_ in t.rows}
    assert pairs == {(a, b, f"{stem.rsplit('_', 1)[1]}, to {target:g}") for stem, (_, target) in mod.FAMILY.items()
                     for a in mod.PROPOSED for b in mod.BASELINES}
    assert {c.scene for c, *_ in t.rows} == {"logreg, to 0.82", "lstm, to 0.65"}
    c, p, q, verdict = t.rows[0]
    assert p.seeds == (0, 1, 2, 3, 4) and p.wins == 5
    # A - B per seed: log10(100 / 10) = 1 four times, then log10(50 / 10); its t interval at 1 - 0.05/30
    diffs = [1.0] * 4 + [math.log10(5)]
    mean = sum(diffs) / 5
    half = t_dist.ppf(1 - 0.05 / 60, 4) * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 4 / 5)
    assert (p.difference.mean, p.difference.low, p.difference.high) == pytest.approx((mean, mean - half, mean + half))
    assert q.difference.mean == pytest.approx(math.log10(50))  # the upload: 50 MB against 1
    assert verdict == "holds" and mean - half > 0
    assert "A > B: A needs fewer MB to the target" in t.family.note and "not tested" not in t.family.note


def test_a_seed_where_one_side_never_reaches_the_target_is_left_out_of_that_pair(tmp_path, monkeypatch):
    # the LSTM's STC p=1/400 never reaches its target in seed 1; its signSGD never in any seed
    def cost(stem, m, s):
        if stem.endswith("lstm") and (m == "signSGD" or (m == "STC p=1/400" and s == 1)):
            return None
        return (1.0, 9.0) if m.startswith("STC") else (50.0, 50.0)

    claims, mod, t = _family(tmp_path, monkeypatch, cost)
    rows = {(c.a, c.b, c.scene.split(" (")[0]): (c, p) for c, p, *_ in t.rows}
    # the three claims against the LSTM's signSGD have no seed where both reach: not tested, not counted
    assert len(t.rows) == 30 - 3 and t.level == 1 - 0.05 / 27
    assert not any(b == "signSGD" and s.startswith("lstm") for _, b, s in rows)
    assert ("not tested, no seed where both reach the target: STC p=1/25 > signSGD in lstm, to 0.65 (A reached it in "
            "3 of 3 seeds, B in 0 of 3); STC p=1/100 > signSGD in lstm") in t.family.note
    # STC p=1/400 against FedAvg n=100 on the LSTM: seeds 0 and 2, and the scene says how many reached
    c, p = rows["STC p=1/400", "FedAvg n=100", "lstm, to 0.65"]
    assert p.seeds == (0, 2) and c.scene == "lstm, to 0.65 (A reached it in 2 of 3 seeds, B in 3 of 3)"
    assert p.difference.mean == pytest.approx(1.0)
    # logistic regression: every seed in every pair
    assert {len(p.seeds) for (_, _, s), (_, p) in rows.items() if s.startswith("logreg")} == {3}


def test_runs_of_two_commits_do_not_make_the_family(tmp_path, monkeypatch):
    claims, mod = script("repro.claims"), script("repro.table42")
    for i, (stem, (_, target)) in enumerate(mod.FAMILY.items()):
        # each config's call at its own commit: the family is not built
        _save(tmp_path, stem, [_run(m, s, _evals(target, 1.0, 1.0, target), commit=str(i) * 40)
                               for m in mod.METHODS for s in (0, 1)])
    monkeypatch.setattr(claims, "DOCS", tmp_path)
    assert "ran at 2 commits" in claims.test(claims.table42_family()).refused


def test_the_recorded_family_reads_the_saved_runs():
    claims, mod = script("repro.claims"), script("repro.table42")
    t = claims.test(claims.table42_family())
    assert not t.refused and len(t.rows) == 30
    c, p, *_ = next(r for r in t.rows
                    if (r[0].a, r[0].b) == ("STC p=1/25", "Baseline") and r[0].scene.startswith("logreg"))
    # by hand from the saved page's evaluations: the total MB at the first evaluation at or above 0.82
    saved = json.loads((claims.DOCS / "records" / "repro_table42_repro_thesis_table42_logreg.json").read_text())["results"]
    total = {}
    for r in saved:
        if (e := mod.first_reaching(r["evals"], 0.82)) and r.get("seed", 0) in mod.FAMILY_SEEDS:
            total[r["method"], r.get("seed", 0)] = e["mb_up"] + e["mb_down"]
    seeds = [s for s in mod.FAMILY_SEEDS if ("STC p=1/25", s) in total and ("Baseline", s) in total]
    assert p.seeds == tuple(seeds) and seeds
    assert p.difference.mean == pytest.approx(
        sum(math.log10(total["Baseline", s] / total["STC p=1/25", s]) for s in seeds) / len(seeds))


def test_a_seed_sets_the_split_and_the_run(monkeypatch):
    mod = script("repro.table42")
    import fedray.repro
    from fedray.sweeps import plan

    seen = {}

    def sweep(config, grid, seeds, out, record, **kw):
        seen.update(grid=grid, seeds=list(seeds))
        return [], []

    monkeypatch.setattr(fedray.repro, "run_sweep", sweep)
    todo = mod.specs(0.0002, 400, 50, ["Baseline", "FedAvg n=100"], seeds=(0, 3))
    assert [(s["method"], s["seed"]) for s in todo] == [("Baseline", 0), ("FedAvg n=100", 0), ("Baseline", 3),
                                                        ("FedAvg n=100", 3)]
    mod.run("x.yaml", todo, "sweep", 2)
    trials = {(t.point["run"], t.seed): t.overrides for t in plan(seen["grid"], seen["seeds"])}
    assert seen["seeds"] == [0, 3] and trials["FedAvg n=100", 3]["training.steps"] == 100
    for (_, seed), o in trials.items():
        assert o["data.seed"] == o["seed"] == seed


def test_the_page_gives_the_mean_over_the_seeds_that_reach_a_target():
    mod = script("repro.table42")
    runs = [_run("STC p=1/25", 0, _evals(0.8, 2.0, 20.0, 0.8)), _run("STC p=1/25", 1, _evals(0.8, 4.0, 40.0, 0.8)),
            _run("STC p=1/25", 2, _evals(None, 4.0, 40.0, 0.8))]
    row = mod.row("STC p=1/25", runs, [0.8, 0.85], 10)
    assert row[2] == "3.0 / 30.0 (0.30 / 3.00; 100 it.; 2 of 3 seeds)" and row[3] == "n.a. (0 of 3 seeds)"
    assert row[1] == f"{(0.81 + 0.81 + 0.75) / 3:.4f}"  # the mean of each seed's best
    # one seed: the cell as it always was
    assert mod.row("STC p=1/25", runs[:1], [0.8, 0.85], 10)[2:4] == ["2.0 / 20.0 (0.20 / 2.00; 100 it.)", "n.a."]
    # a result saved before seeds were kept is seed 0
    assert mod.key({"method": "Baseline"}) == ("Baseline", 0) == mod.key(_run("Baseline", 0, []))


def test_family_runs_exactly_the_family_in_one_call(tmp_path, monkeypatch):
    mod = script("repro.table42")
    calls = []

    def run(config, todo, sweep, jobs):
        calls.append((config, todo, sweep))
        return {mod.key(s): _run(s["method"], s["seed"], _evals(0.9, 1.0, 1.0, 0.8)) for s in todo}, []

    monkeypatch.setattr(mod, "run", run)
    monkeypatch.setattr(sys, "argv", ["table42.py", "--family", "--jobs", "2", "--out", str(tmp_path),
                                      "--sweep", str(tmp_path / "sweep")])
    mod.main()
    assert [c[0].name for c in calls] == [f"{stem}.yaml" for stem in mod.FAMILY]
    for (config, todo, sweep), (stem, (budget, target)) in zip(calls, mod.FAMILY.items()):
        assert sweep == tmp_path / "sweep" / stem
        assert {(s["method"], s["seed"]) for s in todo} == {(m, s) for m in (*mod.PROPOSED, *mod.BASELINES)
                                                            for s in mod.FAMILY_SEEDS}
        assert f"federation.rounds={budget}" in todo[0]["overrides"]  # the Baseline: one iteration a round
        saved = json.loads((tmp_path / "records" / f"repro_table42_{stem}.json").read_text())
        assert saved["budget"] == budget and saved["targets"] == sorted({mod.PAPER_TARGET, target})
        assert len(saved["results"]) == 40 and {r["seed"] for r in saved["results"]} == set(mod.FAMILY_SEEDS)
        call, = saved["invocations"]
        assert call["family"] and call["runs"] == 40 and call["seeds"] == list(mod.FAMILY_SEEDS) and "commit" in call
        page = (tmp_path / f"repro_table42_{stem}.md").read_text()
        assert "Seeds 0, 1, 2, 3, 4, each the run's seed and the split's" in page
        assert f"{target} the claims' (`--family`" in page
