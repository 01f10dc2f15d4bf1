"""The interface every method implements: a server half (Strategy) and a client half.

The round loop (``fedray.federation.Federation``) is written once and never changes for a new method:

1. ``Strategy.configure_round`` returns a :class:`RoundPlan`: the tasks of the sampled clients and the
   payloads broadcast to them (one entry per architecture, put in the object store once each).
2. The host of each client calls ``ClientAlgorithm.run(task, payloads, client)``, which returns a
   :class:`ClientUpdate`. Per-client state (error-feedback residuals, certainty scores, cluster id)
   lives in ``client.state`` on that host between rounds and is checkpointed with the run.
3. ``Strategy.aggregate`` folds the updates into the server state and may run server-side work
   (distillation, generator training, cluster splits); it returns metrics to log.
4. ``Strategy.models_to_evaluate`` names the models the loop evaluates on the test set.

Compression, distillation, clustered FL, FedGen and MrTF plug in by overriding these hooks, with
extra broadcast payloads and extra update contents; the runtime only moves the typed messages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from fedray.config import Config
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan
from fedray.weights import Weights, get_weights, is_update, set_weights


class Params(BaseModel):
    """Base of a method's hyperparameters (the ``algorithm:`` section minus ``name``)."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class VirtualClient:
    """A client as its host sees it: data on the compute device and persistent state."""

    spec: ClientSpec
    x: torch.Tensor
    y: torch.Tensor
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def client_id(self) -> int:
        return self.spec.client_id

    @property
    def num_samples(self) -> int:
        return self.spec.num_samples


@dataclass
class ServerContext:
    """What a strategy knows about the federation."""

    config: Config
    clients: list[ClientSpec]
    build_model: Callable[[str], torch.nn.Module]
    # builds the clustered-FL parameter tree (clients, initial model); None: a local ParameterTree
    tree_factory: Optional[Callable[[list[int], Weights], Any]] = None
    # unlabelled auxiliary inputs (``aux:`` section) and the test set, for server-side distillation
    aux_x: Optional[np.ndarray] = None
    test_x: Optional[np.ndarray] = None
    test_y: Optional[np.ndarray] = None
    device: torch.device = torch.device("cpu")

    @property
    def architectures(self) -> list[str]:
        return list(dict.fromkeys(c.arch for c in self.clients))


def task_seed(seed: int, round: int, client_id: int) -> int:
    """A 63-bit seed for one client in one round, derived from the run seed."""
    return int(np.random.SeedSequence([seed, round, client_id]).generate_state(2, np.uint64)[0] >> 1)


def round_rng(seed: int, round: int) -> np.random.Generator:
    """The server's generator for round ``round`` (client sampling); no state to checkpoint."""
    return np.random.default_rng([seed, round, 0x5EED])


class ClientAlgorithm(ABC):
    """Client half of a method. One instance per host; it serves all clients of that host.

    ``stateful``: set True when ``run`` keeps state in ``client.state`` from one round to the next
    (error-feedback residuals, local optimiser state). Such clients always run on their home host,
    where the state lives; clients of a stateless method may run on any free host.
    """

    stateful: ClassVar[bool] = False

    def __init__(self, params: Params, config: Config, build_model: Callable[[str], torch.nn.Module],
                 device: torch.device, aux_x: Optional[torch.Tensor] = None):
        self.params = params
        self.config = config
        self.device = device
        self.aux_x = aux_x  # unlabelled auxiliary inputs on this host's device (distillation methods)
        self._build_model = build_model
        self._models: dict[str, torch.nn.Module] = {}

    def model(self, arch: str) -> torch.nn.Module:
        """A working model of ``arch``, built once per host and reused across clients."""
        if arch not in self._models:
            self._models[arch] = self._build_model(arch).to(self.device)
        return self._models[arch]

    def train_local(self, task: ClientTask, weights: Weights, client: VirtualClient,
                    extra_loss=None) -> tuple[Weights, dict[str, float]]:
        """SGD_E(weights, D_i) with the task's seeds; returns the trained weights and loss/steps.

        A Byzantine client (thesis section 6.7) does not train: its update is drawn from N(0, I),
        so it returns weights + xi on every floating tensor.
        """
        from fedray.training import local_train

        if client.spec.role == "byzantine":
            rng = np.random.default_rng(task.seed)
            attacked = {k: (v + rng.standard_normal(v.shape)).astype(v.dtype) if is_update(v) else v.copy()
                        for k, v in weights.items()}
            return attacked, {"loss": float("nan"), "steps": 0.0}

        model = self.model(task.arch)
        set_weights(model, weights)
        generator = torch.Generator().manual_seed(task.seed)
        torch.manual_seed(task.seed)  # dropout and other in-model randomness
        stats = local_train(model, client.x, client.y, self.config.training, generator,
                            extra_loss(model) if extra_loss else None)
        return get_weights(model), stats

    def init_state(self, client: VirtualClient) -> dict[str, Any]:
        """Persistent per-client state before round one (empty for stateless methods)."""
        return {}

    @abstractmethod
    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        """Train (or otherwise serve) ``client`` for one round and answer with its update."""


class Strategy(ABC):
    """Server half of a method.

    Subclasses set ``name``, ``Params`` and ``Client`` and override hooks. ``pools_data`` makes the
    loop give each architecture one client holding the pooled training data (central baseline).
    ``needs_aux`` makes the config demand unlabelled auxiliary data (``aux.size > 0``).
    """

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    Client: ClassVar[type[ClientAlgorithm]] = ClientAlgorithm
    pools_data: ClassVar[bool] = False
    needs_aux: ClassVar[bool] = False

    def __init__(self, params: Params, ctx: ServerContext):
        self.params = params
        self.ctx = ctx
        self.config = ctx.config
        self.models: dict[str, Weights] = {}
        for arch in ctx.architectures:
            torch.manual_seed(self.config.seed)
            self.models[arch] = get_weights(ctx.build_model(arch))

    # -- hooks -----------------------------------------------------------------------------------
    def sample_clients(self, round: int) -> list[ClientSpec]:
        """A fraction C of the clients, uniformly without replacement (thesis section 2.4)."""
        k = min(self.config.federation.clients_per_round, len(self.ctx.clients))
        if self.pools_data:
            k = len(self.ctx.clients)
        chosen = round_rng(self.config.seed, round).choice(len(self.ctx.clients), size=k, replace=False)
        return [self.ctx.clients[i] for i in sorted(chosen)]

    def configure_round(self, round: int) -> RoundPlan:
        """Broadcast each sampled architecture's global model once; one task per sampled client."""
        clients = self.sample_clients(round)
        broadcast = {f"model/{c.arch}": self.models[c.arch] for c in clients}
        tasks = [
            ClientTask(c.client_id, round, c.arch, (f"model/{c.arch}",),
                       task_seed(self.config.seed, round, c.client_id))
            for c in clients
        ]
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    @abstractmethod
    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        """Fold the round's updates into the server state; return metrics named as TensorBoard tags."""

    def models_to_evaluate(self) -> dict[str, Weights]:
        return self.models

    def summary(self) -> dict[str, Any]:
        """What the method adds to ``result.json`` at the end of a run (default nothing)."""
        return {}

    def artifacts(self, round: int) -> dict[str, Any]:
        """Text (str) or matplotlib figures to log this round, by TensorBoard tag (default none)."""
        return {}

    def evaluate(self, evaluate_model: Callable[[str, Weights, int], dict[str, float]]) -> dict[str, float]:
        """Test metrics; ``evaluate_model(arch, weights, group)`` scores a model on a group's test set.

        Default: each architecture's model on the test set of every group its benign clients belong
        to. ``eval/accuracy`` is the mean over benign clients of their model's accuracy on their
        group's test data (adversaries are not scored).
        """
        benign = [c for c in self.ctx.clients if c.role == "benign"] or self.ctx.clients
        out: dict[str, float] = {}
        acc = loss = 0.0
        for arch, weights in self.models_to_evaluate().items():
            groups = Counter(c.group for c in benign if c.arch == arch)
            arch_acc = arch_loss = 0.0
            for group, count in sorted(groups.items()):
                result = evaluate_model(arch, weights, group)
                if len(groups) > 1:
                    out[f"eval/accuracy/{arch}/group{group}"] = result["accuracy"]
                arch_acc += count * result["accuracy"] / sum(groups.values())
                arch_loss += count * result["loss"] / sum(groups.values())
            out[f"eval/accuracy/{arch}"], out[f"eval/loss/{arch}"] = arch_acc, arch_loss
            share = sum(groups.values()) / len(benign)
            if self.pools_data:  # one pooled client per architecture: weigh by the configured counts
                counts = self.config.federation.architectures
                share = counts[arch] / sum(counts.values())
            acc, loss = acc + share * arch_acc, loss + share * arch_loss
        out["eval/accuracy"], out["eval/loss"] = acc, loss
        return out

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"models": self.models}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models = state["models"]
