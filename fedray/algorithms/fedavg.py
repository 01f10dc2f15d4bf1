"""Federated Averaging: thesis Algorithm 2 (p. 16); McMahan et al., AISTATS 2017.

    for t = 1..T:
        server selects I_t (a fraction C of the clients) and broadcasts theta     # configure_round
        theta_i <- SGD_E(theta, D_i)   for i in I_t                                # ClientAlgorithm.train
        theta   <- 1/|I_t| sum_i theta_i                                           # aggregate

The client half is the default ``ClientAlgorithm`` (as ``HeadSharingClient``): it trains the
broadcast model and uploads theta_i, which its host folds into sum_i c_i theta_i (``fedray.fold``). Alg. 2 averages unweighted; ``weighted: true`` weights by |D_i| as Alg. 10/15 and
McMahan et al. do. Averaging happens within an architecture: one global model per architecture.

``share: head`` shares only the last, linear layer (FedGen's Table 4, :mod:`fedray.algorithms.head_sharing`):
each client keeps its own feature extractor in its state, the server averages and broadcasts the
heads and scores the round's clients' own extractors under the new heads. FedProx, FedMMD, FedGen
and FedDistill+ inherit it; central, FedOpt and FedEnsemble build on FedAvg with whole models
(their parameters are :class:`AveragingParams`, which has no ``share``).
"""

from __future__ import annotations

from fedray.algorithms.base import Params
from fedray.algorithms.head_sharing import (HeadSharingClient, HeadSharingParams, HeadSharingStrategy, shared,
                                           shares_heads)
from fedray.algorithms.helpers import group_by_arch, mean_client_loss, sample_weights
from fedray.fold import Sums
from fedray.messages import ClientUpdate
from fedray.weights import weighted_mean


class AveragingParams(Params):
    weighted: bool = False


class FedAvgParams(AveragingParams, HeadSharingParams):
    """FedAvg's: ``weighted`` and ``share``."""


class FedAvg(HeadSharingStrategy):
    name = "fedavg"
    description = "FedAvg: clients train locally, the server averages their weights (by data size if weighted)"
    paper = ('McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from Decentralized Data", '
        "AISTATS; as thesis Alg. 2 (Sattler 2021, TU Berlin)")
    Params = FedAvgParams
    Client = HeadSharingClient  # theta_i <- SGD_E(theta, D_i); upload theta_i (or its head)
    state_attrs = ("models", "bodies")

    @property
    def folds(self) -> bool:
        return super().folds and not shares_heads(self.params)  # with share: head the server keeps each client's body

    def aggregate_sums(self, round: int, sums: Sums, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, named in sums.items():  # theta <- sum_i c_i theta_i / sum_i c_i, folded on the hosts
            self.models[arch] = {**self.models[arch], **named["model"].mean()}
        return mean_client_loss(updates)

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        if self.folds:
            return super().aggregate(round, updates)
        for arch, group in group_by_arch(updates).items():
            mean = weighted_mean([shared(u.payload) for u in group], sample_weights(group, self.params.weighted))
            self.models[arch] = {**self.models[arch], **mean}
        self.keep_bodies(updates)
        return mean_client_loss(updates)
