"""The parameter tree of Clustered FL (thesis section 6.4.3, Fig. 6.5).

A node is a cluster: its clients and its model. The root is the whole population; a split turns a
leaf into an inner node whose model stays frozen as the pre-split (stationary) solution theta_v*,
and gives it two children that start from that model. The edge to each child caches the child's
clients' pre-split updates (eq. 6.42), which is what a new client is compared with when it
descends the tree (Alg. 13). A client's root-to-leaf path gives it models of increasing
specificity. In Byzantine mode a split keeps only the larger child (eq. 6.50); the smaller one
stays in the tree, marked ``dropped``, and its clients train no more.

The CFL strategy talks to the tree twice a round, which matters when the tree lives in its own
actor: ``view()`` hands out the tree's shape and the active clusters' models (no cached updates),
and ``apply()`` takes the round's new models and splits in one batch.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from fedray.clustering import cosine_similarities
from fedray.figures import tree_figure
from fedray.weights import Weights


@dataclass
class TreeNode:
    node_id: int
    clients: list[int]
    model: Weights
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    created: int = 0  # round of the split that made it (0 for the root)
    edge_updates: np.ndarray | None = None  # the clients' pre-split updates, one row each (eq. 6.42)
    dropped: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def info(self) -> "NodeInfo":
        return NodeInfo(self.node_id, tuple(self.clients), self.parent, tuple(self.children), self.created,
                        self.dropped)


@dataclass(frozen=True)
class NodeInfo:
    """A node's place in the tree, without its model and cached updates."""

    node_id: int
    clients: tuple[int, ...]
    parent: int | None
    children: tuple[int, ...]
    created: int
    dropped: bool

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class Split:
    """A split of leaf ``node`` into clients ``c1`` and ``c2``, with every client's pre-split update."""

    node: int
    c1: list[int]
    c2: list[int]
    updates: dict[int, np.ndarray]


@dataclass
class TreeView:
    """What a round needs of the tree: the nodes' places and the active clusters' models."""

    nodes: dict[int, NodeInfo]
    models: dict[int, Weights]

    def leaves(self) -> list[int]:
        """The active clusters: leaves that were not dropped, by id."""
        return [n.node_id for n in self.nodes.values() if n.is_leaf and not n.dropped]

    def clusters(self) -> dict[int, list[int]]:
        """Active cluster id -> its clients."""
        return {v: list(self.nodes[v].clients) for v in self.leaves()}

    def leaf_of(self) -> dict[int, int]:
        """Client -> the leaf it ended in: its active cluster, or the dropped one."""
        return {i: n.node_id for n in self.nodes.values() if n.is_leaf for i in n.clients}

    def num_splits(self) -> int:
        """How many clusters were split so far (the inner nodes)."""
        return sum(1 for n in self.nodes.values() if n.children)

    def after(self, nodes: dict[int, NodeInfo], trained: dict[int, Weights]) -> "TreeView":
        """The view once ``apply`` stored the ``trained`` models and made ``nodes``: a split's children
        start from their parent's new model (eq. 6.49), every other cluster keeps its model."""
        known = {**self.models, **trained}
        models = {v: known[v] if v in known else known[nodes[v].parent] for v in nodes
                  if nodes[v].is_leaf and not nodes[v].dropped}
        return TreeView(nodes, models)

    def describe(self) -> str:
        """The tree as indented text: one line per node."""
        lines = []
        for v, depth in self.preorder():
            n = self.nodes[v]
            tag = " dropped" if n.dropped else (" active" if n.is_leaf else "")
            lines.append(f"{'  ' * depth}cluster {v} (round {n.created}, {len(n.clients)} clients{tag}): "
                         f"{id_ranges(list(n.clients))}")
        return "\n".join(lines)

    def figure(self, title: str = ""):
        """The tree drawn (:func:`fedray.figures.tree_figure`)."""
        return tree_figure(self, title)

    def preorder(self) -> list[tuple[int, int]]:
        """(node, depth) from the root, children in split order."""
        order, stack = [], [(0, 0)]
        while stack:
            v, depth = stack.pop()
            order.append((v, depth))
            stack.extend((c, depth + 1) for c in reversed(self.nodes[v].children))
        return order


class ParameterTree:
    """Clusters, their models and the history of splits.

    Args:
        clients: the ids of every client (the root cluster).
        model: the initial model theta_0 of the root.
    """

    def __init__(self, clients: list[int], model: Weights):
        self.nodes: dict[int, TreeNode] = {0: TreeNode(0, sorted(clients), copy.deepcopy(model))}

    # -- queries ---------------------------------------------------------------------------------
    def view(self) -> TreeView:
        """The nodes' places and the active clusters' models: what the CFL strategy reads each round."""
        return TreeView({v: n.info() for v, n in self.nodes.items()}, self.models())

    def _shape(self) -> TreeView:
        return TreeView(self.nodes, {})  # the nodes themselves: queries need no copies

    def leaves(self) -> list[int]:
        """The active clusters: leaves that were not dropped, by id."""
        return self._shape().leaves()

    def clusters(self) -> dict[int, list[int]]:
        """Active cluster id -> its clients."""
        return self._shape().clusters()

    def cluster_of(self, client: int) -> int | None:
        """The active leaf holding ``client``, or None if it was dropped."""
        return next((v for v in self.leaves() if client in self.nodes[v].clients), None)

    def leaf_of(self) -> dict[int, int]:
        """Client -> the leaf it ended in: its active cluster, or the dropped one."""
        return self._shape().leaf_of()

    def num_splits(self) -> int:
        """How many clusters were split so far (the inner nodes)."""
        return self._shape().num_splits()

    def model(self, node: int) -> Weights:
        return self.nodes[node].model

    def models(self) -> dict[int, Weights]:
        """Every active cluster's model, by cluster id."""
        return {v: self.nodes[v].model for v in self.leaves()}

    def set_models(self, models: dict[int, Weights]) -> None:
        """Store the clusters' models after a round of training (only leaves change)."""
        for node, weights in models.items():
            if not self.nodes[node].is_leaf:
                raise ValueError(f"cluster {node} was split; its model is frozen")
            self.nodes[node].model = weights

    def path(self, client: int) -> list[int]:
        """Node ids from the root to the leaf (active or dropped) that holds ``client``."""
        leaf = next(n.node_id for n in self.nodes.values() if n.is_leaf and client in n.clients)
        path = [leaf]
        while self.nodes[path[-1]].parent is not None:
            path.append(self.nodes[path[-1]].parent)
        return path[::-1]

    # -- changes ---------------------------------------------------------------------------------
    def apply(self, models: dict[int, Weights], splits: list[Split], round: int, keep: str = "both"
              ) -> dict[int, NodeInfo]:
        """One round's changes at once: the clusters' new models, then the splits (each child starts
        from its parent's new model). Returns the nodes' places afterwards (``TreeView.after``)."""
        self.set_models(models)
        for s in splits:
            self.split(s.node, s.c1, s.c2, s.updates, round, keep)
        return {v: n.info() for v, n in self.nodes.items()}

    def split(self, node: int, c1: list[int], c2: list[int], updates: dict[int, np.ndarray], round: int,
              keep: str = "both") -> list[int]:
        """Split leaf ``node`` into children with clients c1 and c2; returns the children's ids.

        ``updates`` maps each of the node's clients to its pre-split update (cached on the edges).
        ``keep="larger"`` is the Byzantine-robust rule (eq. 6.50): the smaller child is dropped
        (ties keep c1).
        """
        parent = self.nodes[node]
        if not parent.is_leaf or parent.dropped:
            raise ValueError(f"cluster {node} is not an active leaf")
        if sorted(list(c1) + list(c2)) != parent.clients or not c1 or not c2:
            raise ValueError(f"children {sorted(c1)} and {sorted(c2)} do not bipartition cluster {node}")
        if keep not in ("both", "larger"):
            raise ValueError(f"keep must be 'both' or 'larger', got {keep!r}")
        children = []
        for members in (sorted(c1), sorted(c2)):
            cached = np.stack([np.asarray(updates[i], dtype=np.float32) for i in members])  # as uploaded
            child = TreeNode(max(self.nodes) + 1, members, dict(parent.model), node, created=round,
                             edge_updates=cached)
            self.nodes[child.node_id] = child
            parent.children.append(child.node_id)
            children.append(child.node_id)
        if keep == "larger":
            small = children[1] if len(c2) <= len(c1) else children[0]
            self.nodes[small].dropped = True
        return children

    def children(self, node: int) -> list[int]:
        return list(self.nodes[node].children)

    def closer_child(self, node: int, update: np.ndarray) -> int:
        """Alg. 13's step: the child of ``node`` whose cached pre-split updates hold the one most
        similar to ``update`` (a new client's update at theta_node*)."""
        update = np.asarray(update, dtype=np.float64)
        best = []
        for child in self.nodes[node].children:
            cached = self.nodes[child].edge_updates
            best.append(cosine_similarities(np.vstack([update[None], cached]))[0, 1:].max())
        return self.nodes[node].children[int(np.argmax(best))]

    def assign(self, update_at: Callable[[Weights], np.ndarray]) -> int:
        """Algorithm 13: the leaf a new client belongs to.

        ``update_at(theta)`` is the new client's update SGD(theta, D_new) - theta, flattened (and
        privacy-transformed like the cached ones). At each inner node v the client moves to the
        child whose cached pre-split updates hold the one most similar to its update at theta_v*.
        """
        return descend(self, update_at)

    # -- display, checkpoints --------------------------------------------------------------------
    def describe(self) -> str:
        """The tree as indented text: one line per node."""
        return self._shape().describe()

    def figure(self, title: str = ""):
        """The tree drawn (``TreeView.figure``)."""
        return self._shape().figure(title)

    def state_dict(self) -> dict[str, Any]:
        """The nodes, sharing their arrays with the tree: a node's model is replaced, never changed in
        place, and cached updates never change, so copying them (often gigabytes under Byzantine
        splits: every split caches its cluster's updates) would only cost memory."""
        return {"nodes": {v: _copy_node(n) for v, n in self.nodes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nodes = {v: _copy_node(n) for v, n in state["nodes"].items()}


def _copy_node(node: TreeNode) -> TreeNode:
    return dataclasses.replace(node, clients=list(node.clients), model=dict(node.model),
                               children=list(node.children))


def id_ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], None
    for i, v in enumerate(ids):
        if start is None:
            start = v
        if i + 1 == len(ids) or ids[i + 1] != v + 1:
            out.append(f"{start}-{v}" if v > start else f"{v}")
            start = None
    return ", ".join(out)


def descend(tree, update_at: Callable[[Weights], np.ndarray]) -> int:
    """Alg. 13 on a ParameterTree or its actor proxy: from the root, move to the closer child until
    a leaf. The new client's updates are computed here, where its data is, not inside the tree."""
    v = 0
    while tree.children(v):
        v = tree.closer_child(v, update_at(tree.model(v)))
    return v
