"""FedDistill and FedDistill+, FedGen's label-wise logit-sharing baselines (Zhu et al. 2021,
section 6.1; after Seo et al. 2020, "Federated Knowledge Distillation"), and FedEnsemble.

FedDistill: users share no parameters, only the mean logit vector of each label over the samples
of their round's local steps. The server averages each label's vectors over the users that saw
the label into a table t[y]; each user then trains its own model with

    CE(f(x), y) + reg KL( softmax(t[y]) || softmax(f(x)) )

(the authors' code, reg = 1; samples of a label no user reported carry no second term). Its
models stay on the users (kept in their state); the server evaluates this round's users' models,
which travel only to be scored (their bytes are not counted), on the whole test set and on test
samples of the labels each user holds (``eval/personal_accuracy``, the authors' code's measure). FedDistill+ (``share_models:
true``, the code's FedDistill-FL) also averages the models as FedAvg does, and broadcasts both;
with ``share: head`` (Table 4) only the heads, each user keeping its own feature extractor.
By default (``table: round``) each round's vectors are the round's, and a user without a label
has none. ``table: code`` is the authors' code's tracker (``userFedDistill.py``, ``LogitTracker``;
``serverFedDistill.py``, ``aggregate_logits``): a user's sums run over every round it trained, its
label counts start at 1, so a label it never saw is a zero vector, and the server averages every
user's vector of every label, zero vectors included (a label no user saw pulls toward uniform).

FedDistill+ with whole models folds (``fedray.fold``): the table is a sum, t[y] = sum_k s_k[y] t_k[y]
/ sum_k s_k[y] with s_k[y] = 1 where user k saw label y, else 0, and the model is FedAvg's. FedDistill
does not: the server scores each user's own model, so every model travels to it (and with ``share:
head`` the server keeps each user's feature extractor, as FedAvg's does).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from fedray.config import Config
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import ServerContext, Trained, VirtualClient
from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HeadSharingClient, score_own_models, shares_heads
from fedray.round import Each, Round, Statistics
from fedray.training import Batch, ExtraLoss
from fedray.weights import SIMULATION, Weights


class FedDistillParams(FedAvgParams):
    share_models: bool = False  # FedDistill+: the models are averaged and broadcast too
    reg: float = Field(1.0, ge=0)  # the KL term's weight
    table: Literal["round", "code"] = "round"  # a user's logit vectors: this round's, or the code's running tracker


@dataclass
class LogitUpload:
    """FedDistill+'s upload: the label-wise mean logits (C, C; zeros where ``counts`` is 0), the
    label counts and the model."""

    logits: np.ndarray
    counts: np.ndarray
    weights: Any  # Weights, or with ``share: head`` a HeadUpload


@dataclass
class PrivateModelUpload:
    """FedDistill's upload: the logits and counts; the model rides along for scoring only."""

    logits: np.ndarray
    counts: np.ndarray
    weights: Weights = field(metadata=SIMULATION)


def logit_table(logits: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each label's mean over the users that saw it of their mean logit vectors: logits (K, C, C),
    counts (K, C) -> (table (C, C), which labels have a row (C,))."""
    have = counts > 0  # (K, C)
    return table_of((logits * have[:, :, None]).sum(axis=0), have.sum(axis=0))


def table_of(total: np.ndarray, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The table from sum_k s_k[y] t_k[y] (C, C) and sum_k s_k[y] (C,), the users that saw each label."""
    return (total / np.maximum(users, 1)[:, None]).astype(np.float32), users > 0


class FedDistillClient(HeadSharingClient):
    stateful = True  # FedDistill's users keep their own models

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        if self.params.share_models:
            theta, table = downloads
            theta = self.own_model(task, theta, client)
        else:
            (table,) = downloads
            theta = client.state.get("model") or self.initial(task.arch)
        num_classes = self.model(task.arch).num_classes
        if self.params.table == "code" and "tracker" in client.state:  # copies: a retried task starts from the state
            sums, counts = client.state["tracker"]["sums"].copy(), client.state["tracker"]["counts"].copy()
        else:  # the code's counts start at 1 (userFedDistill.py:12), so every label has a row
            sums = np.zeros((num_classes, num_classes))
            counts = np.full(num_classes, int(self.params.table == "code"), np.int64)
        # this task's table (None before the first) and the label-wise sums and counts it adds up
        client.scratch["table"] = (table["logits"], table["have"], sums, counts) if table else (None, None, sums, counts)
        return theta

    def extra_loss(self, model: torch.nn.Module, task: ClientTask, client: VirtualClient) -> Optional[ExtraLoss]:
        table, have, sums, counts = client.scratch["table"]
        reg = self.params.reg
        target = torch.softmax(torch.from_numpy(table), dim=1).to(self.device) if table is not None else None
        known = torch.from_numpy(have).to(self.device) if have is not None else None

        def tracked(m: torch.nn.Module, step: Batch) -> torch.Tensor:
            y = step.y.cpu().numpy()
            np.add.at(sums, y, step.logits.detach().cpu().double().numpy())
            np.add.at(counts, y, 1)
            if target is None or reg == 0:
                return step.logits.new_zeros(())
            mask = known[step.y]
            log_p = F.log_softmax(step.logits[mask], dim=1)
            return reg * F.kl_div(log_p, target[step.y[mask]], reduction="sum") / len(step.y)

        return tracked

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> Any:
        _, _, sums, counts = client.scratch["table"]
        means = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        if self.params.table == "code":
            client.state["tracker"] = {"sums": sums, "counts": counts}
        if self.params.share_models:
            return LogitUpload(means, counts, self.share_weights(local.weights, client))
        client.state["model"] = local.weights
        return PrivateModelUpload(means, counts, local.weights)

    @classmethod
    def collected(cls, params: FedDistillParams) -> dict[str, type]:
        """FedDistill+ with whole models: FedAvg's theta_k and the label-wise logits, summed. Else each
        user's logits and counts (the table of ``logit_table``), and its own model (FedDistill) or
        FedAvg's head and body (FedDistill+ with ``share: head``)."""
        if not params.share_models:
            return {"logits": Each, "counts": Each, "own": Each}
        if shares_heads(params):
            return {**super().collected(params), "logits": Each, "counts": Each}
        return {**super().collected(params), "logits": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """Summed: t_k with the coefficient s_k, a (C, 1) column of 1 where the user saw the label, 0
        where not (broadcast over each row of logits)."""
        up = update.payload
        if not self.params.share_models:
            return {"logits": Each(up.logits), "counts": Each(up.counts), "own": Each(up.weights)}
        model = super().statistics(replace(update, payload=up.weights), client)
        if shares_heads(self.params):
            return {**model, "logits": Each(up.logits), "counts": Each(up.counts)}
        seen = (up.counts > 0).astype(np.float64)[:, None]
        return {**model, "logits": (seen, up.logits)}


class FedDistill(FedAvg):
    name = "feddistill"
    description = "FedDistill: users share label-wise mean logits, not models (share_models: FedDistill+)"
    paper = ('Seo et al. 2020, "Federated Knowledge Distillation", arXiv:2011.02367; as a baseline of FedGen (Zhu, '
        "Hong, Zhou 2021, ICML, section 6.1)")
    Params = FedDistillParams
    Client = FedDistillClient
    state_attrs = ("models", "bodies", "table", "scored")

    @classmethod
    def config_problem(cls, config: Config, params: FedDistillParams) -> Optional[str]:
        if params.share == "head" and not params.share_models:
            return ("bad config value algorithm.share: FedDistill shares no model, so no head; "
                    "share: head needs share_models: true (FedDistill+)")
        return None

    def __init__(self, params: FedDistillParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.table: Optional[dict[str, np.ndarray]] = None  # {"logits": (C, C), "have": (C,)} after round one
        self.scored: list[tuple[int, str, Weights]] = []  # FedDistill: this round's users' own models

    def configure_round(self, round: int) -> RoundPlan:
        plan = super().configure_round(round)
        keys = ("logits",) if not self.params.share_models else None
        tasks = [replace(t, payload_keys=(keys or t.payload_keys + ("logits",))) for t in plan.tasks]
        broadcast = {**(plan.broadcast if self.params.share_models else {}), "logits": self.table}
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def aggregate(self, round: Round) -> dict[str, float]:
        if self.Client.collected(self.params)["logits"] is Sum:
            # one table for every architecture, added in the run's order of them (whoever answered first)
            sums = round.totals()
            parts = [sums[arch]["logits"] for arch in self.ctx.architectures if arch in sums]
            total, users = np.add.reduce([s.value() for s in parts]), np.add.reduce([s.weight for s in parts])[:, 0]
            table, have = table_of(total, users)
        else:  # each user's logits: the float32 table of the users that saw each label
            table, have = logit_table(np.stack([i.value for i in round.each("logits")]),
                                      np.stack([i.value for i in round.each("counts")]))
        self.table = {"logits": table, "have": have}
        if self.params.share_models:
            return super().aggregate(round)
        self.scored = [(i.client_id, i.arch, i.value) for i in round.each("own")]
        return round.mean_loss()

    def evaluate(self, evaluate_model: Callable[[str, Weights, int], dict[str, float]]) -> dict[str, float]:
        if self.params.share_models or not self.scored:
            return super().evaluate(evaluate_model)
        # FedDistill has no global model: the mean over this round's users of their own model's score
        return score_own_models(evaluate_model, self.scored, self.ctx.label_counts)
