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

import time
from typing import Any

import numpy as np
import torch
from pydantic import Field

from fedray.algorithms.base import Params, VirtualClient
from fedray.algorithms.stc import STC, Compressor, STCClient, compress, is_update
from fedray.messages import ClientTask, ClientUpdate
from fedray.training import local_train
from fedray.weights import get_weights, nbytes, set_weights


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
    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        state = client.state
        theta = self._sync(task, payloads, state)
        model = self.model(task.arch)
        set_weights(model, theta)
        generator = torch.Generator().manual_seed(task.seed)
        torch.manual_seed(task.seed)
        stats = local_train(model, client.x, client.y, self.config.training, generator)
        trained = get_weights(model)
        names = [k for k in theta if is_update(theta[k])]
        m = np.float32(self.params.dgc_momentum)
        u = {k: m * state.get("u", {}).get(k, 0) + (trained[k] - theta[k]) for k in names}  # momentum correction
        v = {k: state.get("v", {}).get(k, 0) + u[k] for k in names}                          # accumulation
        sent, payload = compress(v, "topk", self.params.p_up)
        keep = {k: (sent[k] == 0) for k in names}                                           # factor masking
        state["u"] = {k: u[k] * keep[k] for k in names}
        state["v"] = {k: v[k] * keep[k] for k in names}
        state["theta"], state["synced"] = theta, task.round - 1
        stats["time_s"] = time.perf_counter() - start
        return ClientUpdate(client.client_id, task.arch, client.num_samples, payload, nbytes(payload), stats)


class DGC(STC):
    name = "dgc"
    Params = DGCParams
    Client = DGCClient
