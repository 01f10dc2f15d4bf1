"""RayExecutor: the executor (``fedray.executor.Executor``) that runs the preparation's and each round's
tasks on the client actors (``actors.client``)."""

from __future__ import annotations

import math
import time
from collections import Counter
from functools import reduce
from typing import Any, Callable

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError, RayTaskError

from actors import places
from actors.placement import assign_clients, hand_over
from actors.client import ClientPool, HostNotSetUp, stop
from fedray.clients import client_major
from fedray.config import Config
from fedray.executor import EvalPart, Executor
from fedray.fold import Folder, Node, Sums, TreeFolder, add_sums, blocks, fold_groups
from fedray.method import Method
from fedray.weights import Weights, nbytes
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan
from fedray.runner import ANSI


RESTART_TIMEOUT_S = 120.0  # how long a restarted client actor may take to come back up


class ClientActorLost(RuntimeError):
    """A client actor died (process crash, node loss, out of memory), could not be restarted, and no
    client actor is left to take its clients over (or its restarts are spent on a node still up)."""


class RoundTimeout(RuntimeError):
    """A round's client tasks did not all answer within ``runtime.round_timeout_s``."""


class RayExecutor(Executor):
    """Starts the client actors and runs each round's tasks on them.

    The actors are planned from the nodes' resources (``actors.placement``): spread over the
    nodes, each pinned to its node, as many per node as its CPUs (and GPU shares) hold; the
    ServerActor may be one of them (``runtime.server_hosts_clients``). The
    training set is put in the object store once, client after client, and every actor reads its
    clients' shards from it as zero-copy slices. Each client has a home actor (round-robin) that
    keeps its shard and persistent state. Each round, every broadcast payload is put once (one per
    architecture), and tasks go to the actors in batches, several per call, so that a round of many
    small tasks is not a round of many round trips:

    - a stateful method's tasks, or all tasks when the user fixed ``clients_per_actor``, run on
      their clients' home actors, one batch per actor;
    - otherwise (``auto`` and a stateless method) the tasks, longest first, go out in batches that
      shrink as the round empties (``_balanced``), and every actor that may run them (per
      architecture with per-architecture GPU shares) keeps two batches queued, so it starts the next
      batch, its payloads already fetched, the moment it ends one.

    An actor that dies is restarted by Ray and set up again with its clients' state of the last
    checkpoint (``_recover``). One whose node left the cluster cannot come back: it is dropped, and
    its clients go to the actors left (``actors.placement.hand_over``, balanced by samples), which
    take them with their state of the last checkpoint (``_hand_over``); its lost tasks run again
    there and the run goes on until no actor that may take them is left. An actor whose restarts
    are spent on a node that is still up ends the run: whatever killed it (its clients' memory, a
    broken device) would follow its clients to the others.
    """

    QUEUED = 2

    def __init__(self, config: Config, method: Method, specs: list[ClientSpec], data,
                 initial_models: dict[str, Any] | None = None, pool: ClientPool | None = None):
        pool = pool or ClientPool(config, [spec.arch for spec in specs])
        self.nodes, self.slots, self.actors = pool.nodes, pool.slots, pool.actors
        groups = assign_clients(specs, self.slots)
        for slot, actor in [(s, a) for s, a, g in zip(self.slots, self.actors, groups) if not g]:
            if not slot.server:
                ray.kill(actor)  # planned from the config's clients, left without one (a pooled baseline)
        self.slots, self.actors = [s for s, g in zip(self.slots, groups) if g], [a for a, g in zip(self.actors, groups) if g]
        x, y, spans = client_major(data.train_x, data.train_y, specs)
        x_ref, y_ref, specs_ref, spans_ref = ray.put(x), ray.put(y), ray.put(specs), ray.put(spans)
        del x, y  # the object store holds them now
        aux_ref, initial_ref = ray.put(data.aux_x), ray.put(initial_models)
        # the test set, for evaluations spread over the hosts (``evaluate``): fetched by a host when
        # it is first asked, so it travels once to each
        self.test_ref, self.test_size = ray.put((data.test_x, data.test_y)), len(data.test_y)
        self.groups = assign_clients(specs, self.slots)
        # what each actor's ``setup`` got: a restarted actor gets it again (the object refs keep the
        # training set in the object store for that)
        self.setup_args = [((config, method, specs_ref, x_ref, y_ref, data.num_classes, slot.gpus,
                             [c.client_id for c in group]),
                            {"aux_x": aux_ref, "initial_models": initial_ref, "spans": spans_ref})
                           for slot, group in zip(self.slots, self.groups)]
        self.max_restarts, self.timeout = config.runtime.actor_restarts, config.runtime.round_timeout_s
        self.restarts = [0] * len(self.actors)  # restarts of each actor so far
        self.saved: list = []  # object refs of the client states of the last checkpoint (or resume)
        self.faults: list[str] = []  # the actors restarted or lost since ``take_faults`` last asked
        self.retried = 0  # and the tasks that ran again
        self.received = 0  # bytes of the answers that reached the server since ``take_received``
        self.ids = list(range(len(self.actors)))  # each actor's name in fault lines, kept when others are dropped
        self.owner = {spec.client_id: i for i, group in enumerate(self.groups) for spec in group}
        self.sizes = {spec.client_id: spec.num_samples for spec in specs}
        self.fold_groups = config.runtime.fold_groups
        self.fold_group = fold_groups([spec.client_id for spec in specs], self.fold_groups)
        # an explicit clients_per_actor is a layout the user asked for: keep every client at home
        self.pinned = method.keeps_state(config) or config.runtime.clients_per_actor != "auto"
        # actors that train their tasks as cohorts get them all at once (a cohort per call, not a task)
        self.together = method.vectorizes(config.runtime)
        self.placements: list = [None] * len(self.actors)  # until set up (a hand-over may drop some first)
        self.placements, _ = self._on_each(lambda i: self._setup(i), "start-up")

    def prepare(self, plan: RoundPlan) -> list[ClientUpdate]:
        return self._run(plan, "prepare_batch")[0]

    def execute(self, plan: RoundPlan) -> list[ClientUpdate]:
        return self._run(plan, "run_batch")[0]

    def fold(self, plan: RoundPlan) -> tuple[list[ClientUpdate], Sums]:
        """The round folded on the actors (``fedray.fold``). Where any actor may run any client, a
        batch is a block of the fold tree (``runtime.fold_groups`` groups of client ids, added
        pairwise in a fixed tree): a host sends one sum per block and the server adds blocks to
        their siblings as they come, so the sums are those of the local backend to the last bit,
        whichever actor ran which block, and a run that lost a node ends where the undisturbed run
        ends. Where the clients stay at home or train as cohorts, one unit per actor, added in actor
        order, so a run that lost a node (fewer actors, clients on new homes, a lost unit run again
        in parts) differs from the undisturbed run by rounding."""
        return self._run(plan, "fold_batch")

    @staticmethod
    def _units(batches: dict[int, list[ClientTask]]) -> dict[int, tuple]:
        """Each task's fold unit where every actor has one batch: its actor's."""
        return {t.client_id: (i, "") for i, batch in batches.items() for t in batch}

    def _run(self, plan: RoundPlan, call: str) -> tuple[list[ClientUpdate], Sums | None]:
        """The plan's tasks on the actors, through their ``call`` (``run_batch``, ``fold_batch``,
        ``prepare_batch``); the updates in client order (and, folding, the round's sums). An actor
        that dies meanwhile is set up again and given its lost tasks again; one lost for good (its
        node left) hands its clients over, and its lost tasks run again on the actors left
        (``_survive``, ``again``)."""
        refs = {key: ray.put(payload) for key, payload in plan.broadcast.items()}
        stage = "the preparation" if call == "prepare_batch" else f"round {plan.tasks[0].round if plan.tasks else 0}"
        deadline = time.monotonic() + self.timeout if self.timeout else None
        running: dict[Any, tuple] = {}  # batch -> actor, tasks, incarnation, part, fold-tree node
        folding = call == "fold_batch"
        batches = None
        if self.pinned or self.together:  # one batch per actor: its clients', or an equal share
            batches = self._homes(plan.tasks) if self.pinned else self._spread(plan.tasks)
        tree = folding and batches is None  # any actor takes any block of the fold tree
        unit = self._units(batches) if folding and not tree else {}
        filled: dict[str, set[int]] = {}  # per kind, the fold groups with clients this round
        for task in plan.tasks if tree else []:
            filled.setdefault(self._kind_name(task), set()).add(self.fold_group[task.client_id])
        folder: Any = TreeFolder(self.fold_groups, filled) if tree else Folder(sorted(set(unit.values())))
        parts: dict[tuple, dict[tuple, Sums | None]] = {}  # a unit run again in parts (on new homes): their sums

        def submit(i: int, tasks: list[ClientTask], part: tuple = (), node: Node | None = None) -> None:
            keys = sorted({k for t in tasks for k in t.payload_keys})
            units = [node] if node is not None else [[unit[t.client_id] for t in tasks]] if folding else []
            batch = getattr(self.actors[i], call).remote(tasks, *units, keys, *(refs[k] for k in keys))
            running[batch] = (self.actors[i], tasks, self.restarts[i], part, node)

        def again(actor: Any, tasks: list[ClientTask], part: tuple, node: Node | None) -> None:
            """A lost batch, run again: on its actor, restarted; its actor dropped (its node left),
            on its clients' new homes when they are pinned, else whole on the least busy actor of
            its kind. A fold unit split over several homes is added when its last part is in."""
            i = self._index(actor)
            if i is not None or not self.pinned:
                submit(i if i is not None else self._least_busy(tasks[0], running), tasks, part, node)
                return
            homes = sorted(self._homes(tasks).items())
            if folding and len(homes) > 1:
                waiting = parts.setdefault(unit[tasks[0].client_id], {part: None})  # pinned: a batch is one unit
                del waiting[part]
                waiting.update({part + (r,): None for r in range(len(homes))})
            for r, (j, share) in enumerate(homes):
                submit(j, share, part + (r,) if len(homes) > 1 else part)

        def add(key: tuple, sums: Sums, part: tuple) -> None:
            if key not in parts:
                folder.add(key, sums)
                return
            parts[key][part] = sums
            if all(s is not None for s in parts[key].values()):  # the parts in their order: a sum that repeats
                done = parts.pop(key)
                folder.add(key, reduce(add_sums, (done[p] for p in sorted(done)), {}))

        if batches is not None:
            for i, tasks in batches.items():
                submit(i, tasks)
            refill: Callable[[int], None] = lambda i: None  # noqa: E731
        else:
            in_flight = lambda i: sum(1 for actor, *_ in running.values() if actor is self.actors[i])  # noqa: E731
            refill = self._balanced(plan.tasks, submit, filled if tree else None, in_flight)
        results = []
        while running:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(running), num_returns=1, timeout=left)
            if not ready:
                raise RoundTimeout(self._timeout_message(stage, running.values()))
            actor, tasks, incarnation, part, node = running.pop(ready[0])
            try:
                answer = ray.get(ready[0])
            except RayError as err:
                self._survive(actor, incarnation, err, stage)
                self.retried += len(tasks)
                again(actor, tasks, part, node)
                continue
            self.received += _answer_bytes(answer)
            if folding:
                answer, sums = answer
                for key, s in sums.items():
                    add(key, s, part)
            results.append(answer)
            i = self._index(actor)  # an actor dropped after it answered: another of its kind takes more
            refill(i if i is not None else self._least_busy(tasks[0], running))
        updates = sorted((u for part in results for u in part), key=lambda u: u.client_id)
        return updates, folder.result() if folding else None

    def _index(self, actor: Any) -> int | None:
        """The actor's index now; None when it was dropped (``_hand_over``)."""
        return next((i for i, a in enumerate(self.actors) if a is actor), None)

    def _least_busy(self, task: ClientTask, running: dict) -> int:
        """The actor that may run ``task`` with the fewest batches under way (ties: the first)."""
        busy = Counter(id(actor) for actor, *_ in running.values())
        kind = self._kind(task)
        return min((j for j, slot in enumerate(self.slots) if kind is None or slot.arch == kind),
                   key=lambda j: busy[id(self.actors[j])])

    def _homes(self, tasks: list[ClientTask]) -> dict[int, list[ClientTask]]:
        batches: dict[int, list[ClientTask]] = {}
        for task in tasks:
            batches.setdefault(self.owner[task.client_id], []).append(task)
        return batches

    def _spread(self, tasks: list[ClientTask]) -> dict[int, list[ClientTask]]:
        """The round's tasks in one batch per actor, for actors that train their batch as cohorts
        (``runtime.vectorize``): longest first, each to the actor of its kind with the fewest samples
        so far (ties: the first), so that the actors finish together and the split is the same in
        every run with the same actors."""
        batches: dict[int, list[ClientTask]] = {}
        load = [0] * len(self.actors)
        for task in sorted(tasks, key=lambda t: (-self.sizes[t.client_id], t.client_id)):
            kind = self._kind(task)
            i = min((j for j, slot in enumerate(self.slots) if kind is None or slot.arch == kind), key=lambda j: load[j])
            load[i] += self.sizes[task.client_id]
            batches.setdefault(i, []).append(task)
        return batches

    def _balanced(self, tasks: list[ClientTask], submit, filled: dict[str, set[int]] | None = None,
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
        round while they wait on another (``tests/test_dispatch.py``). On W1 (about 8 blocks of
        0.5-1 s a round on two hosts, one of them the server) the host that finished first had sat
        idle 0.02-0.9 s at the end of each round; each last batch now costs a round trip to the
        server (about 10 ms) instead."""
        todo: dict[Any, list] = {}
        if filled is None:
            for task in sorted(tasks, key=lambda t: -self.sizes[t.client_id]):
                todo.setdefault(self._kind(task), []).append(task)
        else:
            of_block: dict[Node, list[ClientTask]] = {}
            for task in sorted(tasks, key=lambda t: t.client_id):
                name, group = self._kind_name(task), self.fold_group[task.client_id]
                of_block.setdefault(name, []).append((group, task))
            for name, grouped in of_block.items():
                kind = self._kind(grouped[0][1])
                parts = self.QUEUED * max(1, sum(1 for slot in self.slots if slot.arch == kind))
                work: dict[int, float] = {}
                for group, task in grouped:
                    work[group] = work.get(group, 0.0) + self.sizes[task.client_id]
                for level, index in blocks(work, self.fold_groups, parts):
                    node = Node(name, level, index)
                    lo, hi = node.span
                    todo.setdefault(kind, []).append((node, [t for g, t in grouped if lo <= g < hi]))

        def takers(kind: Any) -> list[int]:  # asked each time: actors dropped mid-round take none
            return [i for i, slot in enumerate(self.slots) if slot.arch == kind]

        def refill(i: int) -> None:
            kind = self.slots[i].arch if self.slots[0].arch is not None else None
            left = todo.get(kind)
            if left and len(left) <= self.QUEUED * len(takers(kind)) and in_flight(i):
                return  # the last batches: only for actors with nothing under way
            if left and filled is not None:
                todo[kind] = left[1:]
                submit(i, left[0][1], node=left[0][0])
            elif left:
                size = max(1, math.ceil(len(left) / (self.QUEUED * len(takers(kind)))))
                todo[kind] = left[size:]
                submit(i, left[:size])

        for _ in range(self.QUEUED):
            for kind in list(todo):
                for i in takers(kind):
                    refill(i)
        return refill

    def _setup(self, i: int):
        """Actor ``i``'s ``setup`` call (its clients, built from the same arguments every time)."""
        args, kwargs = self.setup_args[i]
        return self.actors[i].setup.remote(*args, **kwargs)

    def _on_each(self, call: Callable[[int], Any], stage: str) -> tuple[list, list]:
        """``call(i)``, a remote call on actor ``i``, for every actor; their results and the object
        refs that gave them, in actor order. An actor that died (at any moment since it was last
        asked: while idle, or during the call) is set up again and asked again (``_survive``); when
        one is lost for good and its clients go to the others, every actor left is asked again."""
        while True:
            n = len(self.actors)
            pending = {call(i): (i, self.restarts[i]) for i in range(n)}
            results, refs = [None] * n, [None] * n
            while pending and len(self.actors) == n:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i, incarnation = pending.pop(ready[0])
                try:
                    results[i], refs[i] = ray.get(ready[0]), ready[0]
                except RayError as err:
                    self._survive(self.actors[i], incarnation, err, stage)
                    if len(self.actors) == n:
                        pending[call(i)] = (i, self.restarts[i])
            if len(self.actors) == n:
                return results, refs

    def _survive(self, actor: Any, incarnation: int, err: RayError, stage: str) -> None:
        """A call on ``actor`` (made while it was in its ``incarnation``-th life) failed with
        ``err``; return when the call can be made again: on the actor, or, when it was dropped, on
        the actors that took its clients over. A task that failed raises its error; an actor that
        died, or that Ray restarted before it was asked (``HostNotSetUp``), is set up again once
        (``_recover``), when this is the first of its lost calls to come back; an actor whose node
        left (unschedulable, its answer lost with the node) hands its clients over (``_hand_over``)."""
        if isinstance(err, RayTaskError) and not isinstance(err, HostNotSetUp):
            raise err  # a task that failed, not an actor that died
        i = self._index(actor)
        if i is None:  # dropped already: its node left and its clients went to the others
            return
        if not isinstance(err, (RayActorError, HostNotSetUp)):  # e.g. unschedulable: its node left
            if not self._node_left(i):
                raise self._lost_error(err, stage) from None
            self._hand_over(err, stage)
        elif incarnation == self.restarts[i]:
            self._recover(i, err, stage)

    def _recover(self, i: int, err: RayError, stage: str) -> None:
        """Client actor ``i`` died: once Ray has restarted it, set its clients up again with their
        state from the last checkpoint; again if it dies while coming back. When its node left, its
        clients go to the others (``_hand_over``); ClientActorLost when its restarts are spent or it
        does not start again on a node still up."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            if self._node_left(i):
                return self._hand_over(err, stage)
            if self.slots[i].server or self.restarts[i] >= self.max_restarts:
                raise self._lost_error(err, stage)
            self.restarts[i] += 1
            try:
                self._set_up_again(i, deadline)
                break
            except (RayActorError, HostNotSetUp) as again:  # died again while coming back
                err = again
            except RayTaskError:
                raise  # its clients cannot be built: not a fault of the actor
            except (RayError, GetTimeoutError):  # pinned to a node that left (unschedulable), or never back
                if self._node_left(i):
                    return self._hand_over(err, stage)
                raise self._lost_error(err, stage) from None
        how = (f"had died before {stage} (Ray had restarted it without its clients)" if isinstance(err, HostNotSetUp)
               else f"died during {stage} ({_first_line(err)})")
        self.faults.append(f"client actor {self.ids[i]} (clients {_short([c.client_id for c in self.groups[i]])}) "
                           f"{how}; it was restarted ({self.restarts[i]} of runtime.actor_restarts = "
                           f"{self.max_restarts}), its clients got {self._saved_state()}, and what it had lost "
                           f"ran again")

    def _set_up_again(self, i: int, deadline: float) -> None:
        """Actor ``i``'s clients built again and given the states of the last checkpoint, asking
        until Ray has restarted it (or ``deadline``: GetTimeoutError)."""
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                ray.get(self._setup(i), timeout=left)
                ray.get([self.actors[i].load_client_states.remote(part) for part in self.saved], timeout=left)
                return
            except ActorUnavailableError:  # still restarting: ask again
                if time.monotonic() > deadline:
                    raise GetTimeoutError(f"not back within {RESTART_TIMEOUT_S:g} s") from None
                time.sleep(0.1)

    def _node_left(self, i: int) -> bool:
        """Whether actor ``i``'s node has left the cluster (never the server's: it asks)."""
        alive = places.alive()
        return not self.slots[i].server and self.slots[i].node_id not in alive

    def _saved_state(self) -> str:
        return "their state of the last checkpoint" if self.saved else "their initial state (no checkpoint yet)"

    def _hand_over(self, err: RayError, stage: str) -> None:
        """The client actors whose nodes left the cluster are lost for good: they are dropped, and
        their clients go to the actors left (``actors.placement.hand_over``: of their architecture
        with per-architecture shares, balanced by samples), which build them (``adopt``) with their
        state of the last checkpoint (``self.saved``; before the first, their initial state) and
        keep them as home clients, also when they are set up again. A line in ``self.faults`` per
        lost actor. ClientActorLost when no actor that may take the clients is left."""
        alive = places.alive()
        lost = [i for i, slot in enumerate(self.slots) if not slot.server and slot.node_id not in alive]
        left = [i for i in range(len(self.actors)) if i not in lost]
        try:
            taken = hand_over([c for i in lost for c in self.groups[i]], [self.slots[j] for j in left],
                              [sum(c.num_samples for c in self.groups[j]) for j in left])
        except ValueError as nobody:
            raise self._lost_error(err, stage, f", and {nobody} to take its clients over") from None
        home = {c.client_id: self.ids[j] for j, group in zip(left, taken) for c in group}
        for i in lost:
            went: dict[int, list[int]] = {}
            for c in sorted(self.groups[i], key=lambda c: c.client_id):
                went.setdefault(home[c.client_id], []).append(c.client_id)
            self.faults.append(
                f"client actor {self.ids[i]} (clients {_short(sorted(c.client_id for c in self.groups[i]))}) "
                f"was lost during {stage}: its node {self._node_name(self.slots[i].node_id)} left the cluster "
                f"({_first_line(err)}); its clients went to "
                f"{', '.join(f'actor {a} ({_short(ids)})' for a, ids in sorted(went.items()))} with "
                f"{self._saved_state()}, and what it had lost ran again there")
        adopters = []
        for j, group in zip(left, taken):
            if group:
                ids = sorted(c.client_id for c in group)
                self.groups[j] = self.groups[j] + group
                args, kwargs = self.setup_args[j]  # set up again, it builds them as its own
                self.setup_args[j] = ((*args[:-1], sorted(args[-1] + ids)), kwargs)
                adopters.append((self.actors[j], self.restarts[j], ids))
        self._drop(lost)
        pending = {actor.adopt.remote(ids, *self.saved): (actor, incarnation) for actor, incarnation, ids in adopters}
        for ref, (actor, incarnation) in pending.items():
            try:
                hosted = ray.get(ref)
            except RayError as again:  # restarted, it sets them up as its own; lost too, they move on
                self._survive(actor, incarnation, again, stage)
                continue
            j = self._index(actor)
            if j is not None and self.placements[j]:  # (none yet at start-up)
                self.placements[j] = {**self.placements[j], "hosted": hosted}

    def _drop(self, lost: list[int]) -> None:
        """Forget the actors ``lost`` (``ray.kill``: Ray stops trying to restart them) in every
        per-actor list; their clients' owners are the actors that took them."""
        for i in lost:
            ray.kill(self.actors[i])
        keep = [i for i in range(len(self.actors)) if i not in lost]
        for name in ("slots", "actors", "groups", "setup_args", "restarts", "placements", "ids"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in keep])
        self.owner = {spec.client_id: i for i, group in enumerate(self.groups) for spec in group}

    def take_faults(self) -> tuple[list[str], int]:
        """What the executor survived since the last call: a line per restarted or lost actor, and how many
        tasks ran again (the round logs them)."""
        faults, retried, self.faults, self.retried = self.faults, self.retried, [], 0
        return faults, retried

    def take_received(self) -> int:
        received, self.received = self.received, 0
        return received

    def _timeout_message(self, stage: str, running) -> str:
        waiting = sorted({t.client_id for _, tasks, *_ in running for t in tasks})
        return (f"{stage} did not finish within runtime.round_timeout_s = {self.timeout:g} s: "
                f"the client actors running clients {_short(waiting)} did not answer")

    def _kind_name(self, task: ClientTask) -> str:
        """The kind of actor a task needs, as a fold-tree node names it ("" when any actor will do)."""
        return str(self._kind(task) or "")

    def _kind(self, task: ClientTask) -> Any:
        """Which actors may run a task: those of its architecture with per-architecture GPU shares."""
        return task.arch if self.slots[0].arch is not None else None

    def client_states(self) -> dict[int, dict[str, Any]]:
        """Every client's state, for the checkpoint; kept (in the object store) for actors set up
        again and for clients handed over. An actor's part is kept where it was made when that is
        the server's node; one from another node is put again here: a node that leaves takes its
        copy along."""
        parts, refs = self._on_each(lambda i: self.actors[i].client_states.remote(), "checkpoint")
        states: dict[int, dict[str, Any]] = {}
        for part in parts:
            states.update(part)
        here = places.server_place()
        self.saved = [ref if slot.node_id == here else ray.put(part)
                      for slot, ref, part in zip(self.slots, refs, parts)]
        return states

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self.saved = [ray.put(states)]
        self._on_each(lambda i: self.actors[i].load_client_states.remote(self.saved[0]), "resume")

    def node_ids(self) -> list[str]:
        return self._on_each(lambda i: self.actors[i].node_id.remote(), "placement check")[0]

    def evaluate(self, arch: str, weights: Weights, group: int, batch_size: int,
                 num_classes: int = 0) -> list[EvalPart] | None:
        """The evaluation's batches cut into equal runs, one per actor in actor order, each host
        evaluating its run with its own threads while the others do theirs: on 2 cores W2's final
        evaluation took 2.7 s instead of the server's 3.2 s with both cores (means of four runs).
        The parts are added in
        batch order (``combine_parts``), so the result is the single pass's, whichever actors
        there are. An actor that fails meanwhile (lost, or restarted and not yet set up again)
        leaves this evaluation to the server (None); the next round meets the fault as ever."""
        batches = -(-self.test_size // batch_size)
        cuts = [batches * i // len(self.actors) for i in range(len(self.actors) + 1)]
        model = ray.put(weights)
        # the test set's ref inside a list, so that Ray hands it over unfetched: a host gets it once
        calls = [actor.evaluate_part.remote(arch, model, group, [self.test_ref], first, stop, batch_size, num_classes)
                 for actor, first, stop in zip(self.actors, cuts, cuts[1:]) if first < stop]
        try:
            return ray.get(calls, timeout=self.timeout)
        except RayError:  # GetTimeoutError too
            return None

    def describe(self) -> dict[str, Any]:
        per_node = {}
        for slot in self.slots:
            per_node[self._node_name(slot.node_id)] = per_node.get(self._node_name(slot.node_id), 0) + 1
        devices = {}
        for where in self.placements:
            devices[where["device"]] = devices.get(where["device"], 0) + 1
        out = {"backend": "ray", "actors": len(self.actors), "actors_per_node": per_node, "devices": devices,
               "clients_per_actor": [len(g) for g in self.groups],
               "server_hosts_clients": any(slot.server for slot in self.slots)}
        if any(slot.node_id.startswith(places.BUNDLE) for slot in self.slots):  # a sweep's trial: where its bundles were
            out["bundle_nodes"] = {slot.node_id: where["node"][:8] for slot, where in zip(self.slots, self.placements)
                                   if where}
        return out

    def shutdown(self) -> None:
        stop(self.slots, self.actors)

    def _lost_error(self, err: Exception, stage: str, why: str = "") -> ClientActorLost:
        """Which client actors are gone (each pinged), their clients and nodes, in one line; ``why``
        it ends the run when that is not plain."""
        lost = self._lost()
        ids = [c.client_id for i in lost for c in self.groups[i]]
        alive = places.alive()
        gone = sorted({self._node_name(self.slots[i].node_id) for i in lost if self.slots[i].node_id not in alive})
        where = f" (node {', '.join(gone)} left the cluster)" if gone else ""
        spent = any(self.restarts[i] >= self.max_restarts for i in lost)
        again = f", its restarts spent (runtime.actor_restarts = {self.max_restarts})" if spent and not gone else ""
        return ClientActorLost(f"a client actor (hosting clients {_short(ids)}) died during {stage}{where}{again}"
                               f"{why}: {(str(err).splitlines() or [''])[0]}")

    def _node_name(self, node_id: str) -> str:
        """``address/id-prefix``: the address for people, the id for nodes sharing an address."""
        return f"{self.nodes[node_id].address}/{node_id[:8]}"

    def _lost(self, timeout: float = 10.0) -> list[int]:
        """The index of every actor that does not answer a ping; all actors are pinged at once (the
        server, which asks, is alive)."""
        pings = [a.pid.remote() for s, a in zip(self.slots, self.actors) if not s.server]
        ready, _ = ray.wait(pings, num_returns=len(pings), timeout=timeout)
        answered = set()
        for ref in ready:
            try:
                ray.get(ref)
                answered.add(ref)
            except Exception:  # the actor is dead: its ping fails
                pass
        clients = [i for i, s in enumerate(self.slots) if not s.server]
        return [i for i, ping in zip(clients, pings) if ping not in answered]


def _answer_bytes(answer: Any) -> int:
    """The array bytes of a host's answer: its updates' payloads, and folding, its units' sums."""
    if isinstance(answer, tuple):  # fold_batch: (updates, {unit: sums})
        updates, parts = answer
        return _answer_bytes(updates) + sum(s.nbytes() for sums in parts.values() for named in sums.values()
                                            for s in named.values())
    return sum(nbytes(u.payload) for u in answer)


def _first_line(err: Exception) -> str:
    return ANSI.sub("", (str(err).splitlines() or [""])[0])[:160]


def _short(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} in all)]"
