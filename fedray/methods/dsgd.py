"""Distributed SGD: thesis Algorithm 1 (p. 16).

    for t = 1..T:
        each client i samples a batch D_b^i from D_i and computes g_i = grad l(theta, D_b^i)
        all-reduce: g = 1/M sum_i g_i
        theta <- theta - eta * g

eta is ``training.lr``; the batch size is ``training.batch_size``. The sum runs over the clients of
the round (all M when ``clients_per_round == num_clients``, the thesis setting). Buffers such as
BatchNorm statistics are not gradients: they are averaged from the clients' forward passes.

The all-reduce is a sum, so the hosts fold sum_i g_i and the buffers' sum (``fedray.fold``;
``DSGDClient.statistics``) and no gradient reaches the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from fedray.config import Config
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate
from fedray.methods.base import Client, Gradient, Params, Strategy, VirtualClient
from fedray.round import Round, Statistics
from fedray.training import batch_indices
from fedray.weights import Weights, set_weights


@dataclass(frozen=True)
class GradientUpload:
    grad: Weights
    buffers: Weights  # BatchNorm statistics of the forward pass (empty for models without buffers)


class DSGDClient(Client):
    """g_i = grad l(theta, D_b^i) on one mini-batch; uploads g_i and the buffers."""

    update_kind = Gradient

    def train(self, task: ClientTask, theta: Weights, client: VirtualClient) -> Gradient:
        model = self.model(task.arch)
        set_weights(model, theta)
        model.train()
        generator = torch.Generator().manual_seed(task.seed)
        torch.manual_seed(task.seed)
        idx = next(batch_indices(client.num_samples, self.config.training.batch_size, 1, generator))
        idx = idx.to(client.x.device)
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(client.x[idx]), client.y[idx])
        loss.backward()
        grads = {n: p.grad.detach().cpu().numpy().copy() for n, p in model.named_parameters()}
        buffers = {n: b.detach().cpu().numpy().copy() for n, b in model.named_buffers()}
        return Gradient(grads, buffers, {"loss": float(loss.detach()), "steps": 1.0})

    def upload(self, task: ClientTask, theta: Weights, local: Gradient, client: VirtualClient) -> GradientUpload:
        return GradientUpload(local.grad, local.buffers)

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"grad": Sum, "buffers": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """g_i and the buffers, each with c_i = 1 (the all-reduce's sum; a model without buffers has
        an empty one)."""
        return {"grad": (1.0, update.payload.grad), "buffers": (1.0, update.payload.buffers)}


class DSGD(Strategy):
    name = "dsgd"
    description = "Distributed SGD: each client computes one mini-batch gradient, the server steps on their mean"
    paper = ('Sattler 2021, PhD thesis "Concepts for Efficient, Adaptive and Robust Deep Learning from Distributed '
        'Data", TU Berlin; Alg. 1')
    Params = Params
    Client = DSGDClient

    @classmethod
    def config_problem(cls, config: Config, params: Params) -> Optional[str]:
        """Clients take no local step (they send a gradient): a decay of the local lr would do nothing."""
        if config.training.lr_decay != 1:
            return (f"bad config value training.lr_decay = {config.training.lr_decay}: dsgd's clients send one "
                    "gradient and take no local step; the server steps with training.lr")
        return None

    def aggregate(self, round: Round) -> dict[str, float]:
        eta = self.config.training.lr
        buffers = round.mean("buffers")
        for arch, g in round.mean("grad").items():  # 1/M sum_i g_i
            model = dict(self.models[arch])
            for name, grad in g.items():
                model[name] = (model[name] - eta * grad).astype(model[name].dtype)  # theta - eta g
            model.update(buffers[arch])
            self.models[arch] = model
        return round.mean_loss()
