"""The Gaussian mechanism's exact privacy: its privacy profile, its inverse, and the smallest noise.

Balle and Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical Calibration
and Optimal Denoising", ICML 2018, Theorem 8: adding N(0, sigma^2 I) to a function of l2-sensitivity
Delta is (eps, delta)-DP if and only if

    delta >= delta(eps; mu) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu),   mu = Delta / sigma,

Phi the standard normal CDF. delta(eps; mu) falls with eps (to 0) and rises with mu (to 1), so for a
given mu the smallest eps at a delta, and for a given (eps, delta) the largest mu (the smallest
sigma), are roots of a monotone function, found here by bracketing and Brent's method.

The classical calibration sigma = sqrt(2 ln(1.25/delta)) Delta / eps (Dwork and Roth, "The
Algorithmic Foundations of Differential Privacy", 2014, Theorem A.1) is proven for eps < 1 only; at
larger eps it can fall short (eps 10, delta 1e-5: the exact delta is 2.3e-5).

Everything here takes mu = Delta / sigma, which is all the guarantee depends on: mu = 0 is infinite
noise (delta 0 at every eps), mu = inf no noise (delta 1 at every eps: no guarantee).
"""

from __future__ import annotations

import functools
import math

import numpy as np


def gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with mu = Delta / sigma (Balle and Wang, Theorem 8): the
    smallest delta for which it is (eps, delta)-DP.

    Computed as Phi(a) (1 - exp(eps + log Phi(b) - log Phi(a))), a = mu/2 - eps/mu, b = -mu/2 - eps/mu,
    so that e^eps Phi(b) neither overflows at large eps nor loses the difference where both are tiny.

    Args:
        eps: >= 0, may be inf (delta 0 for finite mu).
        mu: >= 0, may be inf (delta 1: no noise).
    """
    from scipy.stats import norm  # imported on first use, not with fedray.privacy

    eps, mu = float(eps), float(mu)
    if eps < 0 or mu < 0 or math.isnan(eps) or math.isnan(mu):
        raise ValueError(f"eps and mu must be >= 0, not eps={eps}, mu={mu}")
    if mu == math.inf:
        return 1.0
    if mu == 0.0 or eps == math.inf:
        return 0.0
    log_a = float(norm.logcdf(mu / 2 - eps / mu))
    if log_a == -math.inf:
        return 0.0
    log_b = float(norm.logcdf(-mu / 2 - eps / mu))
    gap = eps + log_b - log_a  # log(e^eps Phi(b) / Phi(a)) <= 0
    return float(min(max(math.exp(log_a) * -math.expm1(min(gap, 0.0)), 0.0), 1.0))


def gaussian_epsilon(delta: float, mu: float) -> float:
    """The smallest eps at which the Gaussian mechanism with mu = Delta / sigma is (eps, delta)-DP:
    the inverse of :func:`gaussian_delta` in eps. 0 where delta(0) <= ``delta`` already; inf where no
    finite eps reaches it (no noise, or ``delta`` <= 0). The root is nudged up until delta(eps) <=
    ``delta`` holds as computed, so the pair returned is never optimistic.

    Args:
        delta: the target, in [0, 1].
        mu: Delta / sigma, >= 0, may be inf.
    """
    from scipy.optimize import brentq

    delta, mu = float(delta), float(mu)
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    if delta <= 0.0 or mu == math.inf:
        return math.inf

    def excess(eps: float) -> float:
        return gaussian_delta(eps, mu) - delta

    hi = max(1.0, mu * mu)  # delta(eps) is already small once eps >> mu^2 / 2
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 1e300:
            return math.inf
    eps = float(brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    step = max(abs(eps) * 1e-15, 1e-300)
    while excess(eps) > 0:
        eps, step = eps + step, 2 * step
    return eps


@functools.lru_cache(maxsize=256)  # a run calibrates the same (eps, delta) for every client
def gaussian_mu(eps: float, delta: float) -> float:
    """The largest mu = Delta / sigma for which the Gaussian mechanism is (eps, delta)-DP (Balle and
    Wang, Theorem 8, solved for mu by Brent's method: the analytic calibration). inf where any noise
    will do (``eps`` inf or ``delta`` >= 1); the root is nudged down until delta(eps; mu) <= ``delta``
    holds as computed.

    Args:
        eps: > 0, may be inf.
        delta: in (0, 1].
    """
    from scipy.optimize import brentq

    eps, delta = float(eps), float(delta)
    if not eps > 0 or not delta > 0:
        raise ValueError(f"the Gaussian mechanism needs eps > 0 and delta > 0, not eps={eps}, delta={delta}")
    if eps == math.inf or delta >= 1.0:
        return math.inf

    def excess(mu: float) -> float:
        return gaussian_delta(eps, mu) - delta

    hi = 1.0
    while excess(hi) <= 0:
        hi *= 2.0
    mu = float(brentq(excess, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    step = mu * 1e-15
    while excess(mu) > 0:
        mu, step = mu - step, 2 * step
    return mu


def analytic_sigma(eps: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma for which adding N(0, sigma^2 I) to a function of l2-sensitivity
    ``sensitivity`` is (eps, delta)-DP: ``sensitivity`` / :func:`gaussian_mu` (0 where any noise will do)."""
    return float(sensitivity) / gaussian_mu(eps, delta)


def classical_sigma(eps: float, delta: float, sensitivity: float = 1.0) -> float:
    """sigma = sqrt(2 ln(1.25/delta)) ``sensitivity`` / eps (Dwork and Roth, Theorem A.1): sufficient
    for (eps, delta)-DP where eps < 1, not in general beyond."""
    return math.sqrt(2.0 * math.log(1.25 / float(delta))) * float(sensitivity) / float(eps)
