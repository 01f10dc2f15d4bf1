"""The Ray side of ``fedray.runner``: connect to Ray, start the ServerActor, step its rounds.

The driver only steps rounds (``fedray.runner`` draws the progress bar); the ServerActor does the
work. A Ray error that comes back is unwrapped into its original exception and the remote traceback
text (``fedray.runner.RemoteError``), so the runner reports it like any local failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.server import ServerActor
from fedray.config import Config, RuntimeConfig
from fedray.messages import one_line
from fedray.runner import RemoteError, Stepper

if TYPE_CHECKING:
    from fedray.experiment import Method


class ServerActorDied(RuntimeError):
    """The ServerActor's process ended (crash, node loss, out of memory, killed)."""


def connect(runtime: RuntimeConfig) -> None:
    """Start a local Ray capped at the configured resources, or join ``address``/``RAY_ADDRESS``.

    A local Ray starts its dashboard only with ``runtime.dashboard: true`` (it costs about 150 MB).
    """
    if ray.is_initialized():
        return
    address = runtime.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level="ERROR")
    else:
        ray.init(num_cpus=runtime.num_cpus, num_gpus=runtime.num_gpus, include_dashboard=runtime.dashboard,
                 logging_level="ERROR")


def start_server(config: Config, method: Optional[Method], run_dir: Path, resume: bool):
    """The started ServerActor, pinned to this node, with its own CPU/GPU request from the config."""
    rt = config.runtime
    here = ray.get_runtime_context().get_node_id()
    server = ray.remote(ServerActor).options(
        num_cpus=rt.server_cpus, num_gpus=rt.server_gpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    ).remote(config, method, str(run_dir), resume)
    unwrap(lambda: ray.get(server.start.remote()))
    return server


def ray_stepper(config: Config, method: Optional[Method], run_dir: Path, resume: bool) -> Stepper:
    connect(config.runtime)
    server = start_server(config, method, run_dir, resume)
    return Stepper(lambda: unwrap(lambda: ray.get(server.current_round.remote())),
                   lambda: unwrap(lambda: ray.get(server.run_round.remote())),
                   lambda: unwrap(lambda: ray.get(server.finish.remote())))


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
