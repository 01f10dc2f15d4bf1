"""SCAFFOLD: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Algorithm 1. A baseline of MrTF (its reference [20]).

The server keeps a control variate c, each client its own c_i (both start at 0). Per round:

    client i in S:   y_i <- x;  K times: y_i <- y_i - eta_l (g_i(y_i) - c_i + c)      # lines 7-10
                     c_i^+ <- g_i(x)                                   (option I)      # line 12
                          or c_i - c + (x - y_i) / (K eta_l)           (option II)
                     send (y_i - x, c_i^+ - c_i);  c_i <- c_i^+                          # lines 13-14
    server:          x <- x + eta_g / |S| sum_i (y_i - x)                                # line 16
                     c <- c + 1 / N sum_{i in S} (c_i^+ - c_i)                           # line 17

The correction c - c_i enters local training as the linear term <c - c_i, y> added to the loss, so
its gradient is exactly c - c_i at every step (with plain SGD this is line 10; with momentum or
weight decay the correction goes through the optimiser like the gradient). The control variates
cover the model's parameters; buffers (BatchNorm statistics) are averaged as in FedAvg. Both
directions carry a model and a control variate: twice FedAvg's bytes, as the paper notes.

Lines 16 and 17 need the round's clients only through sum_i y_i and sum_i (c_i^+ - c_i), so the
hosts fold them (``fedray.fold``; ``ScaffoldClient.statistics``) and no upload reaches the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from fedray.config import Config
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, Params, ServerContext, Strategy, Trained, VirtualClient, task_seed
from fedray.round import Round, Statistics
from fedray.training import Batch, ExtraLoss, batch_indices
from fedray.weights import Weights, set_weights


class ScaffoldParams(Params):
    server_lr: float = Field(1.0, gt=0)  # eta_g; 1 in the paper's experiments
    control: Literal["II", "I"] = "II"  # how c_i^+ is computed (line 12); the paper's experiments use II


@dataclass
class ScaffoldUpload:
    """y_i and c_i^+ - c_i (line 13; y_i - x is formed on the server, which holds x)."""

    weights: Weights
    control_delta: Weights


def zeros_like_parameters(model: torch.nn.Module) -> Weights:
    return {name: np.zeros(tuple(p.shape), np.float32) for name, p in model.named_parameters()}


class ScaffoldClient(Client):
    stateful = True  # c_i stays on the client's home host and is checkpointed with it

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        theta, control = downloads
        own = client.state.get("control") or zeros_like_parameters(self.model(task.arch))
        client.scratch["controls"] = (control, own)  # (c, c_i) of this task
        return theta

    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        """<c - c_i, y>: its gradient is the correction of line 10."""
        control, own = client.scratch["controls"]
        correction = {name: torch.from_numpy(control[name] - own[name]).to(self.device) for name in control}

        def corrected(m: torch.nn.Module, step: Batch) -> torch.Tensor:
            return sum((p * correction[name]).sum() for name, p in m.named_parameters())

        return corrected

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> ScaffoldUpload:
        control, own = client.scratch["controls"]
        if self.params.control == "I":  # g_i(x): the full local gradient at the server model
            new = self.full_gradient(task.arch, theta, client)
        else:  # c_i - c + (x - y_i) / (K eta_l)
            scale = 1.0 / (local.metrics["steps"] * self.training(task).lr)  # the eta_l it trained with
            new = {name: (own[name] - control[name] + scale * (theta[name] - local.weights[name])).astype(np.float32)
                   for name in own}
        client.state["control"] = new
        return ScaffoldUpload(local.weights, {name: new[name] - own[name] for name in new})

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"model": Sum, "control": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """y_i (line 16; its buffers too) and c_i^+ - c_i (line 17), each with c_i = 1."""
        return {"model": (1.0, update.payload.weights), "control": (1.0, update.payload.control_delta)}

    def full_gradient(self, arch: str, theta: Weights, client: VirtualClient) -> Weights:
        """The mean gradient of the local loss over all of D_i at x (option I), batch by batch."""
        model = self.model(arch)
        set_weights(model, theta)
        model.train()
        model.zero_grad(set_to_none=True)
        size = self.config.training.batch_size
        steps = -(-len(client.x) // size)
        for idx in batch_indices(len(client.x), size, steps, torch.Generator().manual_seed(0)):
            idx = idx.to(client.x.device)
            (F.cross_entropy(model(client.x[idx]), client.y[idx], reduction="sum") / len(client.x)).backward()
        return {name: p.grad.detach().cpu().numpy().astype(np.float32) for name, p in model.named_parameters()}


class Scaffold(Strategy):
    name = "scaffold"
    description = "SCAFFOLD: server and client control variates correct the clients' drift in local training"
    paper = ('Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", ICML; Alg. '
        "1 (control variates by option II or I)")
    Params = ScaffoldParams
    Client = ScaffoldClient
    state_attrs = ("models", "controls")

    @classmethod
    def config_problem(cls, config: Config, params: ScaffoldParams) -> Optional[str]:
        """Option II reads the control variate off the model's change as if the K steps were plain SGD
        of size eta_l; with momentum or Adam the change is larger, c_i too large, and training diverges
        (to chance accuracy in 20 rounds with momentum 0.9 on Fashion-MNIST)."""
        t = config.training
        if params.control == "II" and t.optimizer != "sgd":
            return (f"bad config value training.optimizer = {t.optimizer!r}: scaffold's control variates (option II) "
                    "assume plain local SGD; set training.optimizer=sgd, or algorithm.control=I")
        if params.control == "II" and t.momentum > 0:
            return (f"bad config value training.momentum = {t.momentum}: scaffold's control variates (option II) "
                    "assume plain local SGD; set training.momentum=0, or algorithm.control=I")
        return None

    def __init__(self, params: ScaffoldParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.controls: dict[str, Weights] = {arch: zeros_like_parameters(ctx.build_model(arch))
                                             for arch in ctx.architectures}

    def configure_round(self, round: int) -> RoundPlan:
        clients = self.sample_clients(round)
        broadcast = {}
        for c in clients:
            broadcast[f"model/{c.arch}"], broadcast[f"control/{c.arch}"] = self.models[c.arch], self.controls[c.arch]
        tasks = [ClientTask(c.client_id, round, c.arch, (f"model/{c.arch}", f"control/{c.arch}"),
                            task_seed(self.config.seed, round, c.client_id))
                 for c in clients]
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def aggregate(self, round: Round) -> dict[str, float]:
        clients_of = {arch: sum(1 for c in self.ctx.clients if c.arch == arch) for arch in self.models}
        deltas = round.total("control")
        for arch, y in round.total("model").items():
            x, c = self.models[arch], self.controls[arch]
            model, total = y.mean(), y.value()  # buffers: the clients' mean
            for name in c:  # line 16 for the parameters: x + eta_g (1/|S| sum_i y_i - x)
                model[name] = (x[name] + self.params.server_lr * (total[name] / y.count - x[name])).astype(x[name].dtype)
            self.models[arch] = model
            # line 17: c + 1/N sum_{i in S} (c_i^+ - c_i), N this architecture's clients
            delta_c = deltas[arch].value()
            self.controls[arch] = {name: (c[name] + delta_c[name] / clients_of[arch]).astype(np.float32) for name in c}
        return round.mean_loss()
