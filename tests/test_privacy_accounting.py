"""The Gaussian mechanism's exact privacy (Balle and Wang 2018, Theorem 8) and what FedAUX's release spends.

The expected values were computed apart from the code under test, with mpmath at 50 digits:

    from mpmath import mp, mpf, ncdf, exp, log, sqrt
    mp.dps = 50
    def delta(eps, mu):  # Theorem 8
        eps, mu = mpf(eps), mpf(mu)
        return ncdf(mu / 2 - eps / mu) - exp(eps) * ncdf(-mu / 2 - eps / mu)
    c = sqrt(2 * log(mpf("1.25") / mpf("1e-5")))  # 4.8448052626053894: the classical sigma is c Delta / eps

and the roots (eps at a delta, mu at an (eps, delta)) by 300 steps of bisection on that delta.
"""

import math

import pytest

from fedray.privacy import (
    analytic_sigma,
    classical_sigma,
    dp_mu,
    dp_sigma,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    privacy_spent,
)

C = 4.8448052626053894  # sqrt(2 ln(1.25 / 1e-5))


# -- Theorem 8: delta(eps; mu) ----------------------------------------------------------------------------
def test_delta_at_eps_0_is_the_total_variation_of_two_gaussians():
    # delta(0; mu) = Phi(mu/2) - Phi(-mu/2) = 2 Phi(1/2) - 1 at mu = 1
    assert gaussian_delta(0.0, 1.0) == pytest.approx(0.38292492254802621, rel=1e-12)


@pytest.mark.parametrize("eps, mu, expected", [
    (1.0, 1.0, 0.12693673750664395),
    (3.0, 2.0, 0.18381307654447216),
    (800.0, 40.0, 0.49003266481169869),  # e^800 alone overflows a float: the log-space form must not
])
def test_delta_of_theorem_8(eps, mu, expected):
    assert gaussian_delta(eps, mu) == pytest.approx(expected, rel=1e-10)


def test_delta_at_the_ends():
    assert gaussian_delta(5.0, math.inf) == 1.0  # no noise: no guarantee
    assert gaussian_delta(5.0, 0.0) == 0.0  # infinite noise
    assert gaussian_delta(math.inf, 3.0) == 0.0
    assert gaussian_delta(1e6, 3.0) == 0.0
    with pytest.raises(ValueError):
        gaussian_delta(-1.0, 1.0)


def test_the_classical_sigma_falls_short_at_eps_10():
    # the classical calibration at eps 10, delta 1e-5 (mu = 10 / c) gives an exact delta of 2.27e-5
    assert classical_sigma(10.0, 1e-5) == pytest.approx(C / 10, rel=1e-15)
    assert gaussian_delta(10.0, 1.0 / classical_sigma(10.0, 1e-5)) == pytest.approx(2.2653743647934231e-5, rel=1e-9)
    # and at eps 0.1 it is valid, with room to spare: 2.6e-9
    assert gaussian_delta(0.1, 0.1 / C) == pytest.approx(2.6359406003174346e-9, rel=1e-9)


# -- its inverse in eps -------------------------------------------------------------------------------------
def test_epsilon_at_a_delta():
    assert gaussian_epsilon(0.1, 1.0) == pytest.approx(1.1603338527916172, rel=1e-10)
    assert gaussian_delta(gaussian_epsilon(0.1, 1.0), 1.0) <= 0.1  # never optimistic
    assert gaussian_epsilon(0.5, 1.0) == 0.0  # delta(0) = 0.383 <= 0.5 already
    assert gaussian_epsilon(1e-5, math.inf) == math.inf  # no noise: no finite eps
    assert gaussian_epsilon(0.0, 1.0) == math.inf  # the Gaussian mechanism is never pure DP
    # N = 22,500 at eps 0.1 under the code's C: mu = 2250 / c = 464.4, eps ~ 1.1e5 (e^eps far beyond a float)
    assert gaussian_epsilon(1e-5, 2250 / C) == pytest.approx(109820.30710233078, rel=1e-9)


@pytest.mark.parametrize("eps, mu", [(0.01, 0.05), (0.3, 0.05), (0.01, 1.0), (2.0, 1.0), (10.0, 3.0),
                                     (0.3, 3.0), (200.0, 20.0), (260.0, 20.0), (5000.0, 100.0)])
def test_epsilon_inverts_delta(eps, mu):
    delta = gaussian_delta(eps, mu)
    assert 1e-30 < delta < 0.999  # a delta to invert (1 would say nothing about eps)
    assert gaussian_epsilon(delta, mu) == pytest.approx(eps, rel=1e-8)


# -- calibration ---------------------------------------------------------------------------------------
def test_analytic_calibration_at_eps_10_is_exact_and_more_noise_than_classical():
    mu = gaussian_mu(10.0, 1e-5)
    assert mu == pytest.approx(2.0004456204306324, rel=1e-10)
    assert gaussian_delta(10.0, mu) == pytest.approx(1e-5, rel=1e-9)  # round trip
    assert gaussian_delta(10.0, mu) <= 1e-5
    # the classical sigma is too small here (exact delta 2.27e-5), so the exact one is 3.2% larger
    assert analytic_sigma(10.0, 1e-5) / classical_sigma(10.0, 1e-5) == pytest.approx(1.0318033287475905, rel=1e-9)
    assert analytic_sigma(10.0, 1e-5, sensitivity=0.2) == pytest.approx(0.2 / 2.0004456204306324, rel=1e-10)


def test_analytic_calibration_below_eps_1_needs_less_noise_than_classical():
    # eps 0.5: the largest mu is 0.14221055866926122 against the classical 0.5 / c = 0.10320332250694327
    assert gaussian_mu(0.5, 1e-5) == pytest.approx(0.14221055866926122, rel=1e-10)
    assert analytic_sigma(0.5, 1e-5) < classical_sigma(0.5, 1e-5)
    assert gaussian_mu(math.inf, 1e-5) == math.inf and analytic_sigma(math.inf, 1e-5) == 0.0


def test_fedaux_keeps_the_papers_sigma_below_eps_1_and_is_exact_from_1():
    lam, n = 0.1, 22_500
    for eps in (0.01, 0.1, 0.5, 0.999):  # unchanged, bit for bit
        assert dp_sigma(lam, eps, 1e-5, n) == math.sqrt(8.0 * math.log(1.25 / 1e-5)) / (eps * lam * n)
    sensitivity = 2 / (lam * n)  # Theorem 1
    assert dp_sigma(lam, 10.0, 1e-5, n) == pytest.approx(sensitivity / 2.0004456204306324, rel=1e-10)
    assert dp_sigma(lam, 1.0, 1e-5, n) == pytest.approx(sensitivity / 0.26805112321129422, rel=1e-10)
    assert gaussian_delta(10.0, sensitivity / dp_sigma(lam, 10.0, 1e-5, n)) == pytest.approx(1e-5, rel=1e-9)
    assert dp_mu(0.1, 1e-5) == pytest.approx(0.1 / C, rel=1e-15)
    assert dp_sigma(lam, math.inf, 1e-5, n) == 0.0  # eps: null, no noise


# -- what FedAUX's release spends -------------------------------------------------------------------------
def test_the_codes_nominal_eps_n_is_no_guarantee():
    # the code's C = 1/lambda: sensitivity N times the noise's, so mu = N eps / c
    mu = 500 * 0.1 / C
    assert mu == pytest.approx(10.320332250694327, rel=1e-12)
    assert gaussian_delta(50.0, mu) == pytest.approx(0.58618426365488034, rel=1e-9)  # not 1e-5 at eps N
    # N = 3,750 (docs/methods.md): at eps N = 375 the exact delta is 1 (1 - delta < 1e-50)
    assert gaussian_delta(375.0, 3750 * 0.1 / C) == 1.0


def test_privacy_spent_paper_variant():
    eps, delta = privacy_spent("logistic", 0.1, 1e-5)
    assert eps == 0.1 and 2.6359406003174346e-9 <= delta == pytest.approx(2.6359406003174346e-9, rel=1e-9)
    assert privacy_spent("logistic", 10.0, 1e-5) == (10.0, 1e-5)  # calibrated exactly, read rounded up
    assert privacy_spent("logistic", 1.0, 1e-5) == (1.0, 1e-5)
    assert privacy_spent("logistic", math.inf, 1e-5) == (math.inf, 1.0)  # no noise
    assert privacy_spent("logistic", 0.1, 1e-5, normaliser="paper") == (math.inf, 1.0)


@pytest.mark.parametrize("n, expected", [(500, 96.433935633553121), (3000, 2180.2901864618279),
                                         (3750, 3324.7126761037332)])
def test_privacy_spent_code_variant(n, expected):
    eps, delta = privacy_spent("logistic", 0.1, 1e-5, "code", n_max=n)
    assert delta == 1e-5 and expected <= eps == pytest.approx(expected, rel=1e-9)


def test_privacy_spent_code_variant_above_eps_1():
    # the noise at eps 10 is the analytic one, so mu = N gaussian_mu(10, 1e-5); at N = 100, mu = 200.04
    eps, delta = privacy_spent("logistic", 10.0, 1e-5, "code", n_max=100)
    assert delta == 1e-5 and 20861.092131136037 <= eps == pytest.approx(20861.092131136037, rel=1e-9)


def test_privacy_spent_other_scorers_unchanged():
    assert privacy_spent("equal", 0.1, 1e-5, "code", n_max=500) == (0.0, 0.0)
    assert privacy_spent("random", 10.0, 1e-5) == (0.0, 0.0)
    assert privacy_spent("kde", 0.1, 1e-5, "code", n_max=500) == (math.inf, 1.0)
