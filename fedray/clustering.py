"""Clustered FL, the parts without a model: similarities, bipartitions, split criteria, privacy.

Thesis chapter 6 (digest section 5). Clients' weight updates are compared by cosine similarity
(eq. 6.39); a cluster is split in two when the federation is near a stationary point but some
client is not (eqs. 6.28-6.29), and the bipartition that minimises the largest cross-cluster
similarity (Alg. 9) separates the clients well enough (eq. 6.34).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BIPARTITIONS = ("optimal", "complete")


def cosine_similarities(updates: np.ndarray) -> np.ndarray:
    """alpha_ij = <dtheta_i, dtheta_j> / (||dtheta_i|| ||dtheta_j||) for the rows of ``updates`` (eq. 6.39).

    A zero update has similarity 0 to everything (and 1 to itself).
    """
    u = np.asarray(updates, dtype=np.float64)
    norms = np.linalg.norm(u, axis=1)
    unit = u / np.where(norms > 0, norms, 1.0)[:, None]
    alpha = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(alpha, 1.0)
    return alpha


def optimal_bipartition(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 9: argmin over bipartitions (c1, c2) of max_{i in c1, j in c2} alpha_ij.

    Merge the clusters of the most similar pair first until two clusters remain (single linkage,
    i.e. Kruskal on the maximum-similarity spanning tree); this is exactly optimal. Returns the two
    index arrays, the one holding client 0 first.
    """
    m = len(alpha)
    if m < 2:
        raise ValueError(f"a bipartition needs at least 2 clients, got {m}")
    parent = list(range(m))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    clusters = m
    for s in np.argsort(-np.asarray(alpha).ravel(), kind="stable"):  # most similar pair first
        if clusters == 2:
            break
        i1, i2 = root(int(s) // m), root(int(s) % m)
        if i1 != i2:  # the union of the clusters containing i1 and i2 (diagonal entries are no-ops)
            parent[i2] = i1
            clusters -= 1
    side = np.array([root(i) == root(0) for i in range(m)])
    return np.flatnonzero(side), np.flatnonzero(~side)


def complete_linkage_bipartition(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The authors' code's choice: complete-linkage clustering of the similarities into 2 groups.

    Not the exact min-max bipartition of Alg. 9 (see the digest); a named option.
    """
    if len(alpha) < 2:
        raise ValueError(f"a bipartition needs at least 2 clients, got {len(alpha)}")
    from sklearn.cluster import AgglomerativeClustering  # on use: scikit-learn costs every actor 1.4 s to import

    labels = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete").fit(1.0 - alpha).labels_
    side = labels == labels[0]
    return np.flatnonzero(side), np.flatnonzero(~side)


def bipartition(alpha: np.ndarray, method: str = "optimal") -> tuple[np.ndarray, np.ndarray]:
    if method == "optimal":
        return optimal_bipartition(alpha)
    if method == "complete":
        return complete_linkage_bipartition(alpha)
    raise ValueError(f"unknown bipartition {method!r}; valid: {', '.join(BIPARTITIONS)}")


def max_cross_similarity(alpha: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> float:
    """alpha_cross^max = max_{i in c1, j in c2} alpha_ij for a given bipartition."""
    return float(np.max(alpha[np.ix_(c1, c2)]))


def min_intra_similarity(alpha: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> float:
    """alpha_intra^min: the smallest similarity of two different clients on the same side (1 if none)."""
    values = [alpha[np.ix_(c, c)][~np.eye(len(c), dtype=bool)] for c in (c1, c2) if len(c) > 1]
    return float(min(v.min() for v in values)) if values else 1.0


def separation_gap(alpha: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> float:
    """g(alpha) = alpha_intra^min - alpha_cross^max (Def. 3, eqs. 6.24-6.25); > 0 means a clean split."""
    return min_intra_similarity(alpha, c1, c2) - max_cross_similarity(alpha, c1, c2)


def alpha_threshold(gamma_max: float) -> float:
    """alpha_cross^thresh = 1 - 2 gamma_max^2: eq. 6.34 solved for the cross similarity."""
    if not 0 <= gamma_max <= 1:
        raise ValueError(f"gamma_max must lie in [0, 1], got {gamma_max}")
    return 1.0 - 2.0 * gamma_max ** 2


def near_stationary_but_not_all(mean_norm: float, max_norm: float, eps1: float, eps2: float) -> bool:
    """Split criteria (6.28) ||mean update|| < eps1 and (6.29) max_i ||dtheta_i|| > eps2."""
    return mean_norm < eps1 and max_norm > eps2


@dataclass
class SplitDecision:
    """What the server computed for one cluster in one round."""

    mean_norm: float
    max_norm: float
    criteria_met: bool  # (6.28) and (6.29)
    alpha_cross: float = math.nan  # max cross similarity of the best bipartition, if computed
    gap: float = math.nan  # g(alpha) of that bipartition
    c1: np.ndarray | None = None  # positions (into the cluster's update rows) of the two sides
    c2: np.ndarray | None = None
    split: bool = False  # criteria met and alpha_cross < threshold


def decide_split(updates: np.ndarray, mean_update: np.ndarray, eps1: float, eps2: float, threshold: float,
                 method: str = "optimal", always_measure: bool = False) -> SplitDecision:
    """Alg. 12's server step for one cluster: norms, criteria, bipartition and cross similarity.

    ``updates`` holds the cluster's client updates as rows. The similarities and the bipartition
    are computed when the norm criteria hold (or always, for monitoring, with ``always_measure``).
    """
    norms = np.linalg.norm(np.asarray(updates, dtype=np.float64), axis=1)
    decision = SplitDecision(float(np.linalg.norm(mean_update)), float(norms.max()), False)
    decision.criteria_met = near_stationary_but_not_all(decision.mean_norm, decision.max_norm, eps1, eps2)
    if len(updates) >= 2 and (decision.criteria_met or always_measure):
        alpha = cosine_similarities(updates)
        decision.c1, decision.c2 = bipartition(alpha, method)
        decision.alpha_cross = max_cross_similarity(alpha, decision.c1, decision.c2)
        decision.gap = separation_gap(alpha, decision.c1, decision.c2)
        decision.split = decision.criteria_met and decision.alpha_cross < threshold
    return decision


class OrthonormalTransform:
    """The privacy transform of section 6.4.2 (eqs. 6.40-6.41): clients upload P dtheta.

    ``permutation``: P permutes the coordinates with a permutation drawn from a seed all clients
    share. ``orthonormal``: a random sign per coordinate, the permutation, then independent Haar
    random rotations of consecutive blocks of ``block`` coordinates (a block-diagonal orthogonal
    matrix, so it costs O(d * block) rather than O(d^2)). Either way P^T P = I, so norms and cosine
    similarities, and hence every clustering decision, are unchanged.
    """

    KINDS = ("none", "permutation", "orthonormal")

    def __init__(self, kind: str, dim: int, seed: int, block: int = 64):
        if kind not in self.KINDS:
            raise ValueError(f"unknown privacy transform {kind!r}; valid: {', '.join(self.KINDS)}")
        self.kind, self.dim = kind, dim
        rng = np.random.default_rng([seed, 0x0507])
        self.perm = rng.permutation(dim) if kind != "none" else None
        self.signs = rng.choice([-1.0, 1.0], size=dim) if kind == "orthonormal" else None
        self.block = block
        self.full, self.rest = None, None  # (dim // block, block, block) rotations, then one smaller
        if kind == "orthonormal":
            def haar(n: int, size: int) -> np.ndarray:
                q, r = np.linalg.qr(rng.normal(size=(n, size, size)))
                return q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]  # Haar distributed
            self.full = haar(dim // block, block)
            self.rest = haar(1, dim % block)[0] if dim % block else None

    def _rotate(self, v: np.ndarray, transpose: bool) -> np.ndarray:
        cut = self.full.shape[0] * self.block
        full = self.full.transpose(0, 2, 1) if transpose else self.full
        head = np.einsum("bij,bj->bi", full, v[:cut].reshape(-1, self.block)).reshape(-1)
        if self.rest is None:
            return head
        return np.concatenate([head, (self.rest.T if transpose else self.rest) @ v[cut:]])

    def apply(self, v: np.ndarray) -> np.ndarray:
        """P v for a flat vector of length ``dim``."""
        v = np.asarray(v, dtype=np.float64)
        if self.kind == "none":
            return v.copy()
        if self.signs is not None:
            v = v * self.signs
        out = v[self.perm]
        return self._rotate(out, transpose=False) if self.full is not None else out

    def invert(self, v: np.ndarray) -> np.ndarray:
        """P^-1 v = P^T v."""
        v = np.asarray(v, dtype=np.float64)
        if self.kind == "none":
            return v.copy()
        if self.full is not None:
            v = self._rotate(v, transpose=True)
        out = np.empty_like(v)
        out[self.perm] = v
        return out * self.signs if self.signs is not None else out
