"""Integration tests run a real local Ray (2 CPUs, no dashboard), one instance per test module."""

import pytest

from actors.driver import connect, shutdown_ray
from fedray.config import RuntimeConfig, build_config


@pytest.fixture(scope="module")
def local_ray():
    """Started as a run's own local Ray is (``actors.driver.connect``: lean, on loopback, with a token
    of its own in the environment rather than one written to ~/.ray): about 2 s, not 4-5 s."""
    connect(RuntimeConfig(num_cpus=2))
    yield
    shutdown_ray()


# Four client hosts on the 2 CPUs (the server hosting one share), for tests whose point is many actors.
# small_config's default is two hosts: every actor process costs about 4 CPU-s of imports (torch,
# ray, fedray and TorchDynamo through torch.optim) before it trains, about 3.5 s of a test's wall time.
FOUR_ACTORS = {"actor_cpus": 0.5, "clients_per_actor": 3}


def small_config(**sections):
    """A fast real run: 10 Fashion-MNIST clients on a seeded 6,000-sample subset, on two client hosts
    (with the server actor: the server and one client actor)."""
    tree = {
        "name": "it",
        "data": {"dataset": "fashion_mnist", "train_limit": 6000, "test_limit": 2000},
        "federation": {"num_clients": 10, "clients_per_round": 6, "rounds": 3,
                       "architectures": {"mlp": 5, "lenet5": 5}},
        "training": {"lr": 0.02, "momentum": 0.9, "batch_size": 32, "epochs": 1},
        "runtime": {"actor_cpus": 1, "clients_per_actor": "auto"},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            tree.setdefault(section, {}).update(values)
        else:
            tree[section] = values
    return build_config(tree)
