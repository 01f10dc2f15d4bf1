"""Per-tensor update compressors of Sattler's thesis, chapter 3 (section 3.3), and signSGD.

Each compressor maps one flattened update tensor to its compressed value, a dense array of the same
shape (zeros where nothing is sent). ``fedray.compression.golomb`` turns that into the bitstream that
travels. Compression is applied per parameter tensor, each with its own k and mu (digest section 2.3).
"""

from __future__ import annotations

import numpy as np


def num_kept(n: int, p: float) -> int:
    """k = max(floor(n * p), 1): the number of elements a sparse compressor keeps (Algs. 5 and 6)."""
    if not 0 < p <= 1:
        raise ValueError(f"sparsity p must be in (0, 1], got {p}")
    return max(int(np.floor(n * p)), 1)


def _top_k_values(flat: np.ndarray, k: int) -> np.ndarray:
    """The k largest entries of ``flat``, in increasing order. The order fixes how their mean is
    summed: ``np.partition`` returns them in an order that depends on the CPU's selection kernel."""
    return np.sort(np.partition(flat, len(flat) - k)[len(flat) - k:])


def top_k_indices(a: np.ndarray, k: int) -> np.ndarray:
    """The positions of the k largest entries of ``a``, increasing; where entries tie at the k-th
    value, the lower positions are kept. ``np.argpartition`` keeps some of the tied ones, which ones
    depending on the CPU's selection kernel (numpy dispatches it to AVX-512 or AVX2 sorting
    networks where the CPU has them), so a run would send other positions on other machines. The
    k-th value itself is the same everywhere. NaN ranks above every number, as in ``np.partition``."""
    n = a.size
    if k >= n:
        return np.arange(n)
    threshold = np.partition(a, n - k)[n - k]
    above = np.flatnonzero((a > threshold) | np.isnan(a))[:k]
    tied = np.flatnonzero(a == threshold)[:k - above.size]
    return np.sort(np.concatenate([above, tied]))


def top_k(x: np.ndarray, p: float) -> np.ndarray:
    """Top-k sparsification: keep the k entries of largest magnitude, with their values."""
    flat = x.reshape(-1)
    k = num_kept(flat.size, p)
    keep = top_k_indices(np.abs(flat), k)
    out = np.zeros_like(flat)
    out[keep] = flat[keep]
    return out.reshape(x.shape)


def stc(x: np.ndarray, p: float) -> np.ndarray:
    """Sparse ternary compression, thesis Algorithm 6.

    k <- max(floor(n p), 1); V <- top_k(|T|); mu <- mean(V); T* <- mu (|T| >= min(V)) * sign(T).
    """
    flat = x.reshape(-1)
    k = num_kept(flat.size, p)
    v = _top_k_values(np.abs(flat), k)
    mu = v.mean(dtype=np.float64)
    out = (mu * (np.abs(flat) >= v.min()) * np.sign(flat)).astype(x.dtype)
    return out.reshape(x.shape)


def sbc(x: np.ndarray, p: float) -> np.ndarray:
    """Sparse binary compression, thesis Algorithm 5: only the stronger sign survives.

    V+ <- top_k(T); V- <- top_k(-T); if mean(V+) >= mean(V-): T* <- mu+ (T >= min(V+))
    else T* <- -mu- (T <= -min(V-)).
    """
    flat = x.reshape(-1)
    k = num_kept(flat.size, p)
    v_pos, v_neg = _top_k_values(flat, k), _top_k_values(-flat, k)
    mu_pos, mu_neg = v_pos.mean(dtype=np.float64), v_neg.mean(dtype=np.float64)
    if mu_pos >= mu_neg:
        out = mu_pos * (flat >= v_pos.min())
    else:
        out = -mu_neg * (flat <= -v_neg.min())
    return out.astype(x.dtype).reshape(x.shape)


def sign(x: np.ndarray) -> np.ndarray:
    """signSGD's 1-bit quantisation (Bernstein et al. 2018). One bit cannot say 0, so sign(0) = +1."""
    return np.where(x >= 0, 1, -1).astype(x.dtype)


def majority_vote(signs: list[np.ndarray]) -> np.ndarray:
    """signSGD with majority vote: the sign of the sum of the clients' signs (ties give +1)."""
    return sign(np.sum(signs, axis=0))


def identity(x: np.ndarray, p: float | None = None) -> np.ndarray:
    """No compression (dense 32-bit updates)."""
    return x.copy()


COMPRESSORS = {"stc": stc, "sbc": sbc, "topk": top_k}
