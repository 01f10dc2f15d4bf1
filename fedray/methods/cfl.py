"""Clustered Federated Learning: thesis Algorithm 12 (p. 79), with Alg. 11's recursion as an option.

    init: C = {{1..M}}, theta_c = theta_0, optional orthonormal P (section 6.4.2)
    every round, for every cluster c in C and every client i in c:            # configure_round
        theta_i <- theta_c;  dtheta_i <- P (SGD(theta_i, D_i) - theta_i)          # CFLClient.upload
    server, for every cluster c:                                               # aggregate
        dtheta_c <- 1/|c| sum_{i in c} dtheta_i   (|D_i|-weighted with weighted: true, as Alg. 10)
        theta_c  <- theta_c + P^-1 dtheta_c
        if ||dtheta_c|| < eps1 and max_i ||dtheta_i|| > eps2:                      # (6.28), (6.29)
            c1, c2 <- argmin-max bipartition of the cosine similarities (Alg. 9)     # eq. 6.39
            if alpha_cross(c1, c2) < alpha_thresh:                                 # eq. 6.34
                replace c by c1, c2 (both start from theta_c)                        # (6.49)
                or, Byzantine-robust, by the larger of the two only                  # (6.50)

The server sees only P dtheta_i; norms and similarities are those of dtheta_i. In Alg. 12 each
client adds P^-1 dtheta_c to its own copy of theta; since all clients of a cluster hold the same
copy, the server here applies that step once to the cluster's model, which it then broadcasts.

``schedule: recursive`` is Alg. 11 run round by round: one cluster at a time trains to a
stationary point (||dtheta_c|| < eps1), is split or finished, and its children (which start from
its theta*) go next, depth first.

The clusters, their models and the split history live in a :class:`ParameterTree` (a
``ParameterTreeActor`` under Ray). The strategy reads it once a round (``view``: the clusters and
their models) and writes once (``apply``: the new models and the splits). ``eps1``/``eps2`` left unset follow the thesis's advice
(section 6.5): eps1 = eps1_fraction * max_t ||dtheta_c^t||, the largest cluster update so far (in
practice the root's first rounds; thesis: a tenth, "as small as runtime allows", so short runs need a
larger fraction), and eps2 = eps2_factor * eps1 (thesis: 1 to 10).

CFL does not fold (``fedray.fold``): the split criterion needs every client's own update, its norm
(6.29) and its cosine similarity with every other client's of the cluster (eq. 6.39), which no sum
over the clients gives; so each P dtheta_i travels to the server whole.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Optional

import numpy as np
from pydantic import Field

from fedray.clustering import OrthonormalTransform, alpha_threshold, decide_split
from fedray.config import Config
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, Params, ServerContext, Strategy, Trained, VirtualClient, task_seed
from fedray.parameter_tree import ParameterTree, Split, TreeView
from fedray.round import Each, Round, Statistics
from fedray.weights import Weights, is_update


class CFLParams(Params):
    eps1: Optional[float] = Field(None, gt=0)
    eps2: Optional[float] = Field(None, gt=0)
    eps1_fraction: float = Field(0.1, gt=0, le=1)  # automatic eps1 = this * max_t ||dtheta_c^t|| (thesis: 1/10)
    eps2_factor: float = Field(2.0, ge=1)  # automatic eps2 = this * eps1 (thesis: 1 to 10)
    alpha_thresh: float = Field(0.02, ge=-1, le=1)
    gamma_max: Optional[float] = Field(None, ge=0, le=1)  # if set: alpha_thresh = 1 - 2 gamma_max^2
    bipartition: Literal["optimal", "complete"] = "optimal"
    privacy: Literal["none", "permutation", "orthonormal"] = "none"
    byzantine: bool = False  # keep only the larger child of a split (eq. 6.50)
    schedule: Literal["parallel", "recursive"] = "parallel"
    weighted: bool = False
    norm_criteria: bool = True  # false: split whenever alpha_cross < alpha_thresh (section 6.7's setting)
    split_after: int = Field(0, ge=0)  # no split before this round (the authors' demo: 20)
    min_cluster_size: int = Field(2, ge=2)  # clusters smaller than this are not split


def float_names(weights: Weights) -> list[str]:
    """The tensors that take part in updates and similarities (floating ones, in model order)."""
    return [k for k, v in weights.items() if is_update(v)]


def flatten_update(trained: Weights, theta: Weights) -> np.ndarray:
    return np.concatenate([(trained[k] - theta[k]).ravel() for k in float_names(theta)]).astype(np.float64)


def add_flat(theta: Weights, delta: np.ndarray) -> Weights:
    """theta + delta, delta being a flat vector over the floating tensors."""
    out, start = dict(theta), 0
    for k in float_names(theta):
        size = theta[k].size
        out[k] = (theta[k] + delta[start:start + size].reshape(theta[k].shape)).astype(theta[k].dtype)
        start += size
    return out


class CFLClient(Client):
    """dtheta_i <- P (SGD(theta_c, D_i) - theta_c); uploads it as float32."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._transforms: dict[int, OrthonormalTransform] = {}

    def transform(self, dim: int) -> OrthonormalTransform:
        if dim not in self._transforms:  # P from the seed all clients share
            self._transforms[dim] = OrthonormalTransform(self.params.privacy, dim, self.config.seed)
        return self._transforms[dim]

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> np.ndarray:
        delta = flatten_update(local.weights, theta)
        return self.transform(delta.size).apply(delta).astype(np.float32)

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"update": Each}  # the server needs each client's update (Alg. 11's cosine similarities)

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """dtheta_i, with c_i = |D_i| (``weighted``) or 1 for the cluster's mean."""
        weight = float(update.num_samples) if self.params.weighted else 1.0
        return {"update": Each(update.payload, weight)}

    def update_at(self, task: ClientTask, theta: Weights, client: VirtualClient) -> np.ndarray:
        """The client's transformed update at ``theta`` (a new client descending the tree, Alg. 13)."""
        return self.upload(task, theta, self.train(task, theta, client), client)


class CFL(Strategy):
    name = "cfl"
    description = "CFL: clusters of clients train apart; a stalled cluster splits by its updates' cosine similarity"
    paper = ('Sattler, Müller, Samek 2020, "Clustered Federated Learning: Model-Agnostic Distributed Multitask '
        'Optimization Under Privacy Constraints", IEEE TNNLS; thesis Alg. 12, Alg. 11 with schedule: recursive')
    Params = CFLParams
    Client = CFLClient

    @classmethod
    def config_problem(cls, config: Config, params: CFLParams) -> Optional[str]:
        fed = config.federation
        if len(fed.architectures) != 1:
            return (f"bad config value federation.architectures: cfl compares updates of one architecture; "
                    f"got {', '.join(fed.architectures)}")
        if params.schedule == "parallel" and fed.clients_per_round != fed.num_clients:
            return (f"bad config value federation.clients_per_round = {fed.clients_per_round}: cfl trains every "
                    f"client each round (Alg. 12): set it to num_clients = {fed.num_clients}")
        return None

    def __init__(self, params: CFLParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.arch = next(iter(self.models))
        self.threshold = alpha_threshold(params.gamma_max) if params.gamma_max is not None else params.alpha_thresh
        make_tree = ctx.tree_factory or ParameterTree
        self.tree = make_tree([c.client_id for c in ctx.clients], self.models[self.arch])
        self.view: TreeView = self.tree.view()
        self.dim = sum(self.models[self.arch][k].size for k in float_names(self.models[self.arch]))
        self.transform = OrthonormalTransform(params.privacy, self.dim, self.config.seed)
        self.max_mean_norm = 0.0  # over all clusters and rounds so far, for the automatic eps1
        self.finished: list[int] = []  # recursive schedule: clusters that reached their stationary point
        self.changed = True  # the tree changed since it was last drawn

    # -- rounds ----------------------------------------------------------------------------------
    def training_clusters(self) -> list[int]:
        leaves = [v for v in self.view.leaves() if v not in self.finished]
        if self.params.schedule == "recursive":
            return leaves[:1]  # depth first: children get higher ids than every earlier node
        return leaves

    def configure_round(self, round: int) -> RoundPlan:
        self.view = self.tree.view()  # the round's one read of the tree
        clusters = self.view.clusters()
        tasks, broadcast = [], {}
        for v in self.training_clusters():
            key = f"model/cluster{v}"
            broadcast[key] = self.view.models[v]
            tasks += [ClientTask(i, round, self.arch, (key,), task_seed(self.config.seed, round, i))
                      for i in clusters[v]]
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def aggregate(self, round: Round) -> dict[str, float]:
        by_id = {i.client_id: i for i in round.each("update")}
        clusters = self.view.clusters()
        metrics: dict[str, float] = {}
        new_models, splits = {}, []
        for v in self.training_clusters():
            members = [i for i in clusters[v] if i in by_id]
            if not members:
                continue
            rows = np.stack([by_id[i].value.astype(np.float64) for i in members])
            coef = np.array([by_id[i].weight for i in members])
            mean = (coef / coef.sum()) @ rows
            new_models[v] = add_flat(self.view.models[v], self.transform.invert(mean))
            decision, eps1, eps2, may_split = self._decide(v, rows, mean, round.number, len(members))
            metrics.update(self._cluster_metrics(v, decision, eps1, eps2))
            if decision.split:
                splits.append(Split(v, [members[j] for j in decision.c1], [members[j] for j in decision.c2],
                                    {i: by_id[i].value for i in members}))
            elif self.params.schedule == "recursive" and may_split and decision.mean_norm < eps1:
                self.finished.append(v)  # Alg. 11's else-branch: this cluster keeps theta*
        keep = "larger" if self.params.byzantine else "both"
        self.view = self.view.after(self.tree.apply(new_models, splits, round.number, keep), new_models)  # one write
        self.changed = self.changed or bool(splits)
        metrics.update(round.mean_loss())
        metrics.update(self._population_metrics())
        return metrics

    def _decide(self, v: int, rows: np.ndarray, mean: np.ndarray, round: int, size: int):
        norm = float(np.linalg.norm(mean))
        self.max_mean_norm = max(self.max_mean_norm, norm)
        eps1 = self.params.eps1 or self.params.eps1_fraction * self.max_mean_norm
        eps2 = self.params.eps2 or self.params.eps2_factor * eps1
        if not self.params.norm_criteria:
            eps1, eps2 = np.inf, 0.0
        may_split = round > self.params.split_after and size >= self.params.min_cluster_size
        decision = decide_split(rows, mean, eps1, eps2, self.threshold if may_split else -np.inf,
                                self.params.bipartition, always_measure=size >= 2)
        return decision, eps1, eps2, may_split

    def _cluster_metrics(self, v: int, decision, eps1: float, eps2: float) -> dict[str, float]:
        tag = f"cfl/cluster{v}"
        out = {f"{tag}/mean_norm": decision.mean_norm, f"{tag}/max_norm": decision.max_norm}
        if self.params.norm_criteria:
            out.update({f"{tag}/eps1": eps1, f"{tag}/eps2": eps2})
        if not np.isnan(decision.alpha_cross):
            out.update({f"{tag}/alpha_cross": decision.alpha_cross, f"{tag}/gap": decision.gap})
        return out

    def _population_metrics(self) -> dict[str, float]:
        """Cluster count, splits so far, clients dropped (Byzantine mode), and how many adversaries
        still share a cluster with benign clients."""
        roles = {c.client_id: c.role for c in self.ctx.clients}
        clusters = self.view.clusters()
        mixed = sum(1 for members in clusters.values() if any(roles[i] == "benign" for i in members)
                    for i in members if roles[i] != "benign")
        active = sum(len(members) for members in clusters.values())
        return {"cfl/clusters": float(len(clusters)), "cfl/splits": float(self.view.num_splits()),
                "cfl/dropped_clients": float(len(roles) - active), "cfl/adversaries_with_benign": float(mixed)}

    # -- evaluation, monitoring ------------------------------------------------------------------
    def models_to_evaluate(self) -> dict[str, Weights]:
        return {f"cluster{v}": w for v, w in self.view.models.items()}

    def leaf_model(self, leaf: int) -> Weights:
        """An active cluster's model from the view; a dropped one's from the tree (a rare extra read)."""
        return self.view.models[leaf] if leaf in self.view.models else self.tree.model(leaf)

    def evaluate(self, evaluate_model: Callable[[str, Weights, int], dict[str, float]]) -> dict[str, float]:
        """Each benign client scores its cluster's model on its group's test data; the mean over
        benign clients is ``eval/accuracy``. Per cluster: the mean over its benign clients."""
        benign = [c for c in self.ctx.clients if c.role == "benign"]
        cache: dict[tuple[int, int], dict[str, float]] = {}
        per_cluster: dict[int, list[dict[str, float]]] = {}
        leaf_of = self.view.leaf_of()
        for c in benign:
            leaf = leaf_of[c.client_id]
            if (leaf, c.group) not in cache:
                cache[leaf, c.group] = evaluate_model(self.arch, self.leaf_model(leaf), c.group)
            per_cluster.setdefault(leaf, []).append(cache[leaf, c.group])
        out = {f"eval/accuracy/cluster{v}": float(np.mean([r["accuracy"] for r in rs])) for v, rs in per_cluster.items()}
        scores = [r for rs in per_cluster.values() for r in rs]
        out["eval/accuracy"] = float(np.mean([r["accuracy"] for r in scores]))
        out["eval/loss"] = float(np.mean([r["loss"] for r in scores]))
        return out

    def summary(self) -> dict[str, Any]:
        """The final clusters (id -> clients), the dropped ones, the adversaries, and where the tree lived."""
        clusters = self.view.clusters()
        active = {i for members in clusters.values() for i in members}
        return {"clusters": {str(v): members for v, members in clusters.items()},
                "dropped_clients": sorted(c.client_id for c in self.ctx.clients if c.client_id not in active),
                "adversaries": sorted(c.client_id for c in self.ctx.clients if c.role != "benign"),
                "tree_host": getattr(self.tree, "host", "in-process")}

    def artifacts(self, round: int) -> dict[str, Any]:
        """The tree as text and as a figure, whenever it changed (drawn here from the view)."""
        if not self.changed:
            return {}
        self.changed = False
        return {"cfl/tree": self.view.describe(), "cfl/tree_figure": self.view.figure(f"parameter tree after round {round}")}

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"models": self.models, "tree": self.tree.state_dict(), "max_mean_norm": self.max_mean_norm,
                "finished": list(self.finished)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models = state["models"]
        self.tree.load_state_dict(state["tree"])
        self.view = self.tree.view()
        self.max_mean_norm = float(state["max_mean_norm"])
        self.finished = list(state["finished"])
        self.changed = True
