"""Clustered FL core: cosine similarities, Alg. 9's bipartition, split criteria, the privacy transform."""

import itertools

import numpy as np
import pytest

from fedray.clustering import (OrthonormalTransform, alpha_threshold, complete_linkage_bipartition,
                               cosine_similarities, decide_split, max_cross_similarity, optimal_bipartition,
                               separation_gap)


def brute_force_min_max(alpha):
    m = len(alpha)
    best = np.inf
    for size in range(1, m):
        for c1 in itertools.combinations(range(m), size):
            c2 = [i for i in range(m) if i not in c1]
            best = min(best, alpha[np.ix_(c1, c2)].max())
    return best


@pytest.mark.parametrize("m", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("seed", range(8))
def test_alg9_bipartition_is_exactly_optimal(m, seed):
    rng = np.random.default_rng(seed * 100 + m)
    alpha = cosine_similarities(rng.normal(size=(m, 3)))
    c1, c2 = optimal_bipartition(alpha)
    assert sorted(np.concatenate([c1, c2]).tolist()) == list(range(m)) and len(c1) and len(c2)
    assert 0 in c1
    assert max_cross_similarity(alpha, c1, c2) == pytest.approx(brute_force_min_max(alpha), abs=1e-12)
    k1, k2 = complete_linkage_bipartition(alpha)  # a valid bipartition, never better than the optimum
    assert sorted(np.concatenate([k1, k2]).tolist()) == list(range(m))
    assert max_cross_similarity(alpha, k1, k2) >= brute_force_min_max(alpha) - 1e-12


def test_cosine_similarities_and_separation_gap_on_a_tiny_case():
    u = np.array([[1.0, 0.0], [2.0, 0.2], [-1.0, 0.0], [-1.0, -0.1]])
    alpha = cosine_similarities(u)
    assert alpha[0, 2] == pytest.approx(-1.0) and alpha[0, 1] == pytest.approx(2 / np.sqrt(4.04))
    c1, c2 = optimal_bipartition(alpha)
    assert c1.tolist() == [0, 1] and c2.tolist() == [2, 3]
    intra = min(alpha[0, 1], alpha[2, 3])
    cross = max(alpha[0, 2], alpha[0, 3], alpha[1, 2], alpha[1, 3])
    assert separation_gap(alpha, c1, c2) == pytest.approx(intra - cross)
    assert cosine_similarities(np.zeros((2, 3)))[0, 1] == 0.0


def test_threshold_of_eq_6_34_and_the_split_decision():
    assert alpha_threshold(0.1) == pytest.approx(0.98)
    assert alpha_threshold(np.sqrt(0.5)) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        alpha_threshold(1.5)
    # two incongruent groups at a joint stationary point: mean ~ 0, clients far from stationary
    rng = np.random.default_rng(0)
    g = rng.normal(size=50)
    updates = np.stack([g + 0.1 * rng.normal(size=50) for _ in range(3)] +
                       [-g + 0.1 * rng.normal(size=50) for _ in range(3)])
    d = decide_split(updates, updates.mean(axis=0), eps1=1.0, eps2=2.0, threshold=0.0)
    assert d.criteria_met and d.split and d.alpha_cross < -0.9 and d.gap > 1.5
    assert d.c1.tolist() == [0, 1, 2] and d.c2.tolist() == [3, 4, 5]
    # congruent clients: all updates point the same way, so the mean is not small: no split
    same = np.stack([g + 0.1 * rng.normal(size=50) for _ in range(6)])
    d = decide_split(same, same.mean(axis=0), eps1=1.0, eps2=2.0, threshold=0.0)
    assert not d.criteria_met and not d.split and np.isnan(d.alpha_cross)
    # near a stationary point but the best bipartition still has similar sides: no split
    d = decide_split(updates, updates.mean(axis=0), eps1=1.0, eps2=2.0, threshold=-0.999)
    assert d.criteria_met and not d.split


@pytest.mark.parametrize("kind", ["permutation", "orthonormal"])
@pytest.mark.parametrize("dim", [5, 64, 1000, 4099])
def test_privacy_transform_keeps_norms_and_similarities_and_inverts(kind, dim):
    rng = np.random.default_rng(dim)
    updates = rng.normal(size=(6, dim))
    transform = OrthonormalTransform(kind, dim, seed=7)
    hidden = np.stack([transform.apply(u) for u in updates])
    assert not np.allclose(hidden, updates)
    np.testing.assert_allclose(np.linalg.norm(hidden, axis=1), np.linalg.norm(updates, axis=1), rtol=1e-12)
    np.testing.assert_allclose(cosine_similarities(hidden), cosine_similarities(updates), atol=1e-12)
    np.testing.assert_allclose(np.stack([transform.invert(h) for h in hidden]), updates, atol=1e-12)
    # the same seed gives every client the same P
    np.testing.assert_array_equal(OrthonormalTransform(kind, dim, seed=7).apply(updates[0]), hidden[0])
