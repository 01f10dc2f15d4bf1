"""Splitting a data set's training samples among clients (Sattler thesis, Section 2.4, Table 2.3).

- Balancedness G (eq 2.5, with the normalisation fixed): client i holds the share
  rho(G, i) = 0.1/M + 0.9 * G^i / sum_j G^j of the data; G = 1 is balanced.
- :func:`iid_split`: a random permutation cut into those sizes.
- :func:`dirichlet_split` (Hsu, Qi, Brown 2019): per class a Dirichlet(alpha) distribution over the
  clients (eq 2.6), stacked into P (eq 2.7) and standardised by alternately normalising columns
  and rows (Sinkhorn) so that every class is fully used and the client sizes follow eq 2.5.
- :func:`shard_split` (McMahan et al. 2017): single-label shards, A of A distinct classes per client.

Every partitioner takes the labels and a seeded ``np.random.Generator`` (from the *partition* seed,
not the training seed) and returns one sorted int64 index array per client; the arrays are disjoint
and cover every sample exactly once. :func:`partition` refuses a split that leaves a client without samples.
"""

from __future__ import annotations

import numpy as np

PARTITION_METHODS = ("iid", "dirichlet", "shards")


def _largest_remainder(values: np.ndarray, total: int) -> np.ndarray:
    """Scales non-negative reals to sum to ``total`` and rounds them to integers with exactly that sum.

    Floors every value, then gives the remaining units to the largest fractional parts (ties to the
    lower index). Exact zeros never receive a unit.
    """
    values = np.asarray(values, dtype=np.float64) * (total / values.sum())
    counts = np.floor(values).astype(np.int64)
    fractions = np.where(values > 0, values - counts, -1.0)
    order = np.argsort(-fractions, kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return counts


def balanced_sizes(num_samples: int, num_clients: int, balancedness: float) -> np.ndarray:
    """Client sizes for balancedness G (thesis eq 2.5, with its normalisation fixed).

    Client i (i = 1..M) gets the share rho(G, i) = 0.1/M + 0.9 * G^i / sum_{j=1}^M G^j: a 10% uniform
    floor plus a geometric part. The thesis prints 0.1 for the first term, which does not sum to 1.

    Args:
        num_samples: Total number of samples N (at least ``num_clients``).
        num_clients: Number of clients M.
        balancedness: G in (0, 1]; 1 gives equal sizes (differing by at most 1).

    Returns:
        int64 array of M sizes summing exactly to N (largest-remainder rounding). For G < 1 and
        fewer than 10 samples per client the smallest sizes can round to 0 (:func:`partition`
        refuses that); with 10 or more per client, the 10% floor gives every client a sample.

    Raises:
        ValueError: G outside (0, 1], M < 1 or N < M.
    """
    if not 0.0 < balancedness <= 1.0:
        raise ValueError(f"balancedness must be in (0, 1], got {balancedness}")
    if num_clients < 1 or num_samples < num_clients:
        raise ValueError(f"need num_samples >= num_clients >= 1, got {num_samples} samples, {num_clients} clients")
    geometric = balancedness ** np.arange(num_clients, dtype=np.float64)  # G^i / G, no underflow at i = 1
    shares = 0.1 / num_clients + 0.9 * geometric / geometric.sum()
    return _largest_remainder(shares * num_samples, num_samples)


def _cut(indices: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """Cuts ``indices`` into consecutive pieces of ``sizes``, each sorted ascending."""
    return [np.sort(piece).astype(np.int64) for piece in np.split(indices, np.cumsum(sizes)[:-1])]


def iid_split(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, balancedness: float = 1.0
) -> list[np.ndarray]:
    """Random split into :func:`balanced_sizes` (eq 2.5).

    Args:
        labels: Labels of the N training samples (only their number is used).
        num_clients: Number of clients M.
        rng: Generator seeded from the partition seed.
        balancedness: G of eq 2.5.

    Returns:
        M sorted, disjoint int64 index arrays covering all samples.
    """
    sizes = balanced_sizes(len(labels), num_clients, balancedness)
    return _cut(rng.permutation(len(labels)), sizes)


def _log_dirichlet(alpha: float, num_clients: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """log P for P = [p_1 .. p_c], p_j ~ Dir(alpha) over the M clients (eqs 2.6, 2.7), shape (M, c).

    Sampled in log space: log Gamma(alpha) = log Gamma(alpha + 1) + log(U) / alpha (Marsaglia and
    Tsang), which does not underflow for tiny alpha, where most Gamma(alpha) draws round to 0.
    """
    log_gamma = np.log(rng.gamma(alpha + 1.0, size=(num_clients, num_classes)))
    log_gamma += np.log(rng.uniform(size=(num_clients, num_classes))) / alpha
    return log_gamma - _logsumexp(log_gamma, axis=0)


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    peak = np.max(x, axis=axis, keepdims=True)
    return peak + np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True))


def sinkhorn(log_p: np.ndarray, row_sums: np.ndarray, col_sums: np.ndarray, iterations: int) -> np.ndarray:
    """Scales a non-negative matrix to given row and column sums by alternate normalisation.

    Works on log P, so entries spanning hundreds of orders of magnitude (Dirichlet with alpha = 0.01)
    neither underflow nor overflow; ``-inf`` entries (zeros) stay zero. Each iteration normalises the
    rows, then the columns, so the column sums of the result are exact.

    Args:
        log_p: log of the (M, c) matrix; every row and column needs a finite entry.
        row_sums: Target row sums (M,), positive.
        col_sums: Target column sums (c,), positive, with the same total as ``row_sums``.
        iterations: Number of row-then-column normalisations (the thesis uses 1000).

    Returns:
        The scaled matrix (not in log space).
    """
    log_rows, log_cols = np.log(row_sums)[:, None], np.log(col_sums)[None, :]
    for _ in range(iterations):
        log_p = log_p + log_rows - _logsumexp(log_p, axis=1)
        log_p = log_p + log_cols - _logsumexp(log_p, axis=0)
    return np.exp(log_p)


def _split_by_class(
    labels: np.ndarray, classes: np.ndarray, amounts: np.ndarray, rng: np.random.Generator
) -> list[np.ndarray]:
    """Rounds the real (M, c) class amounts per class (exact column sums) and deals out shuffled indices."""
    pieces: list[list[np.ndarray]] = [[] for _ in range(amounts.shape[0])]
    for j, label in enumerate(classes):
        members = rng.permutation(np.flatnonzero(labels == label))
        counts = _largest_remainder(amounts[:, j], len(members))
        for client, piece in enumerate(np.split(members, np.cumsum(counts)[:-1])):
            pieces[client].append(piece)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in pieces]


def dirichlet_split(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    balancedness: float = 1.0,
    iterations: int = 1000,
) -> list[np.ndarray]:
    """Dirichlet split with Sinkhorn standardisation (thesis Section 2.4, eqs 2.6, 2.7).

    Samples p_j ~ Dir(alpha) over the M clients for each class j (eq 2.6) and stacks them into
    P = [p_1 .. p_c] (eq 2.7). P is standardised by alternately normalising its rows to the client
    sizes of eq 2.5 and its columns to the class counts n_j, ``iterations`` times, ending with the
    columns. Client i then receives round(P_ij) samples of class j, rounded per class by largest
    remainder so that each class is used exactly. Client sizes match :func:`balanced_sizes` up to
    the Sinkhorn residual and the rounding (a few samples). Small alpha gives clients dominated by
    one class, large alpha near-identical label distributions.

    Args:
        labels: Integer labels of the N training samples.
        num_clients: Number of clients M.
        alpha: Dirichlet concentration, > 0 (the thesis uses 0.01 to 100).
        rng: Generator seeded from the partition seed.
        balancedness: G of eq 2.5.
        iterations: Sinkhorn iterations.

    Returns:
        M sorted, disjoint int64 index arrays covering all samples.

    Raises:
        ValueError: alpha <= 0, or as :func:`balanced_sizes`.
    """
    if not alpha > 0:
        raise ValueError(f"Dirichlet alpha must be > 0, got {alpha}")
    classes, class_counts = np.unique(labels, return_counts=True)
    sizes = balanced_sizes(len(labels), num_clients, balancedness)
    log_p = _log_dirichlet(alpha, num_clients, len(classes), rng)
    amounts = sinkhorn(log_p, sizes.astype(np.float64), class_counts.astype(np.float64), iterations)
    return _split_by_class(labels, classes, amounts, rng)


def _shards_per_class(class_counts: np.ndarray, num_clients: int, classes_per_client: int) -> np.ndarray:
    """Number of shards s_j of each class: about proportional to its size, 1 <= s_j <= M, sum M*A.

    Needs c <= M*A (every class gets a shard) and A <= c (so sum M*A fits under c*M).
    """
    total = num_clients * classes_per_client
    target = class_counts * (total / class_counts.sum())
    shards = np.clip(_largest_remainder(target, total), 1, num_clients)
    while shards.sum() != total:  # repair the clipping, moving one shard at a time
        excess = shards - target
        if shards.sum() > total:
            shards[np.argmax(np.where(shards > 1, excess, -np.inf))] -= 1
        else:
            shards[np.argmin(np.where(shards < num_clients, excess, np.inf))] += 1
    return shards


def _assign_shards(shards: np.ndarray, classes_per_client: int, rng: np.random.Generator) -> np.ndarray:
    """Random (M, c) 0/1 support: client i holds A distinct classes, class j exactly s_j shards.

    Clients are served in turn. With R clients left (this one included) the remaining shard counts
    r_j sum to R*A and satisfy r_j <= R, the Gale-Ryser condition for such a 0/1 matrix to exist.
    A class with r_j = R must go to this client (at most A of them can exist); the other picks are
    drawn without replacement with probability proportional to r_j, as random shard dealing would.
    Afterwards r_j <= R - 1 for all j, so the condition holds again and every client gets A distinct
    classes.
    """
    remaining, num_clients = shards.copy(), int(shards.sum()) // classes_per_client
    support = np.zeros((num_clients, len(shards)), dtype=bool)
    for client in range(num_clients):
        forced = np.flatnonzero(remaining == num_clients - client)
        others = np.flatnonzero((remaining > 0) & (remaining < num_clients - client))
        k = classes_per_client - len(forced)
        weights = remaining[others] / remaining[others].sum() if k else None
        picked = np.concatenate([forced, rng.choice(others, size=k, replace=False, p=weights)]).astype(int)
        support[client, picked] = True
        remaining[picked] -= 1
    return support


def shard_split(
    labels: np.ndarray,
    num_clients: int,
    classes_per_client: int,
    rng: np.random.Generator,
    balancedness: float = 1.0,
) -> list[np.ndarray]:
    """McMahan-style shards: each client holds A single-label shards of A distinct classes.

    The samples of each class are shuffled and cut into s_j shards, s_j about proportional to the
    class size, sum_j s_j = M*A, 1 <= s_j <= M (:func:`_shards_per_class`). A random assignment with
    exactly A distinct classes per client (:func:`_assign_shards`) exists whenever s_j <= M, which
    the clipping ensures; with balanced classes (e.g. Fashion-MNIST, M*A divisible by c) every
    shard has N/(M*A) samples and every client N/M. Shard sizes then follow from the same Sinkhorn
    scaling as :func:`dirichlet_split`, restricted to the assigned (client, class) pairs, with rows
    set to the eq 2.5 client sizes: for uneven classes the shards of a class stay single-label but
    their sizes differ between classes, and for G < 1 the client sizes follow eq 2.5 only as far as
    the assigned classes allow. A shard may be empty only if a class is far smaller than the
    others (s_j is clipped to at least 1).

    Args:
        labels: Integer labels of the N training samples.
        num_clients: Number of clients M.
        classes_per_client: A, in [1, number of classes present]; A = c gives an iid-like split.
        rng: Generator seeded from the partition seed.
        balancedness: G of eq 2.5.

    Returns:
        M sorted, disjoint int64 index arrays covering all samples.

    Raises:
        ValueError: A outside [1, c], M*A < c (some class could not be placed), or as
            :func:`balanced_sizes`.
    """
    classes, class_counts = np.unique(labels, return_counts=True)
    if not 1 <= classes_per_client <= len(classes):
        raise ValueError(f"classes_per_client must be in [1, {len(classes)}], got {classes_per_client}")
    if num_clients * classes_per_client < len(classes):
        raise ValueError(f"shards need num_clients * classes_per_client >= {len(classes)} classes, "
                         f"got {num_clients} * {classes_per_client}")  # fmt: skip
    sizes = balanced_sizes(len(labels), num_clients, balancedness)
    support = _assign_shards(_shards_per_class(class_counts, num_clients, classes_per_client), classes_per_client, rng)
    log_support = np.where(support, 0.0, -np.inf)
    amounts = sinkhorn(log_support, sizes.astype(np.float64), class_counts.astype(np.float64), 1000)
    return _split_by_class(labels, classes, amounts, rng)


def _setting(method: str, alpha: float, classes_per_client: int, balancedness: float) -> str:
    """The method and the parameters it uses, e.g. ``'dirichlet' (alpha 0.1, balancedness 0.9)``."""
    params = {"dirichlet": [f"alpha {alpha:g}"], "shards": [f"classes_per_client {classes_per_client}"]}.get(method, [])
    params += [f"balancedness {balancedness:g}"] if balancedness != 1 else []
    return f"{method!r}" + (f" ({', '.join(params)})" if params else "")


def _empty_clients_error(setting: str, empty: str, num_clients: int, num_samples: int, advice: str) -> ValueError:
    return ValueError(f"partition {setting} leaves {empty} of {num_clients} clients without samples "
                      f"({num_samples} training samples): {advice}")  # fmt: skip


def _rounding_advice(method: str, num_clients: int, classes_per_client: int, balancedness: float) -> str:
    """What to change when the Dirichlet or shard rounding leaves clients empty (measured on Fashion-MNIST:
    Dirichlet needs 2 to 5 samples per client, more for larger alpha; shards one per shard)."""
    if method == "shards":
        advice = (f"use fewer clients, more samples (data.train_limit) or fewer classes per client "
                  f"(data.classes_per_client): each client's {classes_per_client} shards need a sample each, "
                  f"about {num_clients * classes_per_client} samples in all")  # fmt: skip
    else:
        advice = ("use fewer clients or more samples (data.train_limit): the per-class rounding needs "
                  "a few samples per client, the more the larger data.alpha")  # fmt: skip
    return advice + ("; a balancedness closer to 1 (data.balancedness) also helps" if balancedness < 1 else "")


def check_split(
    num_samples: int,
    num_clients: int,
    method: str,
    alpha: float = 1.0,
    classes_per_client: int = 2,
    balancedness: float = 1.0,
) -> None:
    """Raises the ValueError :func:`partition` raises before it splits, from the number of samples
    alone (so a run is checked before its data is loaded): an unknown method, fewer samples than
    clients, or eq 2.5 sizes that round to 0. Arguments as :func:`partition` takes them."""
    if method not in PARTITION_METHODS:
        raise ValueError(f"unknown partition method {method!r}; valid methods: {', '.join(PARTITION_METHODS)}")
    setting = _setting(method, alpha, classes_per_client, balancedness)
    if 1 <= num_clients and num_samples < num_clients:
        advice = f"use at most {num_samples} clients or more samples (data.train_limit)"
        raise _empty_clients_error(setting, f"at least {num_clients - num_samples}", num_clients, num_samples, advice)
    zero_sizes = int(np.count_nonzero(balanced_sizes(num_samples, num_clients, balancedness) == 0))
    if zero_sizes:
        advice = ("use fewer clients, more samples (data.train_limit) or a balancedness closer to 1 "
                  "(data.balancedness): below 1 the smallest clients get about a tenth of an equal share")  # fmt: skip
        empty = str(zero_sizes) if method == "iid" else f"at least {zero_sizes}"
        raise _empty_clients_error(setting, empty, num_clients, num_samples, advice)


def partition(
    labels: np.ndarray,
    num_clients: int,
    method: str,
    seed: int,
    alpha: float = 1.0,
    classes_per_client: int = 2,
    balancedness: float = 1.0,
) -> list[np.ndarray]:
    """Splits the training samples among clients with the named method.

    Args:
        labels: Integer labels of the N training samples.
        num_clients: Number of clients M.
        method: ``"iid"``, ``"dirichlet"`` or ``"shards"``.
        seed: Partition seed (independent of the training seed); same seed, same split.
        alpha: Dirichlet concentration (``"dirichlet"`` only).
        classes_per_client: A (``"shards"`` only).
        balancedness: G of eq 2.5.

    Returns:
        M sorted, disjoint int64 index arrays covering all samples, none of them empty.

    Raises:
        ValueError: Unknown method (the message lists the valid ones), invalid parameters, or a split
            that would leave a client without samples: fewer samples than clients, eq 2.5 sizes that
            round to 0 (G < 1 with few samples per client), or a client that the Dirichlet or shard
            rounding leaves empty. One line naming the numbers and what to change.
    """
    labels = np.asarray(labels)
    num_samples = len(labels)
    check_split(num_samples, num_clients, method, alpha, classes_per_client, balancedness)
    setting = _setting(method, alpha, classes_per_client, balancedness)
    rng = np.random.default_rng(seed)
    if method == "iid":
        splits = iid_split(labels, num_clients, rng, balancedness)
    elif method == "dirichlet":
        splits = dirichlet_split(labels, num_clients, alpha, rng, balancedness)
    else:
        splits = shard_split(labels, num_clients, classes_per_client, rng, balancedness)
    empty = sum(len(split) == 0 for split in splits)
    if empty:  # iid cannot get here: its sizes are exactly the (checked) eq 2.5 sizes
        advice = _rounding_advice(method, num_clients, classes_per_client, balancedness)
        raise _empty_clients_error(setting, str(empty), num_clients, num_samples, advice)
    return splits


def label_counts(labels: np.ndarray, splits: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Per-client label histogram.

    Args:
        labels: Labels of all training samples (0 .. num_classes - 1).
        splits: One index array per client.
        num_classes: Number of classes c.

    Returns:
        int64 matrix (clients x classes): entry (i, j) counts client i's samples of class j.
    """
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in splits]).astype(np.int64)
