"""Federated Averaging: thesis Algorithm 2 (p. 16); McMahan et al., AISTATS 2017.

    for t = 1..T:
        server selects I_t (a fraction C of the clients) and broadcasts theta     # configure_round
        theta_i <- SGD_E(theta, D_i)   for i in I_t                                # ClientAlgorithm.train
        theta   <- 1/|I_t| sum_i theta_i                                           # aggregate

The client half is the default ``ClientAlgorithm``: it trains the broadcast model and uploads
theta_i. Alg. 2 averages unweighted; ``weighted: true`` weights by |D_i| as Alg. 10/15 and
McMahan et al. do. Averaging happens within an architecture: one global model per architecture.
"""

from __future__ import annotations

from fedray.algorithms.base import ClientAlgorithm, Params, Strategy
from fedray.algorithms.helpers import group_by_arch, mean_client_loss, sample_weights
from fedray.messages import ClientUpdate
from fedray.weights import weighted_mean


class FedAvgParams(Params):
    weighted: bool = False


class FedAvg(Strategy):
    name = "fedavg"
    Params = FedAvgParams
    Client = ClientAlgorithm  # theta_i <- SGD_E(theta, D_i); upload theta_i

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, group in group_by_arch(updates).items():
            self.models[arch] = weighted_mean([u.payload for u in group], sample_weights(group, self.params.weighted))
        return mean_client_loss(updates)
