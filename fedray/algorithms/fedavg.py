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
mean over the round's clients of their own extractor under the new global head on the whole test
set (``eval/accuracy``, the paper's "all testing dataset"), and ``eval/personal_accuracy``, the
authors' code's: each client on test samples of the labels it holds. FedProx, FedMMD
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
    """The scores of clients' own models, (client, arch, weights) each: the means of their scores
    on the whole test set (the paper's "all testing dataset") and, given the clients' label counts,
    ``eval/personal_accuracy`` (:func:`personal_accuracy`)."""
    scores = [evaluate_model(arch, weights, 0, per_class=True) for _, arch, weights in owned]
    out = {"eval/accuracy": float(np.mean([s["accuracy"] for s in scores])),
           "eval/loss": float(np.mean([s["loss"] for s in scores]))}
    if label_counts is not None:
        out["eval/personal_accuracy"] = personal_accuracy(scores, [label_counts[cid] for cid, _, _ in owned])
    return out


def personal_accuracy(scores: list[dict[str, Any]], label_counts: list[np.ndarray]) -> float:
    """FedGen's authors' code's measure for users' own models: each user is tested on the test
    samples of the labels it holds, and the accuracy is that of the union of those test sets. (The
    code gives each user a disjoint 1/20 of those classes' test samples; taking all of them has the
    same expectation and no sampling noise.) ``scores``: per user, ``class_correct`` and
    ``class_total`` (``evaluate`` with ``num_classes``); ``label_counts``: per user, its training
    label counts."""
    held = [np.asarray(c) > 0 for c in label_counts]
    correct = sum(int(s["class_correct"][h].sum()) for s, h in zip(scores, held))
    total = sum(int(s["class_total"][h].sum()) for s, h in zip(scores, held))
    return correct / total if total else float("nan")
