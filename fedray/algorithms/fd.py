"""Federated distillation (thesis Alg. 3 and section 2.3.3) and compressed FD (thesis Alg. 8).

Client side, each round (section 2.3.3 and Alg. 8):
    theta <- theta_prev (``init_previous``) or random_init() (``init_random``, ``dual``)
    if t > 1: theta <- train(theta, X_pub, Y~_down)        distil the downloaded soft labels
    theta_i <- train(theta, D_i)                            local training
    Y_i <- softmax f(X_pub; theta_i);  Y~_i <- Q_{b_up}(Y_i)   (eqs. 5.8-5.9)
    upload Y~_i, delta-coded against the client's previous upload if ``delta`` (eq. 5.11)
    (downloads are delta-coded too, against what that client downloaded last, when b_down <= 16)
Server:
    Y <- mean_i Y~_i                                        (eq. 2.2 / Alg. 8)
    ``init_previous`` / ``init_random``: Y~_down <- Q_{b_down}(Y)   (clients distil Y themselves)
    ``dual`` (eqs. 5.12-5.15): theta_S <- train(theta_S, X_pub, Y), persistent;
                               Y~_down <- Q_{b_down}(softmax f(X_pub; theta_S))

These are Table 5.1's three columns. The model evaluated is theta_S in ``dual`` mode ("accuracy is
always evaluated on theta_S") and otherwise the distilled model the next round's clients start
from. All clients' distillation step is the same seeded computation on the same inputs, so every
client ends it with the same model (section 2.3.3: "all stochasticity is fixed by random seeds").
The simulation therefore runs that step once, in the server actor, and hands the resulting model
to the round's clients free of charge. What a real client downloads still travels: the coded soft
labels (nothing in round 1, where the initialisation comes from the shared seed), which the client
decodes and checks against the server's CRC32, and ``comm/bytes_down`` counts exactly those bytes.
Uploads are real bitstreams too (``fedray.distill.soft_labels``); ``comm/bytes_up`` is their length. CFD-b_up-b_down
is ``fd`` with ``mode: dual`` and the two bit widths (``cfd`` defaults to CFD-1-32); b = 32 sends
float32 probabilities. With several architectures each one's model distils from the same labels.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from fedray.algorithms.base import ClientAlgorithm, Params, VirtualClient, task_seed
from fedray.algorithms.fedavg import mean_client_loss
from fedray.algorithms.feddf import DistillationStrategy
from fedray.distill import DistillParams, predict_logits
from fedray.distill.soft_labels import (FULL_PRECISION, decode_soft_labels, dequantize, encode_soft_labels,
                                        entropy_bits, quantize)
from fedray.messages import ClientFailure, ClientTask, ClientUpdate, RoundPlan
from fedray.weights import set_weights


def _thesis_distill() -> DistillParams:
    return DistillParams(lr=1e-3)  # section 5.4: Adam, lr 0.001 for local training and distillation


class FDParams(Params):
    mode: Literal["init_previous", "init_random", "dual"] = "init_previous"
    b_up: int = FULL_PRECISION
    b_down: int = FULL_PRECISION
    delta: bool = False  # eq. 5.11: uploads, and downloads when b_down <= 16
    distill: DistillParams = Field(default_factory=_thesis_distill)
    log_before: bool = True

    @field_validator("b_up", "b_down")
    @classmethod
    def _bits(cls, value: int) -> int:
        if not (1 <= value <= 16 or value == FULL_PRECISION):
            raise ValueError(f"soft-label bits must be 1..16 (quantised, eq. 5.8) or 32 (float32), got {value}")
        return value

    @model_validator(mode="after")
    def _delta_needs_quantised_uploads(self) -> "FDParams":
        if self.delta and self.b_up == FULL_PRECISION:
            raise ValueError("delta coding (eq. 5.11) compares quantised labels: set b_up to 1..16 or delta: false")
        return self


class CFDParams(FDParams):
    mode: Literal["init_previous", "init_random", "dual"] = "dual"
    b_up: int = 1


def quantized(probs: np.ndarray, bits: int, seed: int) -> np.ndarray:
    """Q_b(probs) (eqs. 5.8-5.9) as the receiver decodes it: integer counts for b <= 16, float32
    probabilities for b = 32; ties broken by a generator seeded with ``seed``."""
    if bits == FULL_PRECISION:
        return probs.astype(np.float32)
    return quantize(probs, bits, np.random.default_rng(seed))


def as_probs(labels: np.ndarray, bits: int) -> np.ndarray:
    return labels if bits == FULL_PRECISION else dequantize(labels, bits)


class FDClient(ClientAlgorithm):
    """Local training from the round's distilled model, then quantised soft labels on X_pub."""

    stateful = True  # the last upload and the last download, for delta coding

    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        p = self.params
        if len(task.payload_keys) > 1:
            self._receive(task, payloads[task.payload_keys[1]], client)
        weights, stats = self.train_local(task, payloads[task.payload_keys[0]], client)
        model = self.model(task.arch)
        set_weights(model, weights)
        probs = torch.softmax(predict_logits(model, self.aux_x), dim=1).cpu().numpy()
        previous = client.state.get("last") if p.delta else None
        labels = quantized(probs, p.b_up, task.seed)
        payload = encode_soft_labels(labels, p.b_up, previous)
        client.state["last"] = labels if p.b_up != FULL_PRECISION else None
        stats["entropy_bits"] = entropy_bits(labels) if p.b_up != FULL_PRECISION else float("nan")
        stats["time_s"] = time.perf_counter() - start
        return ClientUpdate(client.client_id, task.arch, client.num_samples, payload, len(payload), stats)

    def _receive(self, task: ClientTask, payload: bytes, client: VirtualClient) -> None:
        """Decode the downloaded soft labels (delta-coded against this client's last download) and
        check them against the server's CRC32: the stream a real client would distil from."""
        labels = decode_soft_labels(payload, client.state.get("down") if delta_down(self.params) else None)
        if labels_crc(labels) != task.options["labels_crc"]:
            raise ClientFailure(client.client_id, task.round, "download", "soft labels differ from the server's")
        if delta_down(self.params):
            client.state["down"] = labels


def delta_down(p: FDParams) -> bool:
    """Downloads are delta-coded (eq. 5.11) when ``delta`` is on and they are quantised."""
    return p.delta and p.b_down != FULL_PRECISION


def labels_crc(labels: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(labels).tobytes())


class FD(DistillationStrategy):
    name = "fd"
    Params = FDParams
    Client = FDClient

    def __init__(self, params: FDParams, ctx):
        super().__init__(params, ctx)
        self.start = dict(self.models)  # what this round's clients start from (the same initial model)
        self.down: dict[str, np.ndarray] = {}  # each architecture's soft labels for the next clients
        self.sent: dict[int, np.ndarray] = {}  # the labels each client downloaded last (delta coding)
        self.last_up: dict[int, np.ndarray] = {}  # each client's last upload (decoding of deltas)

    def configure_round(self, round: int) -> RoundPlan:
        """Each client gets the distilled start model (free: every client computes the same one) and,
        after round 1, the coded soft labels it was distilled from, which are what is counted."""
        plan = super().configure_round(round)
        broadcast = {key: self.start[key.split("/", 1)[1]] for key in plan.broadcast}
        sizes = {key: 0 for key in broadcast}
        tasks = []
        for task in plan.tasks:
            if task.arch in self.down:
                key, payload = self._labels_for(task)
                broadcast[key] = payload
                task = replace(task, payload_keys=task.payload_keys + (key,),
                               options={"labels_crc": labels_crc(self.down[task.arch])})
            tasks.append(task)
        self.round_down = float(sum(len(v) for k, v in broadcast.items() if k.startswith("labels/")))
        return RoundPlan(tasks, broadcast, sizes)

    def _labels_for(self, task: ClientTask) -> tuple[str, bytes]:
        labels = self.down[task.arch]
        if not delta_down(self.params):  # the same stream for every client of the architecture
            return f"labels/{task.arch}", encode_soft_labels(labels, self.params.b_down)
        payload = encode_soft_labels(labels, self.params.b_down, self.sent.get(task.client_id))
        self.sent[task.client_id] = labels
        return f"labels/{task.client_id}", payload

    def _decode(self, update: ClientUpdate) -> np.ndarray:
        previous = self.last_up.get(update.client_id) if self.params.delta else None
        labels = decode_soft_labels(update.payload, previous)
        if self.params.b_up != FULL_PRECISION:
            self.last_up[update.client_id] = labels
        return as_probs(labels, self.params.b_up)

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        p = self.params
        mean = np.mean([self._decode(u) for u in sorted(updates, key=lambda u: u.client_id)], axis=0)
        y = torch.from_numpy(mean.astype(np.float32))
        metrics = mean_client_loss(updates)
        metrics["comm/soft_label_bytes_up"] = float(sum(u.bytes_up for u in updates))
        metrics["comm/soft_label_bytes_down"] = self.round_down
        entropies = [u.metrics["entropy_bits"] for u in updates if not np.isnan(u.metrics.get("entropy_bits", np.nan))]
        if entropies:
            metrics["distill/entropy_bits_up"] = float(np.mean(entropies))
        for index, arch in enumerate(self.ctx.architectures):
            if p.log_before:
                metrics[f"distill/accuracy_before/{arch}"] = self.test_accuracy(arch, self.models[arch])
            teacher = y
            if p.mode == "dual":  # eq. 5.13: the server model continues from its previous state
                self.models[arch], stats = self.distill_weights(arch, self.models[arch], y, p.distill, round)
                metrics[f"distill/loss/{arch}"] = stats["loss"]
                teacher = torch.softmax(self.logits(arch, self.models[arch], self.aux), dim=1).cpu()
            seed = task_seed(self.config.seed, round, 2**41 + index)
            self.down[arch] = quantized(teacher.numpy(), p.b_down, seed)
            target = torch.from_numpy(as_probs(self.down[arch], p.b_down))
            init = self.start[arch] if p.mode == "init_previous" else self.random_init(arch, round + 1)
            self.start[arch], stats = self.distill_weights(arch, init, target, p.distill, round + 1)
            if p.mode != "dual":
                self.models[arch] = self.start[arch]
                metrics[f"distill/loss/{arch}"] = stats["loss"]
            metrics[f"distill/accuracy_after/{arch}"] = self.test_accuracy(arch, self.models[arch])
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"models": self.models, "start": self.start, "down": self.down, "sent": self.sent,
                "last_up": self.last_up}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models, self.start, self.down = state["models"], state["start"], state["down"]
        self.sent, self.last_up = state["sent"], state["last_up"]


class CFD(FD):
    """Compressed federated distillation, thesis Alg. 8: ``fd`` with dual distillation and 1-bit uploads."""

    name = "cfd"
    Params = CFDParams
