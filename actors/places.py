"""Where a run's actors may go: the cluster's alive nodes, or, when the run itself runs inside a
placement group (a trial of ``fedray sweep``, which Ray Tune starts in a group of its own), that
group's bundles.

Inside a group every bundle is a place of its own, named ``bundle:<index>``: bundle 0 takes the
server actor, the others one client actor each (``actors.sweep.trial_bundles`` lays them out so).
The planner (``actors.placement.plan_actors``) sees the bundles as nodes, so a trial's actors are
planned by the same rules as a run's, and they start inside the resources Tune reserved for the
trial: concurrent trials never take each other's CPUs. Ray moves a group's bundles off a node that
dies, so inside a group no place is ever lost for good (its actors restart instead).
"""

from __future__ import annotations

import ray
from ray.util import get_current_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from actors.placement import Node, alive_nodes

BUNDLE = "bundle:"


def group():
    """The placement group this process runs in (and its actors start in), or None."""
    return get_current_placement_group()


def nodes() -> list[Node]:
    """The places for the run's actors: the group's bundles, else the cluster's alive nodes."""
    pg = group()
    if pg is None:
        return alive_nodes(ray.nodes())
    return [Node(f"{BUNDLE}{i}", float(spec.get("CPU", 0.0)), float(spec.get("GPU", 0.0)), address="trial")
            for i, spec in enumerate(pg.bundle_specs)]


def server_place() -> str:
    """The server actor's place: bundle 0 of the group, else the driver's node."""
    return f"{BUNDLE}0" if group() is not None else ray.get_runtime_context().get_node_id()


def alive() -> set[str]:
    """The places that are alive now (every bundle of a group)."""
    return {n.node_id for n in nodes()}


def strategy(place: str, soft: bool = False):
    """The scheduling strategy that starts an actor at ``place``."""
    if place.startswith(BUNDLE):
        return PlacementGroupSchedulingStrategy(group(), placement_group_bundle_index=int(place[len(BUNDLE):]),
                                                placement_group_capture_child_tasks=True)
    return NodeAffinitySchedulingStrategy(node_id=place, soft=soft)
