"""ClientActor: a ``fedray.clients.ClientHost`` made a Ray actor, and the executor that drives them."""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import RayActorError

from actors.placement import assign_clients, num_client_actors
from fedray.clients import ClientHost
from fedray.config import Config
from fedray.messages import ClientSpec, ClientUpdate, RoundPlan


class ClientActorLost(RuntimeError):
    """A client actor died (process crash, node loss, out of memory)."""


class ClientActor(ClientHost):
    """ClientHost plus where it runs (for placement checks)."""

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class RayExecutor:
    """Starts the client actors and runs each round's tasks on them.

    The training set is put in the object store once; every actor reads its clients' shards from
    it. Each round, every broadcast payload is put once (one per architecture) and every task is
    submitted before any result is gathered.
    """

    def __init__(self, config: Config, specs: list[ClientSpec], data):
        rt = config.runtime
        resources = ray.cluster_resources()
        n = num_client_actors(len(specs), rt, resources.get("CPU", 0.0), resources.get("GPU", 0.0))
        remote = ray.remote(num_cpus=rt.actor_cpus, num_gpus=rt.actor_gpus)(ClientActor)
        x_ref, y_ref = ray.put(data.train_x), ray.put(data.train_y)
        self.groups = assign_clients(specs, n)
        self.actors = [remote.remote(config, group, x_ref, y_ref, data.num_classes, rt.actor_gpus)
                       for group in self.groups]
        self.owner = {spec.client_id: actor for actor, group in zip(self.actors, self.groups) for spec in group}
        self._gather([a.hosted.remote() for a in self.actors], "start-up")

    def execute(self, plan: RoundPlan) -> list[ClientUpdate]:
        refs = {key: ray.put(payload) for key, payload in plan.broadcast.items()}
        futures = [self.owner[t.client_id].run.remote(t, *(refs[k] for k in t.payload_keys))
                   for t in plan.tasks]
        round_ = plan.tasks[0].round if plan.tasks else 0
        return sorted(self._gather(futures, f"round {round_}"), key=lambda u: u.client_id)

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
        try:
            return ray.get(futures)
        except RayActorError as err:
            lost = next((g for a, g in zip(self.actors, self.groups) if _is_dead(a)), [])
            ids = [c.client_id for c in lost]
            raise ClientActorLost(
                f"a client actor (hosting clients {_short(ids)}) died during {stage}: "
                f"{str(err).splitlines()[0]}"
            ) from None


def _is_dead(actor) -> bool:
    try:
        ray.get(actor.hosted.remote(), timeout=10)
        return False
    except Exception:
        return True


def _short(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)} in all)]"
