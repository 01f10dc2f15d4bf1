"""What is checked before a run starts, before its folder is made or Ray is started; each problem is
one :class:`ConfigError` line naming the key, the value and what to do.

- the data: its files are there (``check_dataset``), and its training samples, less those carved
  out as auxiliary data and cut to ``data.train_limit``, give every client a sample (and every
  shard of ``partition: shards``); the sizes come from file headers or known counts;
- the run folder: it can be made where it is asked for (nothing is created to find out), and a
  new run does not write into an old one;
- Ray: a local Ray must hold the server actor and the client actors with this machine's CPUs and
  GPUs, counted as Ray counts them; a cluster (``runtime.address`` or ``RAY_ADDRESS``) must answer
  within seconds. On a cluster ``actors.driver`` checks the placement again against its nodes.

It imports no torch, and Ray only for the Ray backend.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from fedray.checkpoint import CHECKPOINT
from fedray.config import Config, ConfigError, RuntimeConfig, _path_setting, shown

if TYPE_CHECKING:
    from actors.placement import Node

PROBE_SECONDS = 3.0


def check_data(config: Config) -> None:
    """The data set's files (and the auxiliary data set's) are there, and the split can be made."""
    from fedray.data import check_dataset
    from fedray.data.auxiliary import aux_source

    check_dataset(config.data.dataset, config.data.root, **config.data.options)
    if config.aux.size and config.aux.dataset is not None:
        aux_source(check_dataset, config.aux.dataset, config.aux.root, **config.aux.options)
    check_partition(config)


def training_samples(config: Config) -> tuple[int, str]:
    """The number of training samples the clients share (as ``fedray.federation.load_data`` leaves
    them), and where it comes from, e.g. ``"fashion_mnist has 60000, less aux.size = 500"``."""
    from fedray.data import train_size

    d, a = config.data, config.aux
    n = train_size(d.dataset, d.root, **d.options)
    how = f"{d.dataset} has {n}"
    if a.size and a.dataset is None:
        if a.size >= n:
            raise ConfigError(f"bad config value aux.size = {a.size}: the training set of {d.dataset} has only "
                              f"{n} samples, and the clients need some")
        n -= a.size
        how += f", less aux.size = {a.size}"
    elif a.size:
        available = train_size(a.dataset, a.root, **a.options)
        if a.size > available:
            raise ConfigError(f"bad config value aux.size = {a.size}: the auxiliary data set {a.dataset} has only "
                              f"{available} samples")
    if d.train_limit is not None and d.train_limit < n:
        n = d.train_limit
        how += f", cut to data.train_limit = {n}"
    return n, how


def check_partition(config: Config) -> None:
    """Every client gets a sample, and with ``partition: shards`` every shard does: checked on the
    sample count alone, before any per-client list is made (``num_clients`` may be huge)."""
    from fedray.data.partition import check_split

    d, clients = config.data, config.federation.num_clients
    n, how = training_samples(config)
    if clients > n:
        raise ConfigError(f"bad config value federation.num_clients = {clients}: more clients than the {n} training "
                          f"samples ({how}); use at most {n} clients")
    shards = clients * d.classes_per_client
    if d.partition == "shards" and shards > n:
        raise ConfigError(f"bad config value data.classes_per_client = {d.classes_per_client}: partition 'shards' "
                          f"cuts {clients} clients x {d.classes_per_client} = {shards} shards out of {n} training "
                          f"samples ({how}); use at most {n // d.classes_per_client} clients or fewer classes "
                          f"per client")
    if d.partition != "natural":
        try:
            check_split(n, clients, d.partition, d.alpha, d.classes_per_client, d.balancedness)
        except ValueError as err:
            raise ConfigError(f"bad config value federation.num_clients = {clients}: {err}") from None


def check_folder(path: Path, what: str) -> None:
    """``path`` is a folder that can be written, or can be made: its nearest existing ancestor is a
    writable folder. Nothing is created. ``what`` names the setting in the message."""
    path = Path(os.path.abspath(path))
    try:
        _path_setting(str(path))
    except ValueError as err:  # "File name too long" from every call below
        raise ConfigError(f"run folder {shown(str(path))}: {err}; name a shorter one") from None
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what}: {existing} is a file, not a folder; name a folder to write the run in")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {existing} is not writable; name a folder you can write to")


def check_new_run_dir(run_dir: Path, what: str) -> None:
    """``run_dir`` can be made or written, and holds no run that a new one would overwrite."""
    check_folder(run_dir, what)
    if (Path(run_dir) / CHECKPOINT).exists():
        raise ConfigError(f"{what}: {run_dir} already holds a run ({CHECKPOINT}); continue it with "
                          f"`fedray resume {run_dir}` or name another folder")
    if (Path(run_dir) / "config.yaml").exists():
        raise ConfigError(f"{what}: {run_dir} already holds a run that stopped before its first checkpoint; "
                          f"start it again with `fedray resume {run_dir}` or name another folder")


def check_resume(run_dir: Path, config: Config, rounds_given: bool = False) -> Optional[int]:
    """The round a resume of ``run_dir`` with ``config`` starts from: its checkpoint's (intact,
    written with this config), or None for a run that stopped before its first checkpoint (it
    starts again). Refused when ``federation.rounds`` would not take the run past the checkpoint;
    ``rounds_given``: the count came from ``--rounds``."""
    from fedray.checkpoint import CheckpointError, verify_checkpoint

    if not (Path(run_dir) / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a fedray run folder: {Path(run_dir) / 'config.yaml'} is missing")
    if not (Path(run_dir) / CHECKPOINT).exists():
        return None
    try:
        saved = verify_checkpoint(run_dir, config.to_dict())
    except CheckpointError as err:
        raise ConfigError(str(err)) from None
    rounds = config.federation.rounds
    if rounds_given and rounds < saved:
        raise ConfigError(f"--rounds {rounds} is below round {saved} of the checkpoint in {run_dir}: a resume only "
                          f"extends a run; give --rounds {saved + 1} or more")
    if saved >= rounds:
        raise ConfigError(f"the run in {run_dir} is already at round {saved}: extend it with --rounds {saved + 1} "
                          f"or more")
    return saved


def check_ray(config: Config) -> None:
    """A cluster to join answers; a local Ray can place the server actor and the client actors."""
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

    from actors.placement import Node

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
    from actors.placement import EPS, plan_actors

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
