"""The two toys of FedAUX's certainty weighting (TNNLS Figs. 2 and 3, thesis Figs. 7.2 and 7.3): a few
clients with disjoint non-iid 2-D data, a linear classifier each, and an ensemble that averages the
clients' predicted probabilities weighted by a certainty s_i(x) of each client (:class:`ToyEnsemble`).
The logistic s_i is :mod:`fedray.privacy.certainty`'s scorer of Alg. 1 on random Fourier features
(:func:`fourier_features`, the toys' stand-in for the pre-trained h_0).

- Iris (Fig. 2): :func:`iris_ensemble`, and :func:`iris_toy` its accuracies.
- Three Gaussians (Fig. 3): :func:`gaussian_toy`.

``scripts/repro/fedaux_toy.py`` runs them over seeds and writes docs/repro_fedaux_toy.md and .png.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from fedray.privacy.certainty import SCORERS, XI, certainty_scores, dp_sigma, fit_certainty

# -- the ensemble -----------------------------------------------------------------------------------
Predict = Callable[[np.ndarray], np.ndarray]  # points (n, d) -> class probabilities (n, k) or scores (n,)


def linear_classifier(x: np.ndarray, labels: np.ndarray, num_classes: int) -> Predict:
    """A client's linear classifier: multinomial logistic regression on the classes it holds (sklearn's
    defaults); classes it never saw get probability 0, and a client holding one class predicts that
    class everywhere (the limit of the logistic fit: Fig. 2's "uniformly predict")."""
    from sklearn.linear_model import LogisticRegression

    present = np.unique(labels)
    if len(present) == 1:
        return lambda p: np.tile(np.eye(num_classes)[present[0]], (len(p), 1))
    model = LogisticRegression(max_iter=1000).fit(x, labels)

    def predict(p: np.ndarray) -> np.ndarray:
        out = np.zeros((len(p), num_classes))
        out[:, model.classes_] = model.predict_proba(p)
        return out

    return predict


@dataclasses.dataclass
class ToyEnsemble:
    """Clients' classifiers and, per weighting, their certainty functions s_i.

    Attributes:
        classifiers: client i's p_i(x), class probabilities.
        weights: weighting name -> client i's s_i(x) (``mean`` needs none: s_i = 1).
    """

    classifiers: list[Predict]
    weights: dict[str, list[Predict]]

    def predict(self, points: np.ndarray, weighting: str = "mean") -> np.ndarray:
        """sum_i s_i(x) p_i(x) / sum_j s_j(x) (eq. 3 on the clients' predicted probabilities)."""
        probs = np.stack([f(points) for f in self.classifiers])
        if weighting == "mean":
            return probs.mean(axis=0)
        s = np.stack([f(points) for f in self.weights[weighting]])
        return (s[:, :, None] * probs).sum(axis=0) / s.sum(axis=0)[:, None]

    def accuracy(self, points: np.ndarray, labels: np.ndarray, weighting: str = "mean") -> float:
        return float(np.mean(self.predict(points, weighting).argmax(axis=1) == labels))


def fourier_features(rng: np.random.Generator, inputs: int, dim: int = 200, length: float = 1.0) -> Predict:
    """A fixed random feature map x -> sqrt(2/dim) cos(W x + b), W ~ N(0, I/length^2) (random Fourier
    features of a Gaussian kernel): the toy's stand-in for FedAUX's pre-trained feature extractor h_0,
    shared by every client and the server."""
    w = rng.normal(size=(inputs, dim)) / length
    b = rng.uniform(0.0, 2.0 * np.pi, size=dim)
    return lambda x: np.sqrt(2.0 / dim) * np.cos(np.asarray(x, np.float64) @ w + b)


# -- iris ------------------------------------------------------------------------------------------
def iris_split(labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Fig. 2's three disjoint non-iid clients as read from the text: clients 1 and 3 "uniformly
    predict" one class each, so each holds that class only (setosa; half of virginica); client 2
    holds the rest (all of versicolor, the other half of virginica, drawn at random)."""
    virginica = rng.permutation(np.flatnonzero(labels == 2))
    half = len(virginica) // 2
    return [np.flatnonzero(labels == 0), np.sort(np.r_[np.flatnonzero(labels == 1), virginica[:half]]),
            np.sort(virginica[half:])]


def iris_ensemble(seed: int, lam: float = 0.01, eps: float = 0.1, delta: float = 1e-5,
                  num_negatives: int = 1000) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], ToyEnsemble]:
    """Fig. 2's setting: iris projected on its 2 principal components, split by :func:`iris_split`, a
    linear classifier per client, weighted by a Gaussian KDE of the client's points (``kde``: scipy's,
    Scott's rule, the paper's weights) or by the logistic scorer of Alg. 1 on :func:`fourier_features`
    against ``num_negatives`` public points uniform on the data's bounding box widened by 1, without
    noise (``logistic``) and (eps, delta)-DP (``logistic_dp``).

    Returns:
        (points (150, 2), labels, the clients' index arrays, the ensemble).
    """
    from scipy.stats import gaussian_kde
    from sklearn.datasets import load_iris
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(seed)
    x, labels = load_iris(return_X_y=True)
    points = PCA(n_components=2).fit_transform(x)
    splits = iris_split(labels, rng)
    features = fourier_features(rng, inputs=2)
    negatives = features(rng.uniform(points.min(0) - 1, points.max(0) + 1, size=(num_negatives, 2)))
    fits = [fit_certainty(features(points[s]), negatives, lam) for s in splits]
    sigmas = [dp_sigma(lam, eps, delta, len(s) + num_negatives) for s in splits]
    noisy = [(w + rng.normal(0.0, sigma, size=w.shape), g) for (w, g), sigma in zip(fits, sigmas)]
    kde = [gaussian_kde(points[s].T) for s in splits]
    ensemble = ToyEnsemble(
        classifiers=[linear_classifier(points[s], labels[s], 3) for s in splits],
        weights={"kde": [lambda p, k=k: k(p.T) + XI for k in kde],
                 "logistic": [lambda p, w=w, g=g: certainty_scores(w, g, features(p)) for w, g in fits],
                 "logistic_dp": [lambda p, w=w, g=g: certainty_scores(w, g, features(p)) for w, g in noisy]})
    return points, labels, splits, ensemble


IRIS_WEIGHTINGS = ("mean", "kde", "logistic", "logistic_dp")


def iris_toy(seed: int, lam: float = 0.01, eps: float = 0.1, delta: float = 1e-5) -> dict[str, float]:
    """TNNLS Fig. 2 / thesis Fig. 7.2 (paper: 33% mean vs 88% KDE-weighted): the ensembles' accuracy on
    the iris points, which are also the clients' data (the figure scores the points it shows).

    Args:
        seed: draws the split of virginica, the feature map, the negatives and the DP noise.
        lam, eps, delta: of the logistic scorer (lam 0.01 as the paper's NLP runs and its Fig. 8; eps
            and delta the paper's defaults).

    Returns:
        Accuracy of the ensembles weighted by each of :data:`IRIS_WEIGHTINGS`.
    """
    points, labels, _, ensemble = iris_ensemble(seed, lam, eps, delta)
    return {w: ensemble.accuracy(points, labels, w) for w in IRIS_WEIGHTINGS}


# -- three Gaussians --------------------------------------------------------------------------------
# 3000 points per client, 30000 public negatives, random Fourier features (length 2) as h_0
GAUSS = {"n": 3000, "negatives": 30_000, "radius": 3.0, "lam": 0.001, "eps": (0.1, 1.0, np.inf), "box": 6.0}


def outside(points: np.ndarray) -> np.ndarray:
    """The toy's label: 1 outside the circle through the three centres."""
    return (np.linalg.norm(points, axis=1) > GAUSS["radius"]).astype(int)


def gaussian_toy(seed: int, eps: float, delta: float
                 ) -> tuple[ToyEnsemble, np.ndarray, list[np.ndarray], np.ndarray]:
    """Fig. 3's setting, the clients' scores (eps, delta)-DP: the clients' classifiers and weights, a
    held-out test set (1000 per Gaussian), the clients' data and the negatives."""
    from scipy.stats import gaussian_kde, multivariate_normal

    rng = np.random.default_rng(seed)
    angles = np.deg2rad([90.0, 210.0, 330.0])
    centres = GAUSS["radius"] * np.c_[np.cos(angles), np.sin(angles)]
    own = [c + rng.normal(size=(GAUSS["n"], 2)) for c in centres]
    negatives = rng.uniform(-GAUSS["box"], GAUSS["box"], size=(GAUSS["negatives"], 2))
    test = np.vstack([c + rng.normal(size=(1000, 2)) for c in centres])
    h0 = fourier_features(rng, inputs=2, length=2.0)
    scorers = [SCORERS["logistic"](h0(x), h0(negatives), rng, GAUSS["lam"], eps, delta) for x in own]
    ensemble = ToyEnsemble(
        classifiers=[linear_classifier(x, outside(x), 2) for x in own],
        weights={"logistic": [lambda p, s=s: s.score(h0(p)) for s in scorers],
                 "kde": [lambda p, k=gaussian_kde(x.T): k(p.T) + XI for x in own],
                 "density": [lambda p, c=c: multivariate_normal(c, np.eye(2)).pdf(p) for c in centres]})
    return ensemble, test, own, negatives


def shares(ensemble: ToyEnsemble, weighting: str, points: np.ndarray) -> np.ndarray:
    """s_i(x) / sum_j s_j(x), shape (clients, points)."""
    s = np.stack([f(points) for f in ensemble.weights[weighting]])
    return s / s.sum(axis=0)
