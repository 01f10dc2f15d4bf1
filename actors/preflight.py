"""What the Ray backend checks before a run starts, before its folder is made or Ray is started;
each problem is one :class:`fedray.config.ConfigError` line naming the key, the value and what to do.

A local Ray must hold the server actor and the client actors with this machine's CPUs and GPUs,
counted as Ray counts them, and with its memory (each actor is a Python process with torch); it is
given no more CPUs or GPUs than the machine has (``runtime.num_cpus``, ``num_gpus``). A cluster
(``runtime.address`` or ``RAY_ADDRESS``) must answer within seconds, and be a Ray cluster. On a
cluster ``actors.driver`` checks the placement again against its nodes. The core's own checks
(data, run folder, resume) are ``fedray.preflight``.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from actors.placement import EPS, Node, plan_actors
from fedray.config import Config, ConfigError, RuntimeConfig

PROBE_SECONDS = 3.0
# the memory of one actor, a Python process with torch and fedray's client code: 265 MB resident,
# measured with torch 2.13 on CPU before it holds a model or data
ACTOR_BYTES = 256 << 20


def check_ray(config: Config) -> None:
    """A cluster to join answers; a local Ray can place the server actor and the client actors. In a
    process already connected to Ray (a sweep's trial, a notebook after ``ray.init``) the run joins
    that Ray, and ``actors.driver`` checks the placement against its nodes or the trial's bundles."""
    import ray

    if ray.is_initialized():
        return
    address, key = ray_address(config.runtime)
    if address:
        probe_ray(address, key)
        return
    check_machine(config.runtime)
    check_placement(config, [local_node(config.runtime)], "local", local=True)


def ray_address(runtime: RuntimeConfig) -> tuple[Optional[str], str]:
    """The cluster a run joins (None: it starts a local Ray) and the setting that names it."""
    if runtime.address:
        return runtime.address, "runtime.address"
    return os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS"


def probe_ray(address: str, key: str = "runtime.address", timeout: float = PROBE_SECONDS) -> None:
    """Raise ConfigError unless something accepts a TCP connection at ``address`` within ``timeout``
    seconds (``ray.init`` would retry for minutes). ``auto`` is resolved as Ray resolves it (the
    last ``ray start`` on this machine, else a running GCS), ``local`` starts a Ray: not probed."""
    if address == "local":
        return
    target = address
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # a Ray that resolves it elsewhere: ray.init decides
            return
        try:
            target = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError:
            raise no_cluster(address, key) from None
    scheme, _, rest = target.rpartition("://")
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit() or not host:
        host, port = rest, ("10001" if scheme == "ray" else "6379")  # Ray's client and GCS ports
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError):
        raise no_cluster(address, key) from None
    if not speaks_grpc(f"{host}:{port}", timeout):
        raise ConfigError(f"what answers at {address} is not a Ray cluster (it does not speak gRPC): give the "
                          f"address of a Ray head node's GCS (`ray start --head` prints it) or "
                          f"{'drop runtime.address' if key == 'runtime.address' else 'unset RAY_ADDRESS'}")


def speaks_grpc(target: str, timeout: float) -> bool:
    """Whether a gRPC (HTTP/2) server takes a connection at ``target`` within ``timeout`` seconds, as
    Ray's GCS and Ray Client server do; another server there (a web page, a database) would cost
    ``ray.init`` 20 s and 20 lines of warnings before it gives up. With Ray's TLS (``RAY_USE_TLS``)
    a plain channel cannot tell: True."""
    import grpc

    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return True
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def no_cluster(address: str, key: str) -> ConfigError:
    """The one line for a cluster address where no Ray answers; ``key``: the setting that names it."""
    drop = "drop runtime.address" if key == "runtime.address" else "unset RAY_ADDRESS"
    return ConfigError(f"no Ray cluster answers at {address}: start one with `ray start --head` or {drop}")


def local_node(runtime: RuntimeConfig) -> Node:
    """The node a local Ray makes of this machine: ``runtime.num_cpus``/``num_gpus``, else the CPUs
    and GPUs Ray itself detects (its own functions, so that the two agree)."""
    from ray._private.utils import get_num_cpus

    cpus = runtime.num_cpus if runtime.num_cpus is not None else get_num_cpus()
    gpus = runtime.num_gpus if runtime.num_gpus is not None else machine_gpus()
    return Node("local", float(cpus), float(gpus))


def machine_gpus() -> int:
    """The GPUs Ray detects on this machine (0 without a GPU or its driver)."""
    from ray._private.resource_and_label_spec import ResourceAndLabelSpec

    manager, count = ResourceAndLabelSpec._get_current_node_accelerator(None, {})
    return count if manager is not None and manager.get_resource_name() == "GPU" else 0


def machine_memory() -> int:
    """This machine's memory in bytes, as Ray counts it (a container's limit where it is lower)."""
    try:
        from ray._common.utils import get_system_memory
    except ImportError:  # a Ray that keeps it elsewhere: the physical memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return get_system_memory()


def check_machine(runtime: RuntimeConfig) -> None:
    """A local Ray is given no more CPUs and GPUs than this machine has: Ray believes what it is told
    and would start as many actors as the numbers hold, on CPUs or GPUs that are not there."""
    cpus = os.cpu_count() or 1
    elsewhere = "leave it unset (the machine's) or join a cluster that has more (runtime.address)"
    if runtime.num_cpus is not None and runtime.num_cpus > cpus:
        raise ConfigError(f"bad config value runtime.num_cpus = {runtime.num_cpus}: a local Ray runs on this machine, "
                          f"which has {cpus} CPUs; give at most {cpus}, {elsewhere}")
    if runtime.num_gpus:
        gpus = machine_gpus()
        if runtime.num_gpus > gpus + EPS:
            raise ConfigError(f"bad config value runtime.num_gpus = {runtime.num_gpus:g}: a local Ray runs on this "
                              f"machine, where Ray finds {gpus} GPUs; give at most {gpus}, {elsewhere}")


def check_placement(config: Config, nodes: list[Node], server_node: str, local: bool = False) -> bool:
    """Raise ConfigError (one line) when the server actor does not fit its node (the driver's,
    ``server_node``) or the client actors do not fit ``nodes`` (``actors.placement.plan_actors``);
    return whether the server hosts clients. ``local``: the nodes are a local Ray's, this machine."""
    rt = config.runtime
    node = next((n for n in nodes if n.node_id == server_node), None)
    cpus, gpus = (node.cpus, node.gpus) if node else (0.0, 0.0)
    hosts = rt.server_hosts(cpus)
    where = "this machine's local Ray" if local else "the driver's node of the Ray cluster"
    elsewhere = " or join a cluster that has them (runtime.address)" if local else ""
    if rt.server_gpus > gpus + EPS:
        raise ConfigError(f"bad config value runtime.server_gpus = {rt.server_gpus:g}: the server actor's node "
                          f"({where}) has {gpus:g} GPUs; lower runtime.server_gpus{elsewhere}")
    request = rt.server_request(hosts)
    if request > cpus + EPS:
        key = "runtime.server_cpus" if request == rt.server_cpus else "runtime.actor_cpus"
        hosting = " (the server hosts clients: runtime.server_hosts_clients)" if hosts else ""
        raise ConfigError(f"bad config value {key} = {request:g}{hosting}: the server actor's node ({where}) has "
                          f"{cpus:g} CPUs; lower {key}{elsewhere}")
    try:
        slots = plan_actors(config.federation.client_archs(), rt, nodes, server_node, hosts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if local:
        check_memory(rt, len(slots) + (0 if any(slot.server for slot in slots) else 1), machine_memory())
    return hosts


def check_memory(rt: RuntimeConfig, actors: int, memory: int) -> None:
    """The actors a local Ray starts (``actors``, the server's included), each a Python process with
    torch (``ACTOR_BYTES``), fit this machine's ``memory``: fractional CPU requests can plan thousands
    of them on a few CPUs, which would take the machine down before the first round."""
    if actors * ACTOR_BYTES > memory:
        most = max(memory // ACTOR_BYTES, 1)
        raise ConfigError(f"bad config value runtime.actor_cpus = {rt.actor_cpus:g}: a local Ray would start {actors} "
                          f"actors, Python processes with torch of about {ACTOR_BYTES >> 20} MB each "
                          f"({actors * ACTOR_BYTES / 2**30:.1f} GB), and this machine has {memory / 2**30:.1f} GB; "
                          f"raise runtime.actor_cpus or set runtime.clients_per_actor so that at most {most} start")
