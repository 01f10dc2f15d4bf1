"""The client actors' processes: planned over the nodes and started before the server has the data.

Torch-free at import, so the ServerActor can start its client actors the moment its own process
starts; each ClientActor imports torch and the client code in a background thread from its first
moment, while the server imports them too and loads the data. ``setup`` then builds the actor's
``fedray.clients.ClientHost``.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from typing import Any, Optional

import ray

from actors import places
from actors.placement import plan_actors
from fedray.config import Config


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; elsewhere nothing).
    A round's transient buffers (updates, evaluation batches) otherwise stay resident between rounds
    (docs/performance.md). Hosts call it once a round (``HostActor._new_round``)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class HostNotSetUp(RuntimeError):
    """A client actor that Ray restarted was asked to work before its clients were set up again."""


HOST_GROUPS = {"host": 1}  # a host's methods run one at a time, beside the actor's own (the server's round)


def host_method(fn):
    return ray.method(concurrency_group="host")(fn)


class HostActor:
    """The methods of an actor that hosts clients (a ``ClientHost``, built by ``setup``). They run
    in the concurrency group ``host`` (``HOST_GROUPS``), so the ServerActor, which hosts clients
    too when ``runtime.server_hosts_clients`` says so, runs them while its round waits for them."""

    host = None

    def _host(self):
        if self.host is None:  # Ray restarted this actor: it has no clients until ``setup`` again
            raise HostNotSetUp("this client actor was restarted and has no clients set up")
        return self.host

    @host_method
    def setup(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``ClientHost(*args, **kwargs)``; returns where it runs (``placement``)."""
        from fedray.clients import ClientHost

        self.host = ClientHost(*args, **kwargs)
        return self.placement()

    @host_method
    def collect_batch(self, tasks, units, keys, *payloads):
        self._new_round(tasks)
        return self._host().collect_batch(tasks, units, keys, *payloads)

    _round = None

    def _new_round(self, tasks) -> None:
        """Before the first batch of a round, give back what the last round left free
        (``release_free_memory``): once a round, not after every batch, since the next batch would
        take those pages again, each one a page fault."""
        if tasks and tasks[0].round != self._round:
            release_free_memory()
            self._round = tasks[0].round

    @host_method
    def evaluate_part(self, arch, weights, group, test, first, stop, batch_size, num_classes):
        """``ClientHost.evaluate_part``; ``test``: ``[ref]`` of the test set, fetched only when the
        host has not kept the group's tensors yet."""
        return self._host().evaluate_part(arch, weights, group, lambda: ray.get(test[0]), first, stop,
                                          batch_size, num_classes)

    @host_method
    def prepare_batch(self, tasks, keys, *payloads):
        return self._host().prepare_batch(tasks, keys, *payloads)

    @host_method
    def client_states(self):
        return self._host().client_states()

    @host_method
    def load_client_states(self, states) -> None:
        self._host().load_client_states(states)

    @host_method
    def adopt(self, client_ids: list[int], *parts: dict[int, Any]) -> list[int]:
        """Take over the clients ``client_ids`` of an actor lost for good (``ClientHost.adopt``), with
        their states out of ``parts`` (the executor's parts of the last checkpoint); returns the
        clients hosted here now."""
        wanted = set(client_ids)
        self._host().adopt(client_ids, {cid: s for part in parts for cid, s in part.items() if cid in wanted})
        return self.host.hosted()

    @host_method
    def pid(self) -> int:
        """The actor's process id (fault-injection tests ``kill -9`` it)."""
        return os.getpid()

    @host_method  # not in the server's own group, which is busy asking
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def placement(self) -> dict[str, Any]:
        """Its node, its torch device, the GPUs Ray gave it and its share of them, its clients."""
        return {"node": self.node_id(), "device": str(self.host.device), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "gpus": self.host.gpus, "hosted": self.host.hosted()}


class ClientActor(HostActor):
    """A client actor: imports torch and the client code as it starts."""

    def __init__(self):
        """The imports a client actor needs, done before ``setup`` asks: the client code (torch with
        it) and TorchDynamo, which ``torch.optim`` imports when an optimizer is made. Actors start
        while the server loads the data, so this overlaps it instead of lengthening round one. In
        the constructor, not in a thread of its own: Ray unpickles ``setup``'s arguments (which
        import fedray's modules) before ``setup`` runs, and two threads importing the same modules
        at once can fail with Python's import ``_DeadlockError``."""
        importlib.import_module("fedray.clients")
        importlib.import_module("torch._dynamo")


class ClientPool:
    """The client actors for clients of the architectures ``archs`` (one entry per client), planned
    over the cluster's alive nodes (``actors.placement``) and started at once. ``server``: the
    handle of the ServerActor when it hosts clients too; it is then the pool's first actor."""

    def __init__(self, config: Config, archs: list[str], server: Optional[ray.actor.ActorHandle] = None):
        here = places.server_place()
        self.nodes = {n.node_id: n for n in places.nodes()}
        self.slots = plan_actors(archs, config.runtime, list(self.nodes.values()), here, server_hosts=server is not None)
        client_actor = ray.remote(concurrency_groups=HOST_GROUPS)(ClientActor)
        self.actors = [
            server if slot.server else client_actor.options(
                num_cpus=slot.cpus, num_gpus=slot.gpus, max_restarts=config.runtime.actor_restarts,
                scheduling_strategy=places.strategy(slot.node_id),
            ).remote()
            for slot in self.slots]

    def shutdown(self) -> None:
        """End the client actors (not the server when it hosts clients) at once: one left to end
        with the driver may be torn down mid-start-up and abort, a stack trace on the console."""
        stop(self.slots, self.actors)


def stop(slots: list, actors: list) -> None:
    """``ray.kill`` the actors of ``slots`` that are not the server."""
    for slot, actor in zip(slots, actors):
        if not slot.server:
            ray.kill(actor)
