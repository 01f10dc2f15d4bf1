"""Federated Averaging: thesis Algorithm 2 (p. 16); McMahan et al., AISTATS 2017.

    for t = 1..T:
        server selects I_t (a fraction C of the clients) and broadcasts theta     # configure_round
        theta_i <- SGD_E(theta, D_i)   for i in I_t                                # Client.train
        theta   <- 1/|I_t| sum_i theta_i                                           # aggregate

The client half is the default ``Client`` (as ``HeadSharingClient``): it trains the
broadcast model and uploads theta_i, whose statistic is the term (c_i, theta_i) of sum_i c_i theta_i (``fedray.round``). Alg. 2 averages unweighted; ``weighted: true`` weights by |D_i| as Alg. 10/15 and
McMahan et al. do. Averaging happens within an architecture: one global model per architecture.

``share: head`` shares only the last, linear layer (FedGen's Table 4, :mod:`fedray.methods.head_sharing`):
each client keeps its own feature extractor in its state, the server averages and broadcasts the
heads and scores the round's clients' own extractors under the new heads. FedProx, FedMMD, FedGen
and FedDistill+ inherit it; central, FedOpt and FedEnsemble build on FedAvg with whole models
(their parameters are :class:`AveragingParams`, which has no ``share``).
"""

from __future__ import annotations

from fedray.messages import ClientUpdate
from fedray.methods.base import Params, VirtualClient
from fedray.methods.head_sharing import HeadSharingClient, HeadSharingParams, HeadSharingStrategy
from fedray.round import Each, Round, Statistics


class AveragingParams(Params):
    weighted: bool = False


class FedAvgParams(AveragingParams, HeadSharingParams):
    """FedAvg's: ``weighted`` and ``share``."""


class EachModelClient(HeadSharingClient):
    """FedAvg's client whose model reaches the server on its own (an ``Each`` statistic, weight c_i
    = |D_i| with ``weighted``, else 1): for a server step that needs every model, such as an
    ensemble of them or a robust aggregator (``round.each("model")``); FedAvg's ``round.mean``
    is then their weighted mean."""

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"model": Each}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        weight = float(update.num_samples) if getattr(self.params, "weighted", False) else 1.0
        return {"model": Each(update.payload, weight)}


class FedAvg(HeadSharingStrategy):
    name = "fedavg"
    description = "FedAvg: clients train locally, the server averages their weights (by data size if weighted)"
    paper = ('McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from Decentralized Data", '
        "AISTATS; as thesis Alg. 2 (Sattler 2021, TU Berlin)")
    Params = FedAvgParams
    Client = HeadSharingClient  # theta_i <- SGD_E(theta, D_i); upload theta_i (or its head)
    state_attrs = ("models", "bodies")

    def aggregate(self, round: Round) -> dict[str, float]:
        for arch, mean in round.mean("model").items():  # theta <- sum_i c_i theta_i / sum_i c_i
            self.models[arch] = {**self.models[arch], **mean}
        self.keep_bodies(round)
        return round.mean_loss()
