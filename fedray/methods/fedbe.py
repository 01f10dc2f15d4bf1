"""FedBE: Chen & Chao, "FedBE: Making Bayesian Model Ensemble Applicable to Federated Learning",
ICLR 2021; a baseline of FedAUX (thesis chapter 7, fedaux digest section 7).

    theta_i <- train(theta, D_i)  for i in S_t                                       # as FedAvg
    per architecture:  mean = sum_i |D_i| theta_i / sum |D_i|,
                       var  = sum_i |D_i| (theta_i - mean)^2 / sum |D_i|   (diagonal Gaussian)
                       theta_s ~ N(mean, diag(var)),  s = 1..S            (S = ``samples``, 10)
    ensemble = clients + means + samples; y~ = mean of their softmax outputs on D_distill
    student theta^P <- mean, distilled towards y~ (eq. 7.1)

Only parameters are sampled; buffers (BatchNorm statistics) are the mean's. The FedBE paper also
averages the student's weights along distillation (SWA); that is not done here, so the
distillation step is the same as FedDF's and the two differ only in their ensembles.

Folding (``fedray.fold``, as FedDF's, :mod:`fedray.methods.feddf`): the Gaussian needs the
clients only through sums, its first and second moments per architecture: ``model``
(sum_i c_i theta_i) and ``square`` (sum_i c_i theta_i^2, parameters only), so that
var = sum_i c_i theta_i^2 / sum c - mean^2 (:func:`gaussian_std`); the clients' softmax outputs
on D_distill are FedDF's folded ``teacher``. The means and the samples are the server's own
models: their outputs are computed in the server and added to the clients' sum.
"""

from __future__ import annotations


import numpy as np
from pydantic import Field

from fedray.config import capped
from fedray.distill.ensemble import EnsembleMode
from fedray.fold import Sum, Sums, Terms
from fedray.messages import ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.feddf import FedDF, FedDFClient, FusionParams
from fedray.round import Statistics
from fedray.weights import Weights


# each sampled model is a whole model the server holds and runs on the distillation set at every step:
# a thousand are GBs of VGG11* copies; the paper draws 10
MAX_SAMPLED_MODELS = 1000
SampledModels = capped(MAX_SAMPLED_MODELS, f"at most {MAX_SAMPLED_MODELS:,} sampled models (each a whole model in the "
                                           f"server's ensemble; the paper draws 10)")


class FedBEParams(FusionParams):  # no ``share``: the samples are of whole models
    ensemble: EnsembleMode = "mean_probs"
    samples: SampledModels = Field(10, ge=0)
    include_mean: bool = True


def square_terms(update: ClientUpdate, params: FusionParams, names: set[str]) -> Terms:
    """``square``: theta_i^2 of the parameters ``names``, with FedDF's c_i. Squared in float64:
    float32 squares would round at 6e-8 of theta^2, far above what the variance needs."""
    weight = float(update.num_samples) if params.weighted else 1.0
    weights = update.payload.weights
    return {"square": (weight, {k: np.square(weights[k], dtype=np.float64) for k in sorted(names)})}


def gaussian_std(moments: dict[str, Sum], names: set[str]) -> dict[str, np.ndarray]:
    """sqrt(var) of the parameters ``names`` from one architecture's sums: var = sum_i c_i theta_i^2 /
    sum c - mean^2, in float64. The two terms cancel; their rounding is at most about
    2 (K + 1) 2^-52 of sum_i c_i theta_i^2 / sum c (K clients), so a variance below that is taken as
    0 (a single client's is exactly 0). The std so dropped is under 2.2e-8 sqrt(K + 1) of
    the parameter's root mean square: about a float32 ulp of the sample (6e-8 to 1.2e-7 of a value)
    for tens of clients."""
    first, second = moments["model"], moments["square"]
    std = {}
    for k in names:
        mean = first.value()[k] / first.weight
        square = second.value()[k] / second.weight
        var = square - mean * mean
        var[var <= 2 * (second.count + 1) * 2.0**-52 * square] = 0.0
        std[k] = np.sqrt(var)
    return std


class FedBEClient(FedDFClient):
    """FedDF's client; its terms add the second moment of theta_i (``square``)."""

    @classmethod
    def collected(cls, params: FedBEParams) -> dict[str, type]:
        return {**super().collected(params), "square": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        names = {name for name, _ in self.model(update.arch).named_parameters()}
        return {**super().statistics(update, client), **square_terms(update, self.params, names)}


class FedBE(FedDF):
    name = "fedbe"
    description = "FedBE: FedDF whose ensemble adds the mean and models sampled from a Gaussian over client weights"
    paper = ('Chen & Chao 2021, "FedBE: Making Bayesian Model Ensemble Applicable to Federated Learning", ICLR; as the'
        " baseline of FedAUX, without the SWA of the paper")
    Params = FedBEParams
    Client = FedBEClient

    def extra_teachers(self, round: int, sums: Sums, archs: list[str]) -> list[tuple[str, Weights]]:
        rng = np.random.default_rng([self.config.seed, round, 0xFEDBE])
        teachers = []
        for arch in archs:
            mean = self.models[arch]  # the weighted average, set from the sums before this call
            names = {name for name, _ in self.work_model(arch).named_parameters()}
            std = gaussian_std(sums[arch], names)
            if self.params.include_mean:
                teachers.append((arch, mean))
            for _ in range(self.params.samples):
                sample = dict(mean)
                sample.update({k: (mean[k] + std[k] * rng.standard_normal(mean[k].shape)).astype(mean[k].dtype)
                               for k in sorted(names)})
                teachers.append((arch, sample))
        return teachers
