"""ParameterTreeActor: clustered FL's parameter tree (``fedray.parameter_tree``) in its own actor.

The CFL strategy in the server actor reaches it through :class:`TreeProxy`, which has the
ParameterTree's methods and waits for each answer, so the strategy code is the same with and
without Ray. The strategy calls it twice a round (``view`` and ``apply``). The tree is checkpointed with the run: the strategy's state holds
``tree.state_dict()``, and resuming loads it back into a fresh actor.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fedray.parameter_tree import ParameterTree, descend
from fedray.weights import Weights


class TreeActorDied(RuntimeError):
    """The ParameterTreeActor's process ended: the clusters live on only in the last checkpoint."""


class ParameterTreeActor(ParameterTree):
    """Owns the tree during a run: which clusters exist, which model each client trains, the splits."""

    def ping(self) -> bool:
        return True


class TreeProxy:
    """A ParameterTree whose state lives in a ParameterTreeActor; every call is a blocking remote call."""

    host = "ParameterTreeActor"

    def __init__(self, actor):
        self.actor = actor

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.actor, name)

        def call(*args, **kwargs):
            try:
                return ray.get(method.remote(*args, **kwargs))
            except RayActorError as err:
                raise TreeActorDied(f"the parameter-tree actor of clustered FL died: {str(err).splitlines()[0]}") from None

        return call

    def assign(self, update_at: Callable[[Weights], np.ndarray]) -> int:
        return descend(self, update_at)  # the new client's training stays with the caller


def tree_actor_factory(num_cpus: float = 0):
    """A ``tree_factory`` for the Federation: each call starts a ParameterTreeActor next to the caller."""

    def make(clients: list[int], model: Weights) -> TreeProxy:
        here = ray.get_runtime_context().get_node_id()
        actor = ray.remote(ParameterTreeActor).options(
            num_cpus=num_cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=True),
        ).remote(clients, model)
        ray.get(actor.ping.remote())
        return TreeProxy(actor)

    return make
