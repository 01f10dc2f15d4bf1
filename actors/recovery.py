"""The live client actors of a run, and how the run survives losing one: an actor that died is set
up again once Ray restarts it; one whose node left the cluster hands its clients to the others."""

from __future__ import annotations

import time
from typing import Any, Callable

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError, RayTaskError

from actors import places
from actors.client import HostNotSetUp
from actors.placement import hand_over
from fedray.runner import ANSI

RESTART_TIMEOUT_S = 120.0  # how long a restarted client actor may take to come back up


class ClientActorLost(RuntimeError):
    """A client actor died (process crash, node loss, out of memory), could not be restarted, and no
    client actor is left to take its clients over (or its restarts are spent on a node still up)."""


class ActorSet:
    """The client actors of a run, index by index: each one's slot (``actors.placement``), handle,
    clients (``groups``), ``setup`` arguments, restarts so far, placement and name in fault lines
    (``ids``, kept when others are dropped); ``owner``: each client's actor now.

    An actor that dies is restarted by Ray and set up again with its clients' state of the last
    checkpoint (``recover``). One whose node left the cluster cannot come back: it is dropped, and
    its clients go to the actors left (``actors.placement.hand_over``, balanced by samples), which
    take them with their state of the last checkpoint (``hand_over``). An actor whose restarts are
    spent on a node that is still up ends the run: whatever killed it (its clients' memory, a
    broken device) would follow its clients to the others.
    """

    def __init__(self, nodes: dict, slots: list, actors: list, groups: list, setup_args: list, max_restarts: int):
        self.nodes, self.slots, self.actors, self.groups, self.setup_args = nodes, slots, actors, groups, setup_args
        self.max_restarts = max_restarts
        self.restarts = [0] * len(actors)
        self.ids = list(range(len(actors)))
        self.placements: list = [None] * len(actors)  # until set up (a hand-over may drop some first)
        self.owner = {spec.client_id: i for i, group in enumerate(groups) for spec in group}
        self.saved: list = []  # object refs of the client states of the last checkpoint (or resume)
        self.faults: list[str] = []  # the actors restarted or lost since ``take_faults`` last asked
        self.retried = 0  # and the tasks that ran again

    def index(self, actor: Any) -> int | None:
        """The actor's index now; None when it was dropped (``hand_over``)."""
        return next((i for i, a in enumerate(self.actors) if a is actor), None)

    def setup(self, i: int):
        """Actor ``i``'s ``setup`` call (its clients, built from the same arguments every time)."""
        args, kwargs = self.setup_args[i]
        return self.actors[i].setup.remote(*args, **kwargs)

    def on_each(self, call: Callable[[int], Any], stage: str) -> tuple[list, list]:
        """``call(i)``, a remote call on actor ``i``, for every actor; their results and the object
        refs that gave them, in actor order. An actor that died (at any moment since it was last
        asked: while idle, or during the call) is set up again and asked again (``survive``); when
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
                    self.survive(self.actors[i], incarnation, err, stage)
                    if len(self.actors) == n:
                        pending[call(i)] = (i, self.restarts[i])
            if len(self.actors) == n:
                return results, refs

    def survive(self, actor: Any, incarnation: int, err: RayError, stage: str) -> None:
        """A call on ``actor`` (made while it was in its ``incarnation``-th life) failed with
        ``err``; return when the call can be made again: on the actor, or, when it was dropped, on
        the actors that took its clients over. A task that failed raises its error; an actor that
        died, or that Ray restarted before it was asked (``HostNotSetUp``), is set up again once
        (``recover``), when this is the first of its lost calls to come back; an actor whose node
        left (unschedulable, its answer lost with the node) hands its clients over (``hand_over``)."""
        if isinstance(err, RayTaskError) and not isinstance(err, HostNotSetUp):
            raise err  # a task that failed, not an actor that died
        i = self.index(actor)
        if i is None:  # dropped already: its node left and its clients went to the others
            return
        if not isinstance(err, (RayActorError, HostNotSetUp)):  # e.g. unschedulable: its node left
            if not self.node_left(i):
                raise self.lost_error(err, stage) from None
            self.hand_over(err, stage)
        elif incarnation == self.restarts[i]:
            self.recover(i, err, stage)

    def recover(self, i: int, err: RayError, stage: str) -> None:
        """Client actor ``i`` died: once Ray has restarted it, set its clients up again with their
        state from the last checkpoint; again if it dies while coming back. When its node left, its
        clients go to the others (``hand_over``); ClientActorLost when its restarts are spent or it
        does not start again on a node still up."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            if self.node_left(i):
                return self.hand_over(err, stage)
            if self.slots[i].server or self.restarts[i] >= self.max_restarts:
                raise self.lost_error(err, stage)
            self.restarts[i] += 1
            try:
                self.set_up_again(i, deadline)
                break
            except (RayActorError, HostNotSetUp) as again:  # died again while coming back
                err = again
            except RayTaskError:
                raise  # its clients cannot be built: not a fault of the actor
            except (RayError, GetTimeoutError):  # pinned to a node that left (unschedulable), or never back
                if self.node_left(i):
                    return self.hand_over(err, stage)
                raise self.lost_error(err, stage) from None
        how = (f"had died before {stage} (Ray had restarted it without its clients)" if isinstance(err, HostNotSetUp)
               else f"died during {stage} ({first_line(err)})")
        self.faults.append(f"client actor {self.ids[i]} (clients {short([c.client_id for c in self.groups[i]])}) "
                           f"{how}; it was restarted ({self.restarts[i]} of runtime.actor_restarts = "
                           f"{self.max_restarts}), its clients got {self.saved_state()}, and what it had lost "
                           f"ran again")

    def set_up_again(self, i: int, deadline: float) -> None:
        """Actor ``i``'s clients built again and given the states of the last checkpoint, asking
        until Ray has restarted it (or ``deadline``: GetTimeoutError)."""
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                ray.get(self.setup(i), timeout=left)
                ray.get([self.actors[i].load_client_states.remote(part) for part in self.saved], timeout=left)
                return
            except ActorUnavailableError:  # still restarting: ask again
                if time.monotonic() > deadline:
                    raise GetTimeoutError(f"not back within {RESTART_TIMEOUT_S:g} s") from None
                time.sleep(0.1)

    def node_left(self, i: int) -> bool:
        """Whether actor ``i``'s node has left the cluster (never the server's: it asks)."""
        alive = places.alive()
        return not self.slots[i].server and self.slots[i].node_id not in alive

    def saved_state(self) -> str:
        return "their state of the last checkpoint" if self.saved else "their initial state (no checkpoint yet)"

    def hand_over(self, err: RayError, stage: str) -> None:
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
            raise self.lost_error(err, stage, f", and {nobody} to take its clients over") from None
        home = {c.client_id: self.ids[j] for j, group in zip(left, taken) for c in group}
        for i in lost:
            went: dict[int, list[int]] = {}
            for c in sorted(self.groups[i], key=lambda c: c.client_id):
                went.setdefault(home[c.client_id], []).append(c.client_id)
            self.faults.append(
                f"client actor {self.ids[i]} (clients {short(sorted(c.client_id for c in self.groups[i]))}) "
                f"was lost during {stage}: its node {self.node_name(self.slots[i].node_id)} left the cluster "
                f"({first_line(err)}); its clients went to "
                f"{', '.join(f'actor {a} ({short(ids)})' for a, ids in sorted(went.items()))} with "
                f"{self.saved_state()}, and what it had lost ran again there")
        adopters = []
        for j, group in zip(left, taken):
            if group:
                ids = sorted(c.client_id for c in group)
                self.groups[j] = self.groups[j] + group
                args, kwargs = self.setup_args[j]  # set up again, it builds them as its own
                self.setup_args[j] = ((*args[:-1], sorted(args[-1] + ids)), kwargs)
                adopters.append((self.actors[j], self.restarts[j], ids))
        self.drop(lost)
        pending = {actor.adopt.remote(ids, *self.saved): (actor, incarnation) for actor, incarnation, ids in adopters}
        for ref, (actor, incarnation) in pending.items():
            try:
                hosted = ray.get(ref)
            except RayError as again:  # restarted, it sets them up as its own; lost too, they move on
                self.survive(actor, incarnation, again, stage)
                continue
            j = self.index(actor)
            if j is not None and self.placements[j]:  # (none yet at start-up)
                self.placements[j] = {**self.placements[j], "hosted": hosted}

    def drop(self, lost: list[int]) -> None:
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
        """What the run survived since the last call: a line per restarted or lost actor, and how many
        tasks ran again (the round logs them)."""
        faults, retried, self.faults, self.retried = self.faults, self.retried, [], 0
        return faults, retried

    def lost_error(self, err: Exception, stage: str, why: str = "") -> ClientActorLost:
        """Which client actors are gone (each pinged), their clients and nodes, in one line; ``why``
        it ends the run when that is not plain."""
        lost = self.lost()
        ids = [c.client_id for i in lost for c in self.groups[i]]
        alive = places.alive()
        gone = sorted({self.node_name(self.slots[i].node_id) for i in lost if self.slots[i].node_id not in alive})
        where = f" (node {', '.join(gone)} left the cluster)" if gone else ""
        spent = any(self.restarts[i] >= self.max_restarts for i in lost)
        again = f", its restarts spent (runtime.actor_restarts = {self.max_restarts})" if spent and not gone else ""
        return ClientActorLost(f"a client actor (hosting clients {short(ids)}) died during {stage}{where}{again}"
                               f"{why}: {(str(err).splitlines() or [''])[0]}")

    def node_name(self, node_id: str) -> str:
        """``address/id-prefix``: the address for people, the id for nodes sharing an address."""
        return f"{self.nodes[node_id].address}/{node_id[:8]}"

    def lost(self, timeout: float = 10.0) -> list[int]:
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


def first_line(err: Exception) -> str:
    return ANSI.sub("", (str(err).splitlines() or [""])[0])[:160]


def short(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} in all)]"
