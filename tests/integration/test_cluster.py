"""Ray clusters simulated on this machine (ray.cluster_utils.Cluster): clients spread over nodes,
the actor pool sized per node, and a node lost mid-run."""

import re

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actors.driver import lean_head, shutdown_ray, start_server
from actors.executor import RayExecutor
from fedray.assembly import assemble
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.executor import LocalExecutor
from fedray.federation import Federation
from fedray.resolve import resolve
from fedray.tracking import read_scalars
from tests.integration.conftest import small_config

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def cluster_of(*cpus: int) -> tuple[Cluster, list]:
    """A head of 1 CPU and a node per entry of ``cpus``, each started as a run's own local Ray is
    (``actors.driver.lean_head``: about 4 s for three nodes, not 7), and this process joined to it."""
    with lean_head():
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        nodes = [cluster.add_node(num_cpus=n) for n in cpus]
        ray.init(address=cluster.address, logging_level="ERROR")
        cluster.wait_for_nodes()
    return cluster, nodes


def test_clients_spread_over_two_nodes_and_learn(tmp_path):
    cluster, _ = cluster_of(1)
    try:
        config = small_config(runtime={"address": cluster.address, "actor_cpus": 1, "clients_per_actor": "auto"})
        server = start_server(config, resolve(config), tmp_path, resume=False)
        nodes = ray.get(server.client_node_ids.remote())
        assert len(nodes) == 2 and len(set(nodes)) == 2  # one client actor on each node
        for _ in range(config.federation.rounds):
            result = ray.get(server.run_round.remote())
        assert result.metrics["eval/accuracy"] > 0.70
        assert ray.get(server.finish.remote())["rounds"] == 3
    finally:
        shutdown_ray()
        cluster.shutdown()


@pytest.mark.faults
def test_pool_sized_per_node_and_a_lost_node_hands_its_clients_over(tmp_path):
    """Nodes of 1, 1 and 2 CPUs get 1, 1 and 2 one-CPU client actors. The 2-CPU node is removed
    after round 1, so that round 2's batches meet its dead actors: their clients go to the two
    actors left, the lost tasks run again there, and the run ends its rounds. FedAvg with
    ``clients_per_actor: auto`` folds by fold group, which no actor decides, so the run that lost
    the node ends where the undisturbed run of the same config ends, bit for bit. The undisturbed
    run is the in-process one (``LocalExecutor``: the same sums to the last bit, ``fedray.fold``;
    one torch thread in both, so each client trains alike), which spares the test a second pool."""
    cluster, nodes = cluster_of(1, 2)
    big = f"{nodes[1].node_ip_address}/{nodes[1].node_id[:8]}"
    try:
        config = small_config(runtime={"address": cluster.address, "actor_cpus": 1, "clients_per_actor": "auto",
                                       "torch_threads": 1},
                              federation={"rounds": 3, "clients_per_round": 10}, checkpoint_every=1)
        summaries = {}
        for run, executor in (("whole", LocalExecutor), ("lost", RayExecutor)):
            fed = Federation(assemble(config, executor), tmp_path / run)
            ex = fed.executor
            while not fed.done:
                fed.run_round()
                if run == "lost" and fed.round == 1:
                    name = {f"{n.node_ip_address}/{n.node_id[:8]}": n.node_id for n in [cluster.head_node, *nodes]}
                    assert {name[k]: v for k, v in ex.describe()["actors_per_node"].items()} == {
                        cluster.head_node.node_id: 1, nodes[0].node_id: 1, nodes[1].node_id: 2}
                    on_big = [i for i, slot in enumerate(ex.live.slots) if slot.node_id == nodes[1].node_id]
                    moved = {ex.live.ids[i]: sorted(c.client_id for c in ex.live.groups[i]) for i in on_big}
                    cluster.remove_node(nodes[1])
            hosts = ex.node_ids()
            summaries[run] = fed.finish()
        assert summaries["lost"]["rounds"] == 3 and summaries["lost"]["final"] == summaries["whole"]["final"]
        described = summaries["lost"]["executor"]
        assert described["actors"] == 2 and big not in described["actors_per_node"]
        assert sorted(c.client_id for group in ex.live.groups for c in group) == list(range(10))
        assert sorted(hosts) == sorted([cluster.head_node.node_id, nodes[0].node_id])

        whole, lost = (read_checkpoint(tmp_path / run / CHECKPOINT)["strategy"]["models"] for run in ("whole", "lost"))
        assert whole.keys() == lost.keys()
        for arch in whole:
            assert whole[arch].keys() == lost[arch].keys()
            for key in whole[arch]:
                np.testing.assert_array_equal(whole[arch][key], lost[arch][key])

        scalars = read_scalars(tmp_path / "lost")
        assert dict(scalars["runtime/tasks_retried"])[2] >= 1  # the dead actors' batches ran again
        acc = EventAccumulator(str(tmp_path / "lost"))
        acc.Reload()
        faults = [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors("runtime/faults/text_summary")]
        assert [step for step, _ in faults] == [2]
        lines = faults[0][1].strip().split("\n")
        assert len(lines) == 2  # one per lost actor
        for line, (actor, clients) in zip(lines, sorted(moved.items())):
            assert line.strip().startswith(f"round 2: client actor {actor} (clients {clients}) was lost during round 2: "
                                           f"its node {big} left the cluster")
            assert line.endswith("with their state of the last checkpoint, and what it had lost ran again there")
            went = re.findall(r"actor (\d+) \(\[([\d, ]+)\]\)", line.split("its clients went to ")[1])
            assert sorted(int(c) for _, ids in went for c in ids.split(", ")) == clients
            for actor_left, ids in went:  # named where they are: with an actor left, as its own clients
                group = ex.live.groups[ex.live.ids.index(int(actor_left))]
                assert {int(c) for c in ids.split(", ")} <= {c.client_id for c in group}
    finally:
        shutdown_ray()
        cluster.shutdown()


def test_a_sweep_spreads_its_trials_over_the_nodes_of_a_cluster(tmp_path):
    """``fedray sweep`` from a driver joined to a three-node cluster: a trial of 2 CPUs on nodes of 1
    CPU has its server's bundle on one node and its client actor's on another, and its result is the
    one the same config gives in one process (a run repeats bit for bit, whichever actor ran which
    client). The sweep's folder is on this machine's disk, which every simulated node shares."""
    from fedray import api
    from fedray.sweeps import sweep

    cluster, _ = cluster_of(1, 1)
    try:
        base = small_config(federation={"num_clients": 6, "clients_per_round": 4, "rounds": 2,
                                        "architectures": {"mlp": 6}},
                            data={"dataset": "fashion_mnist", "train_limit": 3000, "test_limit": 1000},
                            runtime={"torch_threads": 1})
        result = sweep(base, {"training.lr": [0.02, 0.05]}, seeds=[1], out=tmp_path / "sweep", trial_cpus=2,
                       progress=False)
        assert [r["status"] for r in result.rows] == ["done", "done"]
        alive = {n["NodeID"][:8] for n in ray.nodes() if n["Alive"]}
        for row in result.rows:
            where = api.Result.load(row["run_dir"]).summary["executor"]["bundle_nodes"]
            assert set(where) == {"bundle:0", "bundle:1"} and len(set(where.values())) == 2
            assert set(where.values()) <= alive
        lr = result.rows[1]["training.lr"]
        local = api.load_config(base, {"training.lr": lr, "seed": 1, "data.seed": 1, "aux.seed": 1,
                                       "runtime.backend": "local"})
        alone = api.run(local, run_dir=tmp_path / "alone", progress=False)
        assert result.rows[1]["final_accuracy"] == alone.final["eval/accuracy"]
    finally:
        shutdown_ray()
        cluster.shutdown()
