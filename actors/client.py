"""ClientActor: a ``fedray.clients.ClientHost`` made a Ray actor, and the executor that drives them."""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util import ActorPool

from actors.placement import assign_clients, num_client_actors
from fedray.clients import ClientHost
from fedray.config import Config
from fedray.experiment import Method
from fedray.messages import ClientSpec, ClientUpdate, RoundPlan


class ClientActorLost(RuntimeError):
    """A client actor died (process crash, node loss, out of memory)."""


class ClientActor(ClientHost):
    """ClientHost plus where it runs (for placement checks)."""

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class RayExecutor:
    """Starts the client actors and runs each round's tasks on them.

    The training set is put in the object store once and every actor reads shards from it. Each
    client has a home actor (round-robin) that keeps its shard and persistent state. Each round,
    every broadcast payload is put once (one per architecture). Tasks run on their clients' home
    actors, all submitted before any result is gathered, when the method is stateful or the user
    fixed ``clients_per_actor``. Otherwise (``auto`` and a stateless method) they go to whichever
    actor is free (``ray.util.ActorPool``), longest first, so a round is not held up by an actor
    that happened to draw more of its clients.
    """

    def __init__(self, config: Config, method: Method, specs: list[ClientSpec], data,
                 initial_models: dict[str, Any] | None = None):
        rt = config.runtime
        resources = ray.cluster_resources()
        n = num_client_actors(len(specs), rt, resources.get("CPU", 0.0), resources.get("GPU", 0.0))
        remote = ray.remote(num_cpus=rt.actor_cpus, num_gpus=rt.actor_gpus)(ClientActor)
        x_ref, y_ref, specs_ref = ray.put(data.train_x), ray.put(data.train_y), ray.put(specs)
        aux_ref, initial_ref = ray.put(data.aux_x), ray.put(initial_models)
        self.groups = assign_clients(specs, n)
        self.actors = [remote.remote(config, method, specs_ref, x_ref, y_ref, data.num_classes, rt.actor_gpus,
                                     [c.client_id for c in group], aux_x=aux_ref, initial_models=initial_ref)
                       for group in self.groups]
        self.owner = {spec.client_id: actor for actor, group in zip(self.actors, self.groups) for spec in group}
        self.sizes = {spec.client_id: spec.num_samples for spec in specs}
        # an explicit clients_per_actor is a layout the user asked for: keep every client at home
        self.pinned = method.client.stateful or rt.clients_per_actor != "auto"
        self._gather([a.hosted.remote() for a in self.actors], "start-up")

    def execute(self, plan: RoundPlan) -> list[ClientUpdate]:
        refs = {key: ray.put(payload) for key, payload in plan.broadcast.items()}
        stage = f"round {plan.tasks[0].round if plan.tasks else 0}"

        def submit(actor, task):
            return actor.run.remote(task, *(refs[k] for k in task.payload_keys))

        if self.pinned:
            updates = self._gather([submit(self.owner[t.client_id], t) for t in plan.tasks], stage)
        else:
            longest_first = sorted(plan.tasks, key=lambda t: -self.sizes[t.client_id])
            pool = ActorPool(self.actors)
            updates = self._collect(lambda: list(pool.map_unordered(submit, longest_first)), stage)
        return sorted(updates, key=lambda u: u.client_id)

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
        return {"backend": "ray", "actors": len(self.actors),
                "clients_per_actor": [len(g) for g in self.groups]}

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)

    def _gather(self, futures: list, stage: str) -> list:
        return self._collect(lambda: ray.get(futures), stage)

    def _collect(self, wait, stage: str) -> list:
        try:
            return wait()
        except RayActorError as err:
            ids = [c.client_id for group in self._lost_groups() for c in group]
            raise ClientActorLost(
                f"a client actor (hosting clients {_short(ids)}) died during {stage}: "
                f"{str(err).splitlines()[0]}"
            ) from None

    def _lost_groups(self, timeout: float = 10.0) -> list[list[ClientSpec]]:
        """The clients of every actor that does not answer a ping; all actors are pinged at once."""
        pings = [a.hosted.remote() for a in self.actors]
        ready, _ = ray.wait(pings, num_returns=len(pings), timeout=timeout)
        answered = set()
        for ref in ready:
            try:
                ray.get(ref)
                answered.add(ref)
            except Exception:  # the actor is dead: its ping fails
                pass
        return [group for ping, group in zip(pings, self.groups) if ping not in answered]


def _short(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} in all)]"
