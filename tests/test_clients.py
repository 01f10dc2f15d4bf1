"""ClientHost: home clients keep data and state; visitors are served only for stateless methods."""

import numpy as np
import pytest
import torch

from fedray.algorithms.base import task_seed
from fedray.algorithms.base import ClientAlgorithm
from fedray.clients import ClientHost
from fedray.config import build_config
from fedray.experiment import resolve
from fedray.messages import ClientFailure, ClientSpec, ClientTask
from fedray.models import create_model
from fedray.weights import get_weights


@pytest.fixture
def host_and_task():
    config = build_config({"federation": {"num_clients": 2, "clients_per_round": 1, "architectures": {"logreg": 2}},
                           "data": {"dataset": "iris"}, "runtime": {"torch_threads": 1}})
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    specs = [ClientSpec(0, "logreg", np.arange(10)), ClientSpec(1, "logreg", np.arange(10, 20))]
    torch.manual_seed(0)
    weights = get_weights(create_model("logreg", (4,), 3))
    host = ClientHost(config, resolve(config), specs, x, y, num_classes=3, home=[0])
    task = ClientTask(1, 1, "logreg", ("model/logreg",), task_seed(0, 1, 1))
    return host, task, weights, (x, y)


def test_home_clients_hold_their_shard(host_and_task):
    host, _, _, (x, _) = host_and_task
    assert host.hosted() == [0]
    assert torch.equal(host.clients[0].x, torch.from_numpy(x[:10]))


def test_visitor_of_a_stateless_method_trains_on_its_own_shard(host_and_task):
    host, task, weights, _ = host_and_task
    update = host.run(task, weights)
    assert update.client_id == 1 and update.num_samples == 10
    assert 1 not in host.client_states()  # nothing of the visitor stays behind
    config = host.algorithm.config
    home = ClientHost(config, resolve(config), list(host.specs.values()), host.train_x, host.train_y, 3, home=[1])
    again = home.run(task, weights)  # the same task on the client's home host: the same result
    for name in update.payload:
        np.testing.assert_array_equal(update.payload[name], again.payload[name])


def test_visitor_of_a_stateful_method_is_refused(host_and_task, monkeypatch):
    host, task, weights, _ = host_and_task
    monkeypatch.setattr(ClientAlgorithm, "stateful", True)
    with pytest.raises(ClientFailure, match="client 1 failed in round 1 during dispatch: client is not hosted here"):
        host.run(task, weights)


def test_a_failing_client_names_itself_its_round_and_stage(host_and_task):
    host, task, _, _ = host_and_task
    wrong = get_weights(create_model("logreg", (4,), 5))  # a model for 5 classes, not 3
    with pytest.raises(ClientFailure, match=r"client 1 failed in round 1 during local training: RuntimeError"):
        host.run(task, wrong)
