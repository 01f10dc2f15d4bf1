"""FedProx: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, Algorithm 2.

Each selected client approximately minimises the proximal local objective (eq. 2 of the paper)

    h_k(w; w^t) = F_k(w) + mu/2 * ||w - w^t||^2

with the local optimiser, starting from the broadcast w^t; the server averages as FedAvg does.
Only the client objective differs from FedAvg, so only that hook is overridden. mu = 0 is FedAvg.
"""

from __future__ import annotations

from typing import Optional

import torch
from pydantic import Field

from fedray.algorithms.base import ClientAlgorithm
from fedray.algorithms.fedavg import FedAvg, FedAvgParams
from fedray.messages import ClientTask
from fedray.training import ExtraLoss, Step


class FedProxParams(FedAvgParams):
    mu: float = Field(0.01, ge=0)


class FedProxClient(ClientAlgorithm):
    def extra_loss(self, model: torch.nn.Module, task: ClientTask) -> Optional[ExtraLoss]:
        mu = self.params.mu
        if mu == 0:
            return None
        anchor = [p.detach().clone() for p in model.parameters()]  # w^t, the broadcast model

        def proximal(m: torch.nn.Module, step: Step) -> torch.Tensor:
            return 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(m.parameters(), anchor))

        return proximal


class FedProx(FedAvg):
    name = "fedprox"
    Params = FedProxParams
    Client = FedProxClient
