"""The executor: how the round loop reaches the clients, and the in-process one.

The loop (``fedray.federation.Federation``) hands the executor a :class:`fedray.messages.RoundPlan`
and gets one :class:`fedray.messages.ClientUpdate` per task back, without its upload, and the
clients' statistics (``fedray.round``), summed on the hosts or gathered; it never knows where the
clients run. Two implementations: :class:`LocalExecutor` here (every client in this process) and
``actors.executor.RayExecutor`` (the clients on Ray actors), which only moves the same messages.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

from fedray.clients import ClientHost, client_major
from fedray.config import Config
from fedray.fold import Block
from fedray.messages import ClientSpec, ClientUpdate, RoundPlan
from fedray.round import Answers
from fedray.training import EvalPart
from fedray.weights import Weights

if TYPE_CHECKING:
    from fedray.data import DatasetBundle
    from fedray.resolve import Method


class Executor(ABC):
    """Everything the round loop and the backends ask of the clients' side."""

    @abstractmethod
    def prepare(self, plan: RoundPlan) -> list[ClientUpdate]:
        """Run the method's one-time preparation (``Strategy.prepare``'s plan) on the clients
        (``Client.prepare``); the uploads in client order."""

    @abstractmethod
    def execute(self, plan: RoundPlan) -> Answers:
        """Run a round's tasks (``Client``'s receive, train, upload, statistics): the updates
        without their uploads, in client order, and the statistics as the run collects them
        (``fedray.round.collection``): the round's sums (added unit by unit in unit order), or each
        client's statistics in client order."""

    @abstractmethod
    def client_states(self) -> dict[int, dict[str, Any]]:
        """Every client's persistent state, for a checkpoint."""

    @abstractmethod
    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        """Give the clients the states of a checkpoint (a resume)."""

    def take_faults(self) -> tuple[list[str], int]:
        """What was survived since the last call: a line per fault (a restarted client actor) and
        how many tasks ran again. Nothing, for an executor that cannot lose a host."""
        return [], 0

    def take_received(self) -> int:
        """The bytes of the hosts' answers (updates, sums) that reached the server since the last
        call; 0 for an executor whose clients run in the server's process."""
        return 0

    def node_ids(self) -> list[str]:
        """The node each host runs on (placement checks); none in-process."""
        return []

    def evaluate(self, arch: str, weights: Weights, group: int, batch_size: int,
                 num_classes: int = 0) -> list[EvalPart] | None:
        """An evaluation spread over the hosts: the parts of the pass of ``weights`` (a model of
        ``arch``) over group ``group``'s test set, in batch order, for ``combine_parts``; None where
        the server evaluates it itself (in-process the one host is the server's own process)."""
        return None

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Where the clients run (backend, actors per node, devices), for the run's record."""

    def shutdown(self) -> None:
        """End the hosts (called once, when the run finishes)."""


ExecutorFactory = Callable[["Config", "Method", list[ClientSpec], "DatasetBundle", dict[str, Weights]], Executor]


class LocalExecutor(Executor):
    """Runs every client in this process, one after another (``runtime.backend: local``)."""

    def __init__(self, config: Config, method: Method, specs: list[ClientSpec], data: DatasetBundle,
                 initial_models: dict[str, Weights] | None = None):
        threads = config.runtime.torch_threads or os.cpu_count() or 1
        x, y, spans = client_major(data.train_x, data.train_y, specs)
        self.host = ClientHost(config, method, specs, x, y, data.num_classes, threads=threads,
                               aux_x=data.aux_x, initial_models=initial_models, spans=spans)
        self.groups = config.runtime.fold_groups
        self.collection = method.collection(config.runtime)

    def prepare(self, plan: RoundPlan) -> list[ClientUpdate]:
        return self._sorted(self.host.prepare_batch(plan.tasks, *self._broadcast(plan)))

    def execute(self, plan: RoundPlan) -> Answers:
        """Every task on the one host; summed as the root block of the fold tree (``fedray.fold``):
        the same additions in the same order as the Ray executor makes over its actors, to the last bit."""
        if self.collection == "gather":
            updates, gathered = self.host.collect_batch(plan.tasks, None, *self._broadcast(plan))
            return Answers(self._sorted(updates), gathered=gathered)
        root = Block("", self.groups.bit_length() - 1, 0)
        updates, parts = self.host.collect_batch(plan.tasks, root, *self._broadcast(plan))
        return Answers(self._sorted(updates), sums=parts[root] or {})

    @staticmethod
    def _broadcast(plan: RoundPlan) -> tuple[Any, ...]:
        """The broadcast keys, sorted, then their payloads: ``ClientHost.run_batch``'s arguments."""
        keys = sorted(plan.broadcast)
        return keys, *(plan.broadcast[k] for k in keys)

    @staticmethod
    def _sorted(updates: list[ClientUpdate]) -> list[ClientUpdate]:
        return sorted(updates, key=lambda u: u.client_id)

    def client_states(self) -> dict[int, dict[str, Any]]:
        return self.host.client_states()

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self.host.load_client_states(states)

    def describe(self) -> dict[str, Any]:
        return {"backend": "local", "actors": 0}
