"""Cluster resources -> the client actors to start: how many, on which node, for which architecture,
with how many CPUs and which GPU share; and which clients each one hosts.

Pure functions of the nodes' resources (``ray.nodes()``), so the plan is tested without a cluster.
Actors are placed node by node, each on the node with the most CPU left, which spreads them over
the cluster and sizes the pool to each node: a node with 4 free CPUs gets 4 one-CPU actors, one
with 1 gets one. The server actor's request is taken off the driver's node, where it runs; when
the server hosts clients (``runtime.server_hosts_clients``), it is the first slot of the plan.

GPU shares are a float (every actor) or a mapping architecture -> share
(``actor_gpus: {resnet8: 0.5, mlp: 0.1}``); with a mapping every actor hosts clients of one
architecture, and each architecture gets actors in proportion to its clients.

When a node leaves mid-run, the clients of its actors are handed to the actors left
(:func:`hand_over`), balanced by samples.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from fedray.config import RuntimeConfig
from fedray.messages import ClientSpec

EPS = 1e-9


@dataclass(frozen=True)
class Node:
    """A node's id and what it offers (``Resources`` of ``ray.nodes()``)."""

    node_id: str
    cpus: float
    gpus: float = 0.0
    address: str = ""


@dataclass(frozen=True)
class Slot:
    """One client actor to start: where, for which architecture (None: any), with what request;
    ``server``: not a client actor but the server actor, which hosts clients too."""

    node_id: str
    arch: Optional[str]
    cpus: float
    gpus: float
    server: bool = False


def alive_nodes(ray_nodes: list[dict]) -> list[Node]:
    """``ray.nodes()`` -> the nodes that are alive, with their CPUs and GPUs."""
    return [Node(n["NodeID"], float(n["Resources"].get("CPU", 0.0)), float(n["Resources"].get("GPU", 0.0)),
                 n.get("NodeManagerAddress", ""))
            for n in ray_nodes if n.get("Alive", n.get("alive", False))]


def plan_actors(archs: list[str], runtime: RuntimeConfig, nodes: list[Node], server_node: str,
                server_hosts: bool = False) -> list[Slot]:
    """The client actors to start, for clients of the architectures ``archs`` (one entry per client).
    With ``server_hosts`` the first slot is the server actor's (it counts as one actor of the pool).

    ``clients_per_actor: auto`` starts as many actors as the nodes hold (one per ``actor_cpus``
    CPUs and per GPU share), at most one per client; an integer k starts ceil(clients / k) actors
    (per architecture with per-architecture shares). Raises ValueError naming the settings to
    change when those actors cannot all be placed.
    """
    free = {n.node_id: [n.cpus, n.gpus] for n in nodes}
    if server_node in free:
        free[server_node][0] -= runtime.server_request(server_hosts)
        free[server_node][1] -= runtime.server_gpus
    per_arch = isinstance(runtime.actor_gpus, dict)
    clients = Counter(archs) if per_arch else Counter({None: len(archs)})
    if runtime.clients_per_actor == "auto":
        wanted = dict(clients)
    else:
        wanted = {arch: math.ceil(count / runtime.clients_per_actor) for arch, count in clients.items()}
    slots: list[Slot] = []
    placed: Counter = Counter()
    if server_hosts and not per_arch:
        slots.append(Slot(server_node, None, runtime.server_request(True), runtime.server_gpus, server=True))
        placed[None] += 1
    while True:
        # the architecture furthest below its share of actors goes next
        open_archs = [a for a in wanted if placed[a] < wanted[a]]
        if not open_archs:
            break
        arch = min(open_archs, key=lambda a: (placed[a] / clients[a], str(a)))
        share = runtime.gpus_for(arch)
        fits = [nid for nid, (cpus, gpus) in free.items() if cpus >= runtime.actor_cpus - EPS and gpus >= share - EPS]
        if not fits:
            if runtime.clients_per_actor != "auto" or placed[arch] == 0:
                raise ValueError(_no_fit(runtime, wanted, nodes, arch))
            wanted[arch] = placed[arch]  # auto: the cluster is full for this architecture
            continue
        node = max(fits, key=lambda nid: (free[nid][0], free[nid][1], nid == server_node))
        free[node][0] -= runtime.actor_cpus
        free[node][1] -= share
        slots.append(Slot(node, arch, runtime.actor_cpus, share))
        placed[arch] += 1
    return slots


def _no_fit(runtime: RuntimeConfig, wanted: dict, nodes: list[Node], arch: Optional[str]) -> str:
    total = sum(wanted.values())
    need = f"{total} client actors x {runtime.actor_cpus:g} CPUs"
    share = runtime.gpus_for(arch)
    if share > 0:
        need += f" and {share:g} GPUs" + (f" ({arch})" if arch is not None else "")
    cpus, gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
    return (f"{need} do not fit the cluster ({len(nodes)} nodes, {cpus:g} CPUs, {gpus:g} GPUs, server takes "
            f"{runtime.server_cpus:g} CPUs and {runtime.server_gpus:g} GPUs): lower runtime.actor_cpus/actor_gpus, "
            f"raise runtime.clients_per_actor, or use clients_per_actor: auto")


def assign_clients(clients: list[ClientSpec], slots: list[Slot]) -> list[list[ClientSpec]]:
    """Round-robin over the actors that take the client's architecture (all of them, without
    per-architecture shares): architectures and sizes spread evenly."""
    groups: list[list[ClientSpec]] = [[] for _ in slots]
    takers: dict[Optional[str], list[int]] = {}
    for i, slot in enumerate(slots):
        takers.setdefault(slot.arch, []).append(i)
    seen: Counter = Counter()
    for client in clients:
        key = client.arch if client.arch in takers else None
        options = takers[key]
        groups[options[seen[key] % len(options)]].append(client)
        seen[key] += 1
    return groups


def hand_over(clients: list[ClientSpec], slots: list[Slot], loads: list[int]) -> list[list[ClientSpec]]:
    """The clients of actors lost for good, handed to the surviving actors ``slots`` (``loads``: the
    samples each one hosts already): the most samples first (ties: the lower id), each to the actor
    of its architecture (with per-architecture shares; else any) that hosts the fewest samples so
    far (ties: the first). The survivors end as even as whole clients make them, and every run that
    loses the same actors hands the same clients to the same survivors. ValueError when no
    surviving actor may take a client."""
    load, groups = list(loads), [[] for _ in slots]
    per_arch = any(slot.arch is not None for slot in slots)
    for client in sorted(clients, key=lambda c: (-c.num_samples, c.client_id)):
        takers = [j for j, slot in enumerate(slots) if not per_arch or slot.arch == client.arch]
        if not takers:
            raise ValueError(f"no client actor{f' of {client.arch}' if per_arch else ''} is left")
        j = min(takers, key=lambda j: load[j])
        groups[j].append(client)
        load[j] += client.num_samples
    return groups
