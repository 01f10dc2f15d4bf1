"""Centralised baseline: the same model trained on the pooled data of all clients.

Each round is one call of the local training loop on the union of the clients' data (one pooled
client per architecture), so ``training.epochs`` epochs per round and the same optimiser settings
as the federated runs; the round count, logging and checkpoints are shared with them.
"""

from __future__ import annotations

from fedray.methods.fedavg import AveragingParams, FedAvg


class Central(FedAvg):
    name = "central"
    description = "Central: the pooled-data baseline, each architecture trained on all clients' data at once"
    paper = "no paper: the centralised reference, e.g. of thesis section 4.3 (Sattler 2021, TU Berlin)"
    Params = AveragingParams  # one pooled model: no ``share``, nothing to keep at home
    pools_data = True
