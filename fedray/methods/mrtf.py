"""MrTF: Li, Yang, Zhan, "MrTF: Model Refinery for Transductive Federated Learning", section 4.4.

Transductive FL: the server holds the unlabelled inputs it must label, X_g (the test inputs, whose
labels are read only to log accuracies; or, with ``inputs: aux``, the ``aux:`` inputs, e.g. a named
data set), and refines each round's aggregate on them:

    theta_{t,k}, L_{t,k} <- local SGD from theta_t on D_k, for k in S_t          # FedAvg's client
    theta_{t+1} <- 1/|S_t| sum_k theta_{t,k}                                    # PA
    q_m <- softmax(tau f_m / std(f_m)) on X_g, m in {theta_{t,k}} + {theta_t, theta_{t+1}}   # ST, eq. 6
    q~ <- u_t sum_k w_k(x) q_k + (1 - u_t)/2 (q_{theta_t} + q_{theta_{t+1}})    # RD, eq. 10
    q~ <- softmax_c(-tau (1 - cos(h(x), v_c)))  after the first rounds          # CLR, eq. 11-12
    theta_{t+1} <- distil theta_{t+1} on X_g towards q~ (Adam, lr 3e-4, 500 steps; eq. 8)
    broadcast the refined theta_{t+1}

The modules switch on and off for the paper's ablation (Fig. 11): ``teachers: avg_logit`` with the
other two off is AL (FedDF's target, eq. 3, on X_g); ``refine: false`` is PA (FedAvg). The server
evaluates the uploaded local models itself: it holds X_g and the clients send their weights, as in
FedAvg. The authors' code refines a copy and keeps broadcasting the plain aggregate
(``feed_back: false``); the paper broadcasts the refined model (the default).

PA (``refine: false``) folds (``fedray.fold``): the hosts sum the local models, FedAvg's client's
term. With refinement the server keeps every local model: its targets are each local model's
predictions on X_g (eq. 6-7, 10), which the server holds and the clients do not.

The authors' code's other rules are named options (``configs/mrtf_code.yaml`` sets them all):
``std: batch`` with ``tau: 1`` (eq. 6 per batch, no tau), ``weights: code`` (its eq. 10),
``ema: true`` (targets averaged across rounds), ``cluster_tau: 8`` with ``cluster_after: 0`` (its
CLR), and its refinement optimiser (Adam lr 1e-3, weight decay 1e-6, cosine schedule, gradient
norm clipped at 100). Its FedDF (the AL ablation) also softens its targets, ``target_power: 0.75``.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
import torch
from pydantic import Field

from fedray.config import Config
from fedray.distill import DistillParams, aggregate_teachers
from fedray.distill.ensemble import predict_features
from fedray.distill.refinery import (batch_stabilised_probs, cluster_refine, code_global_share, code_rectified_target,
                                     ema_targets, local_share, rectified_target, stabilised_probs)
from fedray.distill.strategy import DistillationStrategy
from fedray.fold import Sum
from fedray.messages import ClientUpdate
from fedray.methods.base import Params, ServerContext, VirtualClient
from fedray.methods.head_sharing import HeadSharingClient
from fedray.round import Each, Round, Statistics
from fedray.weights import Weights, weighted_mean


def refine_distill_defaults() -> DistillParams:
    """Section 5: Adam, lr 3e-4, 500 steps; batch 64 from the authors' code."""
    return DistillParams(optimizer="adam", lr=3e-4, steps=500, batch_size=64)


class MrTFParams(Params):
    weighted: bool = False  # theta_{t+1} = 1/|S_t| sum_k theta_{t,k} (section 4.4)
    refine: bool = True  # False: PA, parameter averaging only
    teachers: Literal["stabilised", "avg_logit"] = "stabilised"  # ST (eq. 6-7) or AL (eq. 3)
    rectify: bool = True  # RD, eq. 10
    cluster: bool = True  # CLR, eq. 11-12
    tau: float = Field(4.0, gt=0)  # eq. 6
    cluster_tau: float = Field(4.0, gt=0)  # eq. 12
    cluster_after: int = Field(5, ge=0)  # CLR from round cluster_after + 1 on ("the first several rounds (e.g., 5)")
    # the authors' code's rules (module docstring): eq. 6's std over the whole set or per batch of
    # std_batch_size rows; eq. 10 as in the paper or as in the code; targets averaged across rounds
    std: Literal["set", "batch"] = "set"
    std_batch_size: int = Field(320, ge=2)  # the code's test-loader batch: 10 x the local batch of 32
    weights: Literal["paper", "code"] = "paper"
    ema: bool = False
    feed_back: bool = True  # broadcast the refined model (paper); False: the plain aggregate (authors' code)
    # the round's targets q raised to this power and renormalised, softmax(s log q): 1 leaves them as
    # they are (paper); the authors' FedDF (their AL) softens with 0.75 (feddf.py:188)
    target_power: float = Field(1.0, gt=0)
    # the unlabelled set the server refines on: the test inputs (the paper's transductive setting), or
    # the ``aux:`` inputs (a named data set, ``aux.dataset``, or a part carved out of the training set)
    inputs: Literal["test", "aux"] = "test"
    distill: DistillParams = Field(default_factory=refine_distill_defaults)


class MrTFClient(HeadSharingClient):
    """FedAvg's client: theta_{t,k} <- local SGD from theta_t; its model handed back summed for PA,
    whole for the refinement (which reads every local model's outputs on X_g)."""

    @classmethod
    def collected(cls, params: MrTFParams) -> dict[str, type]:
        return {"model": Each if params.refine else Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        weight = float(update.num_samples) if self.params.weighted else 1.0
        return {"model": Each(update.payload, weight) if self.params.refine else (weight, update.payload)}


class MrTF(DistillationStrategy):
    name = "mrtf"
    description = "MrTF: FedAvg, each aggregate refined by distillation on the server's unlabelled inputs"
    paper = 'Li, Yang, Zhan, "MrTF: Model Refinery for Transductive Federated Learning"; section 4.4, eqs. 6-12'
    Params = MrTFParams
    Client = MrTFClient
    state_attrs = ("models", "refined", "losses", "previous_targets")

    @classmethod
    def config_problem(cls, config: Config, params: MrTFParams) -> Optional[str]:
        if params.inputs == "aux":
            return super().config_problem(config, params)  # the aux: inputs must exist
        return None  # distils on the test inputs, not on auxiliary data

    def __init__(self, params: MrTFParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.inputs = self.test_x if params.inputs == "test" else self.aux  # X_g
        self.refined: dict[str, Weights] = dict(self.models)  # what the clients do not get with feed_back false
        self.losses: list[float] = []  # each earlier round's mean local loss (the code's global share)
        self.previous_targets: dict[str, torch.Tensor] = {}  # last round's targets (``ema``)

    def aggregate(self, round: Round) -> dict[str, float]:
        metrics = round.mean_loss()
        loss = {u.client_id: u.metrics["loss"] for u in round.updates}
        if not self.params.refine:  # PA: theta_{t+1} <- 1/|S_t| sum_k theta_{t,k}
            for arch, mean in round.mean("model").items():
                self.models[arch] = self.refined[arch] = mean
        for arch, group in ({} if not self.params.refine else round.each_by_arch("model")).items():
            previous = self.models[arch]
            average = weighted_mean([i.value for i in group], [i.weight for i in group])
            target, info = self.targets(round.number, arch, [i.value for i in group], previous, average,
                                        float(np.mean([loss[i.client_id] for i in group])))
            if self.params.ema:
                target = self.previous_targets[arch] = ema_targets(target, self.previous_targets.get(arch),
                                                                   code_global_share(self.losses, target.shape[-1]))
            refined, stats = self.distill_on_inputs(arch, average, target, round.number)
            self.refined[arch] = refined
            self.models[arch] = refined if self.params.feed_back else average
            suffix = f"/{arch}" if len(self.ctx.architectures) > 1 else ""
            metrics.update({f"mrtf/{k}{suffix}": v for k, v in info.items()})
            metrics[f"mrtf/distill_loss{suffix}"] = stats["loss"]
            # on the test set, whose labels the server reads for these logs only
            metrics[f"mrtf/accuracy_aggregate{suffix}"] = self.logged_accuracy(self.logits(arch, average, self.test_x))
            if self.params.inputs == "test":  # the targets' accuracy needs the labels of X_g
                metrics[f"mrtf/accuracy_targets{suffix}"] = self.logged_accuracy(target)
            metrics[f"mrtf/accuracy_refined{suffix}"] = self.logged_accuracy(self.logits(arch, refined, self.test_x))
        self.losses.append(float(np.mean(list(loss.values()))))
        return metrics

    def models_to_evaluate(self) -> dict[str, Weights]:
        return self.refined  # the models whose labels for X_g are the answer, broadcast or not

    def targets(self, round: int, arch: str, local: list[Weights], previous: Weights, average: Weights,
                mean_loss: float) -> tuple[torch.Tensor, dict[str, float]]:
        """The distillation targets on X_g of one architecture's round, and what to log about them."""
        p, info = self.params, {}
        local_logits = torch.stack([self.logits(arch, w, self.inputs) for w in local])
        if p.teachers == "avg_logit":  # AL, eq. 3 with w_k = 1 / |S_t|
            target = aggregate_teachers(local_logits, "mean_logits")
        else:
            local_probs = self.stabilised(local_logits)  # ST, eq. 6
            if p.rectify:  # RD, eq. 10
                q_prev, q_new = (self.stabilised(self.logits(arch, w, self.inputs)) for w in (previous, average))
                if p.weights == "code":
                    g = code_global_share(self.losses, local_logits.shape[-1])
                    target = code_rectified_target(local_probs, q_prev, q_new, g)
                    info["u"] = 1.0 - g
                else:
                    u = local_share(mean_loss, local_logits.shape[-1])
                    target = rectified_target(local_probs, q_prev, q_new, u)
                    info["u"] = u
            else:  # eq. 7 with w_k = 1 / |S_t|
                target = local_probs.mean(dim=0)
        if p.cluster and round > p.cluster_after:  # CLR, eq. 11-12, in the new aggregate's feature space
            features = predict_features(self.work_model(arch, average), self.inputs)
            target = cluster_refine(features, target, p.cluster_tau)
        if p.target_power != 1.0:
            target = torch.softmax(p.target_power * torch.log(target + 1e-8), dim=1)
        return target, info

    def stabilised(self, logits: torch.Tensor) -> torch.Tensor:
        """Eq. 6, with the std over all of X_g (paper) or per batch (``std: batch``, the code)."""
        if self.params.std == "batch":
            return batch_stabilised_probs(logits, self.params.std_batch_size, self.params.tau)
        return stabilised_probs(logits, self.params.tau)

    def distill_on_inputs(self, arch: str, weights: Weights, target: torch.Tensor,
                          round: int) -> tuple[Weights, dict[str, float]]:
        """``weights`` distilled on X_g towards ``target`` (eq. 8), seeded as every distillation is."""
        aux, self.aux = self.aux, self.inputs
        try:
            return self.distill_weights(arch, weights, target, self.params.distill, round)
        finally:
            self.aux = aux

    def logged_accuracy(self, scores: torch.Tensor) -> float:
        """Accuracy of the argmax of ``scores`` (N, C) on the test set: the one place that reads its labels."""
        return float((scores.argmax(dim=1) == self.test_y).float().mean())
