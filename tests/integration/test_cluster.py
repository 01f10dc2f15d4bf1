"""Ray clusters simulated on this machine (ray.cluster_utils.Cluster): clients spread over nodes,
the actor pool sized per node, and a node lost mid-run."""

import json
import threading

import pytest
import ray
from ray.cluster_utils import Cluster
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actors.driver import start_server
from fedray.checkpoint import checkpoint_round
from fedray.method import resolve
from fedray.runner import RunFailed, run_experiment
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


@pytest.mark.faults
def test_pool_sized_per_node_and_a_lost_node_names_the_checkpoint(tmp_path):
    """Three nodes of 1, 2 and 3 CPUs get 1, 2 and 3 one-CPU client actors; removing the 3-CPU node
    mid-run ends the run with one line naming the node, the lost clients and the checkpoint."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=2), cluster.add_node(num_cpus=3)]
    run_dir = tmp_path / "run"
    try:
        ray.init(address=cluster.address, logging_level="ERROR")
        cluster.wait_for_nodes()
        config = small_config(runtime={"address": cluster.address, "actor_cpus": 1, "clients_per_actor": "auto"},
                              federation={"rounds": 200, "clients_per_round": 10}, checkpoint_every=1)

        ended = threading.Event()

        def remove_the_big_node():
            # once round 2 is checkpointed, however long that takes on a loaded machine: removed on a
            # deadline instead, the node could leave while the actors are still being set up
            while (checkpoint_round(run_dir) or 0) < 2:
                if ended.wait(0.05):
                    return
            cluster.remove_node(nodes[1])

        remover = threading.Thread(target=remove_the_big_node, daemon=True)
        remover.start()
        try:
            with pytest.raises(RunFailed) as info:
                run_experiment(config, run_dir, progress=False)
        finally:
            ended.set()
            remover.join()
        line = str(info.value)
        assert "\n" not in line and line.startswith("ClientActorLost: a client actor (hosting clients [")
        big = f"{nodes[1].node_ip_address}/{nodes[1].node_id[:8]}"
        assert f"(node {big} left the cluster)" in line
        saved = checkpoint_round(run_dir)
        assert saved >= 2 and line.endswith(f"the checkpoint of round {saved} is intact: fedray resume {run_dir}")

        acc = EventAccumulator(str(run_dir))
        acc.Reload()
        placed = json.loads(acc.Tensors("runtime/executor/text_summary")[0].tensor_proto.string_val[0].decode())
        name = {f"{n.node_ip_address}/{n.node_id[:8]}": n for n in [cluster.head_node, *nodes]}
        assert {name[k].node_id: v for k, v in placed["actors_per_node"].items()} == {
            cluster.head_node.node_id: 1, nodes[0].node_id: 2, nodes[1].node_id: 3}
    finally:
        ray.shutdown()
        cluster.shutdown()
