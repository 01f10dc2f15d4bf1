"""FedNova: Wang, Liu, Liang, Joshi and Poor, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020 (arXiv:2007.07481), normalized averaging.

A method written outside fedray, as a user writes one; a config names it ``algorithm.name:
fednova:FedNova``. The notation is the paper's: x^t is the global model, client i runs tau_i local
steps from it and ends at x_i^{t,tau_i}; p_i = n_i / sum_j n_j over the round's clients.

In the paper's general form, client i's change is x^t - x_i^{t,tau_i} = eta G_i a_i: its stochastic
gradients G_i = [g_i^1 .. g_i^tau_i] combined by a vector a_i that the local solver fixes. FedAvg
adds these changes up weighted by p_i, so a client that takes more steps pulls the model further
towards its own objective (the objective inconsistency). FedNova normalizes each change by
||a_i||_1 first and scales the average back by an effective step count tau_eff:

    d_i     = eta G_i a_i / ||a_i||_1 = (x^t - x_i^{t,tau_i}) / ||a_i||_1    client i's normalized update
    x^{t+1} = x^t - tau_eff sum_i p_i d_i                                    FedNova's server step
    tau_eff = sum_i p_i ||a_i||_1                                            the paper's default choice

Local solvers (``training``):

- plain SGD: a_i = [1, ..., 1], so ||a_i||_1 = tau_i, the client's number of local steps
  (``epochs * ceil(n_i / batch_size)``, or ``steps``), read from its training metrics;
- SGD with momentum rho (PyTorch's heavy ball, no dampening): gradient k is carried into the
  remaining steps, a_i = [1 - rho^tau_i, ..., 1 - rho^2, 1 - rho] / (1 - rho), so
  ||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho) (the paper's momentum variant);
- Adam has no such a_i, and is refused before the run starts.

With equal ||a_i||_1 = tau for every client, tau_eff = tau and x^{t+1} = sum_i p_i x_i^{t,tau}:
FedAvg weighted by n_i. The step needs the round's clients only through sum_i p_i d_i and
sum_i p_i ||a_i||_1, so its clients' statistics are sums (:meth:`FedNovaClient.statistics`): each
client's host adds its terms to running sums and no client's update travels to the server on its
own. Buffers (BatchNorm's running statistics and counter) are not trained by gradients: they are
averaged with the weights p_i, as FedAvg averages them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.methods import Client, Params, Round, Strategy, Sum, Weights


class FedNovaParams(Params):
    """``algorithm:`` of a FedNova config, besides ``name``."""

    weighted: bool = True  # p_i = n_i / sum_j n_j (the paper's); false: p_i = 1 / |round's clients|


@dataclass
class FedNovaUpload:
    """What client i sends: d_i for the model's parameters, its buffers as trained, and ||a_i||_1."""

    d: Weights  # (x^t - x_i^{t,tau_i}) / ||a_i||_1, float32, one entry per parameter
    buffers: Weights  # x_i^{t,tau_i}'s buffers (BatchNorm statistics), averaged as FedAvg does
    a_norm: np.ndarray  # ||a_i||_1, a float64 scalar (tau_i for plain SGD)


def a_norm(steps: int, momentum: float) -> float:
    """||a_i||_1 for ``steps`` local steps of SGD with ``momentum`` rho (module docstring)."""
    if momentum == 0:
        return float(steps)  # vanilla SGD: a_i = [1, ..., 1]
    rho = momentum
    return (steps - rho * (1 - rho ** steps) / (1 - rho)) / (1 - rho)


class FedNovaClient(Client):
    """Trains as FedAvg's client does (the default ``receive`` and ``train``); uploads d_i and ||a_i||_1."""

    @classmethod
    def collected(cls, params):
        return {"d": Sum, "a_norm": Sum, "buffers": Sum}

    def upload(self, task, theta, local, client) -> FedNovaUpload:
        # tau_i: the steps the client took. An adversary's stand-in update reports none: it counts
        # the steps an honest client of its size would have taken, so its model enters as one would.
        steps = int(local.metrics.get("steps", 0)) or self.local_steps(client)
        norm = a_norm(steps, self.config.training.momentum)
        parameters = [name for name, _ in self.model(task.arch).named_parameters()]  # in the model's order
        d = {name: ((theta[name].astype(np.float64) - local.weights[name]) / norm).astype(np.float32)
             for name in parameters}  # d_i = (x^t - x_i^{t,tau_i}) / ||a_i||_1
        buffers = {name: value for name, value in local.weights.items() if name not in parameters}
        return FedNovaUpload(d, buffers, np.array(norm, dtype=np.float64))

    def statistics(self, update, client):
        """The terms of sum_i p_i d_i, sum_i p_i ||a_i||_1 and the buffers' mean, each with the
        unnormalized weight c_i = n_i (or 1); the server divides by sum_i c_i, which makes
        c_i / sum_j c_j = p_i. A model without buffers sends an empty set of them."""
        c = float(update.num_samples) if self.params.weighted else 1.0
        up = update.payload
        return {"d": (c, up.d), "a_norm": (c, up.a_norm), "buffers": (c, up.buffers)}


class FedNova(Strategy):
    """The server half: configure_round is the default one (the global model broadcast to a
    sampled fraction of the clients); the server step is :meth:`aggregate`."""

    name = "fednova"
    description = "FedNova: clients' updates normalized by their local steps, averaged, and scaled by tau_eff"
    paper = ('Wang, Liu, Liang, Joshi, Poor 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous '
             'Federated Optimization", NeurIPS (normalized averaging; vanilla and momentum local SGD)')
    Params = FedNovaParams
    Client = FedNovaClient

    @classmethod
    def config_problem(cls, config, params):
        if config.training.optimizer != "sgd":
            return (f"bad config value training.optimizer = {config.training.optimizer!r}: fednova normalizes "
                    "updates of local SGD (with or without momentum); set training.optimizer=sgd")
        return None

    def aggregate(self, round: Round) -> dict[str, float]:
        metrics = round.mean_loss()
        norms, buffers = round.total("a_norm"), round.mean("buffers")
        for arch, d in round.total("d").items():
            x = self.models[arch]
            mean_d = {name: total / d.weight for name, total in d.value().items()}  # sum_i p_i d_i
            tau_eff = float(norms[arch].value()) / norms[arch].weight  # sum_i p_i ||a_i||_1
            model = dict(x)
            for name, step in mean_d.items():  # x^{t+1} = x^t - tau_eff sum_i p_i d_i, in float64
                model[name] = (x[name].astype(np.float64) - tau_eff * step).astype(x[name].dtype)
            model.update(buffers[arch])  # sum_i p_i (buffers of x_i), as FedAvg
            self.models[arch] = model
            metrics[f"fednova/tau_eff/{arch}"] = tau_eff
        return metrics
