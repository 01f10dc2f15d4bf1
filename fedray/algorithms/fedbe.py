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
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from fedray.algorithms.feddf import FedDF, FusionParams
from fedray.algorithms.helpers import sample_weights
from fedray.distill.ensemble import EnsembleMode
from fedray.messages import ClientUpdate
from fedray.weights import Weights


class FedBEParams(FusionParams):  # no ``share``: the samples are of whole models
    ensemble: EnsembleMode = "mean_probs"
    samples: int = Field(10, ge=0)
    include_mean: bool = True


class FedBE(FedDF):
    name = "fedbe"
    Params = FedBEParams

    def extra_teachers(self, round: int, groups: dict[str, list[ClientUpdate]]) -> list[tuple[str, Weights]]:
        rng = np.random.default_rng([self.config.seed, round, 0xFEDBE])
        teachers = []
        for arch, group in groups.items():
            mean = self.models[arch]  # the weighted average, set by aggregate before this call
            names = {name for name, _ in self.work_model(arch).named_parameters()}
            w = np.array(sample_weights(group, self.params.weighted))
            w = w / w.sum()
            std = {k: np.sqrt(sum(c * (u.payload.weights[k].astype(np.float64) - mean[k]) ** 2
                                  for c, u in zip(w, group))) for k in names}
            if self.params.include_mean:
                teachers.append((arch, mean))
            for _ in range(self.params.samples):
                sample = dict(mean)
                sample.update({k: (mean[k] + std[k] * rng.standard_normal(mean[k].shape)).astype(mean[k].dtype)
                               for k in sorted(names)})
                teachers.append((arch, sample))
        return teachers
