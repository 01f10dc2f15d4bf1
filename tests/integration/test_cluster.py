"""A two-node Ray cluster simulated on this machine (ray.cluster_utils.Cluster)."""

import pytest
import ray
from ray.cluster_utils import Cluster

from actors.driver import start_server
from fedray.experiment import resolve
from tests.integration.conftest import small_config

pytestmark = pytest.mark.integration


def test_clients_spread_over_two_nodes_and_learn(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, logging_level="ERROR")
        cluster.wait_for_nodes()
        config = small_config(runtime={"address": cluster.address, "actor_cpus": 1, "clients_per_actor": "auto"})
        server = start_server(config, resolve(config), tmp_path, resume=False)
        nodes = ray.get(server.client_node_ids.remote())
        assert len(nodes) == 2 and len(set(nodes)) == 2  # one client actor on each node
        for _ in range(config.federation.rounds):
            result = ray.get(server.run_round.remote())
        assert result.metrics["eval/accuracy"] > 0.70
        assert ray.get(server.finish.remote())["rounds"] == 3
    finally:
        ray.shutdown()
        cluster.shutdown()
