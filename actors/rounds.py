"""One round's tasks on the client actors: sent out as the dispatch says, collected (summed, or
gathered) as they come back, and run again where an actor was lost."""

from __future__ import annotations

import time
from functools import reduce
from typing import Any, Callable

import ray
from ray.exceptions import RayError

from actors.dispatch import Dispatcher
from actors.recovery import ActorSet, short
from fedray.fold import Block, Folder, Sums, TreeFolder, add_sums
from fedray.messages import ClientTask, RoundPlan
from fedray.round import Answers, Gathered, statistics_bytes
from fedray.weights import nbytes


class RoundTimeout(RuntimeError):
    """A round's client tasks did not all answer within ``runtime.round_timeout_s``."""


class RoundRun:
    """The plan's tasks on the actors, through their ``call`` (``collect_batch``, with the round's
    ``collection``, or ``prepare_batch``). ``pinned``: each client's tasks on its home actor; ``together``: one batch
    per actor (cohorts); otherwise the balanced dispatch. An actor that dies meanwhile is set up
    again and given its lost tasks again; one lost for good (its node left) hands its clients over,
    and its lost tasks run again on the actors left (``again``)."""

    def __init__(self, live: ActorSet, dispatch: Dispatcher, plan: RoundPlan, call: str, collection: str, *,
                 pinned: bool, together: bool, timeout: float | None):
        self.live, self.dispatch, self.plan, self.call, self.pinned = live, dispatch, plan, call, pinned
        self.refs = {key: ray.put(payload) for key, payload in plan.broadcast.items()}
        self.stage = "the preparation" if call == "prepare_batch" else f"round {plan.tasks[0].round if plan.tasks else 0}"
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout else None
        self.running: dict[Any, tuple] = {}  # batch -> actor, tasks, incarnation, part, fold-tree node
        self.folding = call == "collect_batch" and collection == "fold"
        self.gathering = call == "collect_batch" and collection == "gather"
        self.gathered: Gathered = []  # gathering: each client's statistics
        self.batches = None
        if pinned or together:  # one batch per actor: its clients', or an equal share
            self.batches = dispatch.homes(plan.tasks) if pinned else dispatch.spread(plan.tasks)
        self.tree = self.folding and self.batches is None  # any actor takes any block of the fold tree
        self.unit = dispatch.units(self.batches) if self.folding and not self.tree else {}
        self.filled: dict[str, set[int]] = {}  # per kind, the fold groups with clients this round
        for task in plan.tasks if self.tree else []:
            self.filled.setdefault(dispatch.kind_name(task), set()).add(dispatch.fold_group[task.client_id])
        self.folder: Any = (TreeFolder(dispatch.fold_groups, self.filled) if self.tree
                            else Folder(sorted(set(self.unit.values()))))
        self.parts: dict[tuple, dict[tuple, Sums | None]] = {}  # a unit run again in parts (on new homes): their sums
        self.received = 0  # bytes of the answers that reached the server

    def run(self) -> Answers:
        """The updates in client order, and the round's sums or each client's statistics."""
        if self.batches is not None:
            for i, tasks in self.batches.items():
                self.submit(i, tasks)
            refill: Callable[[int], None] = lambda i: None  # noqa: E731
        else:
            refill = self.dispatch.balanced(self.plan.tasks, self.submit, self.filled if self.tree else None,
                                            self.in_flight)
        results = []
        while self.running:
            left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            ready, _ = ray.wait(list(self.running), num_returns=1, timeout=left)
            if not ready:
                raise RoundTimeout(self.timeout_message())
            actor, tasks, incarnation, part, node = self.running.pop(ready[0])
            try:
                answer = ray.get(ready[0])
            except RayError as err:
                self.live.survive(actor, incarnation, err, self.stage)
                self.live.retried += len(tasks)
                self.again(actor, tasks, part, node)
                continue
            self.received += answer_bytes(answer)
            if self.folding:
                answer, sums = answer
                for key, s in sums.items():
                    self.add(key, s, part)
            elif self.gathering:
                answer, gathered = answer
                self.gathered += gathered
            results.append(answer)
            i = self.live.index(actor)  # an actor dropped after it answered: another of its kind takes more
            refill(i if i is not None else self.dispatch.least_busy(tasks[0], self.in_flight))
        updates = sorted((u for part in results for u in part), key=lambda u: u.client_id)
        if self.gathering:
            return Answers(updates, gathered=sorted(self.gathered, key=lambda entry: entry[0]))
        return Answers(updates, sums=self.folder.result() if self.folding else None)

    def in_flight(self, i: int) -> int:
        """Actor ``i``'s batches running or queued."""
        return sum(1 for actor, *_ in self.running.values() if actor is self.live.actors[i])

    def submit(self, i: int, tasks: list[ClientTask], part: tuple = (), node: Block | None = None) -> None:
        keys = sorted({k for t in tasks for k in t.payload_keys})
        units = ([node] if node is not None else [[self.unit[t.client_id] for t in tasks]] if self.folding
                 else [None] if self.gathering else [])
        batch = getattr(self.live.actors[i], self.call).remote(tasks, *units, keys, *(self.refs[k] for k in keys))
        self.running[batch] = (self.live.actors[i], tasks, self.live.restarts[i], part, node)

    def again(self, actor: Any, tasks: list[ClientTask], part: tuple, node: Block | None) -> None:
        """A lost batch, run again: on its actor, restarted; its actor dropped (its node left),
        on its clients' new homes when they are pinned, else whole on the least busy actor of
        its kind. A fold unit split over several homes is added when its last part is in."""
        i = self.live.index(actor)
        if i is not None or not self.pinned:
            self.submit(i if i is not None else self.dispatch.least_busy(tasks[0], self.in_flight), tasks, part, node)
            return
        homes = sorted(self.dispatch.homes(tasks).items())
        if self.folding and len(homes) > 1:
            waiting = self.parts.setdefault(self.unit[tasks[0].client_id], {part: None})  # pinned: a batch is one unit
            del waiting[part]
            waiting.update({part + (r,): None for r in range(len(homes))})
        for r, (j, share) in enumerate(homes):
            self.submit(j, share, part + (r,) if len(homes) > 1 else part)

    def add(self, key: tuple, sums: Sums, part: tuple) -> None:
        if key not in self.parts:
            self.folder.add(key, sums)
            return
        self.parts[key][part] = sums
        if all(s is not None for s in self.parts[key].values()):  # the parts in their order: a sum that repeats
            done = self.parts.pop(key)
            self.folder.add(key, reduce(add_sums, (done[p] for p in sorted(done)), {}))

    def timeout_message(self) -> str:
        waiting = sorted({t.client_id for _, tasks, *_ in self.running.values() for t in tasks})
        return (f"{self.stage} did not finish within runtime.round_timeout_s = {self.timeout:g} s: "
                f"the client actors running clients {short(waiting)} did not answer")


def answer_bytes(answer: Any) -> int:
    """The array bytes of a host's answer: its updates' payloads, and its units' sums or its clients' statistics."""
    if isinstance(answer, tuple):  # collect_batch: (updates, {unit: sums} or [(client, arch, statistics)])
        updates, collected = answer
        if isinstance(collected, list):
            return answer_bytes(updates) + sum(statistics_bytes(statistics) for *_, statistics in collected)
        return answer_bytes(updates) + sum(s.nbytes() for sums in collected.values() for named in sums.values()
                                           for s in named.values())
    return sum(nbytes(u.payload) for u in answer)
