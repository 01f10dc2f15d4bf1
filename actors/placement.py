"""Cluster resources -> how many client actors, and which clients each one hosts."""

from __future__ import annotations

import math

from fedray.config import RuntimeConfig
from fedray.messages import ClientSpec


def num_client_actors(num_clients: int, runtime: RuntimeConfig, cpus: float, gpus: float) -> int:
    """How many ClientActors to start.

    ``clients_per_actor: auto`` starts one actor per ``actor_cpus`` CPUs (and per ``actor_gpus``
    GPU share when GPUs are requested) left after the server's request, at most one per client.
    An integer k starts ceil(num_clients / k) actors. Raises ValueError, naming the settings to
    change, when those actors cannot all be placed at once.
    """
    free_cpus = cpus - runtime.server_cpus
    free_gpus = gpus - runtime.server_gpus
    slots = math.floor(free_cpus / runtime.actor_cpus + 1e-9)
    if runtime.actor_gpus > 0:
        slots = min(slots, math.floor(free_gpus / runtime.actor_gpus + 1e-9))
    if runtime.clients_per_actor == "auto":
        wanted = min(num_clients, max(slots, 1))
    else:
        wanted = math.ceil(num_clients / runtime.clients_per_actor)
    if wanted > slots:
        need = f"{wanted} client actors x {runtime.actor_cpus:g} CPUs"
        if runtime.actor_gpus > 0:
            need += f" and {runtime.actor_gpus:g} GPUs"
        raise ValueError(
            f"{need} do not fit the cluster ({cpus:g} CPUs, {gpus:g} GPUs, server takes "
            f"{runtime.server_cpus:g} CPUs): lower runtime.actor_cpus/actor_gpus, raise "
            f"runtime.clients_per_actor, or use clients_per_actor: auto"
        )
    return wanted


def assign_clients(clients: list[ClientSpec], num_actors: int) -> list[list[ClientSpec]]:
    """Round-robin: client i goes to actor i mod n, so architectures and sizes spread evenly."""
    groups: list[list[ClientSpec]] = [[] for _ in range(num_actors)]
    for i, client in enumerate(clients):
        groups[i % num_actors].append(client)
    return groups
