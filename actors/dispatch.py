"""Which client actor runs which of a round's tasks. Ray-free: it reads the live actors' slots and
the clients' homes, and hands batches to a ``submit`` callback (``actors.rounds.RoundRun``)."""

from __future__ import annotations

import math
from typing import Any, Callable

from fedray.fold import Block, blocks
from fedray.messages import ClientTask


class Dispatcher:
    """The three ways a round's tasks go out:

    - ``homes``: each task to its client's home actor, one batch per actor (stateful methods, or a
      ``clients_per_actor`` the user fixed);
    - ``spread``: one batch per actor of equal load (actors that train their batch as cohorts);
    - ``balanced``: batches that shrink as the round empties, each actor kept ``QUEUED`` deep.

    ``live``: the live actors (``actors.recovery.ActorSet``, or anything with its ``slots`` and
    ``owner``), read on every call, since an actor dropped mid-round takes no more work.
    """

    QUEUED = 2

    def __init__(self, live: Any, sizes: dict[int, int], fold_group: dict[int, int], fold_groups: int):
        self.live = live
        self.sizes = sizes  # client id -> samples
        self.fold_group = fold_group  # client id -> its group of the fold tree
        self.fold_groups = fold_groups

    def kind(self, task: ClientTask) -> Any:
        """Which actors may run a task: those of its architecture with per-architecture GPU shares."""
        return task.arch if self.live.slots[0].arch is not None else None

    def kind_name(self, task: ClientTask) -> str:
        """The kind of actor a task needs, as a fold-tree node names it ("" when any actor will do)."""
        return str(self.kind(task) or "")

    def takers(self, kind: Any) -> list[int]:
        """The actors that may run tasks of ``kind``."""
        return [i for i, slot in enumerate(self.live.slots) if kind is None or slot.arch == kind]

    @staticmethod
    def units(batches: dict[int, list[ClientTask]]) -> dict[int, tuple]:
        """Each task's fold unit where every actor has one batch: its actor's."""
        return {t.client_id: (i, "") for i, batch in batches.items() for t in batch}

    def least_busy(self, task: ClientTask, in_flight: Callable[[int], int]) -> int:
        """The actor that may run ``task`` with the fewest batches under way (ties: the first)."""
        return min(self.takers(self.kind(task)), key=in_flight)

    def homes(self, tasks: list[ClientTask]) -> dict[int, list[ClientTask]]:
        batches: dict[int, list[ClientTask]] = {}
        for task in tasks:
            batches.setdefault(self.live.owner[task.client_id], []).append(task)
        return batches

    def spread(self, tasks: list[ClientTask]) -> dict[int, list[ClientTask]]:
        """The round's tasks in one batch per actor, for actors that train their batch as cohorts
        (``runtime.vectorize``): longest first, each to the actor of its kind with the fewest samples
        so far (ties: the first), so that the actors finish together and the split is the same in
        every run with the same actors."""
        batches: dict[int, list[ClientTask]] = {}
        load = [0] * len(self.live.slots)
        for task in sorted(tasks, key=lambda t: (-self.sizes[t.client_id], t.client_id)):
            i = min(self.takers(self.kind(task)), key=lambda j: load[j])
            load[i] += self.sizes[task.client_id]
            batches.setdefault(i, []).append(task)
        return batches

    def balanced(self, tasks: list[ClientTask], submit, filled: dict[str, set[int]] | None = None,
                 in_flight: Callable[[int], int] = lambda i: 0) -> Callable[[int], None]:
        """Submit the first batches and return ``refill(i)``, which gives actor ``i`` its next batch.

        Longest first, each actor kept ``QUEUED`` batches deep until no task is left. A batch takes
        1 / (QUEUED x actors) of the tasks left (guided self-scheduling): large batches while much
        is left, single tasks at the end, so the actors finish together. Folding (``filled``: per
        kind, the fold groups with clients), a batch is a block of the fold tree
        (``fedray.fold.blocks``: sized alike, largest first), so that a host sends one sum per block.

        The round's last batches (no more than ``QUEUED`` x actors left) go only to an actor with
        nothing under way (``in_flight(i)``: its batches running or queued), never behind a batch
        it is still running, so an actor that finishes first takes them instead of waiting out the
        round while they wait on another (``tests/test_dispatch.py``): a last batch costs a round
        trip to the server, where a host would otherwise sit idle while another works through two."""
        todo: dict[Any, list] = {}
        if filled is None:
            for task in sorted(tasks, key=lambda t: -self.sizes[t.client_id]):
                todo.setdefault(self.kind(task), []).append(task)
        else:
            of_block: dict[str, list[tuple[int, ClientTask]]] = {}
            for task in sorted(tasks, key=lambda t: t.client_id):
                name, group = self.kind_name(task), self.fold_group[task.client_id]
                of_block.setdefault(name, []).append((group, task))
            for name, grouped in of_block.items():
                kind = self.kind(grouped[0][1])
                parts = self.QUEUED * max(1, len(self.takers(kind)))
                work: dict[int, float] = {}
                for group, task in grouped:
                    work[group] = work.get(group, 0.0) + self.sizes[task.client_id]
                for level, index in blocks(work, self.fold_groups, parts):
                    node = Block(name, level, index)
                    lo, hi = node.span
                    todo.setdefault(kind, []).append((node, [t for g, t in grouped if lo <= g < hi]))

        def refill(i: int) -> None:  # the takers are asked each time: actors dropped mid-round take none
            kind = self.live.slots[i].arch if self.live.slots[0].arch is not None else None
            left = todo.get(kind)
            if left and len(left) <= self.QUEUED * len(self.takers(kind)) and in_flight(i):
                return  # the last batches: only for actors with nothing under way
            if left and filled is not None:
                todo[kind] = left[1:]
                submit(i, left[0][1], node=left[0][0])
            elif left:
                size = max(1, math.ceil(len(left) / (self.QUEUED * len(self.takers(kind)))))
                todo[kind] = left[size:]
                submit(i, left[:size])

        for _ in range(self.QUEUED):
            for kind in list(todo):
                for i in self.takers(kind):
                    refill(i)
        return refill
