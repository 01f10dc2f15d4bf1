import numpy as np
import pytest

from actors.placement import Node, Slot, alive_nodes, assign_clients, hand_over, plan_actors
from fedray.config import RuntimeConfig, build_config
from fedray.messages import ClientSpec


def specs(n: int, archs=("mlp",)) -> list[ClientSpec]:
    return [ClientSpec(i, archs[i * len(archs) // n], np.arange(3)) for i in range(n)]


def plan(clients, runtime, nodes, server):
    return plan_actors([c.arch for c in clients], runtime, nodes, server)


def per_node(slots) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in slots:
        out[s.node_id] = out.get(s.node_id, 0) + 1
    return out


def test_auto_uses_one_actor_per_cpu_slot():
    one = [Node("a", 2)]
    assert len(plan(specs(100), RuntimeConfig(actor_cpus=1), one, "a")) == 2
    assert len(plan(specs(3), RuntimeConfig(actor_cpus=0.5), [Node("a", 8)], "a")) == 3  # one per client at most
    assert len(plan(specs(100), RuntimeConfig(actor_cpus=1, server_cpus=1), [Node("a", 4)], "a")) == 3


def test_the_pool_is_sized_per_node_and_spread():
    nodes = [Node("head", 1), Node("w2", 2), Node("w3", 3)]
    slots = plan(specs(100), RuntimeConfig(actor_cpus=1), nodes, "head")
    assert per_node(slots) == {"head": 1, "w2": 2, "w3": 3}
    assert [s.node_id for s in slots[:3]] == ["w3", "w2", "w3"]  # the node with the most CPU left goes first
    # the server's CPUs come off the driver's node only
    slots = plan(specs(100), RuntimeConfig(actor_cpus=1, server_cpus=1), nodes, "head")
    assert per_node(slots) == {"w2": 2, "w3": 3}
    # few clients: spread, not stacked on one node
    assert per_node(plan(specs(3), RuntimeConfig(actor_cpus=1), nodes, "head")) == {"w3": 2, "w2": 1}


def test_auto_respects_gpu_shares_and_refuses_a_fifth_quarter():
    gpu = [Node("g", 16, 1)]
    slots = plan(specs(100), RuntimeConfig(actor_cpus=1, actor_gpus=0.25), gpu, "g")
    assert len(slots) == 4 and all(s.gpus == 0.25 for s in slots)
    with pytest.raises(ValueError, match=r"5 client actors x 1 CPUs and 0.25 GPUs do not fit the cluster "
                                         r"\(1 nodes, 16 CPUs, 1 GPUs"):
        plan(specs(5), RuntimeConfig(actor_cpus=1, actor_gpus=0.25, clients_per_actor=1), gpu, "g")
    with pytest.raises(ValueError, match="0.5 GPUs do not fit"):  # no GPU at all
        plan(specs(4), RuntimeConfig(actor_gpus=0.5), [Node("c", 8)], "c")


def test_per_architecture_shares_give_each_architecture_its_own_actors():
    rt = build_config({"federation": {"num_clients": 12, "architectures": {"resnet8": 4, "mlp": 8}},
                       "runtime": {"actor_cpus": 1, "actor_gpus": {"resnet8": 0.5, "mlp": 0.1}}}).runtime
    clients = specs(12, ("resnet8", "resnet8", "mlp", "mlp", "mlp", "mlp"))
    slots = plan(clients, rt, [Node("g", 8, 1)], "g")
    shares = sorted((s.arch, s.gpus) for s in slots)
    # 0.5 + 0.5 fills the GPU for resnet8; mlp takes the 6 CPUs left at 0.1 each... until the GPU is full
    assert shares.count(("resnet8", 0.5)) == 1 and all(g == 0.1 for a, g in shares if a == "mlp")
    assert sum(s.gpus for s in slots) <= 1 + 1e-9 and sum(s.cpus for s in slots) <= 8
    groups = assign_clients(clients, slots)
    for slot, group in zip(slots, groups):
        assert {c.arch for c in group} <= {slot.arch}  # an actor hosts one architecture
    assert sorted(c.client_id for g in groups for c in g) == list(range(12))
    rt_fixed = rt.model_copy(update={"clients_per_actor": 4})
    fixed = plan(clients, rt_fixed, [Node("g", 8, 1)], "g")
    assert sorted(s.arch for s in fixed) == ["mlp", "mlp", "resnet8"]


def test_one_actor_per_client_and_clear_error_when_it_cannot_fit():
    assert len(plan(specs(10), RuntimeConfig(clients_per_actor=1, actor_cpus=0.2), [Node("a", 2)], "a")) == 10
    with pytest.raises(ValueError, match="100 client actors x 1 CPUs do not fit the cluster"):
        plan(specs(100), RuntimeConfig(clients_per_actor=1, actor_cpus=1), [Node("a", 2)], "a")


def test_round_robin_assignment_and_alive_nodes():
    clients = [ClientSpec(i, "cnn" if i < 3 else "mlp", np.arange(i)) for i in range(5)]
    slots = plan(clients, RuntimeConfig(actor_cpus=1), [Node("a", 2)], "a")
    assert [[c.client_id for c in g] for g in assign_clients(clients, slots)] == [[0, 2, 4], [1, 3]]
    raw = [{"NodeID": "x", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}, "NodeManagerAddress": "10.0.0.1"},
           {"NodeID": "y", "Alive": False, "Resources": {"CPU": 8.0}}]
    assert alive_nodes(raw) == [Node("x", 4.0, 1.0, "10.0.0.1")]


def test_a_hosting_server_is_the_first_slot_of_its_node():
    two = [Node("a", 2)]
    slots = plan_actors(["mlp"] * 100, RuntimeConfig(actor_cpus=1), two, "a", server_hosts=True)
    assert [(s.node_id, s.cpus, s.server) for s in slots] == [("a", 1, True), ("a", 1, False)]
    # it asks for the larger of its own CPUs and an actor's, which come off its node
    slots = plan_actors(["mlp"] * 100, RuntimeConfig(actor_cpus=1, server_cpus=2), [Node("a", 4), Node("b", 1)], "a",
                        server_hosts=True)
    assert [(s.node_id, s.cpus, s.server) for s in slots] == [("a", 2, True), ("a", 1, False), ("a", 1, False),
                                                              ("b", 1, False)]
    # one client: the server hosts it alone
    assert [s.server for s in plan_actors(["mlp"], RuntimeConfig(), two, "a", server_hosts=True)] == [True]


def test_when_the_server_hosts_clients():
    assert RuntimeConfig().server_hosts(2) and RuntimeConfig().server_request(True) == 1
    assert not RuntimeConfig(actor_cpus=2).server_hosts(1)  # its node lacks an actor's CPUs
    assert not RuntimeConfig(actor_gpus=0.25).server_hosts(8)  # GPU runs keep client actors apart
    assert not RuntimeConfig(server_hosts_clients=False).server_hosts(8)
    assert RuntimeConfig(server_hosts_clients=True, actor_gpus=0.25).server_hosts(8)
    assert RuntimeConfig(server_cpus=3).server_request(True) == 3 and RuntimeConfig(server_cpus=3).server_request(False) == 3
    assert RuntimeConfig().server_request(False) == 0
    with pytest.raises(ValueError, match="server_hosts_clients: true needs one actor_gpus share"):
        RuntimeConfig(server_hosts_clients=True, actor_gpus={"mlp": 0.5})


def test_a_lost_actors_clients_go_to_the_least_loaded_survivors_by_samples():
    """The most samples first, each to the survivor of its kind hosting the fewest samples so far
    (ties: the first): not round-robin, not by count of clients."""
    lost = [ClientSpec(i, "mlp", np.arange(n)) for i, n in enumerate([5, 40, 10, 10, 30])]
    survivors = [Slot("a", None, 1, 0), Slot("b", None, 1, 0), Slot("c", None, 1, 0)]
    groups = hand_over(lost, survivors, [50, 0, 20])
    # 40 -> b (0), 30 -> c (20), 10 (client 2) -> b (40), 10 (client 3) -> a (all at 50: the first), 5 -> b
    assert [[c.client_id for c in g] for g in groups] == [[3], [1, 2, 0], [4]]
    assert [sum(c.num_samples for c in g) + base for g, base in zip(groups, [50, 0, 20])] == [60, 55, 50]
    assert hand_over(list(reversed(lost)), survivors, [50, 0, 20]) == groups  # the same, whatever the order


def test_with_per_architecture_actors_a_client_goes_to_its_own_kind_or_nowhere():
    lost = [ClientSpec(0, "cnn", np.arange(8)), ClientSpec(1, "mlp", np.arange(4)), ClientSpec(2, "mlp", np.arange(2))]
    survivors = [Slot("a", "mlp", 1, 0.1), Slot("b", "cnn", 1, 0.5), Slot("c", "mlp", 1, 0.1)]
    groups = hand_over(lost, survivors, [3, 100, 0])
    assert [[c.client_id for c in g] for g in groups] == [[2], [0], [1]]  # cnn to the busy cnn actor: its only kind
    with pytest.raises(ValueError, match="no client actor of cnn is left"):
        hand_over(lost, [s for s in survivors if s.arch == "mlp"], [0, 0])
    with pytest.raises(ValueError, match="no client actor is left"):
        hand_over(lost[1:], [], [])
