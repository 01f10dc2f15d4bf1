"""RayExecutor: the executor (``fedray.executor.Executor``) that runs the preparation's and each round's
tasks on the client actors (``actors.client``). Which actor runs which task is ``actors.dispatch``;
a round's calls and answers are ``actors.rounds``; surviving a lost actor is ``actors.recovery``."""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import RayError

from actors import places
from actors.client import ClientPool, stop
from actors.dispatch import Dispatcher
from actors.placement import assign_clients
from actors.recovery import ActorSet, ClientActorLost
from actors.rounds import RoundRun, RoundTimeout
from fedray.clients import client_major
from fedray.config import Config
from fedray.executor import EvalPart, Executor
from fedray.fold import fold_groups
from fedray.messages import ClientSpec, ClientUpdate, RoundPlan
from fedray.resolve import Method
from fedray.round import Answers
from fedray.weights import Weights


class RayExecutor(Executor):
    """Starts the client actors and runs each round's tasks on them.

    The actors are planned from the nodes' resources (``actors.placement``): spread over the
    nodes, each pinned to its node, as many per node as its CPUs (and GPU shares) hold; the
    ServerActor may be one of them (``runtime.server_hosts_clients``). The
    training set is put in the object store once, client after client, and every actor reads its
    clients' shards from it as zero-copy slices. Each client has a home actor (round-robin) that
    keeps its shard and persistent state. Each round, every broadcast payload is put once (one per
    architecture), and tasks go to the actors in batches, several per call, so that a round of many
    small tasks is not a round of many round trips (``actors.dispatch``):

    - a stateful method's tasks, or all tasks when the user fixed ``clients_per_actor``, run on
      their clients' home actors, one batch per actor;
    - otherwise (``auto`` and a stateless method) the tasks, longest first, go out in batches that
      shrink as the round empties, and every actor that may run them (per architecture with
      per-architecture GPU shares) keeps two batches queued, so it starts the next batch, its
      payloads already fetched, the moment it ends one.

    An actor that dies is set up again, and one whose node left hands its clients to the others
    (``actors.recovery.ActorSet``); its lost tasks run again and the run goes on until no actor
    that may take them is left.
    """

    def __init__(self, config: Config, method: Method, specs: list[ClientSpec], data,
                 initial_models: dict[str, Any] | None = None, pool: ClientPool | None = None):
        pool = pool or ClientPool(config, [spec.arch for spec in specs])
        slots, actors = pool.slots, pool.actors
        groups = assign_clients(specs, slots)
        for slot, actor in [(s, a) for s, a, g in zip(slots, actors, groups) if not g]:
            if not slot.server:
                ray.kill(actor)  # planned from the config's clients, left without one (a pooled baseline)
        slots, actors = [s for s, g in zip(slots, groups) if g], [a for a, g in zip(actors, groups) if g]
        x, y, spans = client_major(data.train_x, data.train_y, specs)
        x_ref, y_ref, specs_ref, spans_ref = ray.put(x), ray.put(y), ray.put(specs), ray.put(spans)
        del x, y  # the object store holds them now
        aux_ref, initial_ref = ray.put(data.aux_x), ray.put(initial_models)
        # the test set, for evaluations spread over the hosts (``evaluate``): fetched by a host when
        # it is first asked, so it travels once to each
        self.test_ref, self.test_size = ray.put((data.test_x, data.test_y)), len(data.test_y)
        groups = assign_clients(specs, slots)
        # what each actor's ``setup`` got: a restarted actor gets it again (the object refs keep the
        # training set in the object store for that)
        setup_args = [((config, method, specs_ref, x_ref, y_ref, data.num_classes, slot.gpus,
                        [c.client_id for c in group]),
                       {"aux_x": aux_ref, "initial_models": initial_ref, "spans": spans_ref})
                      for slot, group in zip(slots, groups)]
        self.live = ActorSet(pool.nodes, slots, actors, groups, setup_args, config.runtime.actor_restarts)
        self.timeout = config.runtime.round_timeout_s
        self.received = 0  # bytes of the answers that reached the server since ``take_received``
        fold_group = fold_groups([spec.client_id for spec in specs], config.runtime.fold_groups)
        self.dispatch = Dispatcher(self.live, {spec.client_id: spec.num_samples for spec in specs}, fold_group,
                                   config.runtime.fold_groups)
        # an explicit clients_per_actor is a layout the user asked for: keep every client at home
        self.pinned = method.keeps_state(config) or config.runtime.clients_per_actor != "auto"
        # actors that train their tasks as cohorts get them all at once (a cohort per call, not a task)
        self.together = method.vectorizes(config.runtime)
        self.collection = method.collection(config.runtime)  # the hosts sum the statistics, or gather them
        self.live.placements, _ = self.live.on_each(self.live.setup, "start-up")

    @property
    def actors(self) -> list:
        """The live client actors' handles, in actor order."""
        return self.live.actors

    def prepare(self, plan: RoundPlan) -> list[ClientUpdate]:
        return self._run(plan, "prepare_batch").updates

    def execute(self, plan: RoundPlan) -> Answers:
        """The round on the actors, its statistics summed there (``fedray.fold``) or gathered.
        Summed where any actor may run any client, a batch is a block of the fold tree
        (``runtime.fold_groups`` groups of client ids, added pairwise in a fixed tree): a host sends
        one sum per block and the server adds blocks to their siblings as they come, so the sums
        are those of the local backend to the last bit, whichever actor ran which block, and a run
        that lost a node ends where the undisturbed run ends. Where the clients stay at home or train as cohorts, one unit per actor, added in actor
        order, so a run that lost a node (fewer actors, clients on new homes, a lost unit run again
        in parts) differs from the undisturbed run by rounding."""
        return self._run(plan, "collect_batch")

    def _run(self, plan: RoundPlan, call: str) -> Answers:
        run = RoundRun(self.live, self.dispatch, plan, call, self.collection, pinned=self.pinned,
                       together=self.together, timeout=self.timeout)
        try:
            return run.run()
        finally:
            self.received += run.received

    def take_faults(self) -> tuple[list[str], int]:
        return self.live.take_faults()

    def take_received(self) -> int:
        received, self.received = self.received, 0
        return received

    def client_states(self) -> dict[int, dict[str, Any]]:
        """Every client's state, for the checkpoint; kept (in the object store) for actors set up
        again and for clients handed over. An actor's part is kept where it was made when that is
        the server's node; one from another node is put again here: a node that leaves takes its
        copy along."""
        parts, refs = self.live.on_each(lambda i: self.live.actors[i].client_states.remote(), "checkpoint")
        states: dict[int, dict[str, Any]] = {}
        for part in parts:
            states.update(part)
        here = places.server_place()
        self.live.saved = [ref if slot.node_id == here else ray.put(part)
                           for slot, ref, part in zip(self.live.slots, refs, parts)]
        return states

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self.live.saved = [ray.put(states)]
        self.live.on_each(lambda i: self.live.actors[i].load_client_states.remote(self.live.saved[0]), "resume")

    def node_ids(self) -> list[str]:
        return self.live.on_each(lambda i: self.live.actors[i].node_id.remote(), "placement check")[0]

    def evaluate(self, arch: str, weights: Weights, group: int, batch_size: int,
                 num_classes: int = 0) -> list[EvalPart] | None:
        """The evaluation's batches cut into equal runs, one per actor in actor order, each host
        evaluating its run with its own threads while the others do theirs. The parts are added in
        batch order (``combine_parts``), so the result is the single pass's, whichever actors
        there are. An actor that fails meanwhile (lost, or restarted and not yet set up again)
        leaves this evaluation to the server (None); the next round meets the fault as ever."""
        actors = self.live.actors
        batches = -(-self.test_size // batch_size)
        cuts = [batches * i // len(actors) for i in range(len(actors) + 1)]
        model = ray.put(weights)
        # the test set's ref inside a list, so that Ray hands it over unfetched: a host gets it once
        calls = [actor.evaluate_part.remote(arch, model, group, [self.test_ref], first, stop, batch_size, num_classes)
                 for actor, first, stop in zip(actors, cuts, cuts[1:]) if first < stop]
        try:
            return ray.get(calls, timeout=self.timeout)
        except RayError:  # GetTimeoutError too
            return None

    def describe(self) -> dict[str, Any]:
        live = self.live
        per_node: dict[str, int] = {}
        for slot in live.slots:
            per_node[live.node_name(slot.node_id)] = per_node.get(live.node_name(slot.node_id), 0) + 1
        devices: dict[str, int] = {}
        for where in live.placements:
            devices[where["device"]] = devices.get(where["device"], 0) + 1
        out = {"backend": "ray", "actors": len(live.actors), "actors_per_node": per_node, "devices": devices,
               "clients_per_actor": [len(g) for g in live.groups],
               "server_hosts_clients": any(slot.server for slot in live.slots)}
        if any(slot.node_id.startswith(places.BUNDLE) for slot in live.slots):  # a sweep's trial: where its bundles were
            out["bundle_nodes"] = {slot.node_id: where["node"][:8] for slot, where in zip(live.slots, live.placements)
                                   if where}
        return out

    def shutdown(self) -> None:
        stop(self.live.slots, self.live.actors)


__all__ = ["ClientActorLost", "RayExecutor", "RoundTimeout"]
