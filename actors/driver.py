"""The Ray backend (``runtime.backend: ray``, :data:`RAY`): connect to Ray, start the ServerActor,
step its rounds.

The driver only steps rounds (``fedray.runner`` draws the progress bar); the ServerActor does the
work. A Ray error that comes back is unwrapped into its original exception and the remote traceback
text (``fedray.runner.RemoteError``), so the runner reports it like any local failure.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import re
import signal
import time
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence
from unittest import mock

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors import places
from actors.client import HOST_GROUPS
from actors.preflight import check_placement, check_ray, no_cluster, probe_ray, ray_address
from actors.server import ServerActor
from fedray.backends import Stepper
from fedray.config import Config, ConfigError, RuntimeConfig
from fedray.messages import one_line
from fedray.runner import RemoteError

if TYPE_CHECKING:
    from fedray.resolve import Method
    from fedray.observers import Observer


class ServerActorDied(RuntimeError):
    """The ServerActor's process ended (crash, node loss, out of memory, killed)."""


class RayletDied(RuntimeError):
    """The raylet of the local Ray this process started ended (killed, out of memory), and with it
    every actor of the run."""


def connect(runtime: RuntimeConfig) -> bool:
    """Start a local Ray of the run's own, capped at the configured resources, or join the cluster
    of ``runtime.address``/``RAY_ADDRESS``; True when this call started Ray (the caller then shuts
    it down).

    A local Ray is started lean (``lean_head``): with the log monitor only when the actors' output
    is wanted on the console (``runtime.actor_output``), and as ``ray.init`` starts it when the
    dashboard is (``runtime.dashboard``). ``runtime.runtime_env`` (e.g. ``py_modules``) goes to
    ``ray.init``, so that every node can import the config's own code. A cluster that does not
    answer within seconds is a ConfigError (``actors.preflight.probe_ray``), not minutes of
    ``ray.init`` retrying, and so is an address where something else answers.

    A local Ray listens on the loopback interface only (``loopback_head``), collects and serves no
    metrics (``enable_metrics_collection``: else its dashboard agent serves them as Prometheus text
    to anyone, without the token), and when the user has no token of Ray's, it gets one of the run's
    in its environment (``own_token``) instead of Ray writing one to ``~/.ray/auth_token``. A
    cluster is joined as Ray joins it, with the user's token (docs/security.md, what a local run
    listens on).
    """
    if ray.is_initialized():
        return False
    quiet_worker_deaths()
    env = {"runtime_env": runtime.runtime_env} if runtime.runtime_env else {}  # the user's code on every node
    address, key = ray_address(runtime)
    if address:
        drop_own_token()  # the cluster's token is the user's, never the one a local Ray of ours had
        probe_ray(address, key)
        try:
            ray.init(address=address, logging_level="ERROR", **env)
        except ConnectionError:  # something answered, but not Ray
            raise no_cluster(address, key) from None
        return False
    own_token()
    try:
        with loopback_head(), lean_head(not runtime.dashboard, log_monitor=runtime.actor_output):
            # "local": a Ray of its own, where a plain ray.init() would join the last Ray started on
            # this machine (Ray's ``ray_current_cluster`` file), someone else's, or a dead one's address
            ray.init(address="local", num_cpus=runtime.num_cpus, num_gpus=runtime.num_gpus,
                     include_dashboard=runtime.dashboard, logging_level="ERROR", **env,
                     _system_config={"enable_metrics_collection": False})
    except BaseException:
        drop_own_token()
        raise
    return True


WORKER_DIED = "A worker died or was killed while executing a task"
RAYLET_DIED = "Raylet is terminated"  # the dashboard agent's report of its node's raylet, with its log's tail
NODE_DIED = "The node with node id"  # the GCS's report of a node whose heartbeats stopped (its raylet is gone)


def quiet_worker_deaths() -> None:
    """Keep Ray's driver from printing on stdout its 10-line "(raylet) A worker died or was killed
    ..." for a client actor that dies, and the 40-odd lines of "(raylet) Raylet is terminated ..."
    (the tail of the raylet's log, in colour) and the GCS's "(raylet) The node with node id ... has
    been marked dead" for a raylet that dies: the run either survives it (a
    restarted actor or a lost node, recorded in the text ``runtime/faults``) or stops with one line
    naming it (``raylet_died`` for this machine's raylet; its log stays in the session's folder).
    Ray's other messages print as usual."""
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "fedray_quiet", False):
        return

    def filtered(data, *args, **kwargs):
        if data.get("pid") == "raylet" and any(str(line).startswith((WORKER_DIED, RAYLET_DIED, NODE_DIED))
                                               for line in data.get("lines", ())):
            return None
        return original(data, *args, **kwargs)

    filtered.fedray_quiet = True
    worker.print_to_stdstream = filtered


@contextmanager
def lean_head(lean: bool = True, log_monitor: bool = False):
    """While ``ray.init`` starts a local head, start only what a run on this machine uses (what
    each item saves in time and memory: docs/performance.md):

    - no autoscaler monitor (nothing to scale on one machine) and, unless ``log_monitor``, no log
      monitor (the actors' stdout and stderr stay in the session's log files instead of being
      copied to the console);
    - no dashboard head process. Without the dashboard (``include_dashboard=False``) Ray still
      starts it, serving only usage statistics, and waits for it to come up;
    - the node's dashboard agent runs as in a minimal Ray install (``--minimal``: no HTTP or gRPC
      server, which only a dashboard uses), so ``ray.init`` does not import the dashboard's
      dependencies to decide that (its metrics export, which it still starts, is turned off by
      ``connect``);
    - ``ray.init`` waits for its raylet to register by asking the GCS every 20 ms, where Ray asks
      every second;
    - its processes get ``MALLOC_ARENA_MAX=2`` (unless set already): glibc's default of 8 arenas
      per core keeps freed memory of Ray's many threads resident.

    Ray's public ``init`` has no switch for any of this, so the defaults of ``RayParams``, which
    ``init`` builds, and three functions ``init`` calls are replaced for the duration of the call;
    a Ray that lacks them starts as usual."""
    from ray._private import node, parameter, services, state, utils

    original = parameter.RayParams.__init__
    if not lean or not {"include_log_monitor", "no_monitor"} <= set(inspect.signature(original).parameters):
        yield
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.setdefault("include_log_monitor", log_monitor)
        kwargs.setdefault("no_monitor", True)
        kwargs["env_vars"] = {"MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"), **(kwargs.get("env_vars") or {})}
        original(self, *args, **kwargs)

    def get_node(gcs_address: str, node_id: str):
        """``services.get_node`` (which retries in 1 s steps) once the node is registered."""
        try:
            table = state.GlobalState()
            table._initialize_global_state(services._get_gcs_client_options(gcs_address))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    n.get("NodeID") == node_id and n.get("Alive") for n in table.node_table()):
                time.sleep(0.02)
        except Exception:  # noqa: BLE001 - a Ray that differs here: Ray's own wait decides
            pass
        return registered(gcs_address, node_id)

    registered = getattr(services, "get_node", None)
    swaps = [(parameter.RayParams, "__init__", init),
             (node.Node, "start_api_server", lambda self, **kwargs: None),
             (utils, "get_dashboard_dependency_error", lambda: ImportError("no dashboard: the agent starts minimal")),
             (services, "get_node", get_node)]
    with ExitStack() as stack:
        for owner, name, replacement in swaps:
            if hasattr(owner, name):
                stack.enter_context(mock.patch.object(owner, name, replacement))
        yield


@contextmanager
def loopback_head():
    """While ``ray.init`` starts a local Ray, give its node the loopback address (127.0.0.1, or ::1
    where the machine has no IPv4), so that its GCS, raylet, object manager, agents and workers
    listen there alone: a run on one machine needs no other, and Ray's gRPC servers answer gRPC's
    health check without the token. ``ray.init`` has no switch for it (it turns a loopback
    ``_node_ip_address`` into the machine's address; only ``ray start --node-ip-address`` keeps it),
    so the default of ``RayParams.node_ip_address`` is replaced for the call; a Ray whose
    ``RayParams`` lacks it starts on the machine's address."""
    from ray._private import parameter

    original = parameter.RayParams.__init__
    if "node_ip_address" not in inspect.signature(original).parameters:
        yield
        return
    try:
        from ray._common.network_utils import get_localhost_ip
        loopback = get_localhost_ip()
    except ImportError:  # a Ray that keeps it elsewhere
        loopback = "127.0.0.1"

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        if kwargs.get("node_ip_address") is None:
            kwargs["node_ip_address"] = loopback
        original(self, *args, **kwargs)

    with mock.patch.object(parameter.RayParams, "__init__", init):
        yield


TOKEN_ENV = "RAY_AUTH_TOKEN"
_own_token: Optional[str] = None  # the token own_token put in this process's environment


def own_token() -> None:
    """Before a local Ray starts: when token authentication is not turned off (``RAY_AUTH_MODE``)
    and the user has no token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``),
    put a new random one in ``RAY_AUTH_TOKEN``, which the Ray processes started now inherit. Else
    Ray 2.60's ``ray.init`` turns token authentication on and writes a new token to
    ``~/.ray/auth_token`` (mode 0644 under the usual umask, in a 0755 folder), where it stays after
    the run and becomes the token every later ``ray`` command of the user's sends. The token leaves
    the environment with its Ray (``shutdown_ray``) and before the process joins a cluster
    (``drop_own_token``)."""
    global _own_token
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        return  # turned off by the user: Ray writes nothing either
    try:
        from ray._raylet import AuthenticationTokenLoader
        from ray._private.authentication.authentication_token_generator import generate_new_authentication_token
    except ImportError:  # a Ray without token authentication writes no token
        return
    loader = AuthenticationTokenLoader.instance()
    if _own_token is not None and os.environ.get(TOKEN_ENV) == _own_token:
        return
    loader.reset_cache()  # what the user has now, not what an earlier Ray of this process used
    if loader.has_token(ignore_auth_mode=True):
        return
    _own_token = os.environ[TOKEN_ENV] = generate_new_authentication_token()
    loader.reset_cache()


def drop_own_token() -> None:
    """Take the token of ``own_token`` out of this process's environment (once its Ray has ended, and
    before joining a cluster, whose token is the user's); nothing when it put none there."""
    global _own_token
    if _own_token is None:
        return
    if os.environ.get(TOKEN_ENV) == _own_token:
        del os.environ[TOKEN_ENV]
    _own_token = None
    with suppress(ImportError):
        from ray._raylet import AuthenticationTokenLoader
        AuthenticationTokenLoader.instance().reset_cache()


def start_server(config: Config, method: Optional[Method], run_dir: Path, resume: bool,
                 observers: Sequence[Observer] = ()):
    """The started ServerActor, pinned to this node, with its own CPU/GPU request from the config
    (an actor's CPUs when it hosts clients, ``runtime.server_hosts_clients``). A server or client
    actors that the cluster's nodes cannot hold are a ConfigError first (``check_placement``)."""
    rt = config.runtime
    here = places.server_place()  # the driver's node, or bundle 0 of a sweep trial's placement group
    hosts = check_placement(config, places.nodes(), here)
    server = ray.remote(concurrency_groups=HOST_GROUPS)(ServerActor).options(
        num_cpus=rt.server_request(hosts), num_gpus=rt.server_gpus, scheduling_strategy=places.strategy(here),
    ).remote(config, method, str(run_dir), resume, hosts, list(observers))
    try:
        unwrap(lambda: ray.get(server.start.remote()))
    except BaseException:
        ray.kill(server)  # its client actors are ended by ``start``
        raise
    return server


def shutdown_ray() -> None:
    """``ray.shutdown()``, after collecting the garbage of reference cycles while the core worker
    still runs. Whatever calls into Ray's core worker after the shutdown makes Ray end the whole
    process at once with status 1 (its ``QuickExit``, ray-project/ray#19115), and references to
    actors and objects die late when they sit in cycles (a failed task's exception, its traceback
    and the frames that hold them): then in whichever thread the collector next runs. Seen in the
    test suite: a thread drawing the partition figure ended the process 0.1 s after the shutdown,
    after its test had passed, in 1 of 3-6 runs of a test that ends with a failed task; with the
    collection first, in none of 18. The token ``own_token`` gave a local Ray leaves the process's
    environment with it."""
    gc.collect()
    ray.shutdown()
    drop_own_token()


@contextmanager
def own_session():
    """While ``ray.init`` starts a local Ray, its processes start in a session of their own, so a
    signal to the driver's process group (Ctrl-C in a terminal, ``timeout``, a scheduler's SIGTERM)
    reaches the driver alone, which then ends the round under way and writes a checkpoint (Ray
    already blocks SIGINT in them, not SIGTERM). They still end with the driver (Ray's fate sharing)."""
    from ray._private import services

    popen = getattr(services, "ConsolePopen", None)
    if popen is None:
        yield
        return

    class SessionPopen(popen):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    with mock.patch.object(services, "ConsolePopen", SessionPopen):
        yield


class RayBackend:
    """The round loop in a ServerActor, the clients on client actors (``fedray.backends.Backend``)."""

    def check(self, config: Config) -> None:
        check_ray(config)

    def start(self, config: Config, method: Optional[Method], run_dir: Path, resume: bool,
              observers: Sequence[Observer] = ()) -> Stepper:
        with own_session():
            started = connect(config.runtime)
        try:
            server = start_server(config, method, run_dir, resume, observers)
        except BaseException:
            if started:  # the actors are ended: stop Ray before its exit hook streams their teardown
                shutdown_ray()
            raise

        def finish() -> dict[str, Any]:
            summary = unwrap(lambda: ray.get(server.finish.remote()))
            if started:  # now, not at exit: Ray's exit hook first sleeps 0.5 s for log lines to print
                shutdown_ray()
            return summary

        def close() -> None:
            ray.kill(server)  # its client actors, which it owns, end with it
            if started:
                shutdown_ray()

        def ask(call) -> Callable[[], Any]:
            return lambda: unwrap(lambda: ray.get(call.remote()))

        return Stepper(ask(server.current_round), ask(server.run_round), finish, ask(server.checkpoint),
                       ask(server.cohort_refusal)(), close)


RAY = RayBackend()


def unwrap(call: Callable[[], Any]) -> Any:
    """``call()``, with Ray's errors turned into the original exception plus the remote traceback; an
    actor that could not import the config's own code (the user's module is not on that node) is a
    ConfigError saying how to send it there."""
    try:
        return call()
    except RayTaskError as err:
        raise RemoteError(not_importable(err) or task_cause(err), str(err)) from None
    except RayActorError as err:
        raise RemoteError(not_importable(err) or raylet_died()
                          or ServerActorDied(f"the server actor died: {one_line(err)}"), str(err)) from None


def raylet_died(wait_s: float = 1.0) -> Optional[RayletDied]:
    """The RayletDied to report when the raylet of the local Ray this process started has ended
    (waiting up to ``wait_s`` for its exit to show: the actors' sockets close as it dies); None while
    it runs, and for a cluster's node (that is a lost node, which the executor handles)."""
    from ray._private import ray_constants, worker

    node = getattr(worker, "_global_node", None)
    try:
        raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        logs = node.get_logs_dir_path()
    except AttributeError:  # no node of this process's, or a Ray that keeps them elsewhere
        return None
    for info in raylets:
        try:
            code = info.process.wait(wait_s)
        except Exception:  # noqa: BLE001 - still running (TimeoutExpired), or not a process of ours
            continue
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"ended with status {code}")
        return RayletDied(f"the raylet of the run's local Ray (pid {info.process.pid}) {how} and took the run's "
                          f"actors with it; its log: {os.path.join(logs, 'raylet.out')}")
    return None


def not_importable(err: BaseException) -> Optional[ConfigError]:
    """The ConfigError for an actor that died unpickling the user's code: Ray reports it as a
    ModuleNotFoundError deep in the actor's creation task."""
    missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", str(err))
    if missing is None:
        return None
    return ConfigError(f"the run's actors cannot import module {missing[1]!r}, which the config names: send it to "
                       f"the cluster's nodes with runtime.runtime_env (e.g. {{py_modules: [{missing[1].split('.')[0]}]}}) "
                       f"or ray job submit --working-dir (docs/extending.md, where your code runs)")


def task_cause(err: BaseException) -> BaseException:
    """The original exception under Ray's task-error wrappers (a client's error passes two actors);
    ``fedray.runner.root_cause`` then looks under fedray's own wrappers."""
    while isinstance(err, RayTaskError) and getattr(err, "cause", None) is not None and err.cause is not err:
        err = err.cause
    return err
