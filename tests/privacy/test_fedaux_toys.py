"""The iris toy of FedAUX's certainty weighting (TNNLS Fig. 2, thesis Fig. 7.2: 33% mean vs 88%
KDE-weighted), scripts/repro/toy_ensemble.py: the DP logistic scorer of fedray.privacy.certainty at work."""

import pytest

from tests.support import script

iris_toy = script("repro.toy_ensemble").iris_toy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iris_toy_weighting_lifts_the_mean_ensemble_from_a_third(seed):
    # measured over seeds 0-19: mean 1/3 always (it predicts virginica everywhere); kde 0.953-0.980
    # (0.968 on average); logistic without noise 0.927-0.953; with DP at eps 0.1 it collapses (0.01-0.9).
    acc = iris_toy(seed)
    assert acc["mean"] == pytest.approx(1 / 3)
    assert acc["kde"] > 0.92
    assert acc["logistic"] > 0.9
    assert 0.0 <= acc["logistic_dp"] <= 1.0


def test_iris_toy_dp_weights_recover_at_a_large_epsilon():
    # eps 10 (sigma 0.09 against |D_i| = 50): measured 0.92-0.96 over seeds 0-19
    assert iris_toy(0, eps=10.0)["logistic_dp"] > 0.88
