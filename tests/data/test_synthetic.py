"""FedProx Synthetic(alpha, beta): shapes, natural client split, determinism, heterogeneity knobs."""

import numpy as np
import pytest

from fedray.data import check_dataset, load_dataset
from fedray.data.synthetic import sample_counts


def test_shapes_and_client_split():
    bundle = load_dataset("synthetic", num_clients=10, dim=20, num_classes=5, seed=1)
    counts = sample_counts(10, np.random.default_rng(1))  # the generator's first draw
    assert counts.min() >= 50
    assert bundle.input_shape == (20,) and bundle.num_classes == 5
    assert bundle.train_x.dtype == np.float32 and bundle.train_y.dtype == np.int64
    assert len(bundle.train_x) + len(bundle.test_x) == counts.sum()
    split = bundle.client_split
    assert len(split) == 10
    held_out = np.round(0.2 * counts).astype(int)
    assert [len(s) for s in split] == (counts - held_out).tolist()
    assert len(bundle.test_x) == held_out.sum()
    assert np.array_equal(np.concatenate(split), np.arange(len(bundle.train_x)))
    assert bundle.train_y.min() >= 0 and bundle.train_y.max() < 5 and bundle.test_y.max() < 5


def test_same_seed_identical_other_seed_different():
    first = load_dataset("synthetic", num_clients=5, seed=3)
    again = load_dataset("synthetic", num_clients=5, seed=3)
    assert np.array_equal(first.train_x, again.train_x) and np.array_equal(first.test_y, again.test_y)
    other = load_dataset("synthetic", num_clients=5, seed=4)
    assert not np.array_equal(first.train_x[:50], other.train_x[:50])


def client_means(bundle):
    return np.stack([bundle.train_x[idx].mean(axis=0) for idx in bundle.client_split])


def test_beta_spreads_client_inputs():
    # v_k has entries ~ N(B_k, 1) with B_k ~ N(0, beta): client means move apart as beta grows.
    narrow = client_means(load_dataset("synthetic", alpha=0.0, beta=0.0, num_clients=20, seed=0))
    wide = client_means(load_dataset("synthetic", alpha=0.0, beta=5.0, num_clients=20, seed=0))
    assert wide.mean(axis=1).std() > 2 * narrow.mean(axis=1).std()


def test_alpha_does_not_change_the_data():
    # Faithful to the paper and its generator: u_k is one scalar shifting every entry of W_k and b_k,
    # which adds u_k * (sum(x) + 1) to every class's logit alike, so argmax (the label) is unchanged.
    # With the same seed, alpha therefore changes neither inputs nor labels.
    low = load_dataset("synthetic", alpha=0.0, beta=1.0, num_clients=10, seed=0)
    high = load_dataset("synthetic", alpha=3.0, beta=1.0, num_clients=10, seed=0)
    assert np.array_equal(low.train_x, high.train_x)
    assert np.array_equal(low.train_y, high.train_y)


def test_beta_changes_labels():
    low = load_dataset("synthetic", alpha=1.0, beta=0.0, num_clients=10, seed=0)
    high = load_dataset("synthetic", alpha=1.0, beta=3.0, num_clients=10, seed=0)
    assert (low.train_y != high.train_y).mean() > 0.2


def test_iid_shares_input_distribution():
    bundle = load_dataset("synthetic", iid=True, num_clients=10, seed=0)
    assert np.abs(bundle.train_x.mean(axis=0)).max() < 0.1  # v_k = 0 for every client
    means = client_means(bundle)
    assert np.abs(means[:, 0]).max() < 0.5  # first coordinate has variance 1, client sizes >= 40


def test_bad_options():
    with pytest.raises(ValueError, match="alpha and beta must be >= 0"):
        check_dataset("synthetic", beta=-1.0)
    with pytest.raises(ValueError, match="num_clients must be an integer >= 1"):
        load_dataset("synthetic", num_clients=0)
