"""FedMMD: Yao, Huang, Sun, "Two-Stream Federated Learning: Reduce the Communication Costs", VCIP
2018 (with FedFusion in arXiv:1908.05891); MrTF's baseline [19].

Each selected client trains a two-stream model: the broadcast global model, frozen, beside the
local model that starts from it. The local objective adds the squared maximum mean discrepancy
between the two streams' outputs on the same batch,

    L_k(w) = CE(f(x; w), y) + lam * MMD^2_k( f(x; w), f(x; w^t) ),
    MMD^2_k(X, Y) = mean k(X, X) + mean k(Y, Y) - 2 mean k(X, Y)     (biased estimate, clipped at 0)

so the local model may fit its data but its outputs on that data may not drift away, as a
distribution, from what the global model says; the server averages as FedAvg does. lam = 0 is
FedAvg bit for bit.

The defaults follow the first author's released code (thu-media/TwoStreamFederatedLearning,
``losses.mmd_loss``): the streams compared at the logits, a sum of 19 Gaussian kernels
exp(-d^2 / (2 s)) with s from 1e-6 to 1e6 (``kernel: multi``), lam = 0.1. The MrTF authors' own
baseline (lxcnju/FedRepo, ``reg_way: fedmmd``) compares the penultimate features
(``layer: features``) with five Gaussian kernels exp(-d^2 / b) whose bandwidths b are the mean
pairwise squared distance of the joint batch times 2^-2 .. 2^2 (``kernel: adaptive``). The VCIP
text was not available to us; where it says otherwise, it wins.

The server step is FedAvg's, so the hosts fold the clients' models as FedAvg's (``fedray.fold``;
with ``share: head`` they do not, as FedAvg's); the logged MMD^2 is read off the clients' metrics.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, Optional

import torch
from pydantic import Field

from fedray.messages import ClientTask, ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HeadSharingClient
from fedray.round import Round
from fedray.training import Batch, ExtraLoss

# the widths s of the authors' multi-kernel: exp(-d^2 / (2 s)) summed over them
MULTI_WIDTHS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 5, 10, 15, 20, 25, 30, 35, 100, 1e3, 1e4, 1e5, 1e6)


def gaussian_sum(d2: torch.Tensor, kernel: str, joint: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The summed Gaussian kernels of squared distances ``d2``. ``kernel: adaptive`` sets its
    bandwidths from ``joint``, the squared distances within the joint sample (no gradient through them)."""
    if kernel == "multi":
        return sum(torch.exp(-d2 / (2.0 * s)) for s in MULTI_WIDTHS)
    n = joint.shape[0]
    base = joint.detach().sum() / (n * n - n) + 1e-8  # mean squared distance between distinct points
    return sum(torch.exp(-d2 / (base * 2.0 ** i)) for i in range(-2, 3))


def mmd2(x: torch.Tensor, y: torch.Tensor, kernel: Literal["multi", "adaptive"] = "multi") -> torch.Tensor:
    """Squared MMD between the samples ``x`` (n, D) and ``y`` (m, D): mean k(x, x') + mean k(y, y')
    - 2 mean k(x, y), the biased (V-statistic) estimate, clipped at 0 against rounding."""
    joint = torch.cat([x, y]).flatten(start_dim=1)
    # differences, not |a|^2 + |b|^2 - 2ab: the narrowest kernels (s = 1e-6) would amplify its rounding
    d2 = (joint[:, None, :] - joint[None, :, :]).pow(2).sum(dim=-1)
    k = gaussian_sum(d2, kernel, d2)
    n = x.shape[0]
    value = k[:n, :n].mean() + k[n:, n:].mean() - 2.0 * k[:n, n:].mean()
    return value.clamp_min(0.0)


class FedMMDParams(FedAvgParams):
    lam: float = Field(0.1, ge=0)  # the MMD term's weight
    layer: Literal["logits", "features"] = "logits"  # where the two streams are compared
    kernel: Literal["multi", "adaptive"] = "multi"


class FedMMDClient(HeadSharingClient):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._frozen: dict[str, torch.nn.Module] = {}  # the global stream, one per architecture
        self._mmd: list[float] = []  # the running task's MMD^2 per step, for the logs

    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        p = self.params
        self._mmd = []
        if p.lam == 0:
            return None
        frozen = self._frozen.get(task.arch)
        if frozen is None:
            frozen = self._frozen[task.arch] = copy.deepcopy(model).requires_grad_(False)
        frozen.load_state_dict(model.state_dict())  # w^t, the broadcast model
        frozen.eval()  # the fixed stream: no dropout, BatchNorm at its running statistics

        def discrepancy(m: torch.nn.Module, step: Batch) -> torch.Tensor:
            with torch.no_grad():
                target = frozen.features(step.x) if p.layer == "features" else frozen(step.x)
            local = step.features if p.layer == "features" else step.logits
            value = mmd2(local, target, p.kernel)
            self._mmd.append(float(value.detach()))
            return p.lam * value

        discrepancy.needs_features = p.layer == "features"
        return discrepancy

    def train(self, task: ClientTask, theta: Any, client: Any) -> Any:
        local = super().train(task, theta, client)
        if self._mmd:
            local.metrics["mmd"] = sum(self._mmd) / len(self._mmd)
        return local


class FedMMD(FedAvg):
    name = "fedmmd"
    description = "FedMMD: local loss plus lam MMD^2 between the local and the frozen global model's outputs"
    paper = ('Yao, Huang, Sun 2018, "Two-Stream Federated Learning: Reduce the Communication Costs", IEEE VCIP; '
        "defaults from the code of the first author")
    Params = FedMMDParams
    Client = FedMMDClient

    def aggregate(self, round: Round) -> dict[str, float]:
        return {**super().aggregate(round), **mean_mmd(round.updates)}


def mean_mmd(updates: list[ClientUpdate]) -> dict[str, float]:
    """``fedmmd/mmd``: the clients' mean MMD^2 over their steps (none when lam = 0)."""
    values = [u.metrics["mmd"] for u in updates if "mmd" in u.metrics]
    return {"fedmmd/mmd": sum(values) / len(values)} if values else {}
