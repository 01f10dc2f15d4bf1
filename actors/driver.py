"""The Ray side of ``fedray.runner``: connect to Ray, start the ServerActor, step its rounds.

The driver only steps rounds (``fedray.runner`` draws the progress bar); the ServerActor does the
work. A Ray error that comes back is unwrapped into its original exception and the remote traceback
text (``fedray.runner.RemoteError``), so the runner reports it like any local failure.
"""

from __future__ import annotations

import functools
import inspect
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.placement import alive_nodes
from actors.pool import HOST_GROUPS
from actors.server import ServerActor
from fedray.config import Config, RuntimeConfig
from fedray.messages import one_line
from fedray.runner import RemoteError, Stepper

if TYPE_CHECKING:
    from fedray.experiment import Method


class ServerActorDied(RuntimeError):
    """The ServerActor's process ended (crash, node loss, out of memory, killed)."""


def connect(runtime: RuntimeConfig) -> bool:
    """Start a local Ray capped at the configured resources, or join ``address``/``RAY_ADDRESS``;
    True when this call started Ray (the caller then shuts it down).

    A local Ray is started lean (``lean_head``): with the log monitor only when the actors' output
    is wanted on the console (``runtime.actor_output``), and as ``ray.init`` starts it when the
    dashboard is (``runtime.dashboard``).
    """
    if ray.is_initialized():
        return False
    address = runtime.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level="ERROR")
        return False
    with lean_head(not runtime.dashboard, log_monitor=runtime.actor_output):
        ray.init(num_cpus=runtime.num_cpus, num_gpus=runtime.num_gpus, include_dashboard=runtime.dashboard,
                 logging_level="ERROR")
    return True


@contextmanager
def lean_head(lean: bool = True, log_monitor: bool = False):
    """While ``ray.init`` starts a local head: without the autoscaler's monitor (nothing to scale on
    one machine), without the dashboard's head process and, unless ``log_monitor``, without the log
    monitor (the actors' stdout and stderr stay in the session's log files instead of being copied
    to the console). Its processes also get ``MALLOC_ARENA_MAX=2`` (unless set already): glibc's
    default of 8 arenas per core keeps freed memory of Ray's many threads resident (about 50 MB on W1).

    Without the dashboard (``include_dashboard=False``) Ray still starts its head process, serving
    only usage statistics, and ``ray.init`` waits for it to come up: on our 2-core machine that is
    1-1.5 s of the 3-3.5 s ``ray.init`` takes, and 78 MB. The two monitors are 98 MB more.
    Ray's public ``init`` has no switch for these processes, so the defaults of ``RayParams``, which
    ``init`` builds, and the head node's ``start_api_server`` are replaced for the duration of the
    call; a Ray that lacks them starts as usual."""
    from ray._private import node, parameter

    original = parameter.RayParams.__init__
    if not lean or not {"include_log_monitor", "no_monitor"} <= set(inspect.signature(original).parameters):
        yield
        return
    api_server = getattr(node.Node, "start_api_server", None)

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.setdefault("include_log_monitor", log_monitor)
        kwargs.setdefault("no_monitor", True)
        kwargs["env_vars"] = {"MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"), **(kwargs.get("env_vars") or {})}
        original(self, *args, **kwargs)

    parameter.RayParams.__init__ = init
    if api_server is not None:
        node.Node.start_api_server = lambda self, **kwargs: None
    try:
        yield
    finally:
        parameter.RayParams.__init__ = original
        if api_server is not None:
            node.Node.start_api_server = api_server


def start_server(config: Config, method: Optional[Method], run_dir: Path, resume: bool):
    """The started ServerActor, pinned to this node, with its own CPU/GPU request from the config
    (an actor's CPUs when it hosts clients, ``runtime.server_hosts_clients``)."""
    rt = config.runtime
    here = ray.get_runtime_context().get_node_id()
    node_cpus = next((n.cpus for n in alive_nodes(ray.nodes()) if n.node_id == here), 0.0)
    hosts = rt.server_hosts(node_cpus)
    server = ray.remote(concurrency_groups=HOST_GROUPS)(ServerActor).options(
        num_cpus=rt.server_request(hosts), num_gpus=rt.server_gpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    ).remote(config, method, str(run_dir), resume, hosts)
    unwrap(lambda: ray.get(server.start.remote()))
    return server


def ray_stepper(config: Config, method: Optional[Method], run_dir: Path, resume: bool) -> Stepper:
    started = connect(config.runtime)
    server = start_server(config, method, run_dir, resume)

    def finish() -> dict[str, Any]:
        summary = unwrap(lambda: ray.get(server.finish.remote()))
        if started:  # now, not at exit: Ray's exit hook first sleeps 0.5 s for log lines to print
            ray.shutdown()
        return summary

    return Stepper(lambda: unwrap(lambda: ray.get(server.current_round.remote())),
                   lambda: unwrap(lambda: ray.get(server.run_round.remote())), finish)


def unwrap(call: Callable[[], Any]) -> Any:
    """``call()``, with Ray's errors turned into the original exception plus the remote traceback."""
    try:
        return call()
    except RayTaskError as err:
        raise RemoteError(root_cause(err), str(err)) from None
    except RayActorError as err:
        raise RemoteError(ServerActorDied(f"the server actor died: {one_line(err)}"), str(err)) from None


def root_cause(err: BaseException) -> BaseException:
    """The original exception under Ray's task-error wrappers (a client's error passes two actors)."""
    while isinstance(err, RayTaskError) and getattr(err, "cause", None) is not None and err.cause is not err:
        err = err.cause
    return err
