"""fedray beside the authors' own code: the same splits, model, hyperparameters, rounds, client
schedule and test set, run through fedray and through a checkout of the paper's public
implementation; for each method, the paired difference fedray minus authors of the paper's primary
measure, per seed that varies the split.

    git clone https://github.com/zhuangdizhu/FedGen /path/to/FedGen
    python scripts/authors/compare.py fedgen --checkout /path/to/FedGen      # likewise mrtf (lxcnju/MrTF), fedaux (fedl-repo/fedaux)
    python scripts/authors/compare.py fedgen --checkout /path/to/FedGen --methods fedavg fedgen --scenes 0.1 --seeds 0 1
    python scripts/authors/compare.py causes     # docs/records/authors.json's causes rewritten from CAUSES, nothing run
    python scripts/authors/compare.py fedaux --checkout /path/to/fedaux --methods feddf_code --scenes 0.8 --batch-order fedray

fedl-repo/fedaux keeps SimCLR checkpoints (``checkpoints/*.pth``) that a mirror may lack and that these
runs never read; a sparse checkout leaves them out and keeps the tree clean (the rows record whether it
was): ``git clone --no-checkout URL fedaux && cd fedaux && git sparse-checkout set --no-cone '/*'
'!/checkpoints/*.pth' && git checkout main``.

Per call: fedray's runs as a sweep (``fedray.repro.run_specs``, the reproduction script's specs)
into ``--work``/fedray; then each seed's inputs, exported from the config of that seed's fedray
run (``scripts/authors/<paper>.py``, ``export``) into ``--work``/setup; then the authors' runs, one
process each, ``--jobs`` at once, into ``--work``/authors (a stopped call resumes: finished runs
are kept). The authors' code runs unchanged from its checkout: the adapter only swaps at run time
what the docs list (unused imports, the client draw, where results go) and adds fedray's measure.

``--batch-order fedray`` (FedAUX) is a check of the arithmetic: the authors' loaders draw fedray's
batches in fedray's order, and the code's certainty scorer fedray's privacy noise, and each authors' run runs a second time on torch's portable kernels as
a control of how far float rounding alone moves a run; its rows keep each round's accuracy of the
three runs, and the page shows them apart from the table.

The rows go to ``docs/records/authors.json`` (a row per paper, method, scene and batch order; a new row
replaces the saved one), and ``scripts/docs/generate.py`` writes docs/authors.md from them. A row names the commit its
fedray runs carry; runs of one row made at two commits (a resumed sweep) make no row.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# run as a file, it imports the adapters as scripts.authors.*, with the project's root in place of
# this folder: an adapter's file (mrtf.py) would shadow the authors' module of the same name
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from fedray.repro import Store, cpu_model  # noqa: E402
from fedray.stats import paired  # noqa: E402

OUT = ROOT / "docs" / "records" / "authors.json"
# what a difference's cause is, once found: (paper, method) -> text; empty where the two agree
CAUSES: dict[tuple[str, str], str] = {
    ("MrTF", "mrtf"): "the paper's rules against the code's: fedray's mrtf is the paper's MrTF (eq. 6 over the whole "
                      "set with tau 4, eq. 10, CLR from round 6, Adam lr 3e-4, the refined model broadcast); under the "
                      "code's rules (mrtf_code) fedray agrees with the code",
    ("MrTF", "al"): "the paper's rules against the code's: fedray's al is the paper's AL (Adam lr 3e-4, the refined model "
                    "broadcast); under the code's FedDF rules (al_code: targets softened to the power 0.75, Adam lr 1e-3 "
                    "with a cosine schedule and clipping, the plain aggregate broadcast) fedray agrees with the code",
    ("FedAUX", "fedaux"): "the paper's rules against the code's: fedray's fedaux fits the certainty scorer under the "
                          "paper's J with lambda / N (eq. 7.7), whose weights (norm about 1) lie below the privacy "
                          "noise, so the scores hardly rank; the code fits sklearn's C = 1 / lambda (norm 34-42) with "
                          "an intercept, and keeps its Adams and averages unweighted as for its baselines; under the "
                          "code's rules (fedaux_code) fedray agrees with the code",
    ("FedGen", "fedgen"): "the rule the code means against what it computes: fedray's fedgen weighs each user's "
                          "cross-entropy on G(eps, y) by its share of label y, per sample (`teacher: counts`); the "
                          "code multiplies each user's mean cross-entropy by its mean label weight over the batch, a "
                          "(B,) by (B, 1) product that broadcasts to B x B (`serverpFedGen.py`); under what the code "
                          "computes (fedgen_code) fedray agrees with the code"}
for _m in ("feddistill", "feddistill_plus"):
    CAUSES["FedGen", _m] = (
        f"the paper's rules against the code's: fedray's {_m} builds each round's label-wise logit table from that "
        "round's users that saw the label (`table: round`); the code's tracker sums a user's logits over every "
        "round it trained, its counts starting at 1, and averages every user's vector of every label, zero vectors "
        "included (`userFedDistill.py`, `serverFedDistill.py`); under the code's table "
        f"({_m}_code) fedray agrees with the code")
# FedAUX's baselines: the paper trains each client from the broadcast model (Alg. 1, theta_i <- train(theta, D_i))
# and says nothing of optimiser state between rounds; its code keeps every Adam for the whole run
for _m, _what in (("fedavg", ""), ("fedprox", ""), ("feddf", " and one for each distillation"), ("fedavg_p", ""),
                  ("fedprox_p", ""), ("feddf_p", " and one for each distillation")):
    CAUSES["FedAUX", _m] = (
        f"the paper's rules against the code's: fedray's {_m} starts a fresh Adam for each local training{_what} "
        f"and weights the mean by |D_i|; the code keeps one Adam per client{' and one per server model' if _what else ''} "
        f"for the whole run and averages unweighted (`fl_devices.py:53`{', `:131`' if _what else ''}, `:148-152`); under "
        f"the code's rules ({_m}_code) fedray agrees with the code, or differs no more than the code from itself "
        "on other kernels (the check with the same batches)")


def checkout_commit(path: Path) -> tuple[str, bool]:
    """The commit of the authors' checkout and whether its tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        raise SystemExit(f"{path}: not a git checkout of the authors' code (git rev-parse HEAD failed); clone it")
    status = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True)
    return head.stdout.strip(), bool(status.stdout.strip())


# a paper's adapter: scripts/authors/<key>.py, whose ``Paper(args)`` gives the methods and scenes, runs
# fedray's side and reads the measure of both sides (scripts.authors.fedgen.Paper is the model)
PAPERS = {"fedgen": "scripts.authors.fedgen", "mrtf": "scripts.authors.mrtf", "fedaux": "scripts.authors.fedaux"}


def run_authors(paper, checkout: Path, fedray: dict, work: Path, jobs: int,
                batch_order: str = "own") -> dict[tuple[str, float, int], dict]:
    """Export each seed's inputs from its fedray run and run the authors' methods on them (one
    process a run, ``jobs`` at once; finished runs are read back), their loaders in their own batch
    order or, with ``batch_order="fedray"``, in fedray's; then each run also a second time on torch's
    portable kernels (``ATEN_CPU_CAPABILITY=default``), whose accuracies by round (``control``) show
    how far the code drifts from itself when only float rounding changes. Returns (method, scene,
    seed) -> the adapter's result."""
    adapter = paper.adapter
    setups = {}
    for (method, scene, seed), value in sorted(fedray.items(), key=str):
        config = value[2]
        folder = work / "setup" / f"{scene}-seed{seed}".replace(" ", "_")
        if (scene, seed) not in setups:
            if not (folder / "setup.json").exists():
                adapter.export(config, folder)
            setups[scene, seed] = folder
    kernels = ["", "default"] if batch_order != "own" else [""]  # "": the machine's own
    runs = {}  # one run of the authors' code per algorithm, scene, seed and kernels
    for method, scene, seed in fedray:
        algorithm = adapter.METHODS[method]
        name = f"{scene}-seed{seed}.json".replace(" ", "_")
        for k in kernels:
            folder = algorithm + ("" if batch_order == "own" else f"-{batch_order}-order") + (f"-{k}-kernels" if k else "")
            runs.setdefault((algorithm, scene, seed, k), (method, work / "authors" / folder / name))

    def one(item):
        (algorithm, scene, seed, k), (method, out) = item
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            log = out.with_suffix(".log")
            cmd = [sys.executable, __file__, "inside", adapter.__name__, "--checkout", str(checkout), "--setup",
                   str(setups[scene, seed]), "--method", method, "--out", str(out), "--batch-order", batch_order]
            with open(log, "w") as f:
                env = {**os.environ, "OMP_NUM_THREADS": "1", **({"ATEN_CPU_CAPABILITY": k} if k else {})}
                code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
            if code.returncode != 0:
                tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"the authors' {algorithm} ({scene}, seed {seed}) failed: {tail[0]} (log: {log})")
            print(f"authors {algorithm:13s} {scene} seed {seed}{f' ({k} kernels)' if k else ''}: done", flush=True)
        return (algorithm, scene, seed, k), json.loads(out.read_text())

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(pool.map(one, sorted(runs.items(), key=str)))
    result = {}
    for method, scene, seed in fedray:
        key = (adapter.METHODS[method], scene, seed)
        result[method, scene, seed] = {**done[(*key, "")], **({"control": done[(*key, "default")]["accuracy"]}
                                                                if batch_order != "own" else {})}
    return result


def rows(paper, checkout_info: tuple[str, bool], fedray: dict, authors: dict, batch_order: str = "own") -> list[dict]:
    """One row per method and scene: per-seed values of both sides and the paired difference; with
    the authors' loaders in fedray's batch order, also each seed's accuracy by round on both sides."""
    from fedray.repro import setup_rows

    out = []
    for method in paper.methods:
        for scene in paper.scenes:
            seeds = sorted(s for m, a, s in fedray if m == method and a == scene)
            made = [fedray[method, scene, s][3] or {} for s in seeds]  # each run's provenance
            commits = {p.get("commit") for p in made}
            if len(commits) != 1 or None in commits:
                raise SystemExit(f"{paper.name} {method} ({paper.scene_text(scene)}): fedray's runs come from commits "
                                 f"{sorted(map(str, commits))}; a row is one commit's runs (re-run them in a new --work)")
            ours = {s: fedray[method, scene, s][0] for s in seeds}
            theirs = {s: paper.authors_measure(method, authors[method, scene, s]) for s in seeds}
            diff = paired(ours, theirs)
            config = fedray[method, scene, seeds[0]][2]
            out.append({
                "paper": paper.name, "method": method, "authors_method": paper.adapter.METHODS[method],
                "scene": paper.scene_text(scene), "measure": paper.measure, "authors_repo": paper.repo,
                "authors_commit": checkout_info[0], "authors_dirty": checkout_info[1],
                "fedray_commit": commits.pop(), "fedray_dirty": any(p.get("dirty") for p in made), "seeds": seeds,
                "fedray": [ours[s] for s in seeds], "authors": [theirs[s] for s in seeds],
                "authors_own_measure": [paper.own_measure(authors[method, scene, s]) for s in seeds],
                "diff_mean": diff.difference.mean, "diff_ci": [diff.difference.low, diff.difference.high],
                "fedray_s": sum(fedray[method, scene, s][1] for s in seeds),
                "authors_s": sum(authors[method, scene, s]["wall_s"] for s in seeds),
                "setup": {name: ours for name, ours, _ in setup_rows(config, {})},
                "cpu": cpu_model()})
            if batch_order != "own":  # fedray's accuracy by round (in %) beside the authors' on each seed
                out[-1].update({"batch_order": batch_order,
                                "fedray_rounds": [[100 * a for a in fedray[method, scene, s][4]] for s in seeds],
                                "authors_rounds": [[100 * a for a in authors[method, scene, s]["accuracy"]]
                                                   for s in seeds],
                                "control_rounds": [[100 * a for a in authors[method, scene, s]["control"]]
                                                   for s in seeds],
                                "control": [paper.authors_measure(method, {**authors[method, scene, s],
                                                                           "accuracy": authors[method, scene, s]["control"]})
                                            for s in seeds]})
    for row in out:  # where the code's rules were run in the same call, their rows are here to read
        row["cause"] = cause_of(row, out)
    return out


def cause_of(row: dict, rows: Iterable[dict] = ()) -> str:
    """A row's cause: CAUSES' for its paper and method where the two sides differ, empty where they
    agree. A cause that says fedray agrees with the code under the code's rules names those rules'
    methods (``mrtf_code``, outside backquotes): it is given only in a scene where each of those rows
    (among ``rows``) agrees; elsewhere the row stays open."""
    if is_check(row) or agreement({**row, "cause": ""}) == "agrees":
        return ""
    rows = list(rows)
    rounding = rounding_cause(row, rows)
    if rounding:
        return rounding
    cause = CAUSES.get((row["paper"], row["method"]), "")
    same = {r["method"]: r for r in rows if (r["paper"], r["scene"]) == (row["paper"], row["scene"]) and not is_check(r)}
    named = re.findall(r"\b\w+_code\w*\b", re.sub(r"`[^`]*`", "", cause))  # methods; `quoted` are settings, files
    if any(m not in same or (agreement({**same[m], "cause": ""}) != "agrees" and not rounding_cause(same[m], rows))
           for m in named):
        return ""
    return cause


def unsettled(text: str, rows: Iterable[dict]) -> list[str]:
    """The ``_code`` methods that ``text`` names (outside backquotes) without a row that agrees in
    every scene they were run in: an adapter's SETTLES is shown only where this is empty."""
    table = [r for r in rows if not is_check(r)]
    named = dict.fromkeys(re.findall(r"\b\w+_code\w*\b", re.sub(r"`[^`]*`", "", text)))
    return [m for m in named if not any(r["method"] == m for r in table)
            or any(r["method"] == m and agreement({**r, "cause": ""}) != "agrees" for r in table)]


def drift(check: dict) -> tuple[float, float]:
    """A check's mean gap a round, in points over its seeds and rounds: fedray against the authors'
    code, and the code against itself on torch's portable kernels."""
    gap = np.abs(np.subtract(check["fedray_rounds"], check["authors_rounds"])).mean()
    control = np.abs(np.subtract(check["authors_rounds"], check["control_rounds"])).mean()
    return float(gap), float(control)


def equal_rounds(ours: list[float], theirs: list[float]) -> int:
    """How many rounds, from the first, two runs' accuracies are the same to the test image."""
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if abs(a - b) > SAME), len(ours))


def rounding_cause(row: dict, rows: list[dict]) -> str:
    """The cause of a row whose check (same paper, method and scene, fedray's batches on both sides)
    finds fedray no further from the authors' code than the code from itself on other kernels: no
    difference in arithmetic, and float rounding that the scene amplifies; empty where there is no
    such check."""
    check = next((r for r in rows if is_check(r) and
                  (r["paper"], r["method"], r["scene"]) == (row["paper"], row["method"], row["scene"])), None)
    if check is None:
        return ""
    gap, control = drift(check)
    if gap > control:
        return ""
    equal = min(equal_rounds(f, t) for f, t in zip(check["fedray_rounds"], check["authors_rounds"]))
    ours = np.abs(np.subtract(check["fedray"], check["authors"])).mean()
    itself = np.abs(np.subtract(check["authors"], check["control"])).mean()
    return (f"no difference in arithmetic found: with fedray's batches on both sides (the check below) the two agree "
            f"to the test image for the first {equal} rounds on every seed, then drift apart no faster than the "
            f"authors' code drifts from itself on torch's portable kernels (a mean gap of {gap:.2f} points a round "
            f"against {control:.2f}); on the measure a seed moves by {ours:.2f} points between fedray and the code "
            f"and by {itself:.2f} between the code and itself (means over the check's {len(check['seeds'])} seeds). "
            "What is left of the row's difference comes from what the two sides do not share, the batch order and "
            "float rounding, in a scene whose accuracy swings tens of points from round to round")


def key(row: dict) -> tuple:
    """A row's place in the JSON: its paper, method, scene and the authors' batch order."""
    return row["paper"], row["method"], row["scene"], row.get("batch_order", "own")


def is_check(row: dict) -> bool:
    """A row of the check with the authors' loaders in fedray's batch order, not of the table."""
    return row.get("batch_order", "own") != "own"


def with_causes(saved: dict) -> dict:
    """Every saved row's ``cause`` set from CAUSES (:func:`cause_of`, read against all the rows)."""
    for row in saved.values():
        row["cause"] = cause_of(row, saved.values())
    return saved


TARGET = 1.0  # points: a difference within this, with an interval that holds 0, is agreement
SAME = 0.005  # points: two accuracies on the 10,000 test images this close are the same to the image


def agreement(row: dict) -> str:
    """``agrees`` (the mean difference within TARGET points and its interval holding 0), else
    ``differs: <cause>``, or ``open`` where no cause is written down yet."""
    low, high = row["diff_ci"]
    if abs(row["diff_mean"]) <= TARGET and low <= 0 <= high:
        return "agrees"
    return f"differs: {row['cause']}" if row["cause"] else "open: no cause found yet"



def _commits_text(rows: list[dict]) -> str:
    """The fedray commits of a paper's rows: one, or each with the rows it made (the commonest as
    "the other rows"), since a row is one commit's runs but a paper's rows may come from several."""
    by = {}
    for r in rows:
        by.setdefault((r["fedray_commit"] or "unknown")[:9], []).append(r)
    if len(by) == 1:
        return f"commit `{next(iter(by))}`"
    ranked = sorted(by, key=lambda c: -len(by[c]))
    parts = []
    for c in ranked[1:]:
        scenes = {}
        for r in by[c]:
            scenes.setdefault(r["scene"], []).append(r["method"])
        parts.append(f"`{c}` ({'; '.join(f'{sc}: ' + ', '.join(ms) for sc, ms in scenes.items())})")
    return f"commits {', '.join(parts)} and `{ranked[0]}` (the other rows)"


def check_lines(checks: list[dict]) -> list[str]:
    """The section of a paper's check with the authors' loaders in fedray's batch order: each row's
    measure on both sides, and by round the mean gap between the two sides beside the mean gap
    between the authors' code and itself on torch's portable kernels."""
    from fedray.repro import markdown_table

    lines = ["### With the same batches on both sides", "",
             "A check of the arithmetic (`--batch-order fedray`): the authors' client and distillation loaders draw "
             "fedray's batches in fedray's order, and FedAUX's scorer adds fedray's privacy noise (fedray's draw of "
             "each client, in place of numpy's global generator), so that the two sides differ only in how they "
             "compute. Equal "
             "arithmetic gives equal accuracies until float rounding (other orders of additions, other kernels) "
             "sets the models apart; how fast that alone moves them shows in the control, the authors' code "
             "against itself on torch's portable kernels (`ATEN_CPU_CAPABILITY=default`), the same batches on "
             f"both. fedray at {_commits_text(checks)}"
             + (" (with local changes)" if any(r["fedray_dirty"] for r in checks) else "") + ".", ""]
    table = []
    for r in checks:
        low, high = r["diff_ci"]
        itself = paired(dict(zip(r["seeds"], r["authors"])), dict(zip(r["seeds"], r["control"]))).difference
        gap, control = drift(r)
        table.append([r["method"], r["scene"], str(len(r["seeds"])), f"{sum(r['fedray']) / len(r['fedray']):.2f}",
                      f"{sum(r['authors']) / len(r['authors']):.2f}", f"{r['diff_mean']:+.2f} [{low:+.2f}, {high:+.2f}]",
                      f"{itself.mean:+.2f} [{itself.low:+.2f}, {itself.high:+.2f}]",
                      ", ".join(str(equal_rounds(f, t)) for f, t in zip(r["fedray_rounds"], r["authors_rounds"])),
                      ", ".join(str(equal_rounds(t, c)) for t, c in zip(r["authors_rounds"], r["control_rounds"])),
                      f"{gap:.2f} / {control:.2f}"])
    lines += markdown_table(["fedray method", "scene", "n", "fedray", "authors", "fedray - authors [95%]",
                             "authors - authors on the portable kernels [95%]", "rounds equal to the image, by seed",
                             "the same, authors against themselves", "mean gap a round, fedray / the control"], table)
    rounds = max(len(r["fedray_rounds"][0]) for r in checks)
    by_round = [[str(i + 1)] + [
        f"{np.abs(np.subtract(r['fedray_rounds'], r['authors_rounds'])[:, i]).mean():.2f} / "
        f"{np.abs(np.subtract(r['authors_rounds'], r['control_rounds'])[:, i]).mean():.2f}"
        if i < len(r["fedray_rounds"][0]) else "" for r in checks] for i in range(rounds)]
    lines += ["", "By round, the mean gap over the seeds in points: fedray against the authors' code / the code against "
              "itself on the portable kernels.", ""]
    lines += markdown_table(["round"] + [f"{r['method']}, {r['scene']}" for r in checks], by_round)
    return lines


def page(rows: list[dict]) -> str:
    """docs/authors.md from the rows of docs/records/authors.json: the table of each paper, and
    apart from it the rows of the check with the authors' loaders in fedray's batch order."""
    from fedray.repro import markdown_table

    checks, rows = [r for r in rows if is_check(r)], [r for r in rows if not is_check(r)]

    lines = ["# fedray beside the authors' code", "",
             "Each seed's inputs (the split, the model's initialisation, the hyperparameters, the rounds, the "
             "clients of each round and the test set) run through fedray and through the authors' public code, "
             "unchanged, from a checkout. A row is one method in one scene: the paper's primary measure per "
             "seed on each side, and the paired difference fedray minus authors with its 95% t interval over "
             f"the seeds. The target: within {TARGET:g} point, with an interval that holds 0. Written by "
             "`scripts/docs/generate.py` from `docs/records/authors.json`; the runs: `scripts/authors/compare.py` (its docstring has the "
             "commands).", ""]
    verdicts = [agreement(r) for r in rows]
    lines += [f"**{verdicts.count('agrees')} of {len(rows)} rows agree; "
              f"{sum(v.startswith('differs') for v in verdicts)} differ with a cause written down; "
              f"{sum(v.startswith('open') for v in verdicts)} differ with no cause found.**", "",
              f"Each interval is at 95% on its own, not corrected for the {len(rows)} rows: where both sides compute "
              f"the same thing, about {round(0.05 * len(rows))} intervals would still exclude 0 by chance, so a lone "
              "row whose interval only just misses 0 is weak evidence of a difference; a row with an open interval "
              "but a mean more than 1 point away needs more seeds to tell.", ""]
    for paper in dict.fromkeys(r["paper"] for r in rows):
        adapter = importlib.import_module(PAPERS[paper.lower()])
        scenes = list(dict.fromkeys(r["scene"] for r in rows if r["paper"] == paper))
        order = list(adapter.METHODS)  # rows by scene, then in the adapter's order of methods
        mine = sorted((r for r in rows if r["paper"] == paper),
                      key=lambda r: (scenes.index(r["scene"]), order.index(r["method"]) if r["method"] in order else 99))
        first = mine[0]
        commits = _commits_text(mine)
        lines += [f"## {paper}", "",
                  f"The authors' code: `{first['authors_repo']}` at commit `{first['authors_commit'][:9]}`"
                  + (" (with local changes)" if any(r["authors_dirty"] for r in mine) else "")
                  + f"; fedray at {commits}"
                  + (" (with local changes)" if any(r["fedray_dirty"] for r in mine) else "")
                  + f". Measure: {first['measure']}. Seeds: each varies the split; a row's are in its n column "
                  "(seeds 0 to n - 1).", ""]
        settles = getattr(adapter, "SETTLES", "")
        if settles:
            missing = unsettled(settles, mine)
            lines += [f"**What it says of the reproduction.** {settles}." if not missing else
                      f"**What it says of the reproduction:** not settled yet; {', '.join(missing)} does not agree "
                      "with the code in every scene.", ""]
        settings = {}  # each setting's values over the rows (a method's own, e.g. local training, differ)
        for r in mine:
            for name, value in r["setup"].items():
                settings.setdefault(name, {}).setdefault(value, []).append(r)

        def said(values: dict) -> str:
            """A setting: its one value, else each value with the methods it is for, or "(by scene)"
            where it changes with the scene only."""
            if len(values) == 1:
                return next(iter(values))
            per_scene = {}
            for value, rs in values.items():
                for r in rs:
                    per_scene.setdefault(r["scene"], set()).add(value)
            if all(len(v) == 1 for v in per_scene.values()):
                return "; ".join(values) + " (by scene)"
            return "; ".join(f"{v} ({', '.join(dict.fromkeys(r['method'] for r in rs))})" for v, rs in values.items())

        lines += markdown_table(["setting", "both sides"], [[name, said(values)] for name, values in settings.items()])
        lines.append("")
        causes = list(dict.fromkeys(r["cause"] for r in mine if agreement(r).startswith("differs")))
        table = []
        for r in mine:
            v = agreement(r)
            low, high = r["diff_ci"]
            table.append([r["method"], r["authors_method"], r["scene"], str(len(r["seeds"])),
                          f"{sum(r['fedray']) / len(r['fedray']):.2f}", f"{sum(r['authors']) / len(r['authors']):.2f}",
                          f"{r['diff_mean']:+.2f} [{low:+.2f}, {high:+.2f}]",
                          f"differs (cause {causes.index(r['cause']) + 1})" if v.startswith("differs") else v,
                          f"{r['fedray_s'] / 60:.1f} / {r['authors_s'] / 60:.1f}"])
        lines += markdown_table(["fedray method", "authors' method", "scene", "n", "fedray", "authors",
                                 "fedray - authors [95%]", "verdict", "minutes, fedray / authors"], table)
        if causes:
            lines += ["", "The causes of the differences:", ""] + [f"{i}. {c}." for i, c in enumerate(causes, 1)]
        lines += ["", "What the adapter changes when it runs the authors' code (none of it the arithmetic of "
                  "training):", ""] + [f"- {a}." for a in adapter.ADAPTATIONS]
        if getattr(adapter, "FEDRAY_RULES", None):
            lines += ["", "Where fedray's side takes the code's rule over the reproduction's (the paper's), by a named "
                      "option:", ""] + [f"- {r}." for r in adapter.FEDRAY_RULES]
        if getattr(adapter, "UNALIGNED", None):
            lines += ["", "Where the two sides still differ, left as they are:", ""] + [f"- {u}." for u in adapter.UNALIGNED]
        lines += ["", "Not compared, and why:", ""] + [f"- {n}." for n in adapter.NOT_COMPARED]
        mine_checks = [r for r in checks if r["paper"] == paper]
        if mine_checks:
            lines += [""] + check_lines(mine_checks)
            if getattr(adapter, "CHECK_NOTES", None):
                lines += ["", "What the check leaves apart, and what it does:", ""] + [f"- {n}." for n in adapter.CHECK_NOTES]
        lines += ["", f"Minutes are wall time summed over the seeds, one CPU thread a run, on {first['cpu']}; other "
                  "runs shared the machine's cores at times, so they compare the two sides only roughly.", ""]
    return "\n".join(lines)


def inside() -> None:
    """``compare.py inside ADAPTER ...``: one run of the authors' code, in a process of its own
    (run_authors starts it): the adapter's ``inside``."""
    parser = argparse.ArgumentParser(description="one run of the authors' code on an export (run_authors starts it)")
    parser.add_argument("adapter", choices=list(PAPERS.values()))
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--setup", type=Path, required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch-order", choices=["own", "fedray"], default="own")
    a = parser.parse_args(sys.argv[2:])
    adapter = importlib.import_module(a.adapter)
    if a.method not in adapter.METHODS:
        raise SystemExit(f"{a.adapter}: no method {a.method!r}; it has {', '.join(adapter.METHODS)}")
    if a.batch_order == "own":
        adapter.inside(a.checkout.resolve(), a.setup.resolve(), a.method, a.out.resolve())
    else:
        adapter.inside(a.checkout.resolve(), a.setup.resolve(), a.method, a.out.resolve(), batch_order=a.batch_order)


def causes(path: Path) -> None:
    """``compare.py causes [JSON]``: each saved row's ``cause`` set from CAUSES, once a cause is
    written down there (the runs stay as they are)."""
    store = Store(path, key=key, field=None)
    saved = with_causes(store.load())
    store.save(saved)
    print(f"{path}: {sum(bool(r['cause']) for r in saved.values())} of {len(saved)} rows with a cause")


def main() -> None:
    if sys.argv[1:2] == ["inside"]:
        return inside()
    if sys.argv[1:2] == ["causes"]:  # the saved rows' causes rewritten from CAUSES, nothing run
        return causes(Path(sys.argv[2]) if len(sys.argv) > 2 else OUT)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper", choices=list(PAPERS))
    parser.add_argument("--checkout", type=Path, required=True, help="a git checkout of the authors' code")
    parser.add_argument("--methods", nargs="+", help="fedray's methods (default: every one the code implements)")
    parser.add_argument("--scenes", nargs="+", help="the scenes (FedGen: Dirichlet alphas; default: the paper's)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="each varies the split")
    parser.add_argument("--rounds", type=int, help="rounds (default: the reproduction's)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="runs at once on each side")
    parser.add_argument("--work", type=Path, help="the runs' folder (default runs/authors/<paper>)")
    parser.add_argument("--out", type=Path, default=OUT, help="the rows' JSON (merged by paper, method and scene)")
    parser.add_argument("--batch-order", choices=["own", "fedray"], default="own",
                        help="fedray: the authors' loaders draw fedray's batches, in fedray's order, and their scorer "
                             "fedray's privacy noise (FedAUX only), "
                             "so that the two sides differ only in their arithmetic: a check of its own, whose rows "
                             "(each round's accuracy on both sides) the page shows apart from the table")
    args = parser.parse_args()
    args.work = (args.work or ROOT / "runs" / "authors" / args.paper).resolve()
    checkout = args.checkout.resolve()
    info = checkout_commit(checkout)
    paper = importlib.import_module(PAPERS[args.paper]).Paper(args)
    if args.batch_order not in getattr(paper, "batch_orders", ("own",)):
        raise SystemExit(f"--batch-order {args.batch_order}: the {paper.name} adapter runs the authors' loaders in "
                         "their own order only")
    start = time.perf_counter()
    fedray = paper.fedray_runs()
    authors = run_authors(paper, checkout, fedray, args.work, args.jobs, args.batch_order)
    store = Store(args.out, key=key, field=None)
    saved = store.load()
    new = rows(paper, info, fedray, authors, args.batch_order)
    saved.update({store.key(r): r for r in new})
    store.save(with_causes(saved))
    for r in new:
        lo, hi = r["diff_ci"]
        print(f"{r['method']:16s} {r['scene']:10s} fedray {sum(r['fedray']) / len(r['fedray']):6.2f}  authors "
              f"{sum(r['authors']) / len(r['authors']):6.2f}  diff {r['diff_mean']:+.2f} [{lo:+.2f}, {hi:+.2f}]")
        for seed, ours, theirs in zip(r["seeds"], r.get("fedray_rounds", []), r.get("authors_rounds", [])):
            gaps = [a - b for a, b in zip(ours, theirs)]
            print(f"  seed {seed}: fedray - authors by round " + " ".join(f"{g:+.2f}" for g in gaps))
        for seed, ours, theirs in zip(r["seeds"], r.get("authors_rounds", []), r.get("control_rounds", [])):
            gaps = [a - b for a, b in zip(ours, theirs)]
            print(f"  seed {seed}: authors - authors on other kernels " + " ".join(f"{g:+.2f}" for g in gaps))
    print(f"wrote {args.out} ({len(new)} rows) in {(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
