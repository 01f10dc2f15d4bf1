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

``docs/reproductions.md`` holds the tables between the ``claims`` markers, where ``scripts/docs.py``
(the generator of every reproduction number) puts them; ``tests/test_generated_docs.py`` regenerates
them and fails if the page differs.

    python scripts/claims.py            # print the tables
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from fedray.repro import MixedRuns, check_pairing, commit_text, markdown_table, origin  # noqa: E402
from fedray.stats import CONFIDENCE, bonferroni, paired  # noqa: E402

DOCS = ROOT / "docs"
START, END = "<!-- claims:start (scripts/docs.py --write) -->", "<!-- claims:end -->"
WITHHELD = "no verdict (commit not recorded)"


# -- the measures ------------------------------------------------------------------------------------
def final(r: dict, field: str = "accuracy") -> float:
    """The last round's value, in %."""
    return 100 * [h[field] for h in r["history"] if h.get(field) is not None][-1]


def best(r: dict, field: str = "accuracy") -> float:
    """The maximum over the rounds, in %."""
    return 100 * max(h[field] for h in r["history"] if h.get(field) is not None)


def top5(r: dict, field: str = "accuracy") -> float:
    """The mean of the five best rounds, in % (FedGen's Table 1)."""
    return 100 * sum(sorted(h[field] for h in r["history"] if h.get(field) is not None)[-5:]) / 5


MEASURES: dict[str, tuple[str, Callable[..., float]]] = {
    "final": ("final accuracy", final), "best": ("maximum accuracy over the rounds", best),
    "top5": ("mean of the top-5 rounds", top5)}


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
    import repro_fedaux as mod

    runs = [r for r in json.loads((DOCS / "repro_fedaux.json").read_text())["runs"] if r["experiment"] == "claim"]
    claims = []
    for rate in mod.RATES:
        scene = f"alpha 0.01, C = {rate:g}"
        for a in mod.PROPOSED:
            for b in (m for m in mod.METHODS if m not in mod.PROPOSED):
                claims.append(Claim(mod.METHODS[a][0], mod.METHODS[b][0], scene,
                                    by_seed(runs, method=a, rate=rate), by_seed(runs, method=b, rate=rate)))
    return Family("FedAUX, Table I / thesis Table 7.1 (`scripts/repro_fedaux.py --only claim`)", "repro_fedaux.json",
                  mod.PRIMARY, "final", claims)


def mrtf_family() -> Family:
    import repro_mrtf as mod

    runs = json.loads((DOCS / "repro_mrtf.json").read_text())["results"]
    label = {m: mod.METHODS[m][0] for m in mod.METHODS}
    claims = []
    for scene in mod.SPLITS:
        for a, b in ((a, b) for a in mod.PROPOSED for b in mod.BASELINES):
            claims.append(Claim(label[a], label[b], scene, by_seed(runs, split=scene, method=a),
                                by_seed(runs, split=scene, method=b)))
    return Family("MrTF, Fig. 7 (`scripts/repro_mrtf.py --only compare --family`)", "repro_mrtf.json",
                  mod.PRIMARY, "best", claims)


def fedgen_family() -> Family:
    import repro_fedgen as mod

    runs = [r for r in json.loads((DOCS / "repro_fedgen.json").read_text())["results"] if r["experiment"] == "table1"]
    field = {"feddistill": "personal"}  # FedDistill shares no model: its users' own models, on their labels
    claims = []
    for alpha in mod.ALPHAS:
        for a in mod.PROPOSED:
            for b in mod.BASELINES:
                claims.append(Claim(mod.METHODS[a][0], mod.METHODS[b][0], f"alpha {alpha:g}",
                                    by_seed(runs, method=a, alpha=alpha), by_seed(runs, method=b, alpha=alpha),
                                    field.get(a, "accuracy"), field.get(b, "accuracy")))
    return Family("FedGen, Table 1 (`scripts/repro_fedgen.py --family`)", "repro_fedgen.json", mod.PRIMARY,
                  "final", claims)


def cfl_family() -> Family:
    import repro_cfl as mod

    runs = json.loads((DOCS / "repro_cfl.json").read_text())
    res = {(r["experiment"], r["method"]): r for r in runs}
    claims = []
    for s, label in mod.SCENARIOS.items():
        fl, cfl = res.get((f"table62/{s}", "FL")), res.get((f"table62/{s}", "CFL"))
        if fl and cfl:
            claims.append(Claim("CFL", "FL", label, {0: cfl}, {0: fl}))
    return Family("Thesis Table 6.2, clustered FL (`scripts/repro_cfl.py`)", "repro_cfl.json", "final_benign",
                  "final_benign", claims, note="the benign clients' final accuracy; one run per scene")


def distill_family() -> Family:
    from repro_distill import key

    import distill_report as rep

    res = {key(r): r for r in json.loads((DOCS / "repro_distill.json").read_text())["runs"]}
    claims = []
    dual = next(m for m, label in rep.MODES.items() if "Dual" in label)
    for a in rep.ALPHAS51:
        for m, label in rep.MODES.items():
            if m != dual and f"table51/{m}/{a:g}/one/" in res:
                claims.append(Claim(rep.MODES[dual], label, f"alpha {a:g}", {0: res[f"table51/{dual}/{a:g}/one/"]},
                                    {0: res[f"table51/{m}/{a:g}/one/"]}))
    return Family("Thesis Table 5.1, federated distillation (`scripts/repro_distill.py`)", "repro_distill.json", "best",
                  "final", claims, note="one run per scene")


def measure(family: Family, which: str) -> Callable[[dict, str], float]:
    if which == "final_benign":
        import repro_cfl

        return lambda r, field: 100 * repro_cfl.final_accuracy(r)
    return MEASURES[which][1]


def measure_name(which: str) -> str:
    return "the benign clients' final accuracy" if which == "final_benign" else MEASURES[which][0]


FAMILIES = (fedaux_family, mrtf_family, fedgen_family, cfl_family, distill_family)


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
    lines += [f"{n} claims from `docs/{f.source}`, {commit_text(t.commit)}. Primary measure: "
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
        return ["The claims' runs carry no commit: their differences are shown in reproductions.md's claims table "
                "without verdicts.", ""]
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
