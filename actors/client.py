"""RayExecutor: runs each round's tasks on the client actors (``actors.pool``)."""

from __future__ import annotations

import math
from typing import Any

import ray
from ray.exceptions import RayActorError

from actors.placement import alive_nodes, assign_clients
from actors.pool import ClientPool, stop
from fedray.clients import client_major
from fedray.config import Config
from fedray.experiment import Method
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan


class ClientActorLost(RuntimeError):
    """A client actor died (process crash, node loss, out of memory)."""


class RayExecutor:
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
        self.groups = assign_clients(specs, self.slots)
        self.placements = self._gather(
            [actor.setup.remote(config, method, specs_ref, x_ref, y_ref, data.num_classes, slot.gpus,
                                [c.client_id for c in group], aux_x=aux_ref, initial_models=initial_ref,
                                spans=spans_ref)
             for actor, slot, group in zip(self.actors, self.slots, self.groups)], "start-up")
        self.owner = {spec.client_id: i for i, group in enumerate(self.groups) for spec in group}
        self.sizes = {spec.client_id: spec.num_samples for spec in specs}
        # an explicit clients_per_actor is a layout the user asked for: keep every client at home
        self.pinned = method.stateful or config.runtime.clients_per_actor != "auto"

    def execute(self, plan: RoundPlan) -> list[ClientUpdate]:
        refs = {key: ray.put(payload) for key, payload in plan.broadcast.items()}
        stage = f"round {plan.tasks[0].round if plan.tasks else 0}"

        def submit(i: int, tasks: list[ClientTask]):
            keys = sorted({k for t in tasks for k in t.payload_keys})
            return self.actors[i].run_batch.remote(tasks, keys, *(refs[k] for k in keys))

        if self.pinned:
            batches: dict[int, list[ClientTask]] = {}
            for task in plan.tasks:
                batches.setdefault(self.owner[task.client_id], []).append(task)
            parts = self._gather([submit(i, tasks) for i, tasks in batches.items()], stage)
        else:
            parts = self._collect(lambda: self._balanced(plan.tasks, submit), stage)
        return sorted((u for part in parts for u in part), key=lambda u: u.client_id)

    def _balanced(self, tasks: list[ClientTask], submit) -> list[list[ClientUpdate]]:
        """Longest first, each actor kept ``QUEUED`` batches deep until no task is left. A batch takes
        1 / (QUEUED x actors) of the tasks left (guided self-scheduling): large batches while much
        is left, single tasks at the end, so the actors finish together."""
        todo: dict[Any, list[ClientTask]] = {}
        for task in sorted(tasks, key=lambda t: -self.sizes[t.client_id]):
            todo.setdefault(self._kind(task), []).append(task)
        takers = {kind: [i for i, slot in enumerate(self.slots) if slot.arch == kind] for kind in todo}

        def next_batch(kind) -> list[ClientTask]:
            left = todo[kind]
            size = max(1, math.ceil(len(left) / (self.QUEUED * len(takers[kind]))))
            batch, todo[kind] = left[:size], left[size:]
            return batch

        running, results = {}, []
        for _ in range(self.QUEUED):
            for kind, actors in takers.items():
                for i in actors:
                    if todo[kind]:
                        running[submit(i, next_batch(kind))] = (i, kind)
        while running:
            [done], _ = ray.wait(list(running), num_returns=1)
            i, kind = running.pop(done)
            results.append(ray.get(done))
            if todo[kind]:
                running[submit(i, next_batch(kind))] = (i, kind)
        return results

    def _kind(self, task: ClientTask) -> Any:
        """Which actors may run a task: those of its architecture with per-architecture GPU shares."""
        return task.arch if self.slots[0].arch is not None else None

    def client_states(self) -> dict[int, dict[str, Any]]:
        states: dict[int, dict[str, Any]] = {}
        for part in self._gather([a.client_states.remote() for a in self.actors], "checkpoint"):
            states.update(part)
        return states

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self._gather([a.load_client_states.remote(states) for a in self.actors], "resume")

    def node_ids(self) -> list[str]:
        return self._gather([a.node_id.remote() for a in self.actors], "placement check")

    def describe(self) -> dict[str, Any]:
        per_node = {}
        for slot in self.slots:
            per_node[self._node_name(slot.node_id)] = per_node.get(self._node_name(slot.node_id), 0) + 1
        devices = {}
        for where in self.placements:
            devices[where["device"]] = devices.get(where["device"], 0) + 1
        return {"backend": "ray", "actors": len(self.actors), "actors_per_node": per_node, "devices": devices,
                "clients_per_actor": [len(g) for g in self.groups],
                "server_hosts_clients": any(slot.server for slot in self.slots)}

    def shutdown(self) -> None:
        stop(self.slots, self.actors)

    def _gather(self, futures: list, stage: str) -> list:
        return self._collect(lambda: ray.get(futures), stage)

    def _collect(self, wait, stage: str) -> list:
        try:
            return wait()
        except RayActorError as err:
            lost = self._lost()
            ids = [c.client_id for i in lost for c in self.groups[i]]
            alive = {n.node_id for n in alive_nodes(ray.nodes())}
            gone = sorted({self._node_name(self.slots[i].node_id) for i in lost if self.slots[i].node_id not in alive})
            where = f" (node {', '.join(gone)} left the cluster)" if gone else ""
            raise ClientActorLost(
                f"a client actor (hosting clients {_short(ids)}) died during {stage}{where}: "
                f"{str(err).splitlines()[0]}"
            ) from None

    def _node_name(self, node_id: str) -> str:
        """``address/id-prefix``: the address for people, the id for nodes sharing an address."""
        return f"{self.nodes[node_id].address}/{node_id[:8]}"

    def _lost(self, timeout: float = 10.0) -> list[int]:
        """The index of every actor that does not answer a ping; all actors are pinged at once (the
        server, which asks, is alive)."""
        pings = [a.hosted.remote() for s, a in zip(self.slots, self.actors) if not s.server]
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


def _short(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} in all)]"
