"""Sparse ternary compression for federated learning: thesis Algorithm 7 (p. 41), eqs. 4.4-4.8.

    init: theta_i = theta; R_i = 0; R = 0
    client i in I_t:
        dtheta = golomb_decode(download); theta_i += dtheta                    # STCClient.receive
        dtheta_i <- R_i + SGD_n(theta_i, D_i, b) - theta_i                     # train; eq. 4.4 with residual
        dtheta~_i <- compress(dtheta_i, p_up); R_i <- dtheta_i - dtheta~_i     # upload; eq. 4.5 (3.8)
        upload golomb_encode(dtheta~_i)
    server:                                                                    # aggregate
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

The server needs the clients only through mean_i dtheta~_i (eq. 4.6), so the method folds
(``fedray.fold``): the host that ran a client decodes its bitstream, whose bytes are the client's
``bytes_up``, and folds the decoded dtheta~_i (``STCClient.statistics``). R_i stays in the client's
state; R, the downstream compression and the cache stay on the server.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedray.compression import CodedUpdate, compress_update, decode_update
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, Params, ServerContext, Strategy, Trained, VirtualClient, task_seed
from fedray.methods.helpers import CatchUpCache, ModelCheck, model_crc
from fedray.round import Round, Statistics
from fedray.weights import Weights, is_update, nbytes

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


def float_shapes(weights: Weights) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors that are updated and sent (the floating ones)."""
    return {k: v.shape for k, v in weights.items() if is_update(v)}


class STCClient(Client):
    stateful = True  # R_i and the client's copy theta_i stay on its host

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        """theta_i after applying the download: the full model, or the missed updates in order."""
        if downloads and not isinstance(downloads[0], CodedUpdate):  # the whole model
            theta = {k: np.array(v, copy=True) for k, v in downloads[0].items()}
        else:  # Alg. 7's init theta_i = theta, then every missed dtheta~, oldest first
            theta = client.state.get("theta") or dict(self.initial(task.arch))
            shapes = float_shapes(theta)
            for coded in downloads:
                for name, delta in decode_update(coded.tensors, shapes).items():
                    theta[name] = theta[name] + delta
        task.options.verify(theta)
        return theta

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> CodedUpdate:
        coded = self.encode_update(task, theta, local.weights, client.state)
        client.state["theta"] = theta
        return CodedUpdate(coded)

    def encode_update(self, task: ClientTask, theta: Weights, trained: Weights,
                      state: dict[str, Any]) -> dict[str, bytes]:
        """dtheta_i <- R_i + (SGD_n(theta_i) - theta_i), compressed; R_i keeps the error (eq. 3.8)."""
        residual = state.get("residual", {})
        update = {k: residual.get(k, 0) + (trained[k] - theta[k]) for k in theta if is_update(theta[k])}
        compressed, payload = compress_update(update, self.params.up, self.params.p_up)
        if self.params.client_residuals:
            state["residual"] = {k: update[k] - compressed[k] for k in update}
        return payload

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"update": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """dtheta~_i decoded from its bitstream (to the model's shapes), with c_i = |D_i| (``weighted``)
        or 1: eq. 4.6's mean."""
        model = self.initial(update.arch)
        weight = float(update.num_samples) if self.params.weighted else 1.0
        return {"update": (weight, decode_update(update.payload.tensors, float_shapes(model)))}


class STC(Strategy):
    name = "stc"
    description = "STC: sparse ternary compressed updates both ways, Golomb-coded, with error-feedback residuals"
    paper = ('Sattler et al. 2020, "Robust and Communication-Efficient Federated Learning From Non-i.i.d. Data", IEEE '
        "TNNLS; thesis Alg. 7, eqs. 4.4-4.8 (Sattler 2021, TU Berlin)")
    Params = STCParams
    Client = STCClient
    state_attrs = ("models", "residual", "cache")

    def __init__(self, params: STCParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.residual: dict[str, Weights] = {}
        self.cache = CatchUpCache(self.models, params.cache_rounds)

    def configure_round(self, round: int) -> RoundPlan:
        broadcast: dict[str, Any] = {}
        tasks = []
        crc = {arch: model_crc(model) for arch, model in self.models.items()}
        for c in self.sample_clients(round):
            downloads = self._downloads(c.client_id, c.arch, round)
            broadcast.update(downloads)
            tasks.append(ClientTask(c.client_id, round, c.arch, tuple(downloads),
                                    task_seed(self.config.seed, round, c.client_id), ModelCheck(crc[c.arch])))
        return RoundPlan(tasks=tasks, broadcast=broadcast)

    def _downloads(self, client_id: int, arch: str, round: int) -> dict[str, Any]:
        """The missed updates (partial sum P^(s)) if cached and cheaper than the model, else the model."""
        missed = self.cache.missed(client_id, round)  # every client starts with theta^0
        deltas = self.cache.cached(arch, missed)
        if deltas is None or sum(nbytes(d) for d in deltas) >= nbytes(self.models[arch]):
            return {f"model/{arch}": self.models[arch]}
        return {f"delta/{arch}/{r}": d for r, d in zip(missed, deltas)}

    def aggregate(self, round: Round) -> dict[str, float]:
        for arch, mean in round.mean("update").items():  # mean_i dtheta~_i, decoded on the hosts
            theta = self.models[arch]
            residual = self.residual.get(arch, {})
            delta = {k: residual.get(k, 0) + mean[k] for k in mean}  # eq. 4.6
            compressed, payload = compress_update(delta, self.params.down, self.params.p_down)
            if self.params.server_residual:
                self.residual[arch] = {k: delta[k] - compressed[k] for k in delta}  # eq. 4.8
            self.models[arch] = {k: (v + compressed[k]).astype(v.dtype) if k in compressed else v
                                 for k, v in theta.items()}
            self.cache.add(arch, round.number, CodedUpdate(payload))
        self.cache.trained([u.client_id for u in round.updates], round.number)
        return round.mean_loss()
