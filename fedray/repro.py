"""The reproduction harness: run a script's grid as a sweep, read the runs back, tabulate.

The reproduction scripts (``scripts/repro_*.py``) are built from these pieces:

- :func:`run_sweep` runs a grid of a config as :func:`fedray.sweep` trials (each an ordinary run on
  the local backend, one CPU each, as many at once as Ray has CPUs) and reads every finished trial
  back from its run folder: what a ``record`` function keeps of each round's logged metrics
  (:func:`round_metrics`), the summary and the config. A stopped grid resumes where it stopped; a
  grid that grows runs only its new trials. :func:`run_specs` does the same for a script's list of
  specs (each a seed and overrides), as one axis of named variants.
- :class:`Store` is a script's JSON of results, merged with what is already saved there, so a
  re-run of a few specs merges in.
- :func:`markdown_table` writes a table's lines and :func:`listing` a list in a sentence, for the
  sentences a script computes from its runs (its figures: :func:`fedray.figures.figure` and
  :func:`fedray.figures.save_figure`).
- :func:`grid_arguments` is the command line the grid scripts share, :func:`invocation` what one
  call of such a script ran, where (:func:`cpu_model`) and how long; :func:`report_failed` ends a
  script whose trials did not all finish.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional, Sequence

from fedray.checkpoint import DIVERGED
from fedray.config import Config, load_config
from fedray.provenance import source

@dataclasses.dataclass
class Store:
    """A JSON file of run results, rewritten whole after every finished run.

    Args:
        path: the ``.json`` file.
        key: a result's identity; a new result replaces the saved one with the same key.
        field: the field of the file's object that holds the list of results; None: the file is
            that list and has no header.
        header: the file's other fields, written before ``field`` as given.
        match: header fields that a saved file must share with ``header`` for its results to be
            kept (e.g. the number of rounds); the results of a file that differs are dropped.
    """

    path: Path
    key: Callable[[dict[str, Any]], Hashable]
    field: Optional[str] = "results"
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    match: tuple[str, ...] = ()

    def read(self) -> Any:
        """The file's JSON as saved, or None if there is no file."""
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def load(self) -> dict[Hashable, dict[str, Any]]:
        """The saved results by key: none without a file or when the saved header does not match."""
        saved = self.read()
        if saved is None:
            return {}
        if self.field is not None:
            if any(saved.get(name) != self.header.get(name) for name in self.match):
                return {}
            saved = saved.get(self.field, [])
        return {self.key(r): r for r in saved}

    def save(self, results: dict[Hashable, dict[str, Any]]) -> None:
        """Write ``results`` (with the header) over the file."""
        items = list(results.values())
        doc = items if self.field is None else {**self.header, self.field: items}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(doc, indent=1))


SweepRecord = Callable[[int, dict[str, float], Config], Optional[dict[str, Any]]]


@dataclasses.dataclass
class SweptRun:
    """A finished trial of :func:`run_sweep`, read back from its run folder.

    Attributes:
        point: the trial's grid point (each axis's value or variant name).
        seed: the trial's seed.
        config: the trial's config (its ``config.yaml``).
        records: what ``record`` kept of each round, in round order.
        summary: the run's ``result.json``; for a run that diverged (kept with ``diverged=True``),
            its ``diverged.json`` (``fedray.federation.Federation.diverged``).
        wall_s: from the run's start (``config.yaml`` written) to its end (``result.json`` or
            ``diverged.json`` written).
    """

    point: dict[str, Any]
    seed: int
    config: Config
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    wall_s: float


def round_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """A run's logged scalars by round, ``{round: {tag: value}}``, from its event files: the steps of
    its rounds (those with ``time/round_s``). What a method logs at step 0 (diagnostics before round
    1, e.g. FedAUX's scores) joins round 1's metrics; ``pretrain/*`` (stepped by pre-training epoch)
    is left out."""
    from fedray.tracking import read_scalars

    steps: dict[int, dict[str, float]] = {}
    for tag, series in read_scalars(run_dir).items():
        if not tag.startswith("pretrain/"):
            for step, value in series:
                steps.setdefault(step, {})[tag] = value
    rounds = {step: m for step, m in sorted(steps.items()) if "time/round_s" in m}
    if 0 in steps and 1 in rounds:
        rounds[1] = {**steps[0], **rounds[1]}
    return rounds


def run_sweep(config: Any, grid: Mapping[str, Any], seeds: Iterable[int], out: Path, record: SweepRecord, *,
              overrides: Sequence[str] = (), hold: Sequence[str] = (), jobs: Optional[int] = None,
              progress: bool = True, diverged: bool = False) -> tuple[list[SweptRun], list[dict[str, Any]]]:
    """Run a reproduction's grid of ``config`` (a YAML file's path or a dict, as :func:`fedray.sweep`
    takes) as :func:`fedray.sweep` trials and read every finished one back.

    Each trial is an ordinary run of ``config`` with ``overrides``, the grid point's and the seed's,
    on the local backend: one process with one CPU and one torch thread, ``jobs`` at once (default:
    as many as Ray has CPUs), into ``out/trials/<name>``. A stopped grid resumes where it stopped and
    a grid that grows runs only its new trials (:mod:`fedray.sweeps`).

    Args:
        record: what to keep of a round, given the round, its metrics (:func:`round_metrics`) and
            the trial's config; None keeps nothing of that round.
        diverged: a trial that diverged is a result too (its rounds up to the one it diverged in,
            and its ``diverged.json`` as the summary), for a script whose tables show it as such.

    Returns:
        The finished trials (with ``diverged``, those that diverged as well), and the sweep's rows of
        the trials that did not finish (each with the one line of why, and its run folder).
    """
    from fedray.sweeps import sweep

    result = sweep(config, grid, seeds, out=out, hold=hold, trial_cpus=1, max_concurrent=jobs, progress=progress,
                   overrides=[*overrides, "runtime.backend=local", "runtime.torch_threads=1"])
    ended = ("done", "diverged") if diverged else ("done",)
    runs = []
    for row in result.rows:
        if row["status"] not in ended:
            continue
        run_dir = Path(row["run_dir"])
        trial_config = load_config(run_dir / "config.yaml")
        records = [kept for rnd, m in round_metrics(run_dir).items()
                   if (kept := record(rnd, m, trial_config)) is not None]
        end = run_dir / ("result.json" if row["status"] == "done" else DIVERGED)
        wall = end.stat().st_mtime - (run_dir / "config.yaml").stat().st_mtime
        runs.append(SweptRun({k: row[k] for k in grid}, row["seed"], trial_config, records,
                             json.loads(end.read_text()), wall))
    return runs, [row for row in result.rows if row["status"] not in ended]


def run_specs(config: Any, specs: list[dict[str, Any]], name: Callable[[dict[str, Any]], str], out: Path,
              record: SweepRecord, *, hold: Sequence[str] = (), jobs: Optional[int] = None,
              progress: bool = True, diverged: bool = False
              ) -> tuple[list[tuple[dict[str, Any], SweptRun]], list[dict[str, Any]]]:
    """A script's specs (dicts with a ``seed`` and the ``overrides`` of everything else) as one
    :func:`run_sweep`: an axis ``run`` of named variants, one per spec without its seed (``name``),
    crossed with the specs' seeds; the specs must be that grid.

    Returns:
        ``(spec, run)`` for every finished trial, and the rows of the trials that did not finish.
    """
    variants = {name(s): s for s in specs}
    seeds = sorted({s["seed"] for s in specs})
    if len(variants) * len(seeds) != len(specs) or {(name(s), s["seed"]) for s in specs} != \
            {(v, seed) for v in variants for seed in seeds}:
        raise ValueError(f"{out}: the specs are not every variant for every seed")
    done, failed = run_sweep(config, {"run": {v: s["overrides"] for v, s in variants.items()}}, seeds, out, record,
                             hold=hold, jobs=jobs, progress=progress, diverged=diverged)
    return [({**variants[r.point["run"]], "seed": r.seed}, r) for r in done], failed


def run_experiments(specs: list[dict[str, Any]], run: Callable[[str, list[dict[str, Any]]], tuple[dict, list]],
                    store: Store, line: Callable[[dict[str, Any]], str]) -> tuple[dict, list[dict[str, Any]]]:
    """A script's specs, experiment by experiment (``spec["experiment"]``): ``run(experiment, specs)``
    gives the finished results by key and the trials that failed (as :func:`run_specs` does); each
    result is printed with ``line``, and the store (loaded first) is saved after each experiment.

    Returns:
        The saved results merged with the new ones, and every failed trial's row.
    """
    results, failed = store.load(), []
    for experiment in dict.fromkeys(s["experiment"] for s in specs):
        new, failed_here = run(experiment, [s for s in specs if s["experiment"] == experiment])
        results.update(new)
        failed += failed_here
        for r in new.values():
            print(line(r), flush=True)
        store.save(results)
    return results, failed


def report_failed(failed: list[dict[str, Any]]) -> None:
    """After a script saved what finished: one line per trial of :func:`run_sweep` that did not
    finish (why, and its run folder), and exit status 1; nothing when every trial finished."""
    for row in failed:
        print(f"trial {row['trial']} {row['status']}: {row.get('error') or '-'} ({row['run_dir']})", file=sys.stderr)
    if failed:
        sys.exit(1)


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    """The lines of a markdown table: the header, the separator, one line a row (empty cells as ``| |``;
    a ``|`` inside a cell escaped, so that it does not split the cell)."""

    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {c.replace('|', chr(92) + '|')} " if c else " " for c in cells) + "|"

    return [line(header), "|" + "---|" * len(header)] + [line(row) for row in rows]


def listing(items: Iterable[str]) -> str:
    """``"a, b and c"``: items in a sentence."""
    items = list(items)
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


RECORDS = "records"  # beside the pages: the data each is drawn from (its runs' JSON) and its figures


def record_file(page: Path, suffix: str) -> Path:
    """A page's data file: ``records/<name><suffix>`` beside the page (``page`` without suffix),
    its folder made if need be; the page itself is ``page`` with ``.md``."""
    path = page.parent / RECORDS / f"{page.name}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def grid_arguments(doc: str, experiments: Iterable[str], out: Path) -> argparse.ArgumentParser:
    """The options of a grid script: ``--jobs``, ``--only`` (some of ``experiments``), ``--rounds``,
    ``--out`` (default ``out``), ``--sweep`` (where :func:`run_sweep` keeps the trials) and
    ``--plot-only``; ``doc``'s first paragraph is the description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="trials at once (default: one per CPU of Ray)")
    parser.add_argument("--only", nargs="+", choices=list(experiments), help="experiments to run")
    parser.add_argument("--rounds", type=int, help="override every run's rounds (a quick check)")
    parser.add_argument("--out", default=str(out), help="the page's path without suffix (its .json and .png go to records/ beside it)")
    parser.add_argument("--sweep", default=str(Path("runs") / "repro" / out.name),
                        help="the sweep folder: the trials' run folders (default runs/repro/<out's name>)")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved .json")
    return parser


def cpu_model() -> str:
    """The processor's name (Linux's /proc/cpuinfo), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def invocation(args: argparse.Namespace, specs: list, results: dict, key: Callable[[Any], Hashable],
               start: float, **extra: Any) -> dict[str, Any]:
    """What one call of a grid script (options from :func:`grid_arguments`) ran: the specs, trials at
    once, wall time since ``start`` (``time.perf_counter``), run time summed over the trials (for
    trials finished by an earlier call, their own), Python, processor, and the fedray commit it ran at."""
    return {"only": args.only or [], "jobs": args.jobs or os.cpu_count(), "rounds": args.rounds, "runs": len(specs),
            "wall_s": time.perf_counter() - start, **extra,
            "run_s": sum(results[key(s)]["wall_s"] for s in specs), "python": platform.python_version(),
            "cpu": cpu_model(), "commit": source()["commit"], "dirty": source()["dirty"]}


class MixedRuns(ValueError):
    """Runs that a table would mix: ran at different commits or on a tree that differed from its
    commit, or paired runs that saw different held-back data."""


def origin(runs: Iterable[dict[str, Any]], what: str) -> Optional[str]:
    """The one fedray commit that every run of a table ran at (each recorded run's ``provenance``,
    :mod:`fedray.provenance`), or None where no run recorded one (runs saved before runs carried
    their commit: their table says so and gives no verdict).

    Raises:
        MixedRuns: (one line naming ``what``) some runs carry a commit and some do not, they ran at
            different commits, or one ran on a tree that differed from its commit.
    """
    runs = list(runs)
    known = [r["provenance"] for r in runs if r.get("provenance")]
    if not known:
        return None
    if len(known) < len(runs):
        raise MixedRuns(f"{what}: {len(runs) - len(known)} of {len(runs)} runs carry no commit; re-run them")
    dirty = [p["commit"] for p in known if p.get("dirty") is not False or not p.get("commit")]
    if dirty:
        raise MixedRuns(f"{what}: {len(dirty)} runs ran on a tree that differs from its commit (or outside a "
                        "checkout); re-run them from a clean checkout")
    commits = sorted({p["commit"] for p in known})
    if len(commits) > 1:
        raise MixedRuns(f"{what}: the runs ran at {len(commits)} commits ({', '.join(c[:9] for c in commits)}); "
                        "re-run them in one call")
    return commits[0]


def check_pairing(a: dict[str, Any], b: dict[str, Any], what: str) -> None:
    """Two runs paired by seed must have seen the same split and the same held-back (auxiliary)
    data: MixedRuns (one line naming ``what``) where their recorded seeds say otherwise. Runs
    without provenance are not checked (and give no verdict)."""
    pa, pb = a.get("provenance"), b.get("provenance")
    if pa and pb:
        for seed in ("split", "aux"):
            if pa["seeds"][seed] != pb["seeds"][seed]:
                raise MixedRuns(f"{what}: paired runs saw different {seed} seeds ({pa['seeds'][seed]} and "
                                f"{pb['seeds'][seed]})")


def commit_text(commit: Optional[str]) -> str:
    """How a table names where its runs came from: ``commit 2c80048c1`` or that none was recorded."""
    return f"commit `{commit[:9]}`" if commit else "commit not recorded (runs saved before runs carried their commit)"


def setup_rows(config: Config, paper: Mapping[str, str]) -> list[list[str]]:
    """A page's setup, read from its config (so that the page cannot drift from what ran): one row
    per setting with our value and the paper's (``paper``, keyed by the row's name; a row the paper
    does not state shows ``-``). Rows: data set, clients, clients per round, rounds, model, local
    training, test set, auxiliary data and distillation (where the method has them)."""
    fed, train, data = config.federation, config.training, config.data
    models = ", ".join(f"{n} x {arch}" if len(fed.architectures) > 1 else arch for arch, n in fed.architectures.items())
    local = (f"{train.optimizer}, lr {train.lr:g}" + (f", momentum {train.momentum:g}" if train.momentum else "")
             + (f" decayed by {train.lr_decay:g} a round of the client's last training" if train.lr_decay != 1 else "")
             + f", batch {train.batch_size}, " + (f"{train.steps} step" + ("s" if train.steps > 1 else "") if train.steps else f"{train.epochs} epoch"
                                                   + ("s" if train.epochs > 1 else "")))
    split = {"iid": "iid", "dirichlet": f"Dirichlet alpha {data.alpha:g}",
             "shards": f"{data.classes_per_client} classes per client", "natural": "by user"}[data.partition]
    ours = {"data set": f"{data.dataset} ({split})", "clients": str(fed.num_clients),
            "clients per round": str(fed.clients_per_round), "rounds": str(fed.rounds), "model": models,
            "local training": local,
            "test set": f"the first {data.test_limit:,} test samples" if data.test_limit else "the whole test set"}
    aux = config.aux
    if aux.size:
        ours["auxiliary data"] = (f"{aux.size:,} unlabelled " + (f"{aux.dataset} samples" if aux.dataset else
                                                                "training samples carved out before the split"))
    distill = getattr(config.algorithm, "distill", None)  # a method's distillation settings, as configured
    if distill:
        d = distill if isinstance(distill, dict) else vars(distill)
        amount = f"{d['steps']} steps" if d.get("steps") else f"{d.get('epochs', 1)} epoch over the auxiliary data"
        ours["distillation"] = (f"{d.get('optimizer', '?')}, lr {d['lr']:g}" if "lr" in d else "the method's defaults") \
            + (f", batch {d['batch_size']}" if "batch_size" in d else "") + f", {amount}"
    return [[name, value, paper.get(name, "-")] for name, value in ours.items()]


def setup_table(config: Config, paper: Mapping[str, str], deviations: Sequence[tuple[str, str]] = ()) -> list[str]:
    """:func:`setup_rows` as a markdown table, then every deviation from the paper with its reason
    (``(what, why)``) as a list."""
    lines = markdown_table(["setting", "ours", "paper"], setup_rows(config, paper))
    if deviations:
        lines += ["", "Deviations from the paper, and why:", ""] + [f"- {what}: {why}" for what, why in deviations]
    return lines


def runs_commit_text(runs: Iterable[dict[str, Any]], what: str) -> str:
    """:func:`commit_text` of the runs' :func:`origin`, or why they do not make one table."""
    try:
        return commit_text(origin(runs, what))
    except MixedRuns as e:
        return f"runs that do not make one table: {e}"


def final_value(r: dict[str, Any], field: str = "accuracy") -> float:
    """A recorded run's last value of ``field`` (a fraction) over its ``history``; a run that diverged
    (its ``diverged``: the run's ``diverged.json``) ends with no usable model and scores chance."""
    if r.get("diverged"):
        return r["diverged"]["chance"]
    return [h[field] for h in r["history"] if h.get(field) is not None][-1]


def diverged_text(runs: Iterable[dict[str, Any]], name: Callable[[dict[str, Any]], str]) -> str:
    """One sentence naming each run that diverged (``name``: which run it is), the round, why, and
    what it scores (:func:`final_value`); empty where none did."""
    bad = [r for r in runs if r.get("diverged")]
    if not bad:
        return ""
    return ("Runs that diverged, each counted at chance as its final accuracy: " + "; ".join(
        f"{name(r)}, in round {r['diverged']['round']} ("
        + re.sub(r"^round \d+: ", "", r["diverged"]["why"]) + f"), counted as {100 * r['diverged']['chance']:.1f}%"
        for r in bad) + ".")

