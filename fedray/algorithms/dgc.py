"""Deep Gradient Compression (Lin et al., ICLR 2018), the 32-value-bit baseline of thesis chapter 3.

Client i, with its update dtheta_i = SGD_n(theta, D_i) - theta (a negative scaled gradient for n = 1):

    u_i <- m * u_i + dtheta_i           # momentum correction: accumulate velocity, not gradients
    v_i <- v_i + u_i                    # local accumulation
    mask <- top-k(|v_i|) per tensor     # k = max(floor(n p), 1)
    send v_i * mask (positions and float32 values)
    v_i <- v_i * (1 - mask); u_i <- u_i * (1 - mask)   # momentum factor masking

The server is the STC server (Alg. 7): it averages the sparse updates and, with ``down``, compresses
the broadcast. The local optimiser should have no momentum of its own (DGC's momentum lives here).
Not implemented: DGC's warm-up sparsity schedule and local gradient clipping.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from fedray.algorithms.base import Params
from fedray.algorithms.stc import STC, Compressor, STCClient, compress, is_update
from fedray.weights import Weights


class DGCParams(Params):
    p_up: float = Field(0.001, gt=0, le=1)
    dgc_momentum: float = Field(0.9, ge=0, lt=1)
    # the server half is STC's (Alg. 7): its downstream compression, residual, weighting and cache
    down: Compressor = "none"
    p_down: float = Field(0.001, gt=0, le=1)
    server_residual: bool = True
    weighted: bool = False
    cache_rounds: int = Field(50, ge=0)


class DGCClient(STCClient):
    def encode_update(self, theta: Weights, trained: Weights, state: dict[str, Any]) -> dict[str, bytes]:
        names = [k for k in theta if is_update(theta[k])]
        m = np.float32(self.params.dgc_momentum)
        u = {k: m * state.get("u", {}).get(k, 0) + (trained[k] - theta[k]) for k in names}  # momentum correction
        v = {k: state.get("v", {}).get(k, 0) + u[k] for k in names}                          # accumulation
        sent, payload = compress(v, "topk", self.params.p_up)
        keep = {k: (sent[k] == 0) for k in names}                                           # factor masking
        state["u"] = {k: u[k] * keep[k] for k in names}
        state["v"] = {k: v[k] * keep[k] for k in names}
        return payload


class DGC(STC):
    name = "dgc"
    Params = DGCParams
    Client = DGCClient
