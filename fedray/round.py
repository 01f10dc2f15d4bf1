"""A round as the server sees it, and the one contract between a client and the server.

A client's answer to a round's task is its upload (which its host measures and checks) and, made
from it on the host, its *statistics* (``Client.statistics``): named values of two kinds,
which the client half declares for its parameters (``Client.collected``):

- a ``Sum`` statistic is a term ``(c_i, x_i)``: the server reads sum_i c_i x_i (and sum_i c_i) per
  architecture, FedAvg's sum_i c_i theta_i, SCAFFOLD's summed deltas, a teacher's summed logits;
- an :class:`Each` statistic is a value (and an optional weight) the server needs client by
  client: clustered FL's updates, the bodies kept under ``share: head``, FedDistill's per-label
  outputs. It reaches the server unsummed, in client-id order.

Where every statistic of a run is a ``Sum`` (and ``runtime.fold`` is on) the hosts add them up
where the clients ran (``fedray.fold``) and only the sums travel; otherwise each client's
statistics travel and the server adds the ``Sum`` ones in client-id order. That choice is made
once, here (:func:`collection`), from the declared kinds; the strategy's one hook,
``Strategy.aggregate(round)``, reads the same :class:`Round` either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from fedray.fold import Sum, Sums, add_terms
from fedray.messages import ClientUpdate, RoundPlan


@dataclass(frozen=True)
class Each:
    """A statistic gathered unsummed: ``value`` (and ``weight``, for :meth:`Round.mean`)."""

    value: Any
    weight: Any = None


@dataclass(frozen=True)
class Item:
    """One client's :class:`Each` statistic, as :meth:`Round.each` hands it to the strategy."""

    client_id: int
    arch: str
    value: Any
    weight: Any = None


Statistics = dict[str, Any]  # name -> a term (c_i, x_i) of a Sum statistic, or an Each
Gathered = list[tuple[int, str, Statistics]]  # (client id, architecture, statistics), in client-id order


@dataclass
class Answers:
    """What a round's clients hand back to the server: their updates without the uploads (sizes,
    times, losses), in client-id order, and their statistics, summed (``sums``) or gathered."""

    updates: list[ClientUpdate]
    sums: Optional[Sums] = None
    gathered: Optional[Gathered] = None


def statistics_bytes(statistics: Statistics) -> int:
    """The array bytes of one client's statistics (coefficients and weights that are numbers count nothing)."""
    from fedray.weights import nbytes

    parts = [p for v in statistics.values() for p in ((v.value, v.weight) if isinstance(v, Each) else v)]
    return sum(nbytes(p) for p in parts if not isinstance(p, (int, float)))


def collection(kinds: dict[str, type], fold: bool) -> Literal["fold", "gather"]:
    """``fold``: the hosts sum every statistic, as all are ``Sum`` (``fedray.fold``); ``gather``: each
    client's statistics travel and the server adds the ``Sum`` ones in client-id order. ``fold``
    (``runtime.fold``) off gathers everything, to debug a method's sums."""
    return "fold" if fold and all(kind is Sum for kind in kinds.values()) else "gather"


def kind_problem(kinds: dict[str, type], statistics: Statistics) -> Optional[str]:
    """What is wrong with a client's ``statistics`` against the declared ``kinds``, or None."""
    missing = sorted(set(kinds) - set(statistics))
    extra = sorted(set(statistics) - set(kinds))
    if missing or extra:
        said = [f"missing {missing}" if missing else "", f"not declared {extra}" if extra else ""]
        return f"its statistics do not match collected(): {', '.join(s for s in said if s)}"
    for name, value in statistics.items():
        made = Each if isinstance(value, Each) else Sum
        if made is not kinds[name]:
            return (f"its statistic {name!r} is declared {kinds[name].__name__} in collected() but is "
                    f"{'an Each' if made is Each else 'a term (c, x)'}")
    return None


@dataclass
class Round:
    """One round (or the preparation, round 0): its plan, the clients' updates (without their
    uploads) and what they handed back, as the strategy's ``aggregate`` and the observers see it."""

    number: int
    plan: RoundPlan
    updates: list[ClientUpdate]  # client-id order; the observers' screen may leave some out
    sums: Optional[Sums] = None  # folded on the hosts: architecture -> name -> Sum
    gathered: Optional[Gathered] = None  # gathered: each client's statistics
    metrics: dict[str, float] = field(default_factory=dict)  # by TensorBoard tag
    notes: dict[str, str] = field(default_factory=dict)  # text to log this round, by tag
    _totals: Optional[Sums] = field(default=None, repr=False)

    def _kept(self) -> Gathered:
        """The gathered statistics of the clients still in ``updates`` (after the screen)."""
        kept = {u.client_id for u in self.updates}
        return [entry for entry in self.gathered or [] if entry[0] in kept]

    def totals(self) -> Sums:
        """Every ``Sum`` statistic's sum, architecture -> name -> ``fedray.fold.Sum``: the hosts' sums,
        or (gathered) the server's, each client's terms added in client-id order."""
        if self.gathered is None:
            return self.sums or {}
        if self._totals is None:
            self._totals = {}
            for _, arch, statistics in self._kept():
                add_terms(self._totals, arch, {k: v for k, v in statistics.items() if not isinstance(v, Each)})
        return self._totals

    def total(self, name: str) -> dict[str, Sum]:
        """A ``Sum`` statistic's sum per architecture (``fedray.fold.Sum``: ``value()``, ``weight``,
        ``count``, ``mean()``)."""
        return {arch: named[name] for arch, named in self.totals().items() if name in named}

    def each(self, name: str) -> list[Item]:
        """An ``Each`` statistic of every client, in client-id order."""
        return [Item(cid, arch, statistics[name].value, statistics[name].weight)
                for cid, arch, statistics in self._kept()]

    def each_by_arch(self, name: str) -> dict[str, list[Item]]:
        """:meth:`each` per architecture (in the order of each architecture's first client)."""
        by_arch: dict[str, list[Item]] = {}
        for item in self.each(name):
            by_arch.setdefault(item.arch, []).append(item)
        return by_arch

    def mean(self, name: str) -> dict[str, Any]:
        """A statistic's mean per architecture: a ``Sum``'s sum_i c_i x_i / sum_i c_i, or an ``Each``'s
        weighted mean (``fedray.weights.weighted_mean``, the weights normalised first) in client-id order."""
        from fedray.weights import weighted_mean

        entries = self._kept()
        if not entries or not isinstance(entries[0][2][name], Each):
            return {arch: s.mean() for arch, s in self.total(name).items()}
        return {arch: weighted_mean([i.value for i in items], [1.0 if i.weight is None else i.weight for i in items])
                for arch, items in self.each_by_arch(name).items()}

    def mean_loss(self) -> dict[str, float]:
        """``train/loss``: the mean local training loss of the round's clients (adversaries report nan)."""
        from fedray.methods.helpers import mean_client_loss

        return mean_client_loss(self.updates)
