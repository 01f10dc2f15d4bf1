"""The reproductions' method-against-method claims, with the statistics they are worded by, generated
from the recorded runs' JSON in ``docs/`` (``repro_mrtf.json``, ``repro_fedaux.json``,
``repro_fedgen.json``) through ``fedray.stats``.

Each row pairs two methods by seed in one scene, on two measures: the final round's accuracy and
the best round's (for FedGen, the mean of the top-5 rounds: the paper's measure), and says whether
"A > B" holds (the 95% interval of the paired difference lies above zero), is reversed (below
zero), or is not shown. ``docs/reproductions.md`` holds the table between its ``claims`` markers,
where ``scripts/docs.py`` (the generator of every reproduction number) puts it;
``tests/test_generated_docs.py`` regenerates it and fails if the page differs.

    python scripts/claims.py            # print the table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedray.stats import paired  # noqa: E402

DOCS = ROOT / "docs"
START, END = "<!-- claims:start (scripts/docs.py --write) -->", "<!-- claims:end -->"


def final(r: dict) -> float:
    return 100 * r["history"][-1]["accuracy"]


def best(r: dict) -> float:
    return 100 * max(h["accuracy"] for h in r["history"])


def top5(r: dict) -> float:
    return 100 * sum(sorted(h["accuracy"] for h in r["history"])[-5:]) / 5


def by_seed(runs: list[dict], **match) -> dict[int, dict]:
    """The runs that match, by seed (runs recorded before seeds were kept are seed 0)."""
    found: dict[int, dict] = {}
    for r in runs:
        if all(r.get(k) == v for k, v in match.items()):
            seed = r.get("seed") or 0
            if seed in found:
                raise ValueError(f"two runs of {match} with seed {seed}")
            found[seed] = r
    if not found:
        raise ValueError(f"no recorded run of {match}")
    return found


def row(claim: str, scene: str, a: dict[int, dict], b: dict[int, dict],
        measures: list[tuple[str, Callable[[dict], float]]]) -> list[str]:
    """One table row: the claim, the scene, and per measure the seeds, means, paired difference with
    its interval, the seeds where A was above, and the verdict."""
    cells = [claim, scene]
    for _, measure in measures:
        p = paired({s: measure(r) for s, r in a.items()}, {s: measure(r) for s, r in b.items()})
        cells.append(f"{p.a.mean:.1f} vs {p.b.mean:.1f}; {p.difference.text()}; "
                     f"{p.wins} of {len(p.seeds)}; **{p.verdict}**")
    return cells


def table() -> list[str]:
    mrtf = json.loads((DOCS / "repro_mrtf.json").read_text())["results"]
    fedaux = [r for r in json.loads((DOCS / "repro_fedaux.json").read_text())["runs"] if r["experiment"] == "claim"]
    fedgen = [r for r in json.loads((DOCS / "repro_fedgen.json").read_text())["results"] if r["experiment"] == "table1"]
    plain = [("final", final), ("best round", best)]
    rows = []
    for scene in ("alpha 1", "alpha 0.1", "C-bar 5", "C-bar 3"):
        for other, label in (("al", "FedDF (AL)"), ("fedavg", "FedAvg")):
            rows.append(row(f"MrTF (paper's rules) > {label}", f"MrTF, {scene}", by_seed(mrtf, split=scene, method="mrtf"),
                            by_seed(mrtf, split=scene, method=other), plain))
    for rate in (0.2, 0.4, 0.8):
        runs = {m: by_seed(fedaux, method=m, rate=rate) for m in ("feddf", "feddf_p", "fedaux")}
        split = "splits vary" if all(r.get("split_seed") == r["seed"] for m in runs.values() for r in m.values()) \
            else "one split"
        scene = f"FedAUX, alpha 0.01, C = {rate} ({split})"
        rows.append(row("FedDF+P > FedDF", scene, runs["feddf_p"], runs["feddf"], plain))
        rows.append(row("FedAUX > FedDF+P", scene, runs["fedaux"], runs["feddf_p"], plain))
    for alpha in (0.05, 0.1, 1.0):
        for method, label in (("fedgen", "FedGen (paper's rules)"), ("fedgen_code", "FedGen (code's rules)"),
                              ("fedensemble", "FedEnsemble")):
            rows.append(row(f"{label} > FedAvg", f"FedGen Table 1, alpha {alpha:g}",
                            by_seed(fedgen, method=method, alpha=alpha), by_seed(fedgen, method="fedavg", alpha=alpha),
                            [("final", final), ("top-5 rounds", top5)]))
    head = ["claim: A > B", "scene", "final: A vs B; A - B [95% interval]; A above in; verdict",
            "best round (FedGen: top-5 mean): the same"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print("\n".join(table()))


if __name__ == "__main__":
    main()
