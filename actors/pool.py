"""The client actors' processes: planned over the nodes and started before the server has the data.

Torch-free at import, so the ServerActor can start its client actors the moment its own process
starts; each ClientActor imports torch and the client code in a background thread from its first
moment, while the server imports them too and loads the data. ``setup`` then builds the actor's
``fedray.clients.ClientHost``.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.placement import alive_nodes, plan_actors
from fedray.config import Config


class ClientActor:
    """A ``ClientHost`` in a Ray actor, built by ``setup``; the other methods are the host's."""

    def __init__(self):
        self._warm = threading.Thread(target=importlib.import_module, args=("fedray.clients",), daemon=True)
        self._warm.start()
        self.host = None

    def setup(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``ClientHost(*args, **kwargs)``; returns where it runs (``placement``)."""
        self._warm.join()
        from fedray.clients import ClientHost

        self.host = ClientHost(*args, **kwargs)
        return self.placement()

    def run(self, task, *downloads):
        return self.host.run(task, *downloads)

    def run_batch(self, tasks, keys, *payloads):
        return self.host.run_batch(tasks, keys, *payloads)

    def client_states(self):
        return self.host.client_states()

    def load_client_states(self, states) -> None:
        self.host.load_client_states(states)

    def hosted(self) -> list[int]:
        return self.host.hosted()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def placement(self) -> dict[str, Any]:
        """Its node, its torch device, the GPUs Ray gave it and its share of them, its clients."""
        return {"node": self.node_id(), "device": str(self.host.device), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "gpus": self.host.gpus, "hosted": self.host.hosted()}


class ClientPool:
    """The client actors for clients of the architectures ``archs`` (one entry per client), planned
    over the cluster's alive nodes (``actors.placement``) and started at once."""

    def __init__(self, config: Config, archs: list[str]):
        here = ray.get_runtime_context().get_node_id()
        self.nodes = {n.node_id: n for n in alive_nodes(ray.nodes())}
        self.slots = plan_actors(archs, config.runtime, list(self.nodes.values()), here)
        self.actors = [
            ray.remote(ClientActor).options(
                num_cpus=slot.cpus, num_gpus=slot.gpus,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=slot.node_id, soft=False),
            ).remote()
            for slot in self.slots]
