"""Federated distillation core (no Ray): teacher ensembles, the distillation loop, soft-label coding.

- :mod:`fedray.distill.ensemble`: teacher outputs and their aggregation (eqs. 7.2, 7.4).
- :mod:`fedray.distill.loop`: KL distillation of a student (eq. 7.1).
- :mod:`fedray.distill.soft_labels`: soft-label quantisation Q_b (eqs. 5.8-5.9), delta coding
  (eq. 5.11) and their bitstreams.
- :mod:`fedray.distill.generator`: FedGen's conditional generator and its server-side objective.
- :mod:`fedray.distill.refinery`: MrTF's target modules.
- :mod:`fedray.distill.strategy`: the server half the distillation methods share.
"""

from fedray.distill.ensemble import aggregate_teachers, ensemble_accuracy, predict_features, predict_logits
from fedray.distill.loop import DistillParams, distill

__all__ = ["DistillParams", "aggregate_teachers", "distill", "ensemble_accuracy", "predict_features", "predict_logits"]
