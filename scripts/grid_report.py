"""What the pages of the grid scripts share (``fedaux_report.py``, ``distill_report.py``): a recorded
run's accuracy by round, its maximum and its last, and the paragraph on how long the grid took.

A run is what a grid script saved of it in its .json: ``history`` holds one record a round, where a
tag's value is None in a round that did not measure it.
"""

from __future__ import annotations

from typing import Callable


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
