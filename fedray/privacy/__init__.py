"""Privacy of what clients release beyond their models (no Ray).

- :mod:`fedray.privacy.certainty`: FedAUX's (eps, delta)-DP logistic certainty scores (TNNLS Alg. 1,
  Theorem 1) and the scorers of its ablation (Fig. 4).
"""

from fedray.privacy.certainty import (
    NORMALISERS,
    SCORERS,
    LogisticScorer,
    Scorer,
    certainty_scores,
    dp_certainty,
    dp_sigma,
    fit_certainty,
    normalised,
    normaliser,
    privacy_spent,
    scorer_from_upload,
)

__all__ = ["NORMALISERS", "SCORERS", "LogisticScorer", "Scorer", "certainty_scores", "dp_certainty", "dp_sigma",
           "fit_certainty", "normalised", "normaliser", "privacy_spent", "scorer_from_upload"]
