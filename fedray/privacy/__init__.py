"""Privacy of what clients release beyond their models (no Ray).

- :mod:`fedray.privacy.certainty`: FedAUX's (eps, delta)-DP logistic certainty scores (TNNLS Alg. 1,
  Theorem 1) and the scorers of its ablation (Fig. 4).
- :mod:`fedray.privacy.accounting`: the Gaussian mechanism's exact (eps, delta) (Balle and Wang 2018,
  Theorem 8), its inverse, and the smallest sigma for a given (eps, delta).
"""

from fedray.privacy.accounting import (
    analytic_sigma,
    classical_sigma,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
)
from fedray.privacy.certainty import (
    NORMALISERS,
    SCORERS,
    LogisticScorer,
    Scorer,
    certainty_scores,
    dp_certainty,
    dp_mu,
    dp_sigma,
    fit_certainty,
    normalised,
    normaliser,
    privacy_spent,
    scorer_from_upload,
)

__all__ = ["NORMALISERS", "SCORERS", "LogisticScorer", "Scorer", "analytic_sigma", "certainty_scores",
           "classical_sigma", "dp_certainty", "dp_mu", "dp_sigma", "fit_certainty", "gaussian_delta",
           "gaussian_epsilon", "gaussian_mu", "normalised", "normaliser", "privacy_spent", "scorer_from_upload"]
