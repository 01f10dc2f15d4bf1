"""The reproduction harness: run configs locally, run grids of them in parallel, tabulate.

The reproduction scripts (``scripts/repro_*.py``) are built from four pieces:

- :func:`run_local` runs one config in this process (``runtime.backend: local``) in a temporary
  folder without checkpoints, one round at a time, keeping what a ``record`` function picks of each
  round and stopping early where a ``stop`` function says so. It is the one place the scripts build a
  :class:`~fedray.federation.Federation`.
- :func:`run_grid` runs many specs in parallel processes, the longest first, printing a line per
  finished run and rewriting the :class:`Store` (a JSON file) after each, merged with the results
  already saved there: a partial grid survives, and a re-run of a few specs merges in.
- :func:`markdown_table` writes a table's lines and :func:`listing` a list in a sentence, for the
  sentences a script computes from its runs (its figures: :func:`fedray.figures.figure` and
  :func:`fedray.figures.save_figure`).
- :func:`grid_arguments` is the command line the grid scripts share, :func:`invocation` what one
  call of such a script ran, where (:func:`cpu_model`) and how long.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Optional

from fedray.config import Config
from fedray.assembly import assemble
from fedray.federation import Federation
from fedray.messages import ClientSpec

Record = Callable[[Federation, dict[str, float]], Optional[dict[str, Any]]]
Stop = Callable[[Federation, dict[str, float]], bool]


@dataclasses.dataclass
class LocalRun:
    """What :func:`run_local` returns.

    Attributes:
        records: what ``record`` kept of each round, in round order.
        summary: the summary of ``Federation.finish()`` (what ``result.json`` holds).
        wall_s: wall time of the whole run, data loading included, in seconds.
        clients: the run's clients (architecture, data group, role: benign or adversary).
    """

    records: list[dict[str, Any]]
    summary: dict[str, Any]
    wall_s: float
    clients: list[ClientSpec]


def run_local(config: Config, record: Record | None = None, stop: Stop | None = None) -> LocalRun:
    """Run ``config`` in this process, without checkpoints, in a temporary folder removed afterwards.

    Args:
        config: the validated config; it runs ``config.federation.rounds`` rounds unless stopped.
        record: what to keep of a round, given the federation (after the round) and the round's
            metrics; None keeps nothing of that round. Default: the metrics themselves.
        stop: called after ``record``; True ends the run after this round.

    Returns:
        The records, the finish summary, the wall time and the clients.
    """
    start = time.perf_counter()
    records = []
    with tempfile.TemporaryDirectory() as run_dir:
        fed = Federation(assemble(config), run_dir, checkpoints=False)
        for _ in range(config.federation.rounds):
            metrics = fed.run_round().metrics
            kept = record(fed, metrics) if record else metrics
            if kept is not None:
                records.append(kept)
            if stop is not None and stop(fed, metrics):
                break
        summary = fed.finish()
    return LocalRun(records, summary, time.perf_counter() - start, fed.experiment.clients)


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


def run_grid(run: Callable[[Any], dict[str, Any]], specs: Iterable[Any], store: Store, jobs: int = 1,
             cost: Callable[[Any], float] | None = None,
             line: Callable[[dict[str, Any]], str] | None = None) -> dict[Hashable, dict[str, Any]]:
    """Run ``run(spec)`` for every spec in ``jobs`` processes and save each result as it finishes.

    Args:
        run: a module-level function (it is pickled to the worker processes) from a spec to a result.
        specs: what to run.
        store: where the results go; it is loaded first and rewritten after every finished run.
        jobs: how many processes run at once.
        cost: a spec's rough run time; the most costly start first, so the processes finish together.
        line: the line to print for a finished result.

    Returns:
        The saved results merged with the new ones, by ``store.key``.
    """
    results = store.load()
    todo = sorted(specs, key=cost, reverse=True) if cost else list(specs)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run, spec) for spec in todo]
        try:
            for future in as_completed(futures):
                result = future.result()
                results[store.key(result)] = result
                if line is not None:
                    print(line(result), flush=True)
                store.save(results)
        except BaseException:
            pool.shutdown(cancel_futures=True)  # a failed run or Ctrl-C: start no further runs
            raise
    return results


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


def grid_arguments(doc: str, experiments: Iterable[str], out: Path) -> argparse.ArgumentParser:
    """The options of a grid script: ``--jobs``, ``--only`` (some of ``experiments``), ``--rounds``,
    ``--out`` (default ``out``) and ``--plot-only``; ``doc``'s first paragraph is the description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--only", nargs="+", choices=list(experiments), help="experiments to run")
    parser.add_argument("--rounds", type=int, help="override every run's rounds (a quick check)")
    parser.add_argument("--out", default=str(out), help="output path without suffix")
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
    """What one call of a grid script (options from :func:`grid_arguments`) ran: the specs, wall time
    since ``start`` (``time.perf_counter``), run time summed over the processes, Python and processor."""
    return {"only": args.only or [], "jobs": args.jobs, "rounds": args.rounds, "runs": len(specs),
            "wall_s": time.perf_counter() - start, **extra,
            "run_s": sum(results[key(s)]["wall_s"] for s in specs), "python": platform.python_version(),
            "cpu": cpu_model()}
