"""What the Ray backend checks before a run starts, before its folder is made or Ray is started;
each problem is one :class:`fedray.config.ConfigError` line naming the key, the value and what to do.

A local Ray must hold the server actor and the client actors with this machine's CPUs and GPUs,
counted as Ray counts them; a cluster (``runtime.address`` or ``RAY_ADDRESS``) must answer within
seconds, and be a Ray cluster. On a cluster ``actors.driver`` checks the placement again against
its nodes. The core's own checks (data, run folder, resume) are ``fedray.preflight``.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from actors.placement import EPS, Node, plan_actors
from fedray.config import Config, ConfigError, RuntimeConfig

PROBE_SECONDS = 3.0


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
    from ray._private.resource_and_label_spec import ResourceAndLabelSpec
    from ray._private.utils import get_num_cpus

    cpus = runtime.num_cpus if runtime.num_cpus is not None else get_num_cpus()
    gpus = runtime.num_gpus
    if gpus is None:
        manager, count = ResourceAndLabelSpec._get_current_node_accelerator(None, {})
        gpus = count if manager is not None and manager.get_resource_name() == "GPU" else 0
    return Node("local", float(cpus), float(gpus))


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
        plan_actors(config.federation.client_archs(), rt, nodes, server_node, hosts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return hosts
