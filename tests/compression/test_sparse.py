"""Compressors of thesis chapter 3 on tiny tensors worked out by hand, and STC's contraction identity."""

import numpy as np
import pytest

from fedray.compression import majority_vote, num_kept, sbc, sign, stc, top_k
from fedray.compression.sparse import top_k_indices


def test_k_is_floor_np_at_least_one():
    assert num_kept(1000, 0.01) == 10 and num_kept(50, 0.01) == 1 and num_kept(399, 1 / 400) == 1
    with pytest.raises(ValueError, match="sparsity p must be in"):
        num_kept(10, 0)


def test_stc_by_hand():
    x = np.array([0.5, -2.0, 1.0, 0.1], np.float32)
    # k = 2, V = {2, 1}, mu = 1.5, kept where |x| >= 1
    np.testing.assert_array_equal(stc(x, 0.5), [0.0, -1.5, 1.5, 0.0])


def test_sbc_keeps_the_stronger_sign_by_hand():
    x = np.array([0.5, -2.0, 1.0, 0.1, -0.2, 3.0], np.float32)
    # k = 2; V+ = {3, 1}, mu+ = 2; V- = {2, 0.2}, mu- = 1.1; mu+ >= mu-: 2 where x >= 1
    np.testing.assert_array_equal(sbc(x, 1 / 3), [0, 0, 2, 0, 0, 2])
    np.testing.assert_allclose(sbc(-x, 1 / 3), [0, 0, -2, 0, 0, -2])
    y = np.array([-4.0, -3.0, 1.0, 0.5], np.float32)  # V- = {4, 3}, mean 3.5 > mean(V+) = 0.75
    np.testing.assert_array_equal(sbc(y, 0.5), [-3.5, -3.5, 0, 0])


def test_top_k_keeps_values():
    x = np.array([[0.5, -2.0], [1.0, 0.1]], np.float32)
    np.testing.assert_array_equal(top_k(x, 0.5), [[0.0, -2.0], [1.0, 0.0]])


def test_top_k_breaks_ties_towards_the_lower_position():
    """Which of the entries tied at the k-th value are kept is fixed (the lower positions), not left
    to np.argpartition, whose choice differs between numpy's selection kernels for different CPUs."""
    x = np.array([1.0, -3.0, 2.0, 3.0, -2.0, 2.0, 0.5], np.float32)
    np.testing.assert_array_equal(top_k(x, 3 / 7), [0, -3.0, 2.0, 3.0, 0, 0, 0])  # |x|: 3, 3, then 2 at 2, 4, 5
    np.testing.assert_array_equal(top_k_indices(np.abs(x), 4), [1, 2, 3, 4])
    ties = np.tile(np.float32([1, 2]), 5000)  # 5,000 tied 2s, of which 2,500 are kept: the first ones
    np.testing.assert_array_equal(top_k_indices(ties, 2500), np.arange(1, 5000, 2))
    np.testing.assert_array_equal(top_k_indices(np.array([1.0, np.nan, 2.0, np.nan]), 3), [1, 2, 3])  # NaN first
    np.testing.assert_array_equal(top_k_indices(np.array([np.nan, 1.0, np.nan, np.nan]), 2), [0, 2])


def test_sign_and_majority_vote():
    np.testing.assert_array_equal(sign(np.array([0.5, -2.0, 0.0])), [1, -1, 1])
    votes = [np.array([1, -1, 1, -1.0]), np.array([1, -1, -1, 1.0]), np.array([-1, -1, -1, 1.0])]
    np.testing.assert_array_equal(majority_vote(votes), [1, -1, -1, 1])


@pytest.mark.parametrize("n,p", [(10, 0.3), (1000, 0.01), (5000, 1 / 400), (37, 0.5)])
def test_stc_contraction_identity(n, p):
    """||STC(x) - x||^2 = ||x||^2 - k mu^2 (proof of Lemma 2, A.13-A.16), for random x without ties."""
    x = np.random.default_rng(n).normal(size=n)
    k = num_kept(n, p)
    out = stc(x, p)
    assert np.count_nonzero(out) == k
    mu = np.abs(out[out != 0][0])
    assert np.sum((out - x) ** 2) == pytest.approx(np.sum(x ** 2) - k * mu ** 2, rel=1e-9)
    alpha = 1 - np.sort(np.abs(x))[-k:].sum() ** 2 / (k * np.sum(x ** 2))  # Lemma 2 with the digest's "1 -"
    assert np.sum((out - x) ** 2) == pytest.approx(alpha * np.sum(x ** 2), rel=1e-9) and 0 <= alpha < 1


def test_compressors_keep_shape_and_dtype():
    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    for f in (stc, sbc, top_k):
        out = f(x, 0.1)
        assert out.shape == x.shape and out.dtype == np.float32 and np.count_nonzero(out) == 6
