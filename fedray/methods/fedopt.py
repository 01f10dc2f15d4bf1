"""FedOpt: Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2; FedAvgM: Hsu
et al., "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", 2019. A baseline of MrTF (its reference [51]).

The clients train as in FedAvg. The server treats the negative of the averaged client change as a
gradient and feeds it to an optimiser of its own (Alg. 2, lines 9-13):

    Delta_t = 1/|S| sum_i (x_i - x_t)                                   # the pseudo-gradient, negated
    momentum (FedAvgM): m_t = beta_1 m_{t-1} + Delta_t;               x_{t+1} = x_t + eta m_t
    adagrad:  m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t;  v_t = v_{t-1} + Delta_t^2
    yogi:     m_t as adagrad;  v_t = v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
    adam:     m_t as adagrad;  v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2
              x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)               # the three adaptive ones

Alg. 2 starts from m_{-1} = 0 and v_{-1} >= tau^2; here v_{-1} = tau^2, and there is no bias
correction (the algorithm box has none). The optimiser moves the model's parameters; buffers
(BatchNorm statistics) are averaged as in FedAvg, as the authors' TensorFlow Federated code does for
non-trainable variables. ``momentum`` with beta_1 = 0 and eta = 1 is FedAvg exactly.

Delta_t needs the clients only through their mean model, 1/|S| sum_i x_i (|D_i|-weighted with
``weighted: true``): the hosts fold it as FedAvg's (``fedray.fold``), and no upload reaches the server.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from fedray.methods.base import ServerContext
from fedray.methods.fedavg import AveragingParams, FedAvg
from fedray.round import Round
from fedray.weights import Weights


class FedOptParams(AveragingParams):  # no ``share``: the server step moves whole models
    optimizer: Literal["momentum", "adagrad", "yogi", "adam"] = "adam"
    server_lr: float = Field(0.01, gt=0)  # eta; Reddi et al. tune it per task on a log grid
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)  # the degree of adaptivity; also v_{-1} = tau^2


class FedOpt(FedAvg):
    name = "fedopt"
    description = "FedOpt: FedAvg's clients, a server optimiser on their mean change (momentum: FedAvgM, adam, ...)"
    paper = ('Reddi et al. 2021, "Adaptive Federated Optimization", ICLR, Alg. 2; FedAvgM: Hsu, Qi, Brown 2019, '
        '"Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification", '
        "arXiv:1909.06335")
    Params = FedOptParams
    state_attrs = ("models", "moments")

    def __init__(self, params: FedOptParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.parameters = {arch: {name for name, _ in ctx.build_model(arch).named_parameters()}
                           for arch in ctx.architectures}
        # per architecture and parameter: (m, v), float64; v unused by momentum
        self.moments: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {
            arch: {name: (np.zeros(value.shape), np.full(value.shape, params.tau ** 2))
                   for name, value in self.models[arch].items() if name in self.parameters[arch]}
            for arch in ctx.architectures}

    def aggregate(self, round: Round) -> dict[str, float]:
        for arch, mean in round.mean("model").items():  # the clients' mean model, sum_i c_i x_i / sum_i c_i
            self.models[arch] = self.server_step(self.models[arch], mean, self.moments[arch])
        return round.mean_loss()

    def server_step(self, x: Weights, mean: Weights, moments: dict[str, tuple[np.ndarray, np.ndarray]]) -> Weights:
        """x_{t+1} from x_t and the clients' mean model; updates ``moments`` in place."""
        p = self.params
        out = dict(mean)  # buffers: the clients' mean
        for name, (m, v) in moments.items():
            delta = mean[name].astype(np.float64) - x[name]
            if p.optimizer == "momentum":
                m = p.beta1 * m + delta
                step = p.server_lr * m
            else:
                m = p.beta1 * m + (1 - p.beta1) * delta
                square = delta ** 2
                if p.optimizer == "adagrad":
                    v = v + square
                elif p.optimizer == "yogi":
                    v = v - (1 - p.beta2) * square * np.sign(v - square)
                else:
                    v = p.beta2 * v + (1 - p.beta2) * square
                step = p.server_lr * m / (np.sqrt(v) + p.tau)
            moments[name] = (m, v)
            out[name] = (x[name] + step).astype(x[name].dtype)
        return out
