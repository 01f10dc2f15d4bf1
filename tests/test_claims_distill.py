"""The claims of the thesis's chapter 5 (scripts/repro/claims.py): Table 5.1's family (Dual Distill against the
other init modes, by seed) and Table 5.2's (each CFD variant against FD and FedAvg, on the MB to a target
accuracy as log10 of their ratio, a seed that never reaches the target left out of its pair), from tiny
hand-made runs whose values are known."""

import json
import math

import pytest

from tests.support import script


def _provenance(seed, commit="c" * 40):
    return {"commit": commit, "dirty": False, "seeds": {"run": seed, "init": seed, "split": seed, "aux": seed}}


def _run(experiment, method, alpha, seed, accuracies, up=(), down=()):
    """A run as repro/distill.py saves it: one record a round (accuracy as a fraction; cumulative bytes over
    the participants of 8-client rounds), its seed and provenance."""
    history = [{"round": i + 1, "accuracy": a, "bytes_up_total": up[i] if up else 0,
                "bytes_down_total": down[i] if down else 0} for i, a in enumerate(accuracies)]
    return {"experiment": experiment, "method": method, "alpha": alpha, "archs": "one", "lr": None, "seed": seed,
            "rounds": len(history), "clients_per_round": 8, "history": history, "provenance": _provenance(seed)}


def _saved(tmp_path, monkeypatch, runs):
    claims = script("repro.claims")
    (tmp_path / "records").mkdir(exist_ok=True)
    (tmp_path / "records" / "repro_distill.json").write_text(json.dumps({"meta": {}, "runs": runs}))
    monkeypatch.setattr(claims, "DOCS", tmp_path)
    return claims


def test_table51_is_dual_distill_against_both_other_modes_at_every_alpha_by_seed(tmp_path, monkeypatch):
    mod = script("repro.distill")
    # mode m at alpha a, seed s: a maximum of 80 + mode index + s / 10 (Dual Distill, index 2, is highest)
    runs = [_run("table51", m, a, s, [0.5, (80 + i + s / 10) / 100, 0.6])
            for i, m in enumerate(mod.MODES) for a in mod.ALPHAS51 for s in (0, 1, 2)]
    claims = _saved(tmp_path, monkeypatch, runs)
    family = claims.distill_family()
    assert family.primary == mod.PRIMARY51 == "best" and family.note == ""
    assert [(c.a, c.b, c.scene) for c in family.claims] == [
        ("Dual Distill", b, f"alpha {a:g}") for a in (100, 1, 0.1) for b in ("Init Previous", "Init Random")]
    assert all(set(c.a_runs) == set(c.b_runs) == {0, 1, 2} for c in family.claims)
    assert all(r["method"] == "dual" and r["seed"] == s for c in family.claims for s, r in c.a_runs.items())
    t = claims.test(family)
    assert t.commit == "c" * 40 and t.level == pytest.approx(1 - 0.05 / 6) and len(t.rows) == 6
    # Dual Distill (index 2) minus Init Previous (0) and Init Random (1): 2 and 1 points in every seed
    assert [round(p.difference.mean, 9) for _, p, _, _ in t.rows] == [2, 1] * 3
    # one seed per scene: no interval, and the note says so
    one = _saved(tmp_path, monkeypatch, [r for r in runs if r["seed"] == 0])
    assert one.distill_family().note == "one run per scene"
    assert {v for *_, v in one.test(one.distill_family()).rows} == {"one seed"}


def test_table52_measure_is_log10_of_the_mb_to_the_target():
    claims = script("repro.claims")
    # 8 clients a round: 8e6 bytes over the participants are 1 MB per client; the target (81%) first in round 2
    r = {**_run("table52", "fd", 100.0, 0, [0.5, 0.82, 0.9], up=[8e6, 16e6, 24e6], down=[0, 8e6, 16e6]),
         "target": 81.0}
    assert claims.MEASURES["mb_to_target"][1](r, "accuracy") == pytest.approx(-math.log10(2 + 1))
    assert claims.MEASURES["mb_up_to_target"][1](r, "accuracy") == pytest.approx(-math.log10(2))
    # A - B is log10(MB_B / MB_A): 3 MB against 0.03 MB is 2
    a = {**_run("table52", "cfd_1_1", 100.0, 0, [0.82], up=[0.16e6], down=[0.08e6]), "target": 81.0}
    assert claims.to_target(a) - claims.to_target(r) == pytest.approx(2)
    # a run that never reaches its target has no value
    assert claims.to_target({**r, "target": 95.0}) is None


def test_a_seed_that_never_reaches_the_target_is_left_out_of_its_pair():
    claims = script("repro.claims")
    a = {s: {**_run("table52", "cfd_1_1", 0.1, s, [0.7], up=[8e4], down=[8e4]), "target": 63.0} for s in (0, 1, 2)}
    b = {s: {**_run("table52", "fedavg", 0.1, s, [0.7 if s != 1 else 0.5], up=[8e6], down=[8e6]), "target": 63.0}
         for s in (0, 1, 2)}
    kept = claims.reaching(claims.Claim("CFD-1-1", "FedAvg", "alpha 0.1, to 63%", a, b), claims.to_target)
    assert set(kept.a_runs) == set(kept.b_runs) == {0, 2}
    assert kept.scene == "alpha 0.1, to 63% (A reached it in 3 of 3 seeds, B in 2 of 3)"
    t = claims.test(claims.Family("t", "x.json", "mb_to_target", "mb_up_to_target", [kept]))
    p = t.rows[0][1]
    assert p.seeds == (0, 2) and p.difference.mean == pytest.approx(2) and t.rows[0][2].difference.mean == pytest.approx(2)
    # where every seed reached it the scene is left as it is
    assert claims.reaching(claims.Claim("A", "B", "s", a, a), claims.to_target).scene == "s"
    # no seed where both reached: the claim has no runs, and test() leaves it out of the family
    none = claims.reaching(claims.Claim("A", "B", "s", a, {1: b[1]}), claims.to_target)
    assert not none.a_runs and not none.b_runs


def test_table52_is_each_cfd_variant_against_fd_and_fedavg_at_every_alpha(tmp_path, monkeypatch):
    mod = script("repro.distill")
    # a method's run reaches every alpha's target in round 1 with (index + 1) MB per client up and none down
    runs = [_run("table52", m, a, s, [0.9], up=[(i + 1) * 8e6]) for i, m in enumerate(mod.METHODS52)
            for a in mod.ALPHAS52 for s in (0, 1)]
    claims = _saved(tmp_path, monkeypatch, runs)
    family = claims.table52_family()
    assert (family.primary, family.secondary) == (mod.PRIMARY52, mod.SECONDARY52) == ("mb_to_target", "mb_up_to_target")
    label = {m: v[0] for m, v in mod.METHODS52.items()}
    assert [(c.a, c.b, c.scene) for c in family.claims] == [
        (label[a], label[b], f"alpha {alpha:g}, to {mod.TARGETS52[alpha]:g}%") for alpha in (100, 1, 0.1)
        for a in ("cfd_1_32", "cfd_delta_1_32", "cfd_1_1", "cfd_delta_1_1") for b in ("fd", "fedavg")]
    assert all(r["target"] == mod.TARGETS52[r["alpha"]] for c in family.claims for r in c.a_runs.values())
    t = claims.test(family)
    assert len(t.rows) == 4 * 2 * 3 and t.level == pytest.approx(1 - 0.05 / 24)
    # CFD-1-32 (index 2: 3 MB) against FedAvg (index 0: 1 MB) needs 3 times more: log10(1 / 3)
    first = next(p for c, p, _, _ in t.rows if (c.a, c.b) == ("CFD-1-32", "FedAvg"))
    assert first.difference.mean == pytest.approx(math.log10(1 / 3)) and first.seeds == (0, 1)


def test_seed_zero_keeps_its_key_and_the_family_runs_both_tables_on_five_seeds():
    mod = script("repro.distill")
    spec = {"experiment": "table51", "method": "dual", "alpha": 1.0, "archs": "one", "lr": None}
    assert mod.key({**spec, "seed": 0}) == mod.key(spec) == "table51/dual/1/one/"
    assert mod.key({**spec, "seed": 3}) == "table51/dual/1/one//seed3"
    specs = [s for s in mod.runs(None, mod.FAMILY_SEEDS) if s["experiment"] in mod.SEEDED]
    assert len(specs) == 5 * (3 * 3 + 6 * 3) and len({mod.key(s) for s in specs}) == len(specs)
    # the other experiments run on seed 0 alone
    assert {s["seed"] for s in mod.runs(None, (0, 1)) if s["experiment"] not in mod.SEEDED} == {0}


def test_the_page_shows_the_mean_over_seeds_and_how_many_reached_the_target():
    rep = script("repro.distill_page")
    assert rep.spread([81.0], rep.f1) == "81.0" and rep.spread([80.0, 82.0], rep.f1) == "81.0 ± 1.4"
    assert rep.spread([], rep.f1, "n.r.") == "n.r."
    assert rep.reached_text([4], 1) == "4" and rep.reached_text([4, 6], 3) == "4-6; 2 of 3 seeds"
    assert rep.reached_text([], 3) == "n.r."


def test_a_claim_cannot_go_the_way_of_the_side_that_missed_the_target():
    claims = script("repro.claims")

    def side(method, mb, reach):
        """Five seeds; seed s sends mb * (1 + s / 10) MB per client up, none down; accuracy 0.7 where reach(s)."""
        return {s: {**_run("table52", method, 0.1, s, [0.7 if reach(s) else 0.5], up=[8e6 * mb * (1 + s / 10)],
                           down=[0]), "target": 63.0} for s in range(5)}

    def verdict(a, b):
        kept = claims.reaching(claims.Claim("A", "B", "s", a, b), claims.to_target)
        return kept, claims.test(claims.Family("t", "x.json", "mb_to_target", "mb_up_to_target", [kept])).rows[0]

    a, b = side("cfd_1_1", 0.01, lambda s: True), side("fedavg", 1.0, lambda s: True)
    kept, (_, p, _, v) = verdict(a, b)
    assert (kept.a_missed, kept.b_missed) == (0, 0) and p.difference.mean == pytest.approx(2) and v == "holds"
    # A missed the target in seed 4, where B reached it: leaving seed 4 out favours A, so the claim cannot hold
    kept, (_, p, _, v) = verdict(side("cfd_1_1", 0.01, lambda s: s != 4), b)
    assert (kept.a_missed, kept.b_missed) == (1, 0) and p.verdict == "holds" and v == "not shown"
    # B missed it: leaving that seed out favours B, and "holds" stands; the reverse claim cannot be reversed
    kept, (_, p, _, v) = verdict(a, side("fedavg", 1.0, lambda s: s != 4))
    assert (kept.a_missed, kept.b_missed) == (0, 1) and v == "holds"
    kept, (_, p, _, v) = verdict(side("fedavg", 1.0, lambda s: True), side("cfd_1_1", 0.01, lambda s: s != 4))
    assert (kept.a_missed, kept.b_missed) == (0, 1) and p.verdict == "reversed" and v == "not shown"
