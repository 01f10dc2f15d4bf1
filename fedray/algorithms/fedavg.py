"""Federated Averaging: thesis Algorithm 2 (p. 16); McMahan et al., AISTATS 2017.

    for t = 1..T:
        server selects I_t (a fraction C of the clients) and broadcasts theta     # configure_round
        theta_i <- SGD_E(theta, D_i)   for i in I_t                                # ClientAlgorithm.train
        theta   <- 1/|I_t| sum_i theta_i                                           # aggregate

The client half is the default ``ClientAlgorithm``: it trains the broadcast model and uploads
theta_i. Alg. 2 averages unweighted; ``weighted: true`` weights by |D_i| as Alg. 10/15 and
McMahan et al. do. Averaging happens within an architecture: one global model per architecture.

``share: head`` shares only the last, linear layer (FedGen's Table 4): each client keeps its own
feature extractor in its state, the server averages and broadcasts the heads, and the score is the
mean over the round's clients of their own extractor under the new global head: on the whole test
set (``eval/accuracy``) and on test data of each client's own labels (``eval/personal_accuracy``,
Table 4's measure: class accuracies weighted by the client's label counts). FedProx, FedMMD
and FedGen inherit it.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Optional

import numpy as np

from fedray.algorithms.base import ClientAlgorithm, HeadUpload, Params, ServerContext, Strategy, shared, split_head
from fedray.algorithms.helpers import group_by_arch, mean_client_loss, sample_weights
from fedray.messages import ClientUpdate, RoundPlan
from fedray.weights import Weights, weighted_mean


class FedAvgParams(Params):
    weighted: bool = False
    share: Literal["all", "head"] = "all"


class FedAvg(Strategy):
    name = "fedavg"
    Params = FedAvgParams
    Client = ClientAlgorithm  # theta_i <- SGD_E(theta, D_i); upload theta_i
    state_attrs = ("models", "bodies")
    head_sharing = True  # a subclass that needs whole models says no

    def __init__(self, params: FedAvgParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.bodies: list[tuple[str, Weights]] = []  # share: head: the round's clients' own feature extractors

    def configure_round(self, round: int) -> RoundPlan:
        plan = super().configure_round(round)
        return plan if self.params.share == "all" else heads_only(plan)

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, group in group_by_arch(updates).items():
            mean = weighted_mean([shared(u.payload) for u in group], sample_weights(group, self.params.weighted))
            self.models[arch] = {**self.models[arch], **mean}
        if self.params.share == "head":
            self.bodies = [(u.client_id, u.arch, u.payload.body) for u in updates if isinstance(u.payload, HeadUpload)]
        return mean_client_loss(updates)

    def evaluate(self, evaluate_model: Callable[..., dict[str, Any]]) -> dict[str, float]:
        if self.params.share == "all" or not self.bodies:
            return super().evaluate(evaluate_model)
        return score_bodies(evaluate_model, self.models, self.bodies, self.ctx.label_counts)


def heads_only(plan: RoundPlan) -> RoundPlan:
    """``plan`` with each broadcast model cut to its head (``share: head``)."""
    heads = {key: split_head(value)[0] for key, value in plan.broadcast.items() if key.startswith("model/")}
    return RoundPlan(tasks=plan.tasks, broadcast={**plan.broadcast, **heads}, sizes=plan.sizes)


def score_bodies(evaluate_model: Callable[..., dict[str, Any]], models: dict[str, Weights],
                 bodies: list[tuple[int, str, Weights]], label_counts: Optional[np.ndarray]) -> dict[str, float]:
    """``share: head``'s scores: each (client, arch, feature extractor) of ``bodies`` under the global
    head of its architecture, on the whole test set and, given the clients' label counts, on test
    data of its own labels; the means over ``bodies``."""
    return score_own_models(evaluate_model, [(cid, arch, {**body, **split_head(models[arch])[0]})
                                             for cid, arch, body in bodies], label_counts)


def score_own_models(evaluate_model: Callable[..., dict[str, Any]], owned: list[tuple[int, str, Weights]],
                     label_counts: Optional[np.ndarray]) -> dict[str, float]:
    """The mean scores of clients' own models, (client, arch, weights) each: on the whole test set
    and, given the clients' label counts, on test data of each one's labels."""
    scores = [evaluate_model(arch, weights, 0, per_class=True) for _, arch, weights in owned]
    out = {"eval/accuracy": float(np.mean([s["accuracy"] for s in scores])),
           "eval/loss": float(np.mean([s["loss"] for s in scores]))}
    if label_counts is not None:
        out["eval/personal_accuracy"] = float(np.mean([personal_accuracy(s["class_accuracy"], label_counts[cid])
                                                       for (cid, _, _), s in zip(owned, scores)]))
    return out


def personal_accuracy(class_accuracy: np.ndarray, label_counts: np.ndarray) -> float:
    """The accuracy expected on test data drawn with a client's own label distribution (FedGen's
    Table 4 scores each user on test data of its labels): its class accuracies weighted by its
    label counts, over the classes the test set has."""
    present = ~np.isnan(class_accuracy)
    weights = np.where(present, label_counts, 0).astype(float)
    return float(np.dot(weights / weights.sum(), np.nan_to_num(class_accuracy))) if weights.sum() else float("nan")
