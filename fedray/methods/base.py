"""The interface every method implements: a server half (Strategy) and a client half (Client).

The round loop (``fedray.federation.Federation``) is written once and never changes for a new method;
it reaches the clients through an executor (``fedray.executor``), which runs the client half on the
host of each client. A method may have a one-time preparation, run before round one and not a round
of its own: ``Strategy.prepare`` returns a plan (FedAUX: every client, with what it needs to fit its
scorer), the executor runs it in a call of its own with each client's ``Client.prepare``
(the tasks say round 0, for their seeds), and ``Strategy.prepared`` takes the answers; a resumed
run does not prepare again, what it yielded is in the checkpoint. Then each round:

1. ``Strategy.configure_round`` returns a :class:`RoundPlan`: the tasks of the sampled clients and the
   payloads broadcast to them (one entry per architecture, put in the object store once each).
2. The host of each client (``fedray.clients.ClientHost``) runs the client half in three steps:
   ``receive`` (apply the downloads: the model theta_i the client starts from), ``train`` (the local
   computation: SGD_E(theta_i, D_i), or a gradient) and ``upload`` (what travels back: weights, a
   coded update, soft labels). The host times them, counts the uploaded bytes, names the failing
   step, and stands in for ``train`` when the client is an adversary; per-client state (residuals,
   the last upload) lives in ``client.state`` on that host and is checkpointed with the run.
3. On the host, ``Client.statistics`` turns each upload into the statistics the client half
   declares (``collected``): terms the server reads summed, or values it reads client by client
   (``fedray.round``). ``Strategy.aggregate(round)`` reads them into the server state and may run
   server-side work (distillation, cluster splits); it returns metrics to log.
4. ``Strategy.models_to_evaluate`` names the models the loop evaluates on the test set.

Methods override these hooks; shared server-side pieces (grouping by architecture, |D_i| weights,
the seeded initial model, the catch-up cache) are in :mod:`fedray.methods.helpers`, and sharing
only the heads (``share: head``) in :mod:`fedray.methods.head_sharing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from fedray.cohort import CohortClient, StackedLoss, train_cohort
from fedray.config import Config, TrainingConfig
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan
from fedray.methods.helpers import initial_model
from fedray.round import Round, Statistics
from fedray.training import ExtraLoss, local_train, make_optimizer, num_local_steps, optimizer_state
from fedray.weights import Weights, get_weights, set_weights


class Params(BaseModel):
    """Base of a method's hyperparameters (the ``algorithm:`` section minus ``name``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass
class VirtualClient:
    """A client as its host sees it: data on the compute device, persistent state, and for an
    adversary its attack (``fedray.attacks``; its data is already the attacked data)."""

    spec: ClientSpec
    x: torch.Tensor
    y: torch.Tensor
    state: dict[str, Any] = field(default_factory=dict)  # kept from round to round, checkpointed
    attack: Any = None
    # what the method keeps between the hooks of one task (receive, extra_loss, upload): emptied by
    # the host before each task, never checkpointed
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def client_id(self) -> int:
        return self.spec.client_id

    @property
    def num_samples(self) -> int:
        return self.spec.num_samples


@dataclass
class Trained:
    """theta_i after local training, SGD_E(theta, D_i), with its training metrics (loss, steps)."""

    weights: Weights
    metrics: dict[str, float]


@dataclass
class Gradient:
    """One mini-batch gradient g_i (thesis Alg. 1), the buffers of that forward pass, its metrics."""

    grad: Weights
    buffers: Weights
    metrics: dict[str, float]


LocalUpdate = Union[Trained, Gradient]


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
    # theta^0 of each architecture (pre-trained features when ``pretrain.epochs``); None: seeded init
    initial_models: Optional[dict[str, Weights]] = None
    negatives_x: Optional[np.ndarray] = None  # FedAUX's negative set D^- (``aux.negatives``)
    # for diagnostics only (a real server does not know them): clients x classes label counts
    label_counts: Optional[np.ndarray] = None
    class_names: Optional[list[str]] = None

    @property
    def architectures(self) -> list[str]:
        return list(dict.fromkeys(c.arch for c in self.clients))

    def initial(self, arch: str) -> Weights:
        """theta^0 of ``arch``: the run's initial model (pre-trained features, if any)."""
        if self.initial_models is not None:
            return dict(self.initial_models[arch])
        return initial_model(self.build_model, arch, self.config.model_seed)


def task_seed(seed: int, round: int, client_id: int) -> int:
    """A 63-bit seed for one client in one round, derived from the run seed."""
    return int(np.random.SeedSequence([seed, round, client_id]).generate_state(2, np.uint64)[0] >> 1)


def round_rng(seed: int, round: int) -> np.random.Generator:
    """The server's generator for round ``round`` (client sampling); no state to checkpoint."""
    return np.random.default_rng([seed, round, 0x5EED])


class Client:
    """Client half of a method. One instance per host; it serves all clients of that host.

    The defaults are FedAvg's client (thesis Alg. 2): start from the broadcast model, train it with
    the local optimiser, upload the trained weights. A method overrides the steps it changes.

    ``stateful``: set True when the client keeps state in ``client.state`` from one round to the next
    (error-feedback residuals, its copy of the model). Such clients always run on their home host,
    where the state lives; clients of a stateless method may run on any free host.
    ``update_kind``: what ``train`` returns (:class:`Trained` or :class:`Gradient`), so that the host
    can draw an adversary's update of the same kind without training (thesis section 6.7).
    """

    stateful: ClassVar[bool] = False
    update_kind: ClassVar[type] = Trained

    def __init__(self, params: Params, config: Config, build_model: Callable[[str], torch.nn.Module],
                 device: torch.device, aux_x: Optional[torch.Tensor] = None,
                 initial_models: Optional[dict[str, Weights]] = None):
        self.params = params
        self.config = config
        self.device = device
        self.aux_x = aux_x  # unlabelled auxiliary inputs on this host's device (distillation methods)
        self.build_model = build_model
        self._models: dict[str, torch.nn.Module] = {}
        self._initial = initial_models or {}
        # this run's answer to the class's default (``Method.keeps_state``)
        # whether this run's clients stay on their home hosts: they keep state with these parameters, or
        # each keeps its optimiser (``Method.keeps_state``); the class's ``stateful`` is the default
        self.at_home = self.keeps_state(params) or config.training.optimizer_state == "keep"

    def initial(self, arch: str) -> Weights:
        """theta^0 of ``arch``, as the server has it (pre-trained features, if any); do not change it."""
        if arch not in self._initial:
            self._initial[arch] = initial_model(self.build_model, arch, self.config.model_seed)
        return self._initial[arch]

    def model(self, arch: str) -> torch.nn.Module:
        """A working model of ``arch``, built once per host and reused across clients."""
        if arch not in self._models:
            self._models[arch] = self.build_model(arch).to(self.device)
        return self._models[arch]

    def init_state(self, client: VirtualClient) -> dict[str, Any]:
        """Persistent per-client state before round one (empty for stateless methods)."""
        return {}

    def prepare(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Any:
        """The client's part of the method's one-time preparation (a task of ``Strategy.prepare``'s
        plan), e.g. FedAUX's certainty scorer; returns the upload. Methods without a preparation have none."""
        raise TypeError(f"{type(self).__name__} has no preparation step, but got a preparation task")

    # -- the three steps of a round, in the order the host calls them ------------------------------
    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        """theta_i, the model the client starts from, out of this round's downloads (in
        ``task.payload_keys`` order). Default: the one broadcast model."""
        return downloads[0]

    @classmethod
    def keeps_state(cls, params: Params) -> bool:
        """Whether clients keep state between rounds with ``params``: ``stateful`` unless a subclass
        says more (``share: head``, :class:`fedray.methods.head_sharing.HeadSharingClient`)."""
        return cls.stateful

    def train(self, task: ClientTask, theta: Weights, client: VirtualClient) -> LocalUpdate:
        """SGD_E(theta, D_i) with the task's seeds (batch order, dropout) and ``extra_loss``."""
        model = self.model(task.arch)
        set_weights(model, theta)
        generator = torch.Generator().manual_seed(task.seed)
        torch.manual_seed(task.seed)  # dropout and other in-model randomness
        cfg, freeze = self.training(task), self.config.pretrain.freeze_features
        kept = cfg.optimizer_state == "keep"  # the optimiser goes on from the client's last training
        optimizer = make_optimizer(model, cfg, freeze, client.state.get("optimizer")) if kept else None
        stats = local_train(model, client.x, client.y, cfg, generator, self.extra_loss(model, task, client), freeze,
                            optimizer)
        if kept:
            client.state["optimizer"] = optimizer_state(optimizer)
        return Trained(get_weights(model), stats)

    def local_steps(self, client: VirtualClient) -> int:
        """The steps of one local training of ``client`` (``training.epochs`` or ``steps``)."""
        return num_local_steps(client.num_samples, self.config.training)

    def training(self, task: ClientTask) -> TrainingConfig:
        """The task's local training settings: ``training``, its lr times the task's ``lr_scale``."""
        t = self.config.training
        return t if task.lr_scale == 1 else t.model_copy(update={"lr": t.lr * task.lr_scale})

    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        """A term added to the local objective, built after ``model`` holds theta (none by default);
        what ``receive`` left for it is in ``client.scratch``."""
        return None

    # -- vectorised local training (``runtime.vectorize``) --------------------------------------
    @classmethod
    def cohort_refusal(cls) -> Optional[str]:
        """Why this method's clients cannot train as one cohort (``fedray.cohort``), or None when
        they can: ``train`` is plain local training and any ``extra_loss`` has a :meth:`stacked_loss`."""
        if cls.train is not Client.train:
            return f"its local step is its own ({cls.__name__}.train), not plain local training"
        if cls.extra_loss is not Client.extra_loss and cls.stacked_loss is Client.stacked_loss:
            return f"its local objective adds a term ({cls.__name__}.extra_loss) that has no stacked form"
        return None

    def stacked_loss(self) -> Optional[StackedLoss]:
        """``extra_loss`` over stacked tensors, for a cohort (``fedray.cohort.StackedLoss``); none by default."""
        return None

    def train_cohort(self, tasks: list[ClientTask], thetas: list[Weights], clients: list[VirtualClient]) -> list[Trained]:
        """``train`` for clients of one architecture at once, in lockstep (``fedray.cohort.train_cohort``):
        each with its task's seed, so with the batches ``train`` would draw."""
        out: dict[int, Trained] = {}
        for scale in dict.fromkeys(t.lr_scale for t in tasks):  # one cohort per local lr (training.lr_decay)
            mine = [i for i, t in enumerate(tasks) if t.lr_scale == scale]
            cohort = [CohortClient(thetas[i], clients[i].x, clients[i].y, tasks[i].seed) for i in mine]
            trained = train_cohort(self.model(tasks[0].arch), cohort, self.training(tasks[mine[0]]),
                                   self.stacked_loss(), self.config.pretrain.freeze_features)
            out.update({i: Trained(weights, metrics) for i, (weights, metrics) in zip(mine, trained)})
        return [out[i] for i in range(len(tasks))]

    def upload(self, task: ClientTask, theta: Weights, local: LocalUpdate, client: VirtualClient) -> Any:
        """What the client sends back (its ``bytes_up`` are counted by the host). Default: theta_i."""
        return local.weights

    # -- what the server reads (``fedray.round``) -------------------------------------------------
    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        """The statistics a client hands back each round with ``params``: name -> ``Sum`` (a term
        (c_i, x_i) the server reads summed) or ``Each`` (a value it reads client by client). Depends
        on ``params`` only: it decides, before the run, whether the hosts sum (``fedray.round.collection``)."""
        raise TypeError(f"{cls.__name__} declares no statistics: define collected(params) and statistics(update, client)")

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """This client's statistics, made on its host from its upload (``update.payload``), one per
        name of :meth:`collected`: a term ``(c_i, x_i)`` for a ``Sum`` (summed as sum_i c_i x_i per
        architecture, in float64), ``Each(value, weight)`` for an ``Each``."""
        raise TypeError(f"{type(self).__name__} makes no statistics: define statistics(update, client)")


class Strategy(ABC):
    """Server half of a method.

    Subclasses set ``name``, ``Params`` and ``Client`` and override hooks. ``pools_data`` makes the
    loop give each architecture one client holding the pooled training data (central baseline).
    ``config_problem`` says what a config lacks for the method (``resolve`` reports it).
    ``state_attrs`` names the attributes a checkpoint holds.
    """

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    Client: ClassVar[type[Client]] = Client
    pools_data: ClassVar[bool] = False
    state_attrs: ClassVar[tuple[str, ...]] = ("models",)
    # what ``fedray methods`` shows (fedray.catalog): one line on what it does, and the paper it follows
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""

    def __init__(self, params: Params, ctx: ServerContext):
        self.params = params
        self.ctx = ctx
        self.config = ctx.config
        self.models: dict[str, Weights] = {arch: ctx.initial(arch) for arch in ctx.architectures}

    @classmethod
    def config_problem(cls, config: Config, params: Params) -> Optional[str]:
        """What ``config`` lacks for this method with its validated ``params``, as one line naming
        the key to set; None if nothing."""
        return None

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
        tasks = [ClientTask(c.client_id, round, c.arch, (f"model/{c.arch}",),
                            task_seed(self.config.seed, round, c.client_id))
                 for c in clients]
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def prepare(self) -> Optional[RoundPlan]:
        """The plan of the method's one-time preparation before round one, which the executor runs
        with the clients' ``Client.prepare`` (its tasks say round 0, for their seeds), or
        None (default). Run once per run, not again on resume: what it yields is checkpointed."""
        return None

    def prepared(self, updates: list[ClientUpdate]) -> dict[str, float]:
        """Take the answers to ``prepare``'s tasks; return metrics to log at step 0."""
        return {}

    @abstractmethod
    def aggregate(self, round: Round) -> dict[str, float]:
        """The server step of the round: read the clients' statistics (``round.total``,
        ``round.each``, ``round.mean``; ``round.updates`` holds their sizes, times and losses), update
        the server state, and return metrics named as TensorBoard tags."""

    def models_to_evaluate(self) -> dict[str, Weights]:
        return self.models

    def summary(self) -> dict[str, Any]:
        """What the method adds to ``result.json`` at the end of a run (default nothing)."""
        return {}

    def artifacts(self, round: int) -> dict[str, Any]:
        """Text (str), histograms (numpy arrays) or matplotlib figures to log this round, by
        TensorBoard tag (default none); round 0 is right after the preparation."""
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
        return {name: getattr(self, name) for name in self.state_attrs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.state_attrs:
            if name in state:  # a checkpoint from before the method kept ``name`` leaves it as initialised
                setattr(self, name, state[name])
