"""FedDF: Lin et al., "Ensemble Distillation for Robust Model Fusion in Federated Learning",
NeurIPS 2020; as the baseline of FedAUX (thesis chapter 7, Alg. 15 with s_i = 1).

    for t = 1..T:
        theta_i <- train(theta^{R[i]}, D_i)  for i in S_t                          # FedDFClient.run
        for each prototype (architecture) P:
            theta^P <- sum_{i in S_t, R[i]=P} |D_i| theta_i / sum |D_i|           # FedAvg init
            for each mini-batch x of D_distill:                                   # eq. 7.1
                y~ <- softmax(mean_{i in S_t} f_i(x; theta_i))                     # eq. 7.2, all P
                theta^P <- theta^P - eta dKL(y~ || softmax(f(x; theta^P))) / dtheta^P

Every architecture's server model is distilled from the ensemble of *all* participants of all
architectures, which is how clients with different models learn from each other. The teachers'
outputs are computed where the teachers are: each client returns its logits on the distillation
set with its weights, and ``comm/soft_label_bytes_up`` counts them (they are also in
``comm/bytes_up``). Architectures without a participant this round are distilled from their
previous model.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from pydantic import Field

from fedray.algorithms.base import Params, Strategy, VirtualClient, task_seed
from fedray.algorithms.fedavg import FedAvgClient, group_by_arch, mean_client_loss
from fedray.distill import DistillParams, aggregate_teachers, distill, ensemble_accuracy, predict_logits
from fedray.distill.ensemble import EnsembleMode
from fedray.messages import ClientTask, ClientUpdate
from fedray.training import evaluate
from fedray.weights import Weights, get_weights, set_weights, weighted_mean


class FedDFParams(Params):
    weighted: bool = True  # |D_i| weights of the per-architecture average (Alg. 15)
    ensemble: EnsembleMode = "mean_logits"  # eq. 7.2
    distill: DistillParams = Field(default_factory=DistillParams)
    log_before: bool = True  # test accuracy of each architecture's model before distillation
    log_ensemble: bool = True  # test accuracy of the teacher ensemble (server evaluates the uploads)


class FedDFClient(FedAvgClient):
    """theta_i <- train(theta, D_i); uploads theta_i and its logits f_i(X_distill; theta_i)."""

    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        update = super().run(task, payloads, client)
        model = self.model(task.arch)
        set_weights(model, update.payload)
        logits = predict_logits(model, self.aux_x).cpu().numpy()
        metrics = {**update.metrics, "time_s": time.perf_counter() - start}
        return replace(update, payload={"weights": update.payload, "logits": logits},
                       bytes_up=update.bytes_up + logits.nbytes, metrics=metrics)


class DistillationStrategy(Strategy):
    """Base of the distillation methods' server halves: they need auxiliary data, and share models on
    the server's device, the auxiliary inputs and test set there, seeded distillation and test accuracy."""

    needs_aux = True

    def __init__(self, params: Params, ctx):
        super().__init__(params, ctx)
        device = self.ctx.device
        self.aux = torch.from_numpy(np.ascontiguousarray(self.ctx.aux_x)).to(device)
        self.test_x = torch.from_numpy(np.ascontiguousarray(self.ctx.test_x)).to(device)
        self.test_y = torch.from_numpy(np.ascontiguousarray(self.ctx.test_y)).to(device)
        self._work: dict[str, torch.nn.Module] = {}

    def work_model(self, arch: str, weights: Weights | None = None) -> torch.nn.Module:
        """The server's working model of ``arch`` (built once), loaded with ``weights`` if given."""
        if arch not in self._work:
            self._work[arch] = self.ctx.build_model(arch).to(self.ctx.device)
        if weights is not None:
            set_weights(self._work[arch], weights)
        return self._work[arch]

    def random_init(self, arch: str, round: int) -> Weights:
        """A fresh initialisation of ``arch``, the same for everyone who knows (seed, round)."""
        torch.manual_seed(task_seed(self.config.seed, round, 2**42 + self.ctx.architectures.index(arch)))
        return get_weights(self.ctx.build_model(arch))

    def distill_weights(self, arch: str, weights: Weights, target: torch.Tensor, params: DistillParams,
                        round: int) -> tuple[Weights, dict[str, float]]:
        """``weights`` distilled on the auxiliary inputs towards ``target``; seeded by (seed, round, arch)."""
        model = self.work_model(arch, weights)
        seed = task_seed(self.config.seed, round, 2**40 + self.ctx.architectures.index(arch))
        torch.manual_seed(seed)  # dropout
        stats = distill(model, self.aux, target.to(self.aux.device), params, torch.Generator().manual_seed(seed))
        return get_weights(model), stats

    def test_accuracy(self, arch: str, weights: Weights) -> float:
        model = self.work_model(arch, weights)
        return evaluate(model, self.test_x, self.test_y, self.config.federation.eval_batch_size)["accuracy"]

    def logits(self, arch: str, weights: Weights, x: torch.Tensor) -> torch.Tensor:
        return predict_logits(self.work_model(arch, weights), x)


class FedDF(DistillationStrategy):
    name = "feddf"
    Params = FedDFParams
    Client = FedDFClient

    def extra_teachers(self, round: int, groups: dict[str, list[ClientUpdate]]) -> list[tuple[str, Weights]]:
        """Teachers besides the clients, evaluated on the server (none for FedDF; FedBE's samples)."""
        return []

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        groups = group_by_arch(updates)
        for arch, group in groups.items():  # FedAvg init of each student
            coefficients = [u.num_samples if self.params.weighted else 1.0 for u in group]
            self.models[arch] = weighted_mean([u.payload["weights"] for u in group], coefficients)
        ordered = sorted(updates, key=lambda u: u.client_id)
        extra = self.extra_teachers(round, groups)
        teacher_logits = [torch.from_numpy(u.payload["logits"]).to(self.aux.device) for u in ordered]
        teacher_logits += [self.logits(arch, w, self.aux) for arch, w in extra]
        target = aggregate_teachers(torch.stack(teacher_logits), self.params.ensemble,
                                    temperature=self.params.distill.temperature)
        metrics = mean_client_loss(updates)
        metrics["comm/soft_label_bytes_up"] = float(sum(u.payload["logits"].nbytes for u in updates))
        if self.params.log_ensemble:
            teachers = [(u.arch, u.payload["weights"]) for u in ordered] + extra
            test_logits = torch.stack([self.logits(arch, w, self.test_x) for arch, w in teachers])
            metrics["distill/ensemble_accuracy"] = ensemble_accuracy(test_logits, self.test_y, self.params.ensemble)
        for arch in self.ctx.architectures:
            if self.params.log_before:
                metrics[f"distill/accuracy_before/{arch}"] = self.test_accuracy(arch, self.models[arch])
            self.models[arch], stats = self.distill_weights(arch, self.models[arch], target,
                                                            self.params.distill, round)
            metrics[f"distill/loss/{arch}"] = stats["loss"]
            metrics[f"distill/accuracy_after/{arch}"] = self.test_accuracy(arch, self.models[arch])
        return metrics
