"""Sparse ternary compression for federated learning: thesis Algorithm 7 (p. 41), eqs. 4.4-4.8.

    init: theta_i = theta; R_i = 0; R = 0
    client i in I_t:
        dtheta = golomb_decode(download); theta_i += dtheta                    # _sync
        dtheta_i <- R_i + SGD_n(theta_i, D_i, b) - theta_i                     # eq. 4.4 with residual
        dtheta~_i <- compress(dtheta_i, p_up); R_i <- dtheta_i - dtheta~_i     # eq. 4.5 (3.8)
        upload golomb_encode(dtheta~_i)
    server:
        dtheta <- R + mean_i dtheta~_i                                         # eq. 4.6
        dtheta~ <- compress(dtheta, p_down); R <- dtheta - dtheta~             # eqs. 4.7, 4.8
        theta <- theta + dtheta~; broadcast golomb_encode(dtheta~) to all clients

Partial participation (section 4.2.2): the server caches the encoded downstream updates of the last
``cache_rounds`` rounds. A client that missed rounds downloads the ones it missed and applies them in
order (the partial sum P^(s), sent as its s terms), or the full model when that is cheaper or the
cache no longer reaches back far enough. Applying the same float additions in the same order keeps
the client's copy bit-identical to the server's model; a CRC32 of the server's model travels with
the task and the client checks it. ``up``/``down`` choose the compressor (stc, sbc, topk or none, the
latter sending the update without loss: dense, or as positions and values when that is smaller).
With ``down: none`` this is the upstream-only rule (4.4-4.5), and with every client taking part
each round it is Alg. 4 (sparse k-nary DSGD) with ``training.steps`` as the delay n.
Integer buffers (BatchNorm's batch counter) are not updates and are not sent.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from fedray.algorithms.base import ClientAlgorithm, Params, ServerContext, Strategy, VirtualClient, task_seed
from fedray.algorithms.fedavg import group_by_arch, mean_client_loss
from fedray.compression import COMPRESSORS, decode_tensor, encode_tensor, identity
from fedray.messages import ClientFailure, ClientTask, ClientUpdate, RoundPlan
from fedray.weights import Weights, get_weights, is_update, nbytes, weighted_mean

Compressor = Literal["stc", "sbc", "topk", "none"]


class STCParams(Params):
    up: Compressor = "stc"
    p_up: float = Field(1 / 400, gt=0, le=1)
    down: Compressor = "stc"
    p_down: float = Field(1 / 400, gt=0, le=1)
    client_residuals: bool = True
    server_residual: bool = True
    weighted: bool = False
    cache_rounds: int = Field(50, ge=0)


def compress(update: Weights, kind: str, p: float) -> tuple[Weights, dict[str, bytes]]:
    """Per-tensor compression (each tensor its own k and mu) and the encoded payload."""
    if kind == "none":  # no loss: dense float32, or positions and float32 values if that is smaller
        compressed = {name: identity(x) for name, x in update.items()}
        return compressed, {name: min(encode_tensor("dense", x), encode_tensor("topk", x), key=len)
                            for name, x in compressed.items()}
    compressed = {name: COMPRESSORS[kind](x, p) for name, x in update.items()}
    return compressed, {name: encode_tensor(kind, x) for name, x in compressed.items()}


def decode(payload: dict[str, bytes], shapes: dict[str, tuple[int, ...]]) -> Weights:
    return {name: decode_tensor(data, shapes[name], name) for name, data in payload.items()}


def forget_old(cache: dict[int, Any], round: int, keep: int) -> None:
    """Drop cached downstream updates older than the last ``keep`` rounds."""
    for stale in [r for r in cache if r <= round - keep]:
        del cache[stale]


def model_crc(weights: Weights) -> int:
    """CRC32 of a model's floating tensors, to check that a client's copy matches the server's."""
    crc = 0
    for name in sorted(weights):
        if is_update(weights[name]):
            crc = zlib.crc32(np.ascontiguousarray(weights[name]).tobytes(), crc)
    return crc


class STCClient(ClientAlgorithm):
    stateful = True  # R_i, the client's copy theta_i and its last synced round stay on its host

    def _sync(self, task: ClientTask, payloads: dict[str, Any], state: dict[str, Any]) -> Weights:
        """theta_i after applying the download: the full model, or the missed updates in order."""
        keys = task.payload_keys
        if keys and keys[0].startswith("model/"):
            theta = {k: np.array(v, copy=True) for k, v in payloads[keys[0]].items()}
        else:
            theta = state["theta"] if "theta" in state else self._initial(task.arch)
            shapes = {k: v.shape for k, v in theta.items()}
            for key in keys:  # "delta/<arch>/<round>", oldest first
                for name, delta in decode(payloads[key], shapes).items():
                    theta[name] = theta[name] + delta
        if model_crc(theta) != task.options["model_crc"]:
            raise ClientFailure(task.client_id, task.round, "download", "model copy is out of sync with the server")
        return theta

    def _initial(self, arch: str) -> Weights:
        """Alg. 7's init theta_i = theta: the same seeded initial model the server built."""
        torch.manual_seed(self.config.seed)
        return get_weights(self._build_model(arch))

    def encode_update(self, task: ClientTask, theta: Weights, trained: Weights,
                      state: dict[str, Any]) -> dict[str, bytes]:
        """dtheta_i <- R_i + (SGD_n(theta_i) - theta_i), compressed; R_i keeps the error (eq. 3.8)."""
        residual = state.get("residual", {})
        update = {k: residual.get(k, 0) + (trained[k] - theta[k]) for k in theta if is_update(theta[k])}
        compressed, payload = compress(update, self.params.up, self.params.p_up)
        if self.params.client_residuals:
            state["residual"] = {k: update[k] - compressed[k] for k in update}
        return payload

    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        theta = self._sync(task, payloads, client.state)
        trained, stats = self.train_local(task, theta, client)  # SGD_n(theta_i, D_i, b)
        payload = self.encode_update(task, theta, trained, client.state)
        client.state["theta"], client.state["synced"] = theta, task.round - 1
        stats["time_s"] = time.perf_counter() - start
        return ClientUpdate(client.client_id, task.arch, client.num_samples, payload, nbytes(payload), stats)


class STC(Strategy):
    name = "stc"
    Params = STCParams
    Client = STCClient

    def __init__(self, params: STCParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.residual: dict[str, Weights] = {}
        self.cache: dict[str, dict[int, dict[str, bytes]]] = {arch: {} for arch in self.models}
        self.synced: dict[int, int] = {}  # client id -> round whose model it holds (default 0: theta^0)

    def configure_round(self, round: int) -> RoundPlan:
        clients = self.sample_clients(round)
        broadcast: dict[str, Any] = {}
        tasks = []
        for c in clients:
            keys = self._download_keys(c.client_id, c.arch, round)
            for key in keys:
                broadcast[key] = self._payload(key)
            options = {"model_crc": model_crc(self.models[c.arch])}
            tasks.append(ClientTask(c.client_id, round, c.arch, keys, task_seed(self.config.seed, round, c.client_id),
                                    options))
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def _download_keys(self, client_id: int, arch: str, round: int) -> tuple[str, ...]:
        """The missed updates (partial sum P^(s)) if cached and cheaper than the model, else the model."""
        missed = range(self.synced.get(client_id, 0) + 1, round)  # every client starts with theta^0
        full = f"model/{arch}"
        if any(r not in self.cache[arch] for r in missed):
            return (full,)
        if sum(nbytes(self.cache[arch][r]) for r in missed) >= nbytes(self.models[arch]):
            return (full,)
        return tuple(f"delta/{arch}/{r}" for r in missed)

    def _payload(self, key: str):
        kind, arch, *rest = key.split("/")
        return self.models[arch] if kind == "model" else self.cache[arch][int(rest[0])]

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, group in group_by_arch(updates).items():
            theta = self.models[arch]
            shapes = {k: v.shape for k, v in theta.items() if is_update(v)}
            decoded = [decode(u.payload, shapes) for u in group]
            coefficients = [u.num_samples if self.params.weighted else 1.0 for u in group]
            mean = weighted_mean(decoded, coefficients)
            residual = self.residual.get(arch, {})
            delta = {k: residual.get(k, 0) + mean[k] for k in mean}  # eq. 4.6
            compressed, payload = compress(delta, self.params.down, self.params.p_down)
            if self.params.server_residual:
                self.residual[arch] = {k: delta[k] - compressed[k] for k in delta}  # eq. 4.8
            self.models[arch] = {k: (v + compressed[k]).astype(v.dtype) if k in compressed else v
                                 for k, v in theta.items()}
            self.cache[arch][round] = payload
            forget_old(self.cache[arch], round, self.params.cache_rounds)
        for u in updates:
            self.synced[u.client_id] = round - 1
        return mean_client_loss(updates)

    def state_dict(self) -> dict[str, Any]:
        return {"models": self.models, "residual": self.residual, "cache": self.cache, "synced": self.synced}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models, self.residual = state["models"], state["residual"]
        self.cache, self.synced = state["cache"], state["synced"]
