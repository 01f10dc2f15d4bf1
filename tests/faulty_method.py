"""A method whose clients fail deep inside their upload step, to test how failures are reported.

It lives in a module of its own so that Ray's worker processes can import it by name.
"""

from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HeadSharingClient
from fedray.resolve import Method


def shares(total: int, parts: int) -> float:
    return total / parts  # parts is 0 here: ZeroDivisionError


def scaled(weights, samples: int):
    per_sample = shares(1, samples - samples)
    return {name: value * per_sample for name, value in weights.items()}


class FaultyClient(HeadSharingClient):  # FedAvg's client, whose upload fails
    def upload(self, task, theta, local, client):
        return scaled(local.weights, client.num_samples)


class Faulty(FedAvg):
    name = "faulty"
    Client = FaultyClient


FAULTY = Method(Faulty, FedAvgParams())
FAILING_LINE = "return total / parts"


POISONED = (1, 4)  # the clients of ``NAN_CLIENTS`` whose updates are all NaN, from round POISONED_FROM on
POISONED_FROM = 1


class NanClient(HeadSharingClient):
    """FedAvg's client, except that clients ``POISONED`` upload NaN in every tensor. Its host sums
    the others' statistics (``fedray.fold``) and flags these; ``runtime.fold: false`` gathers them all."""

    def upload(self, task, theta, local, client):
        if client.client_id in POISONED and task.round >= POISONED_FROM:
            return {name: value * float("nan") for name, value in local.weights.items()}
        return local.weights


class NanClients(FedAvg):
    name = "nan_clients"
    Client = NanClient


NAN_CLIENTS = Method(NanClients, FedAvgParams())


class LateNanClient(HeadSharingClient):
    """FedAvg's client, except that every client uploads NaN from round 2 on: a run of
    ``DivergesInRound2`` diverges in round 2, after one good round."""

    def upload(self, task, theta, local, client):
        if task.round >= 2:
            return {name: value * float("nan") for name, value in local.weights.items()}
        return local.weights


class DivergesInRound2(FedAvg):
    name = "diverges_in_round_2"
    Client = LateNanClient
