"""Every headline comparison of the reproduced tables, tested: the proposed method against every
baseline of its paper's table that fedray implements, in every scene run, from the recorded runs'
JSON in ``docs/`` through ``fedray.stats``.

Each paper's table is one **family** of claims "A > B" (the proposed method above a baseline; for
an ablation, a step above the one before it). Each claim pairs A and B by seed on the paper's
**primary** measure, declared in the reproduction script before its runs (``PRIMARY``): FedAUX's
Table I the maximum accuracy over the rounds, MrTF's figures the final round's, FedGen's Table 1 the
mean of the top-5 rounds, the thesis's tables theirs. Its interval is corrected for the family's
number of claims (Bonferroni, :func:`fedray.stats.bonferroni`), and the verdict comes from that
interval alone: **holds** (above zero), **reversed** (below zero), **not shown** (holds zero), **one
seed** (no interval). A secondary measure is shown beside it and never gives a verdict.

A family is built only from runs of one commit (each run's ``provenance``; :func:`fedray.repro.origin`)
whose pairs saw the same split and held-back data (:func:`fedray.repro.check_pairing`); a family whose
runs mix commits, or ran on a changed tree, is not built and says why. Runs saved before runs carried
their commit are shown with their statistics but no verdict.

``docs/reproductions.md`` holds the tables between the ``claims`` markers, where ``scripts/docs/generate.py``
(the generator of every reproduction number) puts them; ``tests/test_generated_docs.py`` regenerates
them and fails if the page differs.

    python scripts/repro/claims.py            # print the tables
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from fedray.repro import (RECORDS, MixedRuns, check_pairing, commit_text, final_value,  # noqa: E402
                          markdown_table, origin)
from fedray.stats import CONFIDENCE, bonferroni, paired  # noqa: E402

DOCS = ROOT / "docs"


def recorded(name: str):
    """A recorded file's data: ``docs/records/<name>``."""
    return json.loads((DOCS / RECORDS / name).read_text())
START, END = "<!-- claims:start (scripts/docs/generate.py --write) -->", "<!-- claims:end -->"
WITHHELD = "no verdict (commit not recorded)"


# -- the measures ------------------------------------------------------------------------------------
def final(r: dict, field: str = "accuracy") -> float:
    """The last round's value, in % (a run that diverged: chance, ``fedray.repro.final_value``)."""
    return 100 * final_value(r, field)


def best(r: dict, field: str = "accuracy") -> float:
    """The maximum over the rounds, in %."""
    return 100 * max(h[field] for h in r["history"] if h.get(field) is not None)


def top5(r: dict, field: str = "accuracy") -> float:
    """The mean of the five best rounds, in % (FedGen's Table 1)."""
    return 100 * sum(sorted(h[field] for h in r["history"] if h.get(field) is not None)[-5:]) / 5


def to_target(r: dict, field: str = "accuracy", directions: tuple[str, ...] = ("up", "down")) -> Optional[float]:
    """log10(1 / MB): the MB (1e6 bytes) per client sent up and down (``directions``) up to and including
    the first round whose accuracy reaches the run's ``target`` (%, set by its family; thesis Table 5.2's
    measure, counted as ``distill_report`` counts it); None where no round reaches it, which leaves that
    seed out of the claim's pair (:func:`reaching`). As A - B it is log10(MB_B / MB_A): above zero where A
    needs less. ``field`` is unused: Table 5.2's runs have one accuracy."""
    from scripts.repro.distill_page import per_client, reached

    h = reached(r, r["target"])
    return None if h is None else -math.log10(sum(per_client(r, h, d) for d in directions))


def to_target_up(r: dict, field: str = "accuracy") -> Optional[float]:
    """:func:`to_target` of the upload alone."""
    return to_target(r, field, ("up",))


MEASURES: dict[str, tuple[str, Callable[..., Optional[float]]]] = {
    "final": ("final accuracy", final), "best": ("maximum accuracy over the rounds", best),
    "top5": ("mean of the top-5 rounds", top5),
    "mb_to_target": ("the MB per client up and down to first reach the target accuracy, as log10(1 / MB) (A - B: "
                     "log10 of B's MB over A's, above zero where A needs less)", to_target),
    "mb_up_to_target": ("the MB per client uploaded to first reach the target, as log10(1 / MB)", to_target_up)}


@dataclasses.dataclass
class Claim:
    """``a > b`` in one scene: each side's runs by seed, and the field its accuracy is read from."""

    a: str
    b: str
    scene: str
    a_runs: dict[int, dict]
    b_runs: dict[int, dict]
    a_field: str = "accuracy"
    b_field: str = "accuracy"
    # seeds left out of the pair because only A's run (a_missed) or only B's (b_missed) has no value
    # (:func:`reaching`): leaving them out favours the side that missed, so the claim cannot go its way
    a_missed: int = 0
    b_missed: int = 0


@dataclasses.dataclass
class Family:
    """One paper's table: its claims, the primary and secondary measures (keys of MEASURES), and
    where its runs are recorded."""

    title: str
    source: str
    primary: str
    secondary: str
    claims: list[Claim]
    note: str = ""


def by_seed(runs: list[dict], **match) -> dict[int, dict]:
    """The runs that match, by seed (runs recorded before seeds were kept are seed 0)."""
    found: dict[int, dict] = {}
    for r in runs:
        if all(r.get(k) == v for k, v in match.items()):
            seed = r.get("seed") or 0
            if seed in found:
                raise ValueError(f"two runs of {match} with seed {seed}")
            found[seed] = r
    return found


# -- the families --------------------------------------------------------------------------------------
def fedaux_family() -> Family:
    from scripts.repro import fedaux as mod

    runs = [r for r in recorded("repro_fedaux.json")["runs"] if r["experiment"] == "claim"]
    claims = []
    for rate in mod.RATES:
        scene = f"alpha 0.01, C = {rate:g}"
        for a in mod.PROPOSED:
            for b in (m for m in mod.METHODS if m not in mod.PROPOSED):
                claims.append(Claim(mod.METHODS[a][0], mod.METHODS[b][0], scene,
                                    by_seed(runs, method=a, rate=rate), by_seed(runs, method=b, rate=rate)))
    return Family("FedAUX, Table I / thesis Table 7.1 (`scripts/repro/fedaux.py --only claim`)", "repro_fedaux.json",
                  mod.PRIMARY, "final", claims)


def mrtf_family() -> Family:
    from scripts.repro import mrtf as mod

    runs = recorded("repro_mrtf.json")["results"]
    label = {m: mod.METHODS[m][0] for m in mod.METHODS}
    claims = []
    for scene in mod.SPLITS:
        for a, b in ((a, b) for a in mod.PROPOSED for b in mod.BASELINES):
            claims.append(Claim(label[a], label[b], scene, by_seed(runs, split=scene, method=a),
                                by_seed(runs, split=scene, method=b)))
    return Family("MrTF, Fig. 7 (`scripts/repro/mrtf.py --only compare --family`)", "repro_mrtf.json",
                  mod.PRIMARY, "best", claims)


def fedgen_family() -> Family:
    from scripts.repro import fedgen as mod

    runs = [r for r in recorded("repro_fedgen.json")["results"] if r["experiment"] == "table1"]
    field = {"feddistill": "personal"}  # FedDistill shares no model: its users' own models, on their labels
    claims = []
    for alpha in mod.ALPHAS:
        for a in mod.PROPOSED:
            for b in mod.BASELINES:
                claims.append(Claim(mod.METHODS[a][0], mod.METHODS[b][0], f"alpha {alpha:g}",
                                    by_seed(runs, method=a, alpha=alpha), by_seed(runs, method=b, alpha=alpha),
                                    field.get(a, "accuracy"), field.get(b, "accuracy")))
    return Family("FedGen, Table 1 (`scripts/repro/fedgen.py --family`)", "repro_fedgen.json", mod.PRIMARY,
                  "final", claims)


def cfl_family(runs: Optional[list[dict]] = None) -> Family:
    """Thesis Table 6.2: CFL against FL in each scene, paired by seed; from ``runs`` (a page's own)
    or docs/records/repro_cfl.json."""
    from scripts.repro import cfl as mod

    if runs is None:
        runs = mod.results_of(recorded("repro_cfl.json"))
    claims = []
    for s, label in mod.SCENARIOS.items():
        for b in mod.BASELINES:
            claims.append(Claim(mod.PROPOSED, b, label, by_seed(runs, experiment=f"table62/{s}", method=mod.PROPOSED),
                                by_seed(runs, experiment=f"table62/{s}", method=b)))
    return Family("Thesis Table 6.2, clustered FL (`scripts/repro/cfl.py --family`)", "repro_cfl.json", mod.PRIMARY,
                  "final_benign", claims,
                  note=one_run(claims))


def distill_runs(experiment: str) -> list[dict]:
    return [r for r in recorded("repro_distill.json")["runs"] if r["experiment"] == experiment]


def one_run(claims: list[Claim]) -> str:
    """A family's note where no scene has more than one run."""
    return "one run per scene" if all(len(c.a_runs) <= 1 and len(c.b_runs) <= 1 for c in claims) else ""


def distill_family() -> Family:
    from scripts.repro import distill as mod

    runs = distill_runs("table51")
    claims = [Claim(mod.MODES[a], mod.MODES[b], f"alpha {alpha:g}", by_seed(runs, method=a, alpha=alpha),
                    by_seed(runs, method=b, alpha=alpha))
              for alpha in mod.ALPHAS51 for a in mod.PROPOSED51 for b in mod.BASELINES51]
    return Family("Thesis Table 5.1, federated distillation (`scripts/repro/distill.py --family`)", "repro_distill.json",
                  mod.PRIMARY51, "final", claims, note=one_run(claims))


MISSED = ("a seed in which either side never reaches the target is left out of the pair (the scene then says in "
          "how many seeds each side reached it), and a claim whose A missed it where B reached it cannot hold, one "
          "whose B missed it cannot be reversed")


def reaching(claim: Claim, value: Callable[[dict, str], Optional[float]]) -> Claim:
    """The claim on the seeds where both sides' runs have a ``value`` (None: e.g. a target never reached,
    :func:`to_target`): a seed where either has none is left out of the pair, and the scene then says in
    how many seeds each side had one."""
    a, b = ({s for s, r in runs.items() if value(r, field) is not None}
            for runs, field in ((claim.a_runs, claim.a_field), (claim.b_runs, claim.b_field)))
    scene = claim.scene
    if len(a) < len(claim.a_runs) or len(b) < len(claim.b_runs):
        scene += f" (A reached it in {len(a)} of {len(claim.a_runs)} seeds, B in {len(b)} of {len(claim.b_runs)})"
    both = set(claim.a_runs) & set(claim.b_runs)
    return dataclasses.replace(claim, scene=scene, a_runs={s: claim.a_runs[s] for s in sorted(a & b)},
                               b_runs={s: claim.b_runs[s] for s in sorted(a & b)},
                               a_missed=len((both & b) - a), b_missed=len((both & a) - b))


def table52_family() -> Family:
    from scripts.repro import distill as mod

    runs, value = distill_runs("table52"), MEASURES[mod.PRIMARY52][1]
    claims = []
    for alpha in mod.ALPHAS52:
        side = {m: {s: {**r, "target": mod.TARGETS52[alpha]} for s, r in by_seed(runs, method=m, alpha=alpha).items()}
                for m in (*mod.PROPOSED52, *mod.BASELINES52)}
        scene = f"alpha {alpha:g}, to {mod.TARGETS52[alpha]:g}%"
        claims += [reaching(Claim(mod.METHODS52[a][0], mod.METHODS52[b][0], scene, side[a], side[b]), value)
                   for a in mod.PROPOSED52 for b in mod.BASELINES52]
    return Family("Thesis Table 5.2, compressed federated distillation (`scripts/repro/distill.py --family`)",
                  "repro_distill.json", mod.PRIMARY52, mod.SECONDARY52, claims, note="; ".join(filter(None, (
                      "A > B: A needs fewer MB to the target; the targets were chosen after seeing seed 0's curves",
                      MISSED, one_run(claims)))))


def table42_runs(saved: dict, target: float) -> list[dict]:
    """A Table 4.2 page's runs as :func:`to_target` reads them: each test evaluation a round with the
    bytes sent so far, and the config's target (in %)."""
    return [{"method": r["method"], "seed": r.get("seed", 0), "provenance": r.get("provenance"),
             "clients_per_round": r["clients_per_round"], "target": 100 * target,
             "history": [{"accuracy": e["accuracy"], "bytes_up_total": 1e6 * e["mb_up"],
                          "bytes_down_total": 1e6 * e["mb_down"]} for e in r["evals"]]} for r in saved["results"]]


def table42_family() -> Family:
    """Thesis Table 4.2: each STC variant against every other method of the table, in both configs (the
    table's columns are its scenes: one family, corrected for all of its claims), on the MB to each
    config's target; ``--family`` runs both configs in one call, so the family has one commit."""
    from scripts.repro import table42 as mod

    value, claims = MEASURES[mod.PRIMARY][1], []
    for stem, (_, target) in mod.FAMILY.items():
        runs = table42_runs(recorded(f"repro_table42_{stem}.json"), target)
        side = {m: {s: r for s, r in by_seed(runs, method=m).items() if s in mod.FAMILY_SEEDS}
                for m in (*mod.PROPOSED, *mod.BASELINES)}
        scene = f"{stem.rsplit('_', 1)[1]}, to {target:g}"
        claims += [reaching(Claim(a, b, scene, side[a], side[b]), value) for a in mod.PROPOSED for b in mod.BASELINES]
    untested = [f"{c.a} > {c.b} in {c.scene}" for c in claims if not c.a_runs]
    return Family("Thesis Table 4.2, communication to a target accuracy (`scripts/repro/table42.py --family`)",
                  "repro_table42_repro_thesis_table42_*.json", mod.PRIMARY, mod.SECONDARY, claims,
                  note="; ".join(filter(None, (
                      "A > B: A needs fewer MB to the target; each config's target is one every method reached in "
                      "the seed-0 runs (`FAMILY` in the script)", MISSED,
                      "not tested, no seed where both reach the target: " + "; ".join(untested) if untested else "",
                      one_run(claims)))))


def measure(family: Family, which: str) -> Callable[[dict, str], float]:
    if which == "final_benign":
        from scripts.repro import cfl as repro_cfl

        return lambda r, field: 100 * repro_cfl.final_accuracy(r)
    return MEASURES[which][1]


def measure_name(which: str) -> str:
    return "the benign clients' final accuracy" if which == "final_benign" else MEASURES[which][0]


FAMILIES = (fedaux_family, mrtf_family, fedgen_family, cfl_family, distill_family, table52_family,
            table42_family)


# -- the tests -----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Tested:
    """A family's claims, tested: per claim its Paired on the primary and the secondary measure and
    its verdict; or why the family was not built."""

    family: Family
    commit: Optional[str] = None
    level: float = CONFIDENCE
    rows: list = dataclasses.field(default_factory=list)  # (claim, primary Paired, secondary Paired, verdict)
    refused: str = ""


def test(family: Family) -> Tested:
    """Test a family's claims at the Bonferroni level for their number (see the module's text)."""
    claims = [c for c in family.claims if c.a_runs and c.b_runs]
    out = Tested(family)
    try:
        out.commit = origin([r for c in claims for r in (*c.a_runs.values(), *c.b_runs.values())], family.title)
        for c in claims:
            for s in set(c.a_runs) & set(c.b_runs):
                check_pairing(c.a_runs[s], c.b_runs[s], f"{family.title}, {c.a} and {c.b}, {c.scene}, seed {s}")
    except MixedRuns as e:
        out.refused = str(e)
        return out
    out.level = bonferroni(max(1, len(claims)))
    primary, secondary = measure(family, family.primary), measure(family, family.secondary)
    for c in claims:
        p = paired({s: primary(r, c.a_field) for s, r in c.a_runs.items()},
                   {s: primary(r, c.b_field) for s, r in c.b_runs.items()}, out.level)
        q = paired({s: secondary(r, c.a_field) for s, r in c.a_runs.items()},
                   {s: secondary(r, c.b_field) for s, r in c.b_runs.items()}, out.level)
        verdict = p.verdict if out.commit or p.verdict == "one seed" else WITHHELD
        if (verdict == "holds" and c.a_missed) or (verdict == "reversed" and c.b_missed):
            verdict = "not shown"  # a seed that side lost was left out of the pair (Claim.a_missed)
        out.rows.append((c, p, q, verdict))
    return out


def tested() -> list[Tested]:
    return [test(f()) for f in FAMILIES]


# -- the page --------------------------------------------------------------------------------------------
def count(t: Tested, verdict: str) -> int:
    return sum(v == verdict for *_, v in t.rows)


def overview(results: list[Tested]) -> list[str]:
    """What holds, what is reversed and what is not shown, family by family."""
    rows = []
    for t in results:
        if t.refused:
            rows.append([t.family.title, "not built", "", "", "", t.refused])
            continue
        verdicts = {v for *_, v in t.rows}
        where = commit_text(t.commit) if t.commit else "commit not recorded: no verdicts"
        rows.append([t.family.title, str(len(t.rows)), *(str(count(t, v)) for v in ("holds", "reversed", "not shown")),
                     where + ("; one run per scene: no verdicts" if verdicts == {"one seed"} else "")])
    return markdown_table(["family", "claims", "holds", "reversed", "not shown", "runs"], rows)


def family_lines(t: Tested) -> list[str]:
    f = t.family
    lines = [f"### {f.title}", ""]
    if t.refused:
        return lines + [f"**Not built**: {t.refused}.", ""]
    n = len(t.rows)
    lines += [f"{n} claims from `docs/records/{f.source}`, {commit_text(t.commit)}. Primary measure: "
              f"{measure_name(f.primary)}; each interval at {100 * t.level:.4g}% (Bonferroni for {n} claims: "
              f"{100 * CONFIDENCE:g}% for the family); secondary: {measure_name(f.secondary)}, shown, never a "
              "verdict" + (f"; {f.note}" if f.note else "") + ".", ""]
    rows = []
    for c, p, q, verdict in t.rows:
        rows.append([f"{c.a} > {c.b}", c.scene, str(len(p.seeds)), f"{p.a.mean:.1f} vs {p.b.mean:.1f}",
                     p.difference.text(), f"{p.wins} of {len(p.seeds)}", f"**{verdict}**", q.difference.text()])
    lines += markdown_table(["claim: A > B", "scene", "seeds", "primary: A vs B", "A - B [corrected interval]",
                             "A above in", "verdict", "secondary: A - B [corrected interval]"], rows)
    return lines + [""]


def table() -> list[str]:
    """The claims section's generated lines: the overview, then each family's table."""
    results = tested()
    lines = [*overview(results), ""]
    for t in results:
        lines += family_lines(t)
    return lines[:-1]


def verdict_lines(family: Callable[[], Family], what: str, paper: str, digits: int = 1) -> list[str]:
    """A reproduction page's opening: what holds and what is reversed in ``family`` (``what``: the
    claims in words), beside the paper's own verdict (``paper``)."""
    t = test(family())
    if t.refused:
        return [f"The claims' runs do not make one family: {t.refused}.", ""]
    if not t.commit:
        return [f"The runs of the claims ({what}) carry no commit: their differences are shown in reproductions.md's "
                "claims table without verdicts.", ""]
    if {v for *_, v in t.rows} == {"one seed"}:
        return [f"The claims ({what}) have one run per scene: their differences are shown in reproductions.md's "
                "claims table without verdicts.", ""]
    said = {v: [f"{c.a} > {c.b} ({c.scene}: {p.difference.text(digits)})" for c, p, _, verdict in t.rows if verdict == v]
            for v in ("holds", "reversed")}
    shown = len(t.rows) - len(said["holds"]) - len(said["reversed"])
    return [f"**What holds** ({len(t.rows)} claims: {what}, intervals corrected for {len(t.rows)} claims; "
            f"{commit_text(t.commit)}): "
            + (f"holds in {len(said['holds'])}: " + "; ".join(said["holds"]) if said["holds"] else "none holds")
            + ". " + (f"Reversed in {len(said['reversed'])}: " + "; ".join(said["reversed"]) if said["reversed"]
                      else "None is reversed") + f". Not shown either way: {shown}. {paper} Every interval: "
            "reproductions.md's claims table.", ""]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print("\n".join(table()))


if __name__ == "__main__":
    main()
