"""FedProx's Synthetic(alpha, beta) federated data set.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous Networks",
MLSys 2020, Section 5.1. For client k:

- u_k ~ N(0, alpha); W_k (classes x dim) and b_k have entries ~ N(u_k, 1)  (model heterogeneity);
- B_k ~ N(0, beta); v_k in R^dim has entries ~ N(B_k, 1)                  (data heterogeneity);
- x ~ N(v_k, Sigma), Sigma diagonal with Sigma_jj = j^-1.2 (j = 1..dim);
- y = argmax softmax(W_k x + b_k).

As in the authors' generator (``data/synthetic_*/generate_synthetic.py``), the second argument of
N(., .) for alpha and beta is used as the standard deviation (numpy's ``scale``), and client k has
``int(lognormal(4, 2)) + 50`` samples (a power law). ``iid=True`` gives Synthetic-IID: one W, b
~ N(0, 1) shared by all clients and v_k = 0.

Note: u_k is one scalar shared by all entries of W_k and b_k, so it adds u_k * (sum(x) + 1) to every
class's logit alike and never changes the label: alpha has no effect on the data (with the same seed
the arrays are identical). This holds for the paper's definition and its code alike; heterogeneity
comes from beta (input means), from the per-client W_k, b_k noise, and from the client sizes.

Each client's samples are shuffled and 20% (rounded, at least 1) are held out as its test part; the
bundle's test set is the union of the held-out parts and ``client_split`` holds each client's train
indices (contiguous blocks, client 0 first).
"""

from __future__ import annotations

import numpy as np

from fedray.data.bundle import DatasetBundle

TEST_FRACTION = 0.2


def check_synthetic_options(alpha: float, beta: float, num_clients: int, dim: int, num_classes: int) -> None:
    """Raises ValueError (one line) for an invalid Synthetic(alpha, beta) option."""
    if alpha < 0 or beta < 0:
        raise ValueError(f"synthetic: alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    for name, value, low in (("num_clients", num_clients, 1), ("dim", dim, 1), ("num_classes", num_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"synthetic: {name} must be an integer >= {low}, got {value!r}")


def sample_counts(num_clients: int, rng: np.random.Generator) -> np.ndarray:
    """Samples per client: ``int(lognormal(mean=4, sigma=2)) + 50`` as in the FedProx generator."""
    return rng.lognormal(4.0, 2.0, num_clients).astype(np.int64) + 50


def held_out(n: int) -> int:
    """How many of a client's ``n`` samples go to the test part: 20%, rounded, at least 1."""
    return max(1, int(round(TEST_FRACTION * n)))


def train_size(num_clients: int = 30, seed: int = 0, **options) -> int:
    """The number of training samples ``load_synthetic`` generates, from the client sizes alone."""
    return sum(int(n) - held_out(int(n)) for n in sample_counts(num_clients, np.random.default_rng(seed)))


def _client_data(n: int, w: np.ndarray, b: np.ndarray, v: np.ndarray, rng: np.random.Generator):
    """Draws n samples x ~ N(v, diag(j^-1.2)) and labels y = argmax(W x + b)."""
    scale = np.arange(1, len(v) + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)
    x = v + rng.standard_normal((n, len(v))) * scale
    return x, np.argmax(x @ w.T + b, axis=1)


def _client_models(alpha, beta, num_clients, dim, num_classes, iid, rng):
    """Per-client (W_k, b_k, v_k) for Synthetic(alpha, beta), or shared ones for Synthetic-IID."""
    if iid:
        w, b = rng.normal(0.0, 1.0, (num_classes, dim)), rng.normal(0.0, 1.0, num_classes)
        return [(w, b, np.zeros(dim))] * num_clients
    u = rng.normal(0.0, alpha, num_clients)
    big_b = rng.normal(0.0, beta, num_clients)
    return [(rng.normal(u[k], 1.0, (num_classes, dim)), rng.normal(u[k], 1.0, num_classes),
             rng.normal(big_b[k], 1.0, dim)) for k in range(num_clients)]  # fmt: skip


def load_synthetic(
    alpha: float = 1.0,
    beta: float = 1.0,
    num_clients: int = 30,
    dim: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    iid: bool = False,
) -> DatasetBundle:
    """Generates Synthetic(alpha, beta) with its natural client split.

    Args:
        alpha: Spread of the clients' models (std of u_k).
        beta: Spread of the clients' input means (std of B_k).
        num_clients: Number of clients.
        dim: Input dimension.
        num_classes: Number of classes.
        seed: Seed of all randomness; the same seed gives identical arrays.
        iid: Generate Synthetic-IID instead.

    Returns:
        The bundle, input shape ``(dim,)``, with ``client_split`` set.
    """
    check_synthetic_options(alpha, beta, num_clients, dim, num_classes)
    rng = np.random.default_rng(seed)
    counts = sample_counts(num_clients, rng)
    models = _client_models(alpha, beta, num_clients, dim, num_classes, iid, rng)
    train, test = [], []
    for n, (w, b, v) in zip(counts, models):
        x, y = _client_data(int(n), w, b, v, rng)
        order = rng.permutation(int(n))
        n_test = held_out(int(n))
        test.append((x[order[:n_test]], y[order[:n_test]]))
        train.append((x[order[n_test:]], y[order[n_test:]]))
    ends = np.cumsum([len(y) for _, y in train])
    return DatasetBundle(
        name="synthetic",
        train_x=np.concatenate([x for x, _ in train]).astype(np.float32),
        train_y=np.concatenate([y for _, y in train]).astype(np.int64),
        test_x=np.concatenate([x for x, _ in test]).astype(np.float32),
        test_y=np.concatenate([y for _, y in test]).astype(np.int64),
        num_classes=num_classes,
        input_shape=(dim,),
        client_split=[np.arange(end - len(y), end, dtype=np.int64) for end, (_, y) in zip(ends, train)],
        classes=[str(c) for c in range(num_classes)],
    )
