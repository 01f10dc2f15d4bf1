"""What the pages of the reproduction scripts share: a recorded run's accuracy by round, its maximum
and its last, the paragraph on how long the grid took, the setup table of a page (its config beside
the paper's setting, with every deviation and its reason) and the commit a table's runs ran at.

A run is what a grid script saved of it in its .json: ``history`` holds one record a round, where a
tag's value is None in a round that did not measure it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

from fedray.config import load_config
from fedray.repro import runs_commit_text, setup_table


def accuracies(r: dict, tag: str = "accuracy") -> list[float]:
    """The run's values of ``tag``, by round, in the rounds that measured it."""
    return [h[tag] for h in r["history"] if h.get(tag) is not None]


def best(r: dict, tag: str = "accuracy") -> float:
    """The maximum of ``tag`` over the rounds, in %."""
    return 100 * max(accuracies(r, tag))


def final(r: dict, tag: str = "accuracy") -> float:
    """The last value of ``tag``, in %."""
    return 100 * accuracies(r, tag)[-1]


def command(call: dict) -> str:
    """What a call of the script ran (``fedray.repro.invocation``), as its options: `--only ... --jobs N`."""
    methods = f" --methods {' '.join(call['methods'])}" if call.get("methods") else ""
    return f"`--only {' '.join(call['only']) if call['only'] else 'all'}{methods} --jobs {call['jobs']}`"


def wall_time(meta: dict, describe: Callable[[dict], str], brackets: bool) -> list[str]:
    """The paragraph on how long the grid took: the wall time of its calls in all, each call as
    ``describe`` gives it (in brackets, or after a comma), and the run time summed over the runs.
    Calls that cut the rounds (``--rounds``, a timing check) do not count; none: no paragraph."""
    done = [i for i in meta.get("invocations", []) if i.get("rounds") is None]
    if not done:
        return []
    calls = "; ".join(describe(i) for i in done)
    return [f"Wall time: **{sum(i['wall_s'] for i in done) / 60:.1f} min** in all"
            + (f" ({calls})" if brackets else f", {calls}")
            + f"; {sum(i['run_s'] for i in done) / 60:.1f} min of run time summed over the runs.", ""]


def setup(config: Path, overrides: Sequence[str], paper: Mapping[str, str],
          deviations: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The setup table of a page: ``config`` loaded with the ``overrides`` its runs used
    (:func:`fedray.repro.setup_table`), the paper's setting beside it, then each deviation and why."""
    return setup_table(load_config(config, list(overrides)), paper, deviations) + [""]


def runs_line(runs, what: str) -> list[str]:
    """The line under a table that names the commit its runs ran at."""
    return ["", f"Runs: {runs_commit_text(runs, what)}."]
