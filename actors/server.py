"""ServerActor: the round loop (``fedray.federation.Federation``) inside a Ray actor.

It is pinned to the driver's node, so event files, checkpoints and ``result.json`` land in the run
folder the user named, also when the run is a ``ray job submit`` on a cluster. The round loop and
torch are imported in ``start``, in the actor: the driver that defines the actor imports neither.
The constructor starts the client actors, so their processes start while ``start`` works. With
``runtime.server_hosts_clients`` the server hosts clients too (``actors.client.HostActor``): its own
handle is one actor of the pool, and its host methods run in their own thread while the round
waits for them, so a 2-core machine runs one torch process less.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import ray

from actors.client import HostActor, release_free_memory
from fedray.config import Config
from fedray.messages import RoundResult

if TYPE_CHECKING:
    from fedray.resolve import Method
    from fedray.observers import Observer
    from fedray.federation import Federation


class ServerActor(HostActor):
    """``start`` builds the federation, so a failure there (a bad method, missing data, actors
    that do not fit) reaches the driver as an ordinary task error. Created with ``HOST_GROUPS``."""

    def __init__(self, config: Config, method: Optional[Method], run_dir: str, resume: bool = False,
                 hosts_clients: bool = False, observers: Sequence[Observer] = ()):
        """Stores its arguments and starts the client actors' processes (``actors.client``), so they
        start while ``start`` imports torch and loads the data; a pool that does not fit is
        reported by ``start``. ``hosts_clients``: this actor is one host of the pool. ``observers``:
        the user's, added to the round loop's (``fedray.observers``)."""
        from actors.client import ClientPool

        self.args = (config, method, run_dir, resume, observers)
        self.federation: Federation | None = None
        me = ray.get_runtime_context().current_actor if hosts_clients else None
        try:
            self.pool, self.launch_error = ClientPool(config, config.federation.client_archs(), server=me), None
        except ValueError as err:
            self.pool, self.launch_error = None, err

    def start(self) -> int:
        """Resolve the method (when the driver did not: a bad one fails here, before the run folder
        is made), then assemble the experiment on the started client actors and build its round
        loop; returns the round it starts from."""
        from functools import partial

        from actors.executor import RayExecutor
        from actors.tree import tree_actor_factory
        from fedray.assembly import assemble
        from fedray.resolve import resolve
        from fedray.federation import Federation

        config, method, run_dir, resume, observers = self.args
        try:
            method = method or resolve(config)
            if self.launch_error is not None:
                raise self.launch_error
            # torch's thread count is per thread once set: Federation sets the server's in this thread,
            # and when the server hosts clients, ClientHost sets a client actor's in the host thread
            experiment = assemble(config, partial(RayExecutor, pool=self.pool), method=method,
                                  tree_factory=tree_actor_factory())
            self.federation = Federation(experiment, run_dir, resume=resume, observers=observers)
        except BaseException:
            if self.pool is not None:  # the run will not start: end its client actors now
                self.pool.shutdown()
            raise
        release_free_memory()  # what loading the data and putting it in the object store left
        return self.federation.round

    def cohort_refusal(self) -> Optional[str]:
        """Why the clients do not train as cohorts under ``runtime.vectorize`` (``Method.cohort_refusal``)."""
        return self.federation.experiment.method.cohort_refusal

    def current_round(self) -> int:
        return self.federation.round

    def run_round(self) -> RoundResult:
        try:
            return self.federation.run_round()
        finally:
            release_free_memory()

    def checkpoint(self) -> int:
        """Write the checkpoint of the round now (the driver stops on a signal); returns the round."""
        self.federation.save_checkpoint()
        return self.federation.round

    def assigned_resources(self) -> dict[str, float]:
        """The CPUs and GPU share Ray gave this actor (``runtime.server_cpus``/``server_gpus``)."""
        return dict(ray.get_runtime_context().get_assigned_resources())

    def client_node_ids(self) -> list[str]:
        return self.federation.executor.node_ids()

    def finish(self) -> dict[str, Any]:
        return self.federation.finish()
