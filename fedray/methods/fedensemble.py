"""FedEnsemble, FedGen's ensemble baseline (Zhu et al. 2021, section 6.1): FedAvg's training, but
the answer is the ensemble of every user's latest local model, scored by the mean of their logits
(the paper: "ensembles the prediction outputs of all user models"; a user is in once it has
trained). ``eval/accuracy`` is the ensemble's; ``eval/accuracy_global`` the averaged model's.

Its clients hand back their models one by one (an ``Each`` statistic, ``fedray.round``): the
ensemble keeps every user's latest model, which no sum over the round's clients gives. Summing the
averaged model on the hosts as well would save nothing (the same models reach the server anyway),
so it is averaged there.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from fedray.distill.ensemble import predict_logits
from fedray.methods.base import ServerContext
from fedray.methods.fedavg import AveragingParams, EachModelClient, FedAvg
from fedray.round import Round
from fedray.weights import Weights, set_weights


class FedEnsemble(FedAvg):
    name = "fedensemble"
    description = "FedEnsemble: FedAvg's training, scored by the mean logits of every user's latest model"
    paper = ('Zhu, Hong, Zhou 2021, "Data-Free Knowledge Distillation for Heterogeneous Federated Learning", ICML, '
        "section 6.1 (a baseline)")
    Params = AveragingParams  # no ``share``: it scores whole models
    Client = EachModelClient  # every model reaches the server on its own
    state_attrs = ("models", "latest")

    def __init__(self, params: AveragingParams, ctx: ServerContext):
        super().__init__(params, ctx)
        if ctx.test_x is None:
            raise ValueError("fedensemble scores its ensemble on the test set, but the server has none")
        self.latest: dict[int, tuple[str, Weights]] = {}  # client -> (arch, its last local model)
        self._test = None
        self._work: dict[str, torch.nn.Module] = {}

    def aggregate(self, round: Round) -> dict[str, float]:
        self.latest.update({i.client_id: (i.arch, i.value) for i in round.each("model")})
        return super().aggregate(round)

    @torch.inference_mode()
    def evaluate(self, evaluate_model: Callable[[str, Weights, int], dict[str, float]]) -> dict[str, float]:
        out = super().evaluate(evaluate_model)
        if not self.latest:
            return out
        if self._test is None:
            self._test = (torch.from_numpy(np.ascontiguousarray(self.ctx.test_x)).to(self.ctx.device),
                          torch.from_numpy(np.ascontiguousarray(self.ctx.test_y)).to(self.ctx.device))
        x, y = self._test
        total = None
        for _, (arch, weights) in sorted(self.latest.items()):
            if arch not in self._work:
                self._work[arch] = self.ctx.build_model(arch).to(self.ctx.device)
            set_weights(self._work[arch], weights)
            logits = predict_logits(self._work[arch], x)
            total = logits if total is None else total + logits
        mean = total / len(self.latest)
        out["eval/accuracy_global"] = out["eval/accuracy"]
        out["eval/accuracy"] = float((mean.argmax(dim=1) == y).float().mean())
        out["eval/loss"] = float(torch.nn.functional.cross_entropy(mean, y))
        return out
