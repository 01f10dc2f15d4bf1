"""Thesis Table 6.2 as a family of claims (scripts/repro/claims.py's cfl_family): CFL against FL in each of
the four scenes, paired by seed, on the benign clients' final accuracy; and scripts/repro/cfl.py's
JSON, page and summary from runs of several seeds, with the old bare list of seed-0 runs still read."""

import copy
import json
from pathlib import Path

import pytest

from tests.support import script

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "c" * 40


def _provenance(seed, commit=COMMIT):
    return {"commit": commit, "dirty": False, "seeds": {"run": seed, "init": seed, "split": seed, "aux": seed}}


def _runs(scene, method, finals, commit=COMMIT):
    """One hand-made run a seed: a higher accuracy in an earlier round than the final one, and an
    unmeasured last round, so that only the benign clients' final accuracy gives ``finals``."""
    return [{"experiment": f"table62/{scene}", "method": method, "seed": seed,
             "history": [{"round": 1, "accuracy": 0.99}, {"round": 5, "accuracy": v / 100},
                         {"round": 6, "accuracy": None}],
             "provenance": _provenance(seed, commit)} for seed, v in enumerate(finals)]


# CFL and FL per scene, seeds 0-4 (Clean: FL at seeds 0-2, CFL at 0-1)
RUNS = (_runs("byzantine", "CFL", [80, 82, 81, 83, 79]) + _runs("byzantine", "FL", [40, 45, 42, 38, 44])
        + _runs("noisy", "CFL", [86, 87, 86, 85, 87]) + _runs("noisy", "FL", [85, 88, 84, 87, 86])
        + _runs("label_flip", "CFL", [60, 61, 59, 60, 62]) + _runs("label_flip", "FL", [80, 79, 81, 80, 82])
        + _runs("none", "CFL", [87, 88]) + _runs("none", "FL", [86, 88, 90]))


def test_the_family_is_cfl_against_fl_in_four_scenes_paired_by_seed():
    claims, cfl = script("repro.claims"), script("repro.cfl")
    assert (cfl.PROPOSED, cfl.BASELINES, cfl.PRIMARY) == ("CFL", ("FL",), "final_benign")
    assert cfl.FAMILY_SEEDS == (0, 1, 2, 3, 4)
    family = claims.cfl_family(RUNS)
    assert family.primary == "final_benign" and family.note == ""
    assert [(c.a, c.b, c.scene) for c in family.claims] == [
        ("CFL", "FL", "Byzantine"), ("CFL", "FL", "Noisy"), ("CFL", "FL", "Label-Flip"), ("CFL", "FL", "Clean")]
    t = claims.test(family)
    assert t.commit == COMMIT and t.level == 1 - 0.05 / 4 and not t.refused
    rows = {c.scene: (p, v) for c, p, _, v in t.rows}
    # the final round's accuracy (not the 99% of round 1), by seed
    p, v = rows["Byzantine"]
    assert p.seeds == (0, 1, 2, 3, 4) and (p.a.mean, p.b.mean) == pytest.approx((81.0, 41.8)) and v == "holds"
    assert p.difference.mean == pytest.approx(39.2) and (p.wins, p.losses) == (5, 0)
    assert rows["Noisy"][0].difference.mean == pytest.approx(0.2) and rows["Noisy"][1] == "not shown"
    assert rows["Label-Flip"][0].difference.mean == pytest.approx(-20.0) and rows["Label-Flip"][1] == "reversed"
    # Clean: only the seeds both ran (0 and 1) are paired
    p, v = rows["Clean"]
    assert p.seeds == (0, 1) and (p.a.mean, p.b.mean) == pytest.approx((87.5, 87.0)) and v == "not shown"
    # one run per scene is said only where it is so
    one = claims.cfl_family([r for r in RUNS if r["seed"] == 0])
    assert one.note == "one run per scene"
    assert {v for *_, v in claims.test(one).rows} == {"one seed"}


def test_runs_of_two_commits_do_not_make_the_family():
    claims = script("repro.claims")
    mixed = [r for r in RUNS if r["experiment"] != "table62/none"] + _runs("none", "CFL", [87, 88], commit="d" * 40) \
        + _runs("none", "FL", [86, 88])
    assert "ran at 2 commits" in claims.test(claims.cfl_family(mixed)).refused


def test_the_family_option_runs_exactly_the_claims_runs():
    cfl = script("repro.cfl")
    specs = [s for s in cfl.runs(cfl.FAMILY_SEEDS) if s["experiment"].startswith("table62/")]
    assert len(specs) == 4 * 2 * 5 and {s["method"] for s in specs} == {cfl.PROPOSED, *cfl.BASELINES}
    assert {(s["experiment"], s["seed"]) for s in specs} == {
        (f"table62/{scene}", seed) for scene in cfl.SCENARIOS for seed in cfl.FAMILY_SEEDS}
    # Fig. 6.8 stays one run a method at seed 0
    assert [(s["method"], s["seed"]) for s in cfl.runs(cfl.FAMILY_SEEDS) if s["experiment"] == "fig68"] == [
        ("FL", 0), ("CFL", 0)]


def _bare():
    """docs/records/repro_cfl.json's seed-0 runs as the file was written before seeds, commits and calls were
    kept: a bare list of runs without ``seed``, ``provenance``, ``rounds`` and ``wall_s``."""
    saved = json.loads((ROOT / "docs" / "records" / "repro_cfl.json").read_text())
    return [{k: v for k, v in r.items() if k not in ("seed", "provenance", "rounds", "wall_s")}
            for r in saved["results"] if r.get("seed", 0) == 0]


def test_the_saved_file_is_the_family_at_one_commit():
    """docs/records/repro_cfl.json holds Table 6.2's family (both methods, every scene, seeds 0-4) and Fig. 6.8's
    two runs, every run at one clean commit, and the page is the one written from it."""
    cfl = script("repro.cfl")
    saved = json.loads((ROOT / "docs" / "records" / "repro_cfl.json").read_text())
    assert sorted(map(cfl.key, saved["results"])) == sorted(map(cfl.key, cfl.runs(cfl.FAMILY_SEEDS)))
    assert {(r["provenance"]["commit"], r["provenance"]["dirty"]) for r in saved["results"]} == {
        (saved["invocations"][0]["commit"], False)}
    assert cfl.page(saved) == (ROOT / "docs" / "repro_cfl.md").read_text()


def test_the_saved_bare_list_still_loads():
    """A docs/records/repro_cfl.json written before seeds, commits and calls were kept: its runs are seed 0,
    the family is built from them (without verdicts), and in the object form the file now takes they
    give the same page."""
    claims, cfl = script("repro.claims"), script("repro.cfl")
    saved = _bare()
    assert isinstance(saved, list) and cfl.results_of(saved) is saved
    assert {cfl.key(r)[2] for r in saved} == {0}
    t = claims.test(claims.cfl_family(saved))
    assert len(t.rows) == 4 and t.commit is None and {v for *_, v in t.rows} == {"one seed"}
    assert t.family.note == "one run per scene"
    assert cfl.page({"invocations": [], "results": saved}) == cfl.page(saved)


def test_a_run_of_the_script_converts_the_bare_list_and_keeps_its_runs(tmp_path):
    from fedray.repro import Store

    cfl = script("repro.cfl")
    saved = _bare()
    path = tmp_path / "repro_cfl.json"
    path.write_text(json.dumps(saved))
    store = Store(path, cfl.key)
    results = {cfl.key(r): r for r in cfl.results_of(store.read())}
    new = copy.deepcopy(next(r for r in saved if r["experiment"] == "table62/none" and r["method"] == "FL"))
    new.update(seed=1, provenance=_provenance(1))
    results[cfl.key(new)] = new
    store.header = {"invocations": [{"runs": 1}]}
    store.save(results)
    again = store.read()
    assert again["invocations"] == [{"runs": 1}] and len(cfl.results_of(again)) == len(saved) + 1
    assert cfl.results_of(again)[:len(saved)] == saved


def _seeded(saved, seeds=(0, 1, 2)):
    """The saved Table 6.2 runs at ``seeds``, each seed's accuracies one point above the one before,
    all at one commit; Fig. 6.8's as saved."""
    out = [r for r in saved if r["experiment"] == "fig68"]
    for r in (r for r in saved if r["experiment"].startswith("table62/")):
        for seed in seeds:
            run = copy.deepcopy(r)
            for h in run["history"]:
                h["accuracy"] = None if h["accuracy"] is None else h["accuracy"] + seed / 100
            out.append({**run, "seed": seed, "provenance": _provenance(seed)})
    return out


def test_the_page_and_the_summary_show_the_mean_over_seeds():
    cfl, docs = script("repro.cfl"), script("docs.generate")
    saved = _bare()
    runs = _seeded(saved)
    call = {"only": [], "jobs": 2, "rounds": None, "runs": 24, "wall_s": 600.0, "seeds": [0, 1, 2], "family": True,
            "cpu": "a CPU", "commit": COMMIT}
    text = cfl.page({"invocations": [call], "results": runs})
    byzantine = {m: 100 * cfl.final_accuracy(next(r for r in saved if r["experiment"] == "table62/byzantine"
                                                  and r["method"] == m)) for m in ("FL", "CFL")}
    # seeds x, x + 1, x + 2: mean x + 1, std 1.0
    assert f"| FL | **{byzantine['FL'] + 1:.1f}** ± 1.0 (paper 9.6) |" in text
    assert f"| CFL | **{byzantine['CFL'] + 1:.1f}** ± 1.0 (paper 78.0) |" in text
    assert "(CNN); seeds 0-2, each the run's seed and the split's" in text
    assert "| splits | 30 | 1 | 1 | 0 |" in text
    assert "Runs: commit `ccccccccc`." in text and "**What holds** (4 claims" in text
    assert "Written by `scripts/repro/cfl.py`: 24 runs (`--family`, seeds 0-2) in 10.0 min with 2 trials at once on " \
        "a CPU at commit `ccccccccc`." in text
    cell = docs.cfl62({"invocations": [call], "results": runs})
    assert cell.startswith("FL / CFL final accuracy of the benign clients, %, mean of seeds 0-2: Byzantine "
                           f"**{byzantine['FL'] + 1:.1f} / {byzantine['CFL'] + 1:.1f}**")
    notes = "\n".join(docs.cfl_notes({"invocations": [call], "results": runs}))
    assert "(seeds 0-2, accuracies the means over the seeds, splits their range, 200 rounds;" in notes
    assert "benign clients dropped: 0 in the 9 runs" in notes
    # the same runs at seed 0 alone give the bare list's page, but for their commit
    only0 = [r for r in runs if r.get("seed", 0) == 0]
    assert cfl.page(only0) == cfl.page(saved).replace(
        "Runs: commit not recorded (runs saved before runs carried their commit).\n\n## Fig. 6.8",
        "Runs: commit `ccccccccc`.\n\n## Fig. 6.8")
