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

Folding (``fedray.fold``): Y = mean_i Y~_i is a sum over the round's clients, so the hosts fold it
(:func:`label_terms`: ``labels``, each client's dequantised upload with weight 1, and ``entropy``,
eq. 5.2's H of its quantised labels, for ``distill/entropy_bits_up``); the server divides the sum
by the number of clients. What a host folds is what the server decodes from the stream: the
client's quantised labels (``client.state["last"]``, which its stream decodes to, delta-coded or
not), or the float32 stream itself. With ``runtime.fold: false`` the server decodes the streams,
against its copy of each client's last upload when delta-coded, and folds them itself.
(Thesis Alg. 3 averages soft labels on X_pub; there are no per-class averages to fold.)
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from fedray.distill import DistillParams, predict_logits
from fedray.distill.soft_labels import (FULL_PRECISION, decode_soft_labels, dequantize, encode_soft_labels,
                                        entropy_bits, quantize)
from fedray.distill.strategy import DistillationStrategy
from fedray.fold import Sum
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, Params, Trained, VirtualClient, task_seed
from fedray.round import Round, Statistics
from fedray.weights import Weights, set_weights


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


def label_terms(labels: np.ndarray, bits: int) -> Statistics:
    """A client's terms of Y = mean_i Y~_i (eq. 2.2 / Alg. 8): its labels as probabilities, weight 1;
    quantised, also eq. 5.2's H of them (a 0-d array), whose mean is ``distill/entropy_bits_up``."""
    terms: Statistics = {"labels": (1.0, as_probs(labels, bits))}
    if bits != FULL_PRECISION:
        terms["entropy"] = (1.0, np.array(entropy_bits(labels)))
    return terms


@dataclass(frozen=True)
class CodedLabels:
    """Soft labels on X_pub as they travel: the coded stream of ``encode_soft_labels``."""

    stream: bytes


@dataclass(frozen=True)
class LabelsCheck:
    """Task option: the CRC32 of the soft labels the client must hold once its download is decoded."""

    crc: int


class LabelsOutOfSync(RuntimeError):
    """The decoded soft labels differ from the server's."""


def delta_down(p: FDParams) -> bool:
    """Downloads are delta-coded (eq. 5.11) when ``delta`` is on and they are quantised."""
    return p.delta and p.b_down != FULL_PRECISION


def labels_crc(labels: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(labels).tobytes())


class FDClient(Client):
    """Local training from the round's distilled model, then quantised soft labels on X_pub."""

    stateful = True  # the last upload and the last download, for delta coding

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        """The round's start model; after round 1 also the coded soft labels it was distilled from, which
        the client decodes (against its last download when delta-coded) and checks by CRC32."""
        for coded in downloads[1:]:
            labels = decode_soft_labels(coded.stream, client.state.get("down") if delta_down(self.params) else None)
            if labels_crc(labels) != task.options.crc:
                raise LabelsOutOfSync("soft labels differ from the server's")
            if delta_down(self.params):
                client.state["down"] = labels
        return downloads[0]

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> CodedLabels:
        """Y~_i = Q_{b_up}(softmax f(X_pub; theta_i)), delta-coded against the last upload if ``delta``."""
        p = self.params
        model = self.model(task.arch)
        set_weights(model, local.weights)
        probs = torch.softmax(predict_logits(model, self.aux_x), dim=1).cpu().numpy()
        labels = quantized(probs, p.b_up, task.seed)
        stream = encode_soft_labels(labels, p.b_up, client.state.get("last") if p.delta else None)
        client.state["last"] = labels if p.b_up != FULL_PRECISION else None
        return CodedLabels(stream)

    @classmethod
    def collected(cls, params: FDParams) -> dict[str, type]:
        return {"labels": Sum, **({"entropy": Sum} if params.b_up != FULL_PRECISION else {})}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """Y~_i as the server would decode it: the quantised labels the stream codes (``last``), or
        the float32 stream (32 bits: never delta-coded)."""
        if self.params.b_up == FULL_PRECISION:
            return label_terms(decode_soft_labels(update.payload.stream), FULL_PRECISION)
        return label_terms(client.state["last"], self.params.b_up)


class FD(DistillationStrategy):
    name = "fd"
    description = "FD: clients upload (quantised) soft labels on public data, never weights; Table 5.1's three modes"
    paper = ('Jeong et al. 2018, "Communication-efficient on-device machine learning: Federated distillation and '
        'augmentation under non-IID private data", arXiv:1811.11479; as thesis Alg. 3 and section 2.3.3 (Sattler '
        "2021, TU Berlin)")
    Params = FDParams
    Client = FDClient
    state_attrs = ("models", "start", "down", "sent")

    def __init__(self, params: FDParams, ctx):
        super().__init__(params, ctx)
        self.start = dict(self.models)  # what this round's clients start from (the same initial model)
        self.down: dict[str, np.ndarray] = {}  # each architecture's soft labels for the next clients
        self.sent: dict[int, np.ndarray] = {}  # the labels each client downloaded last (delta coding)

    def configure_round(self, round: int) -> RoundPlan:
        """Each client gets the distilled start model (free: every client computes the same one) and,
        after round 1, the coded soft labels it was distilled from, which are what is counted."""
        broadcast: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        tasks = []
        for c in self.sample_clients(round):
            keys, options = (f"model/{c.arch}",), None
            broadcast[keys[0]], sizes[keys[0]] = self.start[c.arch], 0
            if c.arch in self.down:
                key = self._labels_for(c, broadcast)
                keys, options = keys + (key,), LabelsCheck(labels_crc(self.down[c.arch]))
            tasks.append(ClientTask(c.client_id, round, c.arch, keys, task_seed(self.config.seed, round, c.client_id),
                                    options))
        self.round_down = float(sum(len(v.stream) for v in broadcast.values() if isinstance(v, CodedLabels)))
        return RoundPlan(tasks, broadcast, sizes)

    def _labels_for(self, client: ClientSpec, broadcast: dict[str, Any]) -> str:
        """Put the client's coded labels in the broadcast: one stream per architecture, or per client
        when downloads are delta-coded against what that client downloaded last."""
        labels = self.down[client.arch]
        if not delta_down(self.params):
            key = f"labels/{client.arch}"
            if key not in broadcast:
                broadcast[key] = CodedLabels(encode_soft_labels(labels, self.params.b_down))
            return key
        key = f"labels/{client.client_id}"
        broadcast[key] = CodedLabels(encode_soft_labels(labels, self.params.b_down, self.sent.get(client.client_id)))
        self.sent[client.client_id] = labels
        return key

    def aggregate(self, round: Round) -> dict[str, float]:
        p, sums, number = self.params, round.totals(), round.number
        y = torch.from_numpy(self.pooled_mean(sums, "labels").astype(np.float32))  # Y = mean_i Y~_i
        metrics = round.mean_loss()
        metrics["comm/soft_label_bytes_up"] = float(sum(u.bytes_up for u in round.updates))
        metrics["comm/soft_label_bytes_down"] = self.round_down
        if p.b_up != FULL_PRECISION:  # eq. 5.2's H of the quantised uploads, before delta coding
            metrics["distill/entropy_bits_up"] = float(self.pooled_mean(sums, "entropy"))
        for index, arch in enumerate(self.ctx.architectures):
            if p.log_before:
                metrics[f"distill/accuracy_before/{arch}"] = self.test_accuracy(arch, self.models[arch])
            teacher = y
            if p.mode == "dual":  # eq. 5.13: the server model continues from its previous state
                self.models[arch], stats = self.distill_weights(arch, self.models[arch], y, p.distill, number)
                metrics[f"distill/loss/{arch}"] = stats["loss"]
                teacher = torch.softmax(self.logits(arch, self.models[arch], self.aux), dim=1).cpu()
            seed = task_seed(self.config.seed, number, 2**41 + index)
            self.down[arch] = quantized(teacher.numpy(), p.b_down, seed)
            target = torch.from_numpy(as_probs(self.down[arch], p.b_down))
            init = self.start[arch] if p.mode == "init_previous" else self.random_init(arch, number + 1)
            self.start[arch], stats = self.distill_weights(arch, init, target, p.distill, number + 1, "/start")
            if p.mode != "dual":
                self.models[arch] = self.start[arch]
                metrics[f"distill/loss/{arch}"] = stats["loss"]
            metrics[f"distill/accuracy_after/{arch}"] = self.test_accuracy(arch, self.models[arch])
        return metrics


class CFD(FD):
    """Compressed federated distillation, thesis Alg. 8: ``fd`` with dual distillation and 1-bit uploads."""

    name = "cfd"
    description = "CFD: FD with dual distillation and quantised, delta-coded soft labels (1 bit up, float32 down)"
    paper = ('Sattler, Marban, Rischke, Samek 2021, "CFD: Communication-Efficient Federated Distillation via '
        'Soft-Label Quantization and Delta Coding", IEEE TNSE; thesis Alg. 8 (Sattler 2021, TU Berlin)')
    Params = CFDParams
