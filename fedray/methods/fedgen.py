"""FedGen: Zhu, Hong, Zhou, "Data-Free Knowledge Distillation for Heterogeneous Federated
Learning", ICML 2021, Algorithm 1 (signs restored as in the mrtf_fedgen digest, B.4).

    server broadcasts theta, the generator w and the label prior p^(y) to the active users A
    for k in A:  theta_k <- theta; T local steps on eq. 5:
        CE(h(f(x; theta_k^f); theta_k^p), y) + alpha CE(h(z^; theta_k^p), y^),  y^ ~ p^(y), z^ ~ G_w(.|y^)
        (the generated latent points go through the head only; G is fixed), counting the labels seen
    theta <- 1/|A| sum_k theta_k;  p^(y) <- the users' label counts, normalised
    w <- w - lr grad_w J(w)  (eq. 4: the users' heads label G_w(eps, y) as y; fedray.distill.generator)

Every architecture's features must have one size d (the generator's output): that is what lets
users with different feature extractors share one generator (e.g. ``cnn`` with ``hidden: 32`` and
``mlp`` with ``hidden: [200, 32]``). Averaging happens within an architecture, as FedAvg's does.
``share: head`` shares only the heads (section 3.3, Table 4); the generator needs no more.

The paper's behaviour is the default; the authors' code's (digest B.2-B.3) is named options:
``noise: uniform``, ``labels: available``, ``teacher: counts``, ``alpha: 10`` with
``alpha_decay: 0.98``, its third term ``beta: 10`` (KL from the head's prediction on G(y) to the
model's on the real x of label y), ``start_round: 2`` (its first round is FedAvg), ``weighted:
true``. The generator's optimiser, which the paper leaves out, is the code's: Adam, lr 3e-4,
weight decay 1e-2, decayed by 0.98 a round, 50 steps of 32 samples.

The server step needs the users through sums only (``fedray.fold``), so with eq. 4's teacher the
method folds: FedAvg's sum_k c_k theta_k, the label counts sum_k c_k, and the heads sum_k theta_k^p,
since the heads are linear, (1/K) sum_k g(z; theta_k^p) = g(z; (1/K) sum_k theta_k^p), and the
generator trains against the mean head. ``teacher: counts`` weighs each user's cross-entropy on
G_w(eps, y) by its share of label y: a function of every user's head and counts, not a sum, so
then every upload travels to the server (as with ``share: head``, whose bodies the server keeps).
``teacher: counts_code`` is what the code computes instead of that weighting (each user's mean
cross-entropy times its mean weight over the batch, counts from 1: ``teacher_loss``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from fedray.config import BatchSize, ConfigError, Dim
from fedray.distill.generator import Generator, draw_labels, draw_noise, train_generator
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import ServerContext, Trained, VirtualClient, task_seed
from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HEAD_PREFIX, HeadSharingClient, body_of, shared, shares_heads
from fedray.round import Each, Round, Statistics
from fedray.training import Batch, ExtraLoss, batch_indices, num_local_steps
from fedray.weights import Weights, get_weights, set_weights

HEAD = (HEAD_PREFIX + "weight", HEAD_PREFIX + "bias")  # theta^p: the last, linear layer of every FedModel


class FedGenParams(FedAvgParams):
    alpha: float = Field(1.0, ge=0)  # eq. 5's weight of the generated samples' loss (0: FedAvg)
    alpha_decay: float = Field(1.0, gt=0, le=1)  # alpha_t = max(1e-4, alpha decay^(t-1)) when below 1 (code: 0.98)
    beta: float = Field(0.0, ge=0)  # the code's third term (code: 10)
    beta_decay: float = Field(1.0, gt=0, le=1)
    start_round: int = Field(1, ge=1)  # the first round whose users are regularised (code: 2)
    noise: Literal["gaussian", "uniform"] = "gaussian"
    labels: Literal["prior", "available"] = "prior"
    teacher: Literal["mean_logits", "counts", "counts_code"] = "mean_logits"
    noise_dim: Dim = Field(32, ge=1)  # d_eps
    hidden_dim: Dim = Field(256, ge=1)  # d_h
    diversity: float = Field(1.0, ge=0)  # eta, the diversity loss's weight
    gen_steps: int = Field(50, ge=0)
    gen_batch_size: BatchSize = Field(32, ge=2)
    gen_lr: float = Field(3e-4, gt=0)
    gen_weight_decay: float = Field(1e-2, ge=0)
    gen_lr_decay: float = Field(0.98, gt=0, le=1)


@dataclass
class FedGenUpload:
    """theta_k (or with ``share: head`` its head, a HeadUpload) and c_k, the labels of the samples its
    local steps drew."""

    weights: Any
    label_counts: np.ndarray


def decayed(weight: float, decay: float, round: int) -> float:
    """weight decay^(t-1), floored at 1e-4 as the code does, when there is a decay."""
    return weight if decay == 1.0 or weight == 0 else max(1e-4, weight * decay ** (round - 1))


def seen_labels(y: torch.Tensor, num_classes: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """c_k: the labels of the batches ``local_train`` draws with ``seed`` (the same order, replayed)."""
    counts = torch.zeros(num_classes, dtype=torch.int64)
    for idx in batch_indices(len(y), batch_size, steps, torch.Generator().manual_seed(seed)):
        counts += torch.bincount(y[idx.to(y.device)].cpu(), minlength=num_classes)
    return counts.numpy()


class FedGenClient(HeadSharingClient):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._gen: Optional[Generator] = None

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        theta, gen = downloads
        client.scratch["generator"] = (gen["weights"], gen["prior"])  # (w, p^(y)) of this task
        return self.own_model(task, theta, client)

    def generator(self, arch: str, weights: Weights) -> Generator:
        """G_w on this host, fixed (eval mode: BatchNorm at the server's running statistics)."""
        if self._gen is None:
            model = self.model(arch)
            self._gen = Generator(model.num_classes, model.feature_dim, self.params.noise_dim,
                                  self.params.hidden_dim).to(self.device)
        set_weights(self._gen, weights)
        return self._gen.eval().requires_grad_(False)

    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        p = self.params
        weights, prior = client.scratch["generator"]
        alpha, beta = (decayed(p.alpha, p.alpha_decay, task.round), decayed(p.beta, p.beta_decay, task.round))
        if task.round < p.start_round or (alpha == 0 and beta == 0):
            return None
        gen = self.generator(task.arch, weights)
        prior = torch.from_numpy(prior).double()
        rng = torch.Generator().manual_seed(task.seed + 1)  # its own stream: batch order and dropout as FedAvg's

        def regulariser(m: torch.nn.Module, step: Batch) -> torch.Tensor:
            n = step.x.shape[0]  # B_G = B
            y_hat = draw_labels(n, prior, p.labels, rng).to(self.device)
            with torch.no_grad():
                z_hat = gen(draw_noise(n, p.noise_dim, p.noise, rng).to(self.device), y_hat)
            term = alpha * F.cross_entropy(m.head(z_hat), y_hat)  # eq. 5
            if beta > 0:  # the code: KL(softmax(h(G(y))) || p(.|x)) on the real batch's labels
                with torch.no_grad():
                    z_real = gen(draw_noise(n, p.noise_dim, p.noise, rng).to(self.device), step.y)
                    target = torch.softmax(m.head(z_real), dim=1)
                term = term + beta * F.kl_div(F.log_softmax(step.logits, dim=1), target, reduction="batchmean")
            return term

        return regulariser

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> FedGenUpload:
        model, cfg = self.model(task.arch), self.config.training
        counts = seen_labels(client.y, model.num_classes, cfg.batch_size, num_local_steps(len(client.x), cfg), task.seed)
        return FedGenUpload(self.share_weights(local.weights, client), counts)

    @classmethod
    def collected(cls, params: FedGenParams) -> dict[str, type]:
        """With ``teacher: mean_logits`` and whole models, FedAvg's theta_k and, for the generator step,
        theta_k^p and c_k, summed; otherwise each user's (the teacher of eq. 4 reads every head)."""
        if params.teacher == "mean_logits" and not shares_heads(params):
            return {"model": Sum, "head": Sum, "labels": Sum}
        return {"model": Each, "head": Each, "labels": Each, **({"body": Each} if shares_heads(params) else {})}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """theta_k (FedAvg's), theta_k^p and c_k, the last two with coefficient 1 where summed."""
        weights, counts = update.payload.weights, update.payload.label_counts
        if self.collected(self.params)["head"] is Sum:
            return {**super().statistics(replace(update, payload=weights), client),
                    "head": (1.0, {k: weights[k] for k in HEAD}), "labels": (1.0, counts)}
        weight = float(update.num_samples) if self.params.weighted else 1.0
        statistics = {"model": Each(shared(weights), weight), "head": Each({k: shared(weights)[k] for k in HEAD}),
                      "labels": Each(counts)}
        if shares_heads(self.params):
            statistics["body"] = Each(body_of(weights))
        return statistics


class FedGen(FedAvg):
    name = "fedgen"
    description = "FedGen: a server-trained generator of features regularises the clients' heads (data-free KD)"
    paper = ('Zhu, Hong, Zhou 2021, "Data-Free Knowledge Distillation for Heterogeneous Federated Learning", ICML; '
        "Alg. 1, eqs. 4-5")
    Params = FedGenParams
    Client = FedGenClient
    state_attrs = ("models", "bodies", "prior", "generator", "gen_optimizer")

    def __init__(self, params: FedGenParams, ctx: ServerContext):
        super().__init__(params, ctx)
        models = {arch: ctx.build_model(arch) for arch in ctx.architectures}
        sizes = {arch: getattr(m, "feature_dim", None) for arch, m in models.items()}
        if None in sizes.values() or len(set(sizes.values())) > 1:
            raise ConfigError(f"fedgen needs one feature size across architectures (the generator's output), got {sizes}; "
                              "set federation.model_options, e.g. cnn: {hidden: 32} and mlp: {hidden: [200, 32]}")
        model = next(iter(models.values()))
        self.num_classes, self.latent_dim = model.num_classes, model.feature_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.model_seed)
            self._gen = Generator(self.num_classes, self.latent_dim, params.noise_dim, params.hidden_dim).to(ctx.device)
        self._opt = torch.optim.Adam(self._gen.parameters(), lr=params.gen_lr, weight_decay=params.gen_weight_decay)
        self.prior = np.full(self.num_classes, 1.0 / self.num_classes)  # p^(y), uniform before any counts

    # generator weights and its optimiser's moments live in the module and optimiser; a checkpoint copies them
    @property
    def generator(self) -> Weights:
        return get_weights(self._gen)

    @generator.setter
    def generator(self, weights: Weights) -> None:
        set_weights(self._gen, weights)

    @property
    def gen_optimizer(self) -> dict[str, Any]:
        return copy.deepcopy(self._opt.state_dict())

    @gen_optimizer.setter
    def gen_optimizer(self, state: dict[str, Any]) -> None:
        self._opt.load_state_dict(state)

    def configure_round(self, round: int) -> RoundPlan:
        plan = super().configure_round(round)
        tasks = [replace(t, payload_keys=t.payload_keys + ("generator",)) for t in plan.tasks]
        broadcast = {**plan.broadcast, "generator": {"weights": self.generator, "prior": self.prior}}
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def aggregate(self, round: Round) -> dict[str, float]:
        """Eq. 4, then FedAvg's average per architecture. With ``mean_logits`` eq. 4's teacher is the
        mean head of the round's users, of every architecture (the generator is one); otherwise
        every user's head with its label counts."""
        if self.Client.collected(self.params)["head"] is Sum:
            sums = round.totals()
            archs = [arch for arch in self.ctx.architectures if arch in sums]  # the run's order, whoever answered first
            heads = [sums[arch]["head"] for arch in archs]
            users = sum(h.count for h in heads)
            mean = {k: np.add.reduce([h.value()[k] for h in heads]) / users for k in HEAD}
            counts = np.add.reduce([sums[arch]["labels"].value() for arch in archs])  # exact: integers in float64
            self.prior = counts / counts.sum()  # p^(y) from the users' counts
            weight, bias = (torch.from_numpy(mean[k].astype(np.float32))[None] for k in HEAD)  # one head: the mean
            stats = self.generator_step(round.number, weight, bias, torch.from_numpy(counts)[None])
        else:
            counts = torch.from_numpy(np.stack([i.value for i in round.each("labels")]).astype(np.float64))
            self.prior = (counts.sum(dim=0) / counts.sum()).numpy()  # p^(y) from the users' counts
            heads = [i.value for i in round.each("head")]
            weight = torch.stack([torch.from_numpy(h[HEAD[0]]) for h in heads])
            bias = torch.stack([torch.from_numpy(h[HEAD[1]]) for h in heads])
            stats = self.generator_step(round.number, weight, bias, counts)
        return {**super().aggregate(round), **stats}

    def generator_step(self, round: int, weight: torch.Tensor, bias: torch.Tensor,
                       counts: torch.Tensor) -> dict[str, float]:
        """w <- w - lr grad_w J(w) (eq. 4) against the heads (K, C, d), (K, C) and label counts (K, C)."""
        p, device = self.params, self.ctx.device
        for group in self._opt.param_groups:
            group["lr"] = p.gen_lr * p.gen_lr_decay ** (round - 1)
        rng = torch.Generator().manual_seed(task_seed(self.config.seed, round, 2**31 - 1))  # the server's own stream
        stats = train_generator(self._gen, self._opt, weight.to(device), bias.to(device),
                                counts.to(device=device, dtype=torch.float32), p.gen_steps, p.gen_batch_size, rng,
                                noise=p.noise, labels=p.labels, teacher=p.teacher,
                                diversity=p.diversity) if p.gen_steps else {}
        return {f"fedgen/{k}": v for k, v in stats.items()}
