"""Deep Gradient Compression (Lin et al., ICLR 2018), the 32-value-bit baseline of thesis chapter 3.

Client i, with its update dtheta_i = SGD_n(theta, D_i) - theta (a negative scaled gradient for n = 1):

    u_i <- m * u_i + dtheta_i           # momentum correction: accumulate velocity, not gradients
    dtheta_i <- dtheta_i * min(1, c N^-1/2 / ||dtheta_i||)   # local clipping (clip_norm c, N clients/round)
    v_i <- v_i + u_i                    # local accumulation
    mask <- top-k(|v_i|) per tensor     # k = max(floor(n p_t), 1)
    send v_i * mask (positions and float32 values)
    v_i <- v_i * (1 - mask); u_i <- u_i * (1 - mask)   # momentum factor masking

Warm-up (``warmup_rounds`` > 0): the density p_t falls exponentially over the first rounds, as the
paper's 75%, 93.75%, 98.4375%, 99.6% sparsity over its first four epochs: p_t = max(p, 0.25^(1 + j))
in the j-th quarter of the warm-up, then p. The server is the STC server (Alg. 7): it averages the
sparse updates and, with ``down``, compresses the broadcast. As STC's, the average folds on the
hosts (``STCClient.statistics``: each client's positions and values decoded there, its bytes
counted as sent); u_i and v_i stay in the client's state. The local optimiser should have no
momentum of its own (DGC's momentum lives here).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
from pydantic import Field

from fedray.compression import compress_update
from fedray.messages import ClientTask
from fedray.methods.base import Params
from fedray.methods.stc import Compressor, STC, STCClient
from fedray.weights import Weights, is_update


class DGCParams(Params):
    p_up: float = Field(0.001, gt=0, le=1)
    dgc_momentum: float = Field(0.9, ge=0, lt=1)
    warmup_rounds: int = Field(0, ge=0)
    clip_norm: Optional[float] = Field(None, gt=0)
    # the server half is STC's (Alg. 7): its downstream compression, residual, weighting and cache
    down: Compressor = "none"
    p_down: float = Field(0.001, gt=0, le=1)
    server_residual: bool = True
    weighted: bool = False
    cache_rounds: int = Field(50, ge=0)


def warmup_density(p: float, round: int, warmup_rounds: int) -> float:
    """p_t: 0.25, 0.0625, 0.015625, 0.0039 in the four quarters of the warm-up (never below p), then p."""
    if round > warmup_rounds:
        return p
    quarter = min(3, (4 * (round - 1)) // warmup_rounds)
    return max(p, 0.25 ** (1 + quarter))


def clip(update: Weights, threshold: float) -> Weights:
    """Scale the whole update to an L2 norm of at most ``threshold``."""
    norm = math.sqrt(sum(float(np.sum(np.square(x, dtype=np.float64))) for x in update.values()))
    if norm <= threshold:
        return update
    scale = np.float32(threshold / norm)
    return {k: x * scale for k, x in update.items()}


class DGCClient(STCClient):
    def encode_update(self, task: ClientTask, theta: Weights, trained: Weights,
                      state: dict[str, Any]) -> dict[str, bytes]:
        names = [k for k in theta if is_update(theta[k])]
        step = {k: trained[k] - theta[k] for k in names}
        if self.params.clip_norm is not None:  # local gradient clipping, threshold scaled by N^-1/2
            step = clip(step, self.params.clip_norm / math.sqrt(self.config.federation.clients_per_round))
        m = np.float32(self.params.dgc_momentum)
        u = {k: m * state.get("u", {}).get(k, 0) + step[k] for k in names}                  # momentum correction
        v = {k: state.get("v", {}).get(k, 0) + u[k] for k in names}                          # accumulation
        density = warmup_density(self.params.p_up, task.round, self.params.warmup_rounds)
        sent, payload = compress_update(v, "topk", density)
        keep = {k: (sent[k] == 0) for k in names}                                           # factor masking
        state["u"] = {k: u[k] * keep[k] for k in names}
        state["v"] = {k: v[k] * keep[k] for k in names}
        return payload


class DGC(STC):
    name = "dgc"
    description = "DGC: top-k sparse updates with momentum correction, factor masking, warm-up; STC's server"
    paper = ('Lin et al. 2018, "Deep Gradient Compression: Reducing the Communication Bandwidth for Distributed '
        'Training", ICLR; the baseline of thesis chapter 3 (Sattler 2021, TU Berlin)')
    Params = DGCParams
    Client = DGCClient
