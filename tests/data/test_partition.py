"""Partitioners: balancedness (eq 2.5), iid, Dirichlet + Sinkhorn, shards, counts and the figure."""

import re

import numpy as np
import pytest
from matplotlib.figure import Figure

from fedray.data import (
    balanced_sizes,
    dirichlet_split,
    iid_split,
    label_counts,
    partition,
    shard_split,
    sinkhorn,
)
from fedray.data.partition import _log_dirichlet
from fedray.figures import partition_figure


def assert_exact_cover(splits, num_samples):
    """Disjoint, sorted int64 arrays that together hold every index exactly once."""
    for idx in splits:
        assert idx.dtype == np.int64
        assert np.all(np.diff(idx) > 0)
    joined = np.concatenate(splits)
    assert len(joined) == num_samples
    assert np.array_equal(np.sort(joined), np.arange(num_samples))


# balanced_sizes (eq 2.5) ------------------------------------------------------------------------


def test_balanced_sizes_hand_example():
    # N = 1000, M = 3, G = 0.5: G^i = 1/2, 1/4, 1/8, sum 7/8, so G^i / sum = 4/7, 2/7, 1/7.
    # rho = 0.1/3 + 0.9 * (4/7, 2/7, 1/7) = 0.547619.., 0.290476.., 0.161904..
    # N * rho = 547.619, 290.476, 161.905 -> floors 547, 290, 161 (sum 998); the 2 left-over
    # samples go to the largest fractions .905 (client 3) and .619 (client 1).
    sizes = balanced_sizes(1000, 3, 0.5)
    assert sizes.tolist() == [548, 290, 162]
    assert sizes.sum() == 1000


def test_balanced_sizes_equal_for_g_one():
    assert balanced_sizes(10, 3, 1.0).tolist() == [4, 3, 3]
    assert balanced_sizes(60000, 100, 1.0).tolist() == [600] * 100


def test_balanced_sizes_decrease_and_sum():
    sizes = balanced_sizes(60000, 100, 0.9)
    assert sizes.sum() == 60000
    assert np.all(np.diff(sizes) <= 0)
    assert sizes.min() >= int(0.1 * 60000 / 100)  # the 10% uniform floor


@pytest.mark.parametrize("g", [0.0, -0.5, 1.5])
def test_balanced_sizes_rejects_bad_g(g):
    with pytest.raises(ValueError, match="balancedness"):
        balanced_sizes(100, 3, g)


# iid ---------------------------------------------------------------------------------------------


def test_iid_split_sizes_cover_and_seed():
    labels = np.zeros(103, dtype=np.int64)
    splits = iid_split(labels, 4, np.random.default_rng(0))
    assert [len(s) for s in splits] == [26, 26, 26, 25]
    assert_exact_cover(splits, 103)
    again = iid_split(labels, 4, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(splits, again))
    other = iid_split(labels, 4, np.random.default_rng(1))
    assert not all(np.array_equal(a, b) for a, b in zip(splits, other))


def test_iid_split_follows_balancedness():
    splits = iid_split(np.zeros(1000), 3, np.random.default_rng(0), balancedness=0.5)
    assert [len(s) for s in splits] == [548, 290, 162]


# Sinkhorn ----------------------------------------------------------------------------------------


def test_sinkhorn_scales_to_marginals():
    out = sinkhorn(np.zeros((2, 2)), np.array([3.0, 1.0]), np.array([2.0, 2.0]), iterations=50)
    np.testing.assert_allclose(out, [[1.5, 1.5], [0.5, 0.5]])


def test_sinkhorn_keeps_zeros():
    # Support [[1, 0], [1, 1]] with rows (1, 3) and columns (2, 2) has the unique solution [[1, 0], [1, 2]].
    log_p = np.array([[0.0, -np.inf], [0.0, 0.0]])
    out = sinkhorn(log_p, np.array([1.0, 3.0]), np.array([2.0, 2.0]), iterations=2000)
    np.testing.assert_allclose(out, [[1.0, 0.0], [1.0, 2.0]], atol=1e-3)


def test_log_dirichlet_is_finite_for_tiny_alpha():
    log_p = _log_dirichlet(0.01, 100, 10, np.random.default_rng(0))
    assert np.all(np.isfinite(log_p))
    np.testing.assert_allclose(np.exp(log_p).sum(axis=0), 1.0)
    assert log_p.min() < -200  # plain float64 Gamma draws would have underflowed to 0


# Dirichlet on Fashion-MNIST ----------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.01, 0.1, 1.0, 100.0])
def test_dirichlet_uses_every_sample_and_balances(fmnist_labels, alpha):
    splits = dirichlet_split(fmnist_labels, 100, alpha, np.random.default_rng(0))
    assert_exact_cover(splits, 60000)
    sizes = np.array([len(s) for s in splits])
    # Measured: at most 3 samples (0.5%) from 600, all from per-class rounding (Sinkhorn converges).
    assert np.abs(sizes - 600).max() <= 3
    counts = label_counts(fmnist_labels, splits, 10)
    assert counts.sum(axis=0).tolist() == [6000] * 10


def test_dirichlet_small_alpha_one_class_per_client(fmnist_labels):
    counts = label_counts(fmnist_labels, dirichlet_split(fmnist_labels, 100, 0.01, np.random.default_rng(0)), 10)
    top_fraction = counts.max(axis=1) / counts.sum(axis=1)
    assert np.median(top_fraction) > 0.9


def test_dirichlet_large_alpha_near_uniform(fmnist_labels):
    counts = label_counts(fmnist_labels, dirichlet_split(fmnist_labels, 100, 100.0, np.random.default_rng(0)), 10)
    fractions = counts / counts.sum(axis=1, keepdims=True)
    assert np.abs(fractions - 0.1).max() < 0.06
    assert (counts > 0).all()


def test_dirichlet_follows_balancedness(fmnist_labels):
    splits = dirichlet_split(fmnist_labels, 100, 1.0, np.random.default_rng(0), balancedness=0.9)
    target = balanced_sizes(60000, 100, 0.9)
    assert np.abs(np.array([len(s) for s in splits]) - target).max() <= 3


def test_dirichlet_rejects_bad_alpha():
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_split(np.zeros(10, np.int64), 2, 0.0, np.random.default_rng(0))


# Shards ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("classes_per_client", [1, 2, 5, 10])
def test_shards_distinct_classes_on_fashion_mnist(fmnist_labels, classes_per_client):
    splits = shard_split(fmnist_labels, 100, classes_per_client, np.random.default_rng(0))
    assert_exact_cover(splits, 60000)
    counts = label_counts(fmnist_labels, splits, 10)
    assert ((counts > 0).sum(axis=1) == classes_per_client).all()
    assert (counts.sum(axis=1) == 600).all()
    shard = 60000 // (100 * classes_per_client)
    assert set(counts[counts > 0].tolist()) == {shard}  # equal single-label shards


def test_shards_pairs_are_random(fmnist_labels):
    counts = label_counts(fmnist_labels, shard_split(fmnist_labels, 100, 2, np.random.default_rng(0)), 10)
    pairs = {tuple(np.flatnonzero(row)) for row in counts}
    assert len(pairs) > 10  # not a fixed cyclic pairing of the 10 classes


def test_shards_uneven_classes_still_distinct():
    rng = np.random.default_rng(0)
    labels = rng.choice(6, size=3000, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
    splits = shard_split(labels, 30, 2, np.random.default_rng(1))
    assert_exact_cover(splits, 3000)
    counts = label_counts(labels, splits, 6)
    assert ((counts > 0).sum(axis=1) == 2).all()


@pytest.mark.parametrize("classes_per_client", [0, 11])
def test_shards_reject_bad_classes_per_client(fmnist_labels, classes_per_client):
    with pytest.raises(ValueError, match="classes_per_client"):
        shard_split(fmnist_labels, 100, classes_per_client, np.random.default_rng(0))


# Dispatcher, counts, figure ----------------------------------------------------------------------


def test_partition_dispatches_and_is_seeded(fmnist_labels):
    for method in ("iid", "dirichlet", "shards"):
        first = partition(fmnist_labels, 20, method, seed=3)
        again = partition(fmnist_labels, 20, method, seed=3)
        assert len(first) == 20
        assert all(np.array_equal(a, b) for a, b in zip(first, again))
        assert_exact_cover(first, 60000)


def test_partition_unknown_method_lists_valid():
    with pytest.raises(ValueError, match="iid, dirichlet, shards"):
        partition(np.zeros(10, np.int64), 2, "pathological", seed=0)


# Refusing splits that leave a client without samples -------------------------------------------


def refusal(labels, num_clients, method, **kwargs):
    """The one-line message with which partition refuses the split, and its number of empty clients."""
    with pytest.raises(ValueError) as err:
        partition(labels, num_clients, method, seed=0, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    empty = re.search(rf"leaves (?:at least )?(\d+) of {num_clients} clients without samples", message)
    assert empty, message
    assert f"({len(labels)} training samples)" in message and "data.train_limit" in message
    return message, int(empty.group(1))


@pytest.mark.parametrize("alpha", [0.01, 0.1, 1.0, 100.0])
def test_dirichlet_with_too_few_samples_per_client_is_refused(fmnist_labels, alpha):
    # 1.5 samples per client: the per-class rounding leaves clients empty, the more the larger alpha.
    message, empty = refusal(fmnist_labels[:1500], 1000, "dirichlet", alpha=alpha)
    assert message.startswith(f"partition 'dirichlet' (alpha {alpha:g}) leaves {empty} of 1000 clients")
    assert 0 < empty < 1000 and "data.alpha" in message


def test_shards_with_too_few_samples_per_shard_are_refused(fmnist_labels):
    message, empty = refusal(fmnist_labels[:1500], 1000, "shards", classes_per_client=2)
    assert message.startswith(f"partition 'shards' (classes_per_client 2) leaves {empty} of 1000 clients")
    assert 0 < empty < 1000 and "data.classes_per_client" in message and "about 2000 samples" in message


@pytest.mark.parametrize("method", ["iid", "dirichlet", "shards"])
def test_fewer_samples_than_clients_is_refused(fmnist_labels, method):
    message, empty = refusal(fmnist_labels[:500], 1000, method)
    assert empty == 500 and "leaves at least 500 of 1000" in message
    assert message.endswith("use at most 500 clients or more samples (data.train_limit)")


@pytest.mark.parametrize("method", ["iid", "dirichlet", "shards"])
def test_sizes_rounded_to_zero_by_balancedness_are_refused(fmnist_labels, method):
    # G = 0.5 with 1.5 samples per client: eq 2.5 gives 845 clients a size of 0 (the 10% floor is 0.15).
    assert (balanced_sizes(1500, 1000, 0.5) == 0).sum() == 845
    message, empty = refusal(fmnist_labels[:1500], 1000, method, balancedness=0.5)
    assert empty == 845 and "balancedness 0.5" in message and "data.balancedness" in message


def test_one_sample_per_client_is_accepted():
    splits = partition(np.arange(50) % 5, 50, "iid", seed=0)
    assert [len(s) for s in splits] == [1] * 50


def test_label_counts_hand_example():
    labels = np.array([0, 1, 1, 2, 0])
    counts = label_counts(labels, [np.array([0, 1]), np.array([2, 3, 4])], 4)
    assert counts.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert counts.dtype == np.int64


@pytest.mark.parametrize("num_clients", [7, 500])
def test_partition_figure(num_clients):
    counts = np.arange(num_clients * 3).reshape(num_clients, 3)
    fig = partition_figure(counts, class_names=["a", "b", "c"])
    assert isinstance(fig, Figure)
    images = [image for ax in fig.axes for image in ax.images]
    assert len(images) == 1
    assert images[0].get_array().shape == (num_clients, 3)
    assert f"{num_clients} clients" in fig.axes[0].get_title()
    fig.canvas.draw()  # renders headless
