"""Federated Averaging: thesis Algorithm 2 (p. 16); McMahan et al., AISTATS 2017.

    for t = 1..T:
        server selects I_t (a fraction C of the clients) and broadcasts theta     # configure_round
        theta_i <- SGD_E(theta, D_i)   for i in I_t                                # FedAvgClient.run
        theta   <- 1/|I_t| sum_i theta_i                                           # aggregate

Alg. 2 averages unweighted; ``weighted: true`` weights by |D_i| as Alg. 10/15 and McMahan et al. do.
Averaging happens within an architecture: one global model per architecture.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from fedray.algorithms.base import ClientAlgorithm, Params, Strategy, VirtualClient
from fedray.messages import ClientTask, ClientUpdate
from fedray.training import ExtraLoss
from fedray.weights import nbytes, weighted_mean


class FedAvgParams(Params):
    weighted: bool = False


class FedAvgClient(ClientAlgorithm):
    """theta_i <- SGD_E(theta, D_i); uploads theta_i."""

    def extra_loss(self, model: torch.nn.Module, task: ClientTask) -> ExtraLoss | None:
        """An additional term of the local objective (none for FedAvg)."""
        return None

    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        weights, stats = self.train_local(task, payloads[task.payload_keys[0]], client,
                                          lambda model: self.extra_loss(model, task))
        stats["time_s"] = time.perf_counter() - start
        return ClientUpdate(client.client_id, task.arch, client.num_samples, weights, nbytes(weights), stats)


def group_by_arch(updates: list[ClientUpdate]) -> dict[str, list[ClientUpdate]]:
    groups: dict[str, list[ClientUpdate]] = defaultdict(list)
    for update in sorted(updates, key=lambda u: u.client_id):
        groups[update.arch].append(update)
    return dict(groups)


def mean_client_loss(updates: list[ClientUpdate]) -> dict[str, float]:
    losses = [u.metrics["loss"] for u in updates if not np.isnan(u.metrics["loss"])]  # Byzantine: nan
    return {"train/loss": float(np.mean(losses))} if losses else {}


class FedAvg(Strategy):
    name = "fedavg"
    Params = FedAvgParams
    Client = FedAvgClient

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, group in group_by_arch(updates).items():
            coefficients = [u.num_samples if self.params.weighted else 1.0 for u in group]
            self.models[arch] = weighted_mean([u.payload for u in group], coefficients)
        return mean_client_loss(updates)
