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
outputs are computed where the teachers are: each client returns its logits on the distillation
set with its weights (``FedDFClient.upload``), and ``comm/soft_label_bytes_up`` counts them (they are also in
``comm/bytes_up``). Architectures without a participant this round are distilled from their
previous model.

``share: head`` is FedGen's FedDFusion of Table 4 (:mod:`fedray.algorithms.head_sharing`): users
upload whole models and the server averages and distils them as above, but broadcasts only the
heads; each user keeps its own feature extractor, and the score is the round's users' extractors
under the new heads (as FedAvg's). FedBE and FedAUX build on FedDF with whole models (their
parameters derive from :class:`FusionParams`, which has no ``share``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
import torch
from pydantic import Field

from fedray.algorithms.base import Params, Trained, VirtualClient
from fedray.algorithms.head_sharing import HeadSharingClient, HeadSharingParams, HeadSharingStrategy
from fedray.algorithms.helpers import group_by_arch, mean_client_loss, sample_weights
from fedray.distill import DistillParams, aggregate_teachers, ensemble_accuracy, predict_logits
from fedray.distill.ensemble import EnsembleMode
from fedray.distill.strategy import DistillationStrategy
from fedray.messages import ClientTask, ClientUpdate
from fedray.weights import Weights, set_weights, weighted_mean


class FusionParams(Params):
    """FedDF's ensemble distillation, which FedBE and FedAUX share."""

    weighted: bool = True  # |D_i| weights of the per-architecture average (Alg. 15)
    ensemble: EnsembleMode = "mean_logits"  # eq. 7.2
    distill: DistillParams = Field(default_factory=DistillParams)
    log_before: bool = True  # test accuracy of each architecture's model before distillation
    log_ensemble: bool = True  # test accuracy of the teacher ensemble (server evaluates the uploads)


class FedDFParams(FusionParams, HeadSharingParams):
    """FedDF's: the fusion's and ``share`` (head: FedGen's Table 4 FedDFusion)."""


@dataclass(frozen=True)
class WeightsAndLogits:
    """A FedDF upload: theta_i and its logits f_i(X_distill; theta_i) on the auxiliary inputs."""

    weights: Weights
    logits: np.ndarray


class FedDFClient(HeadSharingClient):
    """theta_i <- train(theta, D_i); uploads theta_i and its logits on the distillation set."""

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> WeightsAndLogits:
        model = self.model(task.arch)
        set_weights(model, local.weights)
        self.keep_body(local.weights, client)  # share: head: the whole model travels, and the body stays too
        return WeightsAndLogits(local.weights, predict_logits(model, self.aux_x).cpu().numpy())


class FedDF(HeadSharingStrategy, DistillationStrategy):
    name = "feddf"
    Params = FedDFParams
    Client = FedDFClient
    state_attrs = ("models", "bodies")

    def extra_teachers(self, round: int, groups: dict[str, list[ClientUpdate]]) -> list[tuple[str, Weights]]:
        """Teachers besides the clients, evaluated on the server (none for FedDF; FedBE's samples)."""
        return []

    def teacher_weights(self, clients: list[int], on_test: bool = False) -> Optional[torch.Tensor]:
        """Per-sample weights s_i(x) of the client teachers, shape (clients, samples), on the
        distillation set (or the test set, for diagnostics); None: all equal (FedDF, eq. 7.2)."""
        return None

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        groups = group_by_arch(updates)
        for arch, group in groups.items():  # FedAvg init of each student
            self.models[arch] = weighted_mean([u.payload.weights for u in group],
                                              sample_weights(group, self.params.weighted))
        ordered = sorted(updates, key=lambda u: u.client_id)
        extra = self.extra_teachers(round, groups)
        # np.stack copies: Ray hands uploads over as read-only arrays, which torch.from_numpy warns about
        teacher_logits = list(torch.from_numpy(np.stack([u.payload.logits for u in ordered])).to(self.aux.device))
        teacher_logits += [self.logits(arch, w, self.aux) for arch, w in extra]
        target = aggregate_teachers(torch.stack(teacher_logits), self.params.ensemble,  # eq. 7.2, or 7.4 weighted
                                    self.teacher_weights([u.client_id for u in ordered]),
                                    temperature=self.params.distill.temperature)
        metrics = mean_client_loss(updates)
        metrics["comm/soft_label_bytes_up"] = float(sum(u.payload.logits.nbytes for u in updates))
        if self.params.log_ensemble:
            metrics.update(self.ensemble_metrics(ordered, extra))
        for arch in self.ctx.architectures:
            if self.params.log_before:
                metrics[f"distill/accuracy_before/{arch}"] = self.test_accuracy(arch, self.models[arch])
            self.models[arch], stats = self.distill_weights(arch, self.models[arch], target,
                                                            self.params.distill, round)
            metrics[f"distill/loss/{arch}"] = stats["loss"]
            metrics[f"distill/accuracy_after/{arch}"] = self.test_accuracy(arch, self.models[arch])
        self.keep_bodies([replace(u, payload=u.payload.weights) for u in updates])
        return metrics

    def ensemble_metrics(self, ordered: list[ClientUpdate], extra: list[tuple[str, Weights]]) -> dict[str, float]:
        """Test accuracy of the teacher ensemble (the server evaluates the uploaded models), and of the
        weighted one where the method weighs its teachers."""
        teachers = [(u.arch, u.payload.weights) for u in ordered] + extra
        logits = torch.stack([self.logits(arch, w, self.test_x) for arch, w in teachers])
        out = {"distill/ensemble_accuracy": ensemble_accuracy(logits, self.test_y, self.params.ensemble)}
        weights = self.teacher_weights([u.client_id for u in ordered], on_test=True)
        if weights is not None:
            out["distill/weighted_ensemble_accuracy"] = ensemble_accuracy(logits, self.test_y, self.params.ensemble,
                                                                          weights)
        return out
