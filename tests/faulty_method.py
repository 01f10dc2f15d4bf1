"""A method whose clients fail deep inside their upload step, to test how failures are reported.

It lives in a module of its own so that Ray's worker processes can import it by name.
"""

from fedray.algorithms.base import ClientAlgorithm
from fedray.algorithms.fedavg import FedAvg, FedAvgParams
from fedray.experiment import Method


def shares(total: int, parts: int) -> float:
    return total / parts  # parts is 0 here: ZeroDivisionError


def scaled(weights, samples: int):
    per_sample = shares(1, samples - samples)
    return {name: value * per_sample for name, value in weights.items()}


class FaultyClient(ClientAlgorithm):
    def upload(self, task, theta, local, client):
        return scaled(local.weights, client.num_samples)


class Faulty(FedAvg):
    name = "faulty"
    Client = FaultyClient


FAULTY = Method(Faulty, FedAvgParams())
FAILING_LINE = "return total / parts"
