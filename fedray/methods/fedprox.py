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

from fedray.cohort import StackedLoss
from fedray.messages import ClientTask
from fedray.methods.base import VirtualClient
from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HeadSharingClient
from fedray.training import ExtraLoss


class FedProxParams(FedAvgParams):
    mu: float = Field(0.01, ge=0)


class FedProxClient(HeadSharingClient):
    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        if self.params.mu == 0:
            return None
        anchor = [p.detach().clone() for p in model.parameters()]  # w^t, the broadcast model
        return lambda m, step: proximal(self.params.mu, list(m.parameters()), anchor)

    def stacked_loss(self) -> Optional[StackedLoss]:
        """The same term for a cohort: over stacked tensors, the sum of every client's term."""
        if self.params.mu == 0:
            return None
        return lambda params, start: proximal(self.params.mu, list(params.values()), list(start.values()))


def proximal(mu: float, params: list[torch.Tensor], anchor: list[torch.Tensor]) -> torch.Tensor:
    """(mu / 2) ||w - w^t||^2, the proximal term of Li et al.'s eq. 2."""
    return 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))


class FedProx(FedAvg):
    name = "fedprox"
    description = "FedProx: FedAvg with a proximal term mu/2 ||w - w^t||^2 in each client's local objective"
    paper = 'Li et al. 2020, "Federated Optimization in Heterogeneous Networks", MLSys; Alg. 2, eq. 2'
    Params = FedProxParams
    Client = FedProxClient
