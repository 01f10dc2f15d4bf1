"""``share: head``, FedGen's Table 4 (Zhu et al. 2021, section 3.3): only the last, linear layer of
each model (the head theta^p) is shared; every client keeps its own feature extractor (the body).

A helper module, not a method. A method takes ``share`` by deriving its ``Params`` from
:class:`HeadSharingParams`, its client half from :class:`HeadSharingClient` and its server half from
:class:`HeadSharingStrategy`; ``fedray.resolve.resolve`` refuses ``share`` for the others. With
``share: head``:

- the client's model theta_i is the broadcast head on its own feature extractor (the initial one
  before its first round): :meth:`HeadSharingClient.own_model`;
- the client uploads the head (a :class:`HeadUpload`) and keeps the body in ``client.state``, so it
  keeps state between rounds (:meth:`HeadSharingClient.share_weights`);
- the server broadcasts only the heads (:func:`heads_only`) and scores the round's clients' own
  feature extractors under the new heads (:func:`score_bodies`; ``eval/accuracy`` on the whole test
  set, the paper's "all testing dataset", and ``eval/personal_accuracy``, the authors' code's).

With ``share: all`` (the default) all of this stands aside and the method shares whole models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

import numpy as np

from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, LocalUpdate, Params, ServerContext, Strategy, VirtualClient
from fedray.round import Each, Round, Statistics
from fedray.weights import SIMULATION, Weights

HEAD_PREFIX = "classifier."  # theta^p: the last, linear layer of every FedModel


class HeadSharingParams(Params):
    """The ``share`` key of a method that can share only the heads."""

    share: Literal["all", "head"] = "all"


def shares_heads(params: Params) -> bool:
    """Whether a run with ``params`` shares only the heads: its method takes ``share`` and it says head."""
    return isinstance(params, HeadSharingParams) and params.share == "head"


def split_head(weights: Weights) -> tuple[Weights, Weights]:
    """(head, body): the predictor's entries and the feature extractor's."""
    head = {k: v for k, v in weights.items() if k.startswith(HEAD_PREFIX)}
    return head, {k: v for k, v in weights.items() if not k.startswith(HEAD_PREFIX)}


@dataclass
class HeadUpload:
    """With ``share: head`` the head travels; the feature extractor stays on the client and rides
    along only so that the server can score the client's model (not counted)."""

    head: Weights
    body: Weights = field(metadata=SIMULATION)


def shared(payload: Any) -> Weights:
    """The shared weights of an upload: all of them, or the head of a :class:`HeadUpload`."""
    return payload.head if isinstance(payload, HeadUpload) else payload


def body_of(payload: Any) -> Weights:
    """The feature extractor of an upload: a :class:`HeadUpload`'s body, or a whole model's."""
    return payload.body if isinstance(payload, HeadUpload) else split_head(payload)[1]


def heads_only(plan: RoundPlan) -> RoundPlan:
    """``plan`` with each broadcast model cut to its head."""
    heads = {key: split_head(value)[0] for key, value in plan.broadcast.items() if key.startswith("model/")}
    return RoundPlan(tasks=plan.tasks, broadcast={**plan.broadcast, **heads}, sizes=plan.sizes)


class HeadSharingClient(Client):
    """A client half that can share only its head. ``receive`` and ``upload`` are FedAvg's (one
    broadcast model in, theta_i out) through :meth:`own_model` and :meth:`share_weights`, which a
    subclass with steps of its own calls too."""

    @classmethod
    def keeps_state(cls, params: Params) -> bool:
        return super().keeps_state(params) or shares_heads(params)

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        return self.own_model(task, downloads[0], client)

    def upload(self, task: ClientTask, theta: Weights, local: LocalUpdate, client: VirtualClient) -> Any:
        return self.share_weights(local.weights, client)

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        """FedAvg's: theta_i summed; with ``share: head`` each head and each body, client by client."""
        return {"model": Each, "body": Each} if shares_heads(params) else {"model": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """theta_i (its shared part) with c_i = |D_i| (``weighted``) or 1; with ``share: head`` the body too."""
        weight = float(update.num_samples) if getattr(self.params, "weighted", False) else 1.0
        if shares_heads(self.params):
            return {"model": Each(shared(update.payload), weight), "body": Each(body_of(update.payload))}
        return {"model": (weight, shared(update.payload))}

    def own_model(self, task: ClientTask, theta: Weights, client: VirtualClient) -> Weights:
        """theta_i from the broadcast theta: all of it, or with ``share: head`` the broadcast head on
        this client's own feature extractor (the initial one before its first round)."""
        if not shares_heads(self.params):
            return theta
        return {**(client.state.get("body") or split_head(self.initial(task.arch))[1]), **theta}

    def keep_body(self, weights: Weights, client: VirtualClient) -> None:
        """With ``share: head``, keep theta_i's feature extractor in the client's state for its next round."""
        if shares_heads(self.params):
            client.state["body"] = split_head(weights)[1]

    def share_weights(self, weights: Weights, client: VirtualClient) -> Any:
        """What of theta_i travels: all of it, or with ``share: head`` the head (the body is kept)."""
        if not shares_heads(self.params):
            return weights
        head, body = split_head(weights)
        client.state["body"] = body
        return HeadUpload(head, body)


class HeadSharingStrategy(Strategy):
    """A server half that can share only the heads: with ``share: head`` it broadcasts the heads of
    the plan its base makes, and scores the bodies that the method hands to :meth:`keep_bodies`
    each round (a subclass lists ``bodies`` in its ``state_attrs``)."""

    def __init__(self, params: Params, ctx: ServerContext):
        super().__init__(params, ctx)
        self.bodies: list[tuple[int, str, Weights]] = []  # the round's clients' own feature extractors

    def configure_round(self, round: int) -> RoundPlan:
        plan = super().configure_round(round)
        return heads_only(plan) if shares_heads(self.params) else plan

    def keep_bodies(self, round: Round) -> None:
        """With ``share: head``, the feature extractors of the round's clients (their ``body`` statistics)."""
        if shares_heads(self.params):
            self.bodies = [(i.client_id, i.arch, i.value) for i in round.each("body")]

    def evaluate(self, evaluate_model: Callable[..., dict[str, Any]]) -> dict[str, float]:
        if not shares_heads(self.params) or not self.bodies:
            return super().evaluate(evaluate_model)
        return score_bodies(evaluate_model, self.models, self.bodies, self.ctx.label_counts)


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
    ``eval/personal_accuracy`` (:func:`personal_accuracy`). FedDistill scores its users' models so too."""
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
