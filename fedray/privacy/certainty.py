"""FedAUX's certainty scores (P2) and their differential privacy (P3), and the scorer ablation.

Sattler, Korjakow, Rischke, Samek, "FedAUX: Leveraging Unlabeled Auxiliary Data in Federated
Learning", IEEE TNNLS 2021 (Alg. 1, eqs. 9-12, Theorem 1, Figs. 2-4); thesis chapter 7 (Alg. 14,
eqs. 7.6-7.13, Theorem 4, Figs. 7.2-7.4, Appendix C.2).

    Alg. 1, client i (preparation):
        gamma_i <- max_{x in D_i u D^-} ||h_0(x)||                                 # normaliser
        w_i*    <- argmin_w J(w), J = 1/N sum_x l(t_x <w, h_0(x)/gamma_i>) + lam/2 ||w||^2   # fit_certainty
        w_i*    <- w_i* + N(0, sigma^2 I), sigma^2 = 8 ln(1.25/delta) / (eps^2 lam^2 N^2)      # dp_certainty
    server:
        s_i(x)  <- sigmoid(<w_i*, h_0(x)/gamma_i>) + xi, xi = 1e-8                  # certainty_scores

with l(z) = log(1 + exp(-z)), t_x = +1 on D_i and -1 on D^-, N = |D_i| + |D^-|. Theorem 1 bounds the
l2-sensitivity of D_i -> argmin J by 2/(lam N) for features of norm <= 1; the Gaussian mechanism with
that sensitivity gives the sigma above (the arXiv eq. (10) and thesis eq. 7.13 print |D_aux| in place
of |D^-|: a typo, Alg. 1 and the TNNLS text have |D^-|). That sigma is the classical calibration,
proven for eps < 1 only; for eps >= 1 :func:`dp_sigma` takes the smallest sigma for which (eps, delta)
holds exactly (Balle and Wang 2018, Theorem 8; :mod:`fedray.privacy.accounting`), and
:func:`privacy_spent` reports the exact (eps, delta) of the release.

The normaliser. Theorem 1 holds the feature map fixed between neighbouring data sets, but Alg. 1's
gamma_i is the largest norm over D_i u D^-: it moves with the client's data, and it is released
without noise. One replaced sample of large norm rescales every feature, and w* moves far beyond
2/(lam N) (:func:`normalised` has the numbers). So the default here, ``normaliser="public"``, takes
gamma from the public negatives alone (h_0 and D^- are the server's, so gamma says nothing about D_i)
and clips each own feature x/gamma to norm 1: the map is the same for all neighbours and every
input has norm <= 1, so Theorem 1 and the (eps, delta) of eq. 12 hold. ``normaliser="paper"`` is
Alg. 1's gamma_i; a release under it carries no guarantee (:func:`privacy_spent` says inf).

Where the authors' code departs from the paper, this follows the paper: sklearn's ``C`` is 1/(lam N),
not 1/lam (which is N times weaker regularisation, and a sensitivity N times the noise's), and there
is no intercept (the theorem covers w alone). ``regularization="code"`` is the code's C = 1/lam, and
``intercept=True`` its unpenalised intercept b, noised as w is (w then carries b as a last entry:
s(x) = sigmoid(<w, [h_0(x)/gamma, 1]>)); the code fits at sklearn's default ``tol`` of 1e-4.

:data:`SCORERS` is TNNLS Fig. 4 / thesis Fig. 7.4's ablation: other ways to weigh a client's teacher
per sample, implemented after thesis Appendix C.2. Only ``logistic`` is private.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import pickle
from typing import Any, Callable, Optional, Protocol

import numpy as np

from fedray.privacy.accounting import gaussian_delta, gaussian_epsilon, gaussian_mu
from fedray.weights import SIMULATION

XI = 1e-8  # xi of eq. 11: keeps every score positive


NORMALISERS = ("public", "paper")


# -- the DP logistic certainty score (Alg. 1, eqs. 9-12, Theorem 1) -----------------------------------
def normaliser(own: np.ndarray, negatives: np.ndarray, kind: str = "public") -> float:
    """gamma: ``paper``, the largest feature norm ||h_0(x)|| over D_i u D^- (Alg. 1), so ||x / gamma||
    <= 1 on both sets; ``public``, the largest over the public negatives D^- alone (own features are
    then clipped, :func:`normalised`)."""
    if kind not in NORMALISERS:
        raise ValueError(f"normaliser must be one of {', '.join(NORMALISERS)}, not {kind!r}")
    largest = float(np.linalg.norm(negatives, axis=1).max())
    return largest if kind == "public" else max(float(np.linalg.norm(own, axis=1).max()), largest)


def normalised(x: np.ndarray, gamma: float, dtype: str = "float64", clip: bool = True) -> np.ndarray:
    """x / gamma, each row clipped to norm at most 1 (in ``dtype``; ``clip=False``: not clipped): the
    feature map of fit and score.

    Where gamma bounds every row (Alg. 1's gamma_i on D_i u D^-) the clip changes nothing, so the
    paper's map is this one. With the public gamma it is what makes Theorem 1 apply: the map no
    longer depends on D_i, and a replaced sample of any norm enters with norm <= 1. (Measured in
    ``tests/privacy/test_certainty.py``, N = 800: with Alg. 1's gamma_i recomputed on the neighbour,
    one replaced sample of norm 20 moved w* by 15 times 2/(lam N); with the public one, 0.35 of it.)"""
    z = np.asarray(x, dtype=dtype) / np.dtype(dtype).type(gamma)
    if not clip:
        return z
    norms = np.linalg.norm(z, axis=1, keepdims=True) if z.ndim == 2 else np.linalg.norm(z)
    return z / np.maximum(norms, 1.0)


def fit_certainty(own: np.ndarray, negatives: np.ndarray, lam: float, gamma: Optional[float] = None,
                  tol: float = 1e-10, regularization: str = "paper", kind: str = "public",
                  intercept: bool = False, dtype: str = "float64") -> tuple[np.ndarray, float]:
    """The minimiser of J (eq. 9) without noise: the client's logistic "own vs negatives" head.

    Args:
        own: features h_0(x) of the client's data D_i, shape (n_i, d).
        negatives: features of the negative set D^-, shape (n_-, d).
        lam: lambda of J, > 0.
        gamma: the normaliser; None computes it (:func:`normaliser` of ``kind``).
        tol: L-BFGS gradient tolerance (on J itself, see below).
        regularization: ``paper`` minimises J; ``code`` what the authors' code minimises, J with
            lambda / N (sklearn's C = 1/lam): far sharper scores, and N times the sensitivity.
        kind: the normaliser, ``public`` (private) or ``paper`` (Alg. 1's gamma_i); see the module.
        intercept: also fit an unpenalised intercept b (the authors' code; the paper has none).
        dtype: the precision of the fit: ``float32`` fits on the features as the model gives them
            (sklearn's L-BFGS keeps float32), as the authors' code does; where ``tol`` stops the
            solver short of the optimum, where it stops depends on it.

    Returns:
        (w, gamma): w float64 of shape (d,), or (d + 1,) with b last where ``intercept``.
    """
    from sklearn.linear_model import LogisticRegression

    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', not {dtype!r}")
    own, negatives = np.asarray(own, dtype=dtype), np.asarray(negatives, dtype=dtype)
    gamma = normaliser(own, negatives, kind) if gamma is None else float(gamma)
    x = normalised(np.vstack([own, negatives]), gamma, dtype)
    t = np.r_[np.ones(len(own)), -np.ones(len(negatives))]  # t_x: +1 own, -1 negatives
    n = len(x)
    # sklearn minimises 1/2 ||w||^2 + C sum_x l(t_x <w, x>). With C = 1/(lam N) that is
    # 1/2 ||w||^2 + 1/(lam N) sum_x l = J(w) / lam, so both have the same minimiser, the paper's w*.
    # (sklearn's lbfgs even minimises 1/N sum l + 1/(C N) 1/2 ||w||^2 = J itself, so `tol` is on grad J.)
    # The authors' C = 1/lam minimises sum l + lam/2 ||w||^2 = N (1/N sum l + lam/(2N) ||w||^2): J with
    # lambda / N, whose sensitivity is N times the 2/(lam N) the noise is scaled to.
    if regularization not in ("paper", "code"):
        raise ValueError(f"regularization must be 'paper' or 'code', not {regularization!r}")
    c = 1.0 / (lam * n) if regularization == "paper" else 1.0 / lam
    model = LogisticRegression(solver="lbfgs", fit_intercept=intercept, C=c, max_iter=1000, tol=tol)
    model.fit(x, t)
    w = model.coef_[0] if not intercept else np.r_[model.coef_[0], model.intercept_]  # of classes_[1] = +1 (own)
    return w.astype(np.float64), gamma


def dp_sigma(lam: float, eps: float, delta: float, n: int) -> float:
    """sigma of the Gaussian mechanism (Alg. 1, eq. 10): sigma^2 = 8 ln(1.25/delta) / (eps^2 lam^2 n^2)
    where eps < 1; where eps >= 1, the smallest sigma for which (eps, delta) holds (:func:`dp_mu`).

    The formula is 2 ln(1.25/delta) Delta^2 / eps^2 with Theorem 1's sensitivity Delta = 2 / (lam n).

    Args:
        lam: lambda of J.
        eps: epsilon of the release (inf: no noise, sigma 0).
        delta: delta of the release.
        n: |D_i| + |D^-| (not |D_aux|: eq. 10's typo).
    """
    if eps < 1.0:  # the paper's formula, valid here (Dwork and Roth, Theorem A.1): kept as it was
        return math.sqrt(8.0 * math.log(1.25 / delta)) / (eps * lam * n)
    return 2.0 / (lam * n) / dp_mu(eps, delta)


def dp_mu(eps: float, delta: float) -> float:
    """Delta / sigma of :func:`dp_sigma`'s noise, which does not depend on lambda or N.

    The paper's sigma comes from the classical calibration sqrt(2 ln(1.25/delta)) Delta / eps, proven
    for eps < 1 only (Dwork and Roth 2014, Theorem A.1); at eps 10, delta 1e-5 it gives an exact delta of
    2.3e-5 (Balle and Wang 2018, Theorem 8). So for eps >= 1 the noise is the analytic calibration,
    the largest mu at which Theorem 8's delta(eps) is at most delta (:func:`gaussian_mu`): the stated
    (eps, delta) holds exactly. Below 1 the paper's sigma stays, so runs there do not change.
    """
    if eps < 1.0:
        return eps / math.sqrt(2.0 * math.log(1.25 / delta))
    return gaussian_mu(eps, delta)


def dp_certainty(own: np.ndarray, negatives: np.ndarray, lam: float, eps: float, delta: float,
                 rng: np.random.Generator, gamma: Optional[float] = None,
                 regularization: str = "paper", kind: str = "public", intercept: bool = False,
                 tol: float = 1e-10, dtype: str = "float64") -> tuple[np.ndarray, float]:
    """The release of Alg. 1: argmin J + N(0, sigma^2 I) (eq. 12), and gamma; (eps, delta)-DP with
    ``kind="public"``, ``regularization="paper"`` and no intercept (:func:`privacy_spent`).

    Args:
        own, negatives, lam, gamma, regularization, kind, intercept, tol, dtype: as :func:`fit_certainty`
            (the noise is the paper's sigma either way, on b too, as in the authors' code).
        eps, delta: the privacy of the released w (:func:`dp_sigma`).
        rng: draws the noise.

    Returns:
        (w_noisy, gamma).
    """
    w, gamma = fit_certainty(own, negatives, lam, gamma, tol, regularization, kind, intercept, dtype)
    sigma = dp_sigma(lam, eps, delta, len(own) + len(negatives))
    return w + rng.normal(0.0, sigma, size=w.shape), gamma


def certainty_scores(w: np.ndarray, gamma: float, features: np.ndarray, clip: bool = True) -> np.ndarray:
    """s(x) = sigmoid(<w, h_0(x)/gamma>) + xi (eq. 11), float64, one per row of ``features``; h_0(x)/gamma
    clipped to norm 1 as in the fit under the public normaliser (:func:`normalised`), not clipped
    (``clip=False``) under Alg. 1's gamma_i, whose map has no clip: inputs to be scored may lie beyond
    gamma_i. A w one longer than the features carries an intercept last (:func:`fit_certainty`'s
    ``intercept``)."""
    w = np.asarray(w, dtype=np.float64)
    x = normalised(features, gamma, clip=clip)
    z = x @ w if len(w) == x.shape[1] else x @ w[:-1] + w[-1]
    return _sigmoid(z) + XI


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) without overflow warnings."""
    return np.exp(-np.logaddexp(0.0, -z))


# -- the scorers of the ablation (TNNLS Fig. 4, thesis Fig. 7.4 and Appendix C.2) ----------------------
class Scorer(Protocol):
    """A fitted certainty scorer: ``score`` gives positive values, higher = more like the client's data;
    ``upload`` is what travels to the server (:func:`scorer_from_upload` turns it back)."""

    def score(self, features: np.ndarray) -> np.ndarray: ...

    def upload(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class LogisticScorer:
    """The DP logistic scorer: the release of Alg. 1 is these two arrays and nothing else.

    Attributes:
        w: the noised w_i*, shape (d,), float64; (d + 1,) with the noised intercept last where the
            scorer fits one (the authors' code).
        gamma: the normaliser gamma_i, a 0-d float64 array (an array, so the host can count its bytes).
        clip: whether the score clips h_0(x)/gamma to norm 1 (the public normaliser) or not (Alg. 1's
            gamma_i); the server knows it from the config, so it does not travel.
    """

    w: np.ndarray
    gamma: np.ndarray
    clip: bool = dataclasses.field(default=True, metadata=SIMULATION)

    def score(self, features: np.ndarray) -> np.ndarray:
        return certainty_scores(self.w, float(self.gamma), features, self.clip)

    def upload(self) -> "LogisticScorer":
        return self


class PickledScorer:
    """A scorer that travels as the pickled bytes of itself (fitted scikit-learn estimators inside).

    These are not private: the estimators keep support vectors, trees or the whole client data set
    (KDE), and nothing bounds what they reveal. Unpickling is safe only because the simulation's
    clients are ours; a real server must not unpickle what clients send.
    """

    def score(self, features: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def upload(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)


@dataclasses.dataclass
class KDEScorer(PickledScorer):
    """Gaussian KDE of the client's features, standardised per dimension by the client's own mean and
    std, bandwidth by Scott's rule n^(-1/(d+4)) (scipy's ``gaussian_kde`` default, with a diagonal
    covariance; the thesis's fixed 0.5 only means something at one feature scale). Score:
    exp(log p(x) - max over own of log p), clipped to 1, so in (0, 1] (thesis: min-max normalised)."""

    kde: Any
    mean: np.ndarray
    scale: np.ndarray
    log_max: float

    def score(self, features: np.ndarray) -> np.ndarray:
        log_p = self.kde.score_samples((np.asarray(features, np.float64) - self.mean) / self.scale)
        return np.minimum(np.exp(log_p - self.log_max), 1.0) + XI


@dataclasses.dataclass
class EstimatorScorer(PickledScorer):
    """A fitted estimator and how its output becomes a score in (0, 1].

    Attributes:
        estimator: the fitted scikit-learn estimator (or pipeline).
        kind: ``isolation_forest`` (1 + score_samples, in [0, 1]), ``one_class_svm``
            (sigmoid of decision_function) or ``svm_rbf`` (Platt probability of "own").
    """

    estimator: Any
    kind: str

    def score(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, np.float64)
        if self.kind == "isolation_forest":
            raw = 1.0 + self.estimator.score_samples(x)  # score_samples = -anomaly score, in [-1, 0]
        elif self.kind == "one_class_svm":
            raw = _sigmoid(self.estimator.decision_function(x))
        else:  # svm_rbf
            raw = self.estimator.predict_proba(x)[:, list(self.estimator.classes_).index(1)]
        return raw.astype(np.float64) + XI


@dataclasses.dataclass
class RandomScorer(PickledScorer):
    """s(x) ~ U(0, 1) (thesis eq. C.21), drawn from ``seed`` (fixed at fit time) so that scoring the
    same inputs twice gives the same scores."""

    seed: int

    def score(self, features: np.ndarray) -> np.ndarray:
        return np.random.default_rng(self.seed).uniform(size=len(features)) + XI


@dataclasses.dataclass
class EqualScorer(PickledScorer):
    """s(x) = 1: the plain mean of FedDF (+P); the thesis's 1/2 (eq. C.22) weighs the same."""

    def score(self, features: np.ndarray) -> np.ndarray:
        return np.ones(len(features)) + XI


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))


def fit_logistic(own, negatives, rng, lam, eps, delta, regularization: str = "paper",
                 normaliser: str = "public", intercept: bool = False, tol: float = 1e-10,
                 dtype: str = "float64") -> LogisticScorer:
    """The DP logistic scorer of Alg. 1 (``regularization``, ``normaliser``, ``intercept``, ``tol``,
    ``dtype``: :func:`fit_certainty`'s ``regularization``, ``kind``, ``intercept``, ``tol`` and ``dtype``;
    what it spends: :func:`privacy_spent`)."""
    w, gamma = dp_certainty(own, negatives, lam, eps, delta, rng, regularization=regularization, kind=normaliser,
                            intercept=intercept, tol=tol, dtype=dtype)
    return LogisticScorer(w, np.asarray(gamma, dtype=np.float64), clip=normaliser != "paper")


def fit_kde(own, negatives, rng, lam, eps, delta) -> KDEScorer:
    """Gaussian KDE on the client's own features (see :class:`KDEScorer`); ignores the negatives."""
    from sklearn.neighbors import KernelDensity

    own = np.asarray(own, np.float64)
    mean, scale = own.mean(axis=0), np.maximum(own.std(axis=0), 1e-12)
    z = (own - mean) / scale
    bandwidth = len(z) ** (-1.0 / (z.shape[1] + 4))  # Scott's rule on standardised features
    kde = KernelDensity(kernel="gaussian", bandwidth=bandwidth).fit(z)
    return KDEScorer(kde, mean, scale, float(kde.score_samples(z).max()))


def fit_isolation_forest(own, negatives, rng, lam, eps, delta) -> EstimatorScorer:
    """An isolation forest of 100 trees on the own features (thesis Appendix C.2)."""
    from sklearn.ensemble import IsolationForest

    forest = IsolationForest(n_estimators=100, random_state=_seed(rng)).fit(np.asarray(own, np.float64))
    return EstimatorScorer(forest, "isolation_forest")


def fit_one_class_svm(own, negatives, rng, lam, eps, delta) -> EstimatorScorer:
    """A one-class RBF SVM on the standard-scaled own features, gamma = 1/(d var) ("scale"; App. C.2)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import OneClassSVM

    svm = make_pipeline(StandardScaler(), OneClassSVM(kernel="rbf", gamma="scale"))
    return EstimatorScorer(svm.fit(np.asarray(own, np.float64)), "one_class_svm")


def fit_svm_rbf(own, negatives, rng, lam, eps, delta) -> EstimatorScorer:
    """A two-class RBF SVM, own (1) vs negatives (0), gamma = 1/(d var) over both sets ("scale"),
    Platt-calibrated by 5-fold cross-validation (App. C.2; what ``SVC(probability=True)`` did)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.svm import SVC

    x = np.vstack([own, negatives]).astype(np.float64)
    t = np.r_[np.ones(len(own), dtype=int), np.zeros(len(negatives), dtype=int)]
    folds = StratifiedKFold(5, shuffle=True, random_state=_seed(rng))
    svm = CalibratedClassifierCV(SVC(kernel="rbf", gamma="scale"), method="sigmoid", cv=folds, ensemble=False)
    return EstimatorScorer(svm.fit(x, t), "svm_rbf")


def fit_random(own, negatives, rng, lam, eps, delta) -> RandomScorer:
    """Random scores (eq. C.21); they depend on no data."""
    return RandomScorer(_seed(rng))


def fit_equal(own, negatives, rng, lam, eps, delta) -> EqualScorer:
    """Equal scores (eq. C.22): FedDF+P."""
    return EqualScorer()


Fit = Callable[..., Scorer]  # fit(own, negatives, rng, lam, eps, delta) -> Scorer
SCORERS: dict[str, Fit] = {
    "logistic": fit_logistic,
    "kde": fit_kde,
    "isolation_forest": fit_isolation_forest,
    "one_class_svm": fit_one_class_svm,
    "svm_rbf": fit_svm_rbf,
    "random": fit_random,
    "equal": fit_equal,
}


def scorer_from_upload(payload: Any) -> Scorer:
    """The server side: a client's upload back as a scorer (a :class:`LogisticScorer` is its own upload)."""
    if isinstance(payload, LogisticScorer):
        return payload
    if isinstance(payload, (bytes, bytearray)):
        scorer = pickle.loads(payload)
        if isinstance(scorer, PickledScorer):
            return scorer
        raise TypeError(f"a scorer upload unpickled to a {type(scorer).__name__}, not a scorer")
    raise TypeError(f"not a scorer upload: {type(payload).__name__}")


def privacy_spent(name: str, eps: float, delta: float, regularization: str = "paper",
                  n_max: int = 1, normaliser: str = "public", intercept: bool = False) -> tuple[float, float]:
    """(eps, delta) that releasing a ``name`` scorer costs each client, exact for the Gaussian mechanism
    (Balle and Wang 2018, Theorem 8) at the sensitivity the release really has.

    - ``logistic`` with the paper's J: the noise has mu = Delta/sigma = :func:`dp_mu`, and the pair is
      (eps, the exact delta at eps). For eps >= 1 that is the configured delta (the noise is calibrated
      to it); below 1 the paper's classical sigma is conservative and the delta smaller (eps 0.1,
      delta 1e-5: 2.6e-9).
    - ``logistic`` with ``regularization: code``: the sensitivity is N times the one the noise is
      scaled to (N = ``n_max``, the largest |D_i| + |D^-|), so mu is N times :func:`dp_mu`, and the pair
      is (the exact eps at the configured delta, delta): eps 0.1, delta 1e-5 and N 500 spend eps 96.4,
      not eps N = 50 (at which the exact delta is 0.59).
    - ``logistic`` under ``normaliser: paper``: gamma_i is released without noise and the map moves
      with D_i, so no guarantee is known: (inf, 1). So too without noise (``eps`` inf), and with an
      intercept: J is not strongly convex in the unpenalised b, so Theorem 1 bounds nothing.
    - ``equal`` and ``random``: (0, 0), they release nothing about the data; the other scorers are not
      private: (inf, 1).

    Figures are rounded up to 10 significant digits (a larger eps or delta is as true), so that a
    delta calibrated to 1e-5 reads 1e-5.
    """
    if name not in SCORERS:
        raise KeyError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")
    if name in ("equal", "random"):
        return 0.0, 0.0
    if name != "logistic" or normaliser == "paper" or intercept or math.isinf(eps):
        return math.inf, 1.0
    mu = dp_mu(eps, delta)
    if regularization == "code":
        spent_eps = gaussian_epsilon(delta, n_max * mu)
        return (math.inf, 1.0) if math.isinf(spent_eps) else (_round_up(spent_eps), float(delta))
    spent_delta = gaussian_delta(eps, mu)
    return (math.inf, 1.0) if spent_delta >= 1.0 else (float(eps), _round_up(spent_delta))


def _round_up(x: float, digits: int = 10) -> float:
    """x rounded up to ``digits`` significant digits (never below x)."""
    if x == 0 or not math.isfinite(x):
        return float(x)
    rounded = float(decimal.Decimal(x).quantize(decimal.Decimal(1).scaleb(math.floor(math.log10(x)) - digits + 1),
                                                rounding=decimal.ROUND_CEILING))
    return rounded if rounded >= x else math.nextafter(rounded, math.inf)
