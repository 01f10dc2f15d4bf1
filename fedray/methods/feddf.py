"""FedDF: Lin et al., "Ensemble Distillation for Robust Model Fusion in Federated Learning",
NeurIPS 2020; as the baseline of FedAUX (thesis chapter 7, Alg. 15 with s_i = 1).

    for t = 1..T:
        theta_i <- train(theta^{R[i]}, D_i)  for i in S_t                          # FedDFClient
        for each prototype (architecture) P:
            theta^P <- sum_{i in S_t, R[i]=P} |D_i| theta_i / sum |D_i|           # FedAvg init
            for each mini-batch x of D_distill:                                   # eq. 7.1
                y~ <- softmax(mean_{i in S_t} f_i(x; theta_i))                     # eq. 7.2, all P
                theta^P <- theta^P - eta dKL(y~ || softmax(f(x; theta^P))) / dtheta^P

Every architecture's server model is distilled from the ensemble of *all* participants of all
architectures, which is how clients with different models learn from each other. The teachers'
outputs are computed where the teachers are: each client computes its logits on the distillation
set and uploads them with its weights (``FedDFClient.upload``); ``comm/soft_label_bytes_up`` counts
them (they are also in ``comm/bytes_up``). Architectures without a participant this round are
distilled from their previous model.

Folding (``fedray.fold``). The server step needs the round's clients only through sums, so their
hosts fold the uploads (:func:`fusion_terms`) and no client model nor logit reaches the server:

- ``model``: sum_i c_i theta_i per architecture, c_i = |D_i| or 1 (``weighted``): the FedAvg init;
- ``teacher``: sum_i s_i(x) t_i(x) on D_distill and its weight sum_i s_i(x), where t_i is f_i(x)
  (eqs. 7.2, 7.4 average logits; the softmax comes after) or softmax(f_i(x) / T) (``ensemble:
  mean_probs``), and s_i = 1 (FedDF) or FedAUX's certainty scores (eq. 7.4);
- ``test`` (and FedAUX's ``test_weighted``): the same on the test set, for the diagnostics.

The server adds the architectures' teacher sums (and FedBE its own teachers' outputs) and divides
(:meth:`fedray.distill.strategy.DistillationStrategy.pooled_mean`). D_distill is fixed (no
augmentation), so the teacher is computed once a round, by each client's host. With ``runtime.fold:
false`` every upload travels to the server, which folds them itself in client-id order
(:meth:`FedDF.aggregate`); ``share: head`` does not fold, the server keeps each client's body.

``log_ensemble``: ``distill/ensemble_accuracy`` is the test accuracy of the teacher ensemble, and
needs every teacher's outputs on the test set. They are folded too: the test inputs ride to the
hosts with the broadcast, uncounted (``plan.sizes`` 0: a real federation would not run this
diagnostic), each client computes its outputs there (``WeightsAndLogits.test_logits``, which the
byte count leaves out), and the server reads the ensemble's argmax off the folded mean.

``share: head`` is FedGen's FedDFusion of Table 4 (:mod:`fedray.methods.head_sharing`): users
upload whole models and the server averages and distils them as above, but broadcasts only the
heads; each user keeps its own feature extractor, and the score is the round's users' extractors
under the new heads (as FedAvg's). FedBE and FedAUX build on FedDF with whole models (their
parameters derive from :class:`FusionParams`, which has no ``share``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np
import torch
from pydantic import Field

from fedray.distill import DistillParams, predict_logits
from fedray.distill.ensemble import EnsembleMode, soft_labels, teacher_output
from fedray.distill.strategy import DistillationStrategy
from fedray.fold import Sum, Sums, Terms
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Params, Trained, VirtualClient
from fedray.methods.head_sharing import HeadSharingClient, HeadSharingParams, HeadSharingStrategy, body_of, shares_heads
from fedray.round import Each, Round, Statistics
from fedray.weights import SIMULATION, Weights, set_weights

TEST_INPUTS = "test/x"  # the broadcast key of the test inputs (``log_ensemble``)


class FusionParams(Params):
    """FedDF's ensemble distillation, which FedBE and FedAUX share."""

    weighted: bool = True  # |D_i| weights of the per-architecture average (Alg. 15)
    ensemble: EnsembleMode = "mean_logits"  # eq. 7.2
    distill: DistillParams = Field(default_factory=DistillParams)
    log_before: bool = True  # test accuracy of each architecture's model before distillation
    log_ensemble: bool = True  # test accuracy of the teacher ensemble (the clients' outputs on the test set, folded)


class FedDFParams(FusionParams, HeadSharingParams):
    """FedDF's: the fusion's and ``share`` (head: FedGen's Table 4 FedDFusion)."""


@dataclass(frozen=True)
class WeightsAndLogits:
    """A FedDF upload: theta_i and its logits f_i(X_distill; theta_i) on the auxiliary inputs; with
    ``log_ensemble`` also its logits on the test set, for the diagnostic only (not counted)."""

    weights: Weights
    logits: np.ndarray
    test_logits: Optional[np.ndarray] = field(default=None, metadata=SIMULATION)


def fusion_terms(update: ClientUpdate, params: FusionParams, scores: Optional[np.ndarray] = None,
                 test_scores: Optional[np.ndarray] = None) -> Terms:
    """A client's terms (module docstring): theta_i with c_i, its teacher output on D_distill with
    s_i(x) (``scores``, eq. 7.4; None: 1, eq. 7.2) and, if it came, on the test set (plainly, and
    with ``test_scores`` where given). The same on a host and in the server."""
    upload: WeightsAndLogits = update.payload
    weight = float(update.num_samples) if params.weighted else 1.0
    teacher = teacher_output(upload.logits, params.ensemble, params.distill.temperature)
    terms: Terms = {"model": (weight, upload.weights), "teacher": (_per_sample(scores), teacher)}
    if upload.test_logits is not None:  # at temperature 1, as the ensemble's accuracy always was
        test = teacher_output(upload.test_logits, params.ensemble)
        terms["test"] = (1.0, test)
        if test_scores is not None:
            terms["test_weighted"] = (_per_sample(test_scores), test)
    return terms


def _per_sample(scores: Optional[np.ndarray]) -> Any:
    """s_i(x) as a coefficient of (N, C) outputs: a column (N, 1), or 1.0 for none."""
    return 1.0 if scores is None else np.asarray(scores)[:, None]


class FedDFClient(HeadSharingClient):
    """theta_i <- train(theta, D_i); uploads theta_i and its logits on the distillation set."""

    test_x: Optional[torch.Tensor] = None  # the test inputs on this host's device, once they came

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        self.hold_test_inputs(task, downloads)
        return super().receive(task, downloads, client)

    def hold_test_inputs(self, task: ClientTask, downloads: tuple[Any, ...]) -> None:
        """Keep the test inputs on this host's device the first time a task brings them (they are
        the same all run); a copy, since what came through Ray's object store is read-only."""
        if TEST_INPUTS in task.payload_keys and self.test_x is None:
            self.test_x = torch.from_numpy(np.array(downloads[task.payload_keys.index(TEST_INPUTS)])).to(self.device)

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> WeightsAndLogits:
        model = self.model(task.arch)
        set_weights(model, local.weights)
        self.keep_body(local.weights, client)  # share: head: the whole model travels, and the body stays too
        test = predict_logits(model, self.test_x).cpu().numpy() if TEST_INPUTS in task.payload_keys else None
        return WeightsAndLogits(local.weights, predict_logits(model, self.aux_x).cpu().numpy(), test)

    @classmethod
    def collected(cls, params: FusionParams) -> dict[str, type]:
        """theta_i and the teacher output summed (with the test outputs under ``log_ensemble``); with
        ``share: head`` each body too, for the server's scores."""
        kinds: dict[str, type] = {"model": Sum, "teacher": Sum}
        if params.log_ensemble:
            kinds["test"] = Sum
        if shares_heads(params):
            kinds["body"] = Each
        return kinds

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        statistics: Statistics = fusion_terms(update, self.params, *self.certainty(update, client))
        if shares_heads(self.params):
            statistics["body"] = Each(body_of(update.payload.weights))
        return statistics

    def certainty(self, update: ClientUpdate, client: VirtualClient) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """s_i on D_distill and on the test set (FedAUX's); none for FedDF (eq. 7.2)."""
        return None, None


class FedDF(HeadSharingStrategy, DistillationStrategy):
    name = "feddf"
    description = "FedDF: FedAvg per architecture, then each model distilled from all clients' ensemble on aux data"
    paper = ('Lin et al. 2020, "Ensemble Distillation for Robust Model Fusion in Federated Learning", NeurIPS; the '
        "baseline of FedAUX, thesis Alg. 15 with equal weights, eqs. 7.1-7.2 (Sattler 2021, TU Berlin)")
    Params = FedDFParams
    Client = FedDFClient
    state_attrs = ("models", "bodies")

    def configure_round(self, round: int) -> RoundPlan:
        return self.with_test_inputs(super().configure_round(round))

    def with_test_inputs(self, plan: RoundPlan) -> RoundPlan:
        """With ``log_ensemble``, ``plan`` with the test inputs for every task, uncounted (module docstring)."""
        if not self.params.log_ensemble:
            return plan
        tasks = [replace(t, payload_keys=t.payload_keys + (TEST_INPUTS,)) for t in plan.tasks]
        return RoundPlan(tasks, {**plan.broadcast, TEST_INPUTS: self.ctx.test_x}, {**plan.sizes, TEST_INPUTS: 0})

    def aggregate(self, round: Round) -> dict[str, float]:
        sums = round.totals()
        for arch, named in sums.items():  # the FedAvg init of each student (Alg. 15)
            self.models[arch] = named["model"].mean()
        archs = [a for a in dict.fromkeys(u.arch for u in round.updates) if a in sums]
        extra = self.extra_teachers(round.number, sums, archs)
        p = self.params
        own = [teacher_output(self.logits(arch, w, self.aux).cpu().numpy(), p.ensemble, p.distill.temperature)
               for arch, w in extra]
        target = soft_labels(self.pooled_mean(sums, "teacher", own), p.ensemble, p.distill.temperature)  # eq. 7.2 / 7.4
        metrics = round.mean_loss()
        teachers = [sums[a]["teacher"] for a in archs]
        rows, classes = target.shape  # each client uploads float32 logits (N, C) on D_distill
        metrics["comm/soft_label_bytes_up"] = float(sum(t.count for t in teachers) * rows * classes * 4)
        if p.log_ensemble:
            metrics.update(self.ensemble_metrics(sums, extra))
        for arch in self.ctx.architectures:
            if p.log_before:
                metrics[f"distill/accuracy_before/{arch}"] = self.test_accuracy(arch, self.models[arch])
            self.models[arch], stats = self.distill_weights(arch, self.models[arch], target.to(self.aux.device),
                                                            p.distill, round.number)
            metrics[f"distill/loss/{arch}"] = stats["loss"]
            metrics[f"distill/accuracy_after/{arch}"] = self.test_accuracy(arch, self.models[arch])
        self.keep_bodies(round)
        return metrics

    def extra_teachers(self, round: int, sums: Sums, archs: list[str]) -> list[tuple[str, Weights]]:
        """Teachers besides the clients, the server's own (none for FedDF; FedBE's samples), from the
        round's sums of the architectures ``archs`` (in the order their first client comes)."""
        return []

    def ensemble_metrics(self, sums: Sums, extra: list[tuple[str, Weights]]) -> dict[str, float]:
        """Test accuracy of the teacher ensemble (clients and the server's own teachers), and of the
        weighted one where the method weighs its teachers, from the clients' folded test outputs."""
        own = [teacher_output(self.logits(arch, w, self.test_x).cpu().numpy(), self.params.ensemble)
               for arch, w in extra]
        y = self.test_y.cpu().numpy()
        out = {}
        for name, tag in (("test", "distill/ensemble_accuracy"), ("test_weighted", "distill/weighted_ensemble_accuracy")):
            if any(name in named for named in sums.values()):  # the argmax of the mean output is the ensemble's
                out[tag] = float(np.mean(self.pooled_mean(sums, name, own).argmax(axis=1) == y))
        return out
