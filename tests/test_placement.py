import numpy as np
import pytest

from actors.placement import assign_clients, num_client_actors
from fedray.config import RuntimeConfig
from fedray.messages import ClientSpec


def test_auto_uses_one_actor_per_cpu_slot():
    rt = RuntimeConfig(clients_per_actor="auto", actor_cpus=1)
    assert num_client_actors(100, rt, cpus=2, gpus=0) == 2
    assert num_client_actors(3, RuntimeConfig(actor_cpus=0.5), cpus=8, gpus=0) == 3  # at most one per client
    assert num_client_actors(100, RuntimeConfig(actor_cpus=1, server_cpus=1), cpus=4, gpus=0) == 3


def test_auto_respects_gpu_shares():
    rt = RuntimeConfig(actor_cpus=1, actor_gpus=0.25)
    assert num_client_actors(100, rt, cpus=16, gpus=1) == 4


def test_one_actor_per_client_and_clear_error_when_it_cannot_fit():
    assert num_client_actors(10, RuntimeConfig(clients_per_actor=1, actor_cpus=0.2), cpus=2, gpus=0) == 10
    with pytest.raises(ValueError, match="100 client actors x 1 CPUs do not fit the cluster"):
        num_client_actors(100, RuntimeConfig(clients_per_actor=1, actor_cpus=1), cpus=2, gpus=0)


def test_round_robin_assignment():
    specs = [ClientSpec(i, "cnn" if i < 3 else "mlp", np.arange(i)) for i in range(5)]
    groups = assign_clients(specs, 2)
    assert [[c.client_id for c in g] for g in groups] == [[0, 2, 4], [1, 3]]
