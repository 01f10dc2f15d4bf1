"""The statistics a reproduction's claims are worded by: a mean with its 95% interval over seeds, and
a paired comparison of two methods run on the same seeds.

A claim "A > B" *holds* only where the 95% interval of the paired difference A - B lies above zero;
it is *reversed* where the interval lies below zero; otherwise the seeds do not show it either way.
The interval is Student's t over the seeds (``scipy.stats.t``), so with 2 or 3 seeds it is wide on
purpose; one seed has no interval, and its comparison is never worded as holding.

    from fedray.stats import paired
    p = paired({0: 81.9, 1: 82.3, 2: 81.5}, {0: 84.1, 1: 84.0, 2: 84.3})
    p.verdict  # "reversed": A is below B in every seed and the interval excludes zero

A page's claims are one family: each claim's interval is taken at :func:`bonferroni`'s level, so
that the chance of any "holds" or "reversed" in the family being wrong stays under 5% (the
Bonferroni procedure: each of m intervals at 1 - 0.05 / m). Holm's step-down procedure would reject
at least as often but gives no interval per claim; with Bonferroni a claim's verdict is always what
its own printed interval shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

CONFIDENCE = 0.95


def bonferroni(claims: int, confidence: float = CONFIDENCE) -> float:
    """The level of each of ``claims`` intervals whose family-wise level is ``confidence``:
    1 - (1 - confidence) / claims."""
    if claims < 1:
        raise ValueError(f"a family has at least one claim, got {claims}")
    return 1 - (1 - confidence) / claims


@dataclass(frozen=True)
class Interval:
    """The mean of ``n`` values and its two-sided 95% t interval (``low``, ``high``; NaN for n < 2)."""

    n: int
    mean: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def text(self, digits: int = 1) -> str:
        """``81.9 [80.1, 83.7]``, or ``81.9 (one seed)``."""
        if self.n < 2:
            return f"{self.mean:.{digits}f} (one seed)"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean and t interval of ``values`` (at least one)."""
    from scipy.stats import t

    values = [float(v) for v in values]
    if not values:
        raise ValueError("an interval needs at least one value")
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(n, mean, math.nan, math.nan)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return Interval(n, mean, mean - half, mean + half)


@dataclass(frozen=True)
class Paired:
    """A against B on the seeds both ran: their means, the difference A - B per seed and its interval,
    and in how many seeds A was above B (``wins``) and below (``losses``)."""

    seeds: tuple
    a: Interval
    b: Interval
    difference: Interval
    wins: int
    losses: int

    @property
    def verdict(self) -> str:
        """``holds`` (A > B: the interval lies above zero), ``reversed`` (below zero), ``not shown``
        (it holds zero), or ``one seed`` (no interval)."""
        d = self.difference
        if d.n < 2:
            return "one seed"
        if d.low > 0:
            return "holds"
        if d.high < 0:
            return "reversed"
        return "not shown"


def paired(a: Mapping, b: Mapping, confidence: float = CONFIDENCE) -> Paired:
    """Compare A and B, each a mapping seed -> value, on the seeds they share (at least one)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError(f"no seed in common: A ran {sorted(a)}, B ran {sorted(b)}")
    diffs = [float(a[s]) - float(b[s]) for s in seeds]
    return Paired(seeds, interval([a[s] for s in seeds], confidence), interval([b[s] for s in seeds], confidence),
                  interval(diffs, confidence), sum(d > 0 for d in diffs), sum(d < 0 for d in diffs))
