"""Soft-label quantisation, delta coding and the soft-label payload of Compressed Federated Distillation.

Sattler, "Concepts for Efficient, Adaptive and Robust Deep Learning from Distributed Data" (PhD thesis,
TU Berlin 2021), chapter 5, section 5.2, and the digest
``shared/notes/thesis.md`` section 4. Clients send predictions on a shared public set X^pub instead of
weights; their cost is |X^pub| * (H(Y) + eta) bits (eq. 5.2). Three steps bring it down:

* :func:`quantize` applies the constrained uniform quantiser Q_b (eq. 5.8): the L1-closest point of
  the grid {l / (2^b - 1)} on the probability simplex, ties broken at random. Q_1 is the one-hot
  argmax (eq. 5.9). A quantised row is kept as integer counts k with q = k / L, L = 2^b - 1.
* :func:`delta_encode` replaces a row equal to last round's row by an all-zero row (eq. 5.11), which
  requires the same X^pub in the same order every round.
* :func:`encode_soft_labels` writes the real bitstream: a header, a codebook of the distinct rows and
  the LZMA-coded row indices (LZMA stands in for the thesis's CABAC), under a CRC32, so a truncated or
  altered payload raises :class:`~fedray.compression.CorruptPayload`. 32 bits means "not quantised":
  raw float32 probabilities.
"""

from __future__ import annotations

import lzma
import struct
import sys
import zlib

import numpy as np

from fedray.compression import CorruptPayload

FULL_PRECISION = 32
MAX_BITS = 16
MAGIC = b"FSL1"
VERSION = 1
# magic, version, bits, delta flag, reserved, rows N, classes C, codebook size K, CRC32 of all else
_HEADER = struct.Struct("<4sBBBBQIQI")
# Fixed raw LZMA2 chain: lc = lp = pb = 0 is an order-0 model of the index bytes. Measured on 5000
# one-hot 10-class indices, p = (.5 .2 .1 .05 .05 .03 .03 .02 .01 .01), 20 seeds (ideal N*H/8 = 1424
# bytes): this chain 1694.8 bytes on average (seed 0: 1601); raw LZMA1 same options 1693.9 (1600);
# raw LZMA2 preset 9e defaults (lc 3, pb 2) 1756.4; FORMAT_XZ with CHECK_NONE 1805.8 (preset 9e) and
# 1811.0 (preset 6). LZMA2 over LZMA1 despite 1 byte more: it stores incompressible chunks verbatim
# (5000 random bytes: 5004 against 5081), which matters for near-uniform uint16 indices.
_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "lc": 0, "lp": 0, "pb": 0,
             "dict_size": 1 << 20}]


def _levels(bits: int) -> int:
    """L = 2^b - 1, the number of grid steps of Q_b (eq. 5.8); validates b."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be an integer in 1..{MAX_BITS} for quantised labels, got {bits!r}")
    return (1 << int(bits)) - 1


def _count_dtype(levels: int) -> np.dtype:
    return np.dtype("u1" if levels < 256 else "<u2")


def _index_dtype(codebook_size: int) -> np.dtype:
    return np.dtype("u1" if codebook_size <= 1 << 8 else "<u2" if codebook_size <= 1 << 16 else "<u4")


def _check_probs(probs: np.ndarray) -> np.ndarray:
    """Float64 copy of an [N, C] array of probability rows, renormalised to sum exactly to 1."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] == 0:
        raise ValueError(f"probs must be a 2D [N, C] array with C >= 1, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("probs must be finite and non-negative")
    sums = p.sum(axis=1, keepdims=True)
    if np.any(np.abs(sums - 1) > 1e-3):
        raise ValueError(f"probs rows must sum to 1, found sums up to {float(np.abs(sums - 1).max()):.3g} away")
    return p / sums


def quantize(probs: np.ndarray, bits: int, rng: np.random.Generator) -> np.ndarray:
    """Q_b of eq. 5.8 as integer counts: row k sums to L = 2^b - 1 and Q_b(p) = k / L.

    Args:
        probs: [N, C] probabilities (non-negative, rows summing to 1).
        bits: b in 1..16. 32 (no quantisation) is refused: callers skip quantisation then.
        rng: generator for the random tie-breaking of eq. 5.8.

    Returns:
        [N, C] counts, uint8 if L < 256 else uint16.
    """
    if bits == FULL_PRECISION:
        raise ValueError("bits == 32 means full precision: skip quantize (see quantize_soft_labels)")
    levels = _levels(bits)
    scaled = _check_probs(probs) * levels
    counts = np.floor(scaled)
    frac = scaled - counts
    remaining = np.clip(levels - counts.sum(axis=1).round().astype(np.int64), 0, scaled.shape[1])
    # sum_i |k_i - p_i L| is separable and convex in the integers k_i, so adding units greedily by
    # marginal cost is exactly optimal: from the floor, a unit on i costs 1 - 2 frac_i and a second one
    # +1, so the r = L - sum(floor) units go to the r largest fractions. Equal fractions are exact ties
    # of eq. 5.8, broken by a random key.
    order = np.lexsort((rng.random(scaled.shape), -frac), axis=1)
    bonus = np.zeros(scaled.shape, dtype=np.int64)
    np.put_along_axis(bonus, order, np.arange(scaled.shape[1]) < remaining[:, None], axis=1)
    return (counts.astype(np.int64) + bonus).astype(_count_dtype(levels))


def dequantize(counts: np.ndarray, bits: int) -> np.ndarray:
    """Grid probabilities q = k / L (eq. 5.8) as float32."""
    return (np.asarray(counts, dtype=np.float64) / _levels(bits)).astype(np.float32)


def quantize_soft_labels(probs: np.ndarray, bits: int, rng: np.random.Generator) -> np.ndarray:
    """Q_b(p) as float32 probabilities; bits == 32 returns ``probs`` as float32, not quantised."""
    if bits == FULL_PRECISION:
        return np.array(probs, dtype=np.float32)
    return dequantize(quantize(probs, bits, rng), bits)


def delta_encode(current: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
    """Eq. 5.11: rows of ``current`` equal to the same row of ``previous`` become all-zero rows.

    A real row of counts sums to L > 0, so a zero row unambiguously means "unchanged". With
    ``previous`` None (the first round) ``current`` is returned as a copy.
    """
    current = np.array(current)
    if previous is None:
        return current
    previous = np.asarray(previous)
    if previous.shape != current.shape or current.ndim != 2:
        raise ValueError(f"delta coding needs two [N, C] arrays of one shape, got {current.shape} and {previous.shape}")
    current[np.all(current == previous, axis=1)] = 0
    return current


def delta_decode(delta: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
    """Inverse of :func:`delta_encode`: all-zero rows take the row of ``previous``."""
    out = np.array(delta)
    if out.ndim != 2:
        raise ValueError(f"delta must be a 2D [N, C] array, got shape {out.shape}")
    unchanged = ~np.any(out, axis=1)
    if previous is None:
        if unchanged.any():
            raise ValueError("delta has unchanged (all-zero) rows but no previous labels to take them from")
        return out
    previous = np.asarray(previous)
    if previous.shape != out.shape:
        raise ValueError(f"delta has shape {out.shape} but previous labels have shape {previous.shape}")
    out[unchanged] = previous[unchanged]
    return out


def _check_counts(counts: np.ndarray, levels: int, allow_zero_rows: bool, what: str) -> np.ndarray:
    """``counts`` as the count dtype after checking it holds rows of Q_b counts (eq. 5.8)."""
    k = np.asarray(counts)
    if k.ndim != 2 or not (np.issubdtype(k.dtype, np.integer) or k.size == 0):
        raise ValueError(f"{what} must be a 2D integer [N, C] array of counts from quantize(), got "
                         f"{k.dtype} of shape {k.shape}")
    sums = k.astype(np.int64).sum(axis=1)
    valid = (sums == levels) | (allow_zero_rows & ~np.any(k, axis=1))
    if np.any(k < 0) or not valid.all():
        raise ValueError(f"{what} rows must be non-negative counts summing to L = {levels}")
    return k.astype(_count_dtype(levels))


def _pack(bits: int, delta: bool, shape: tuple[int, int], codebook_size: int, body: bytes) -> bytes:
    fields = (MAGIC, VERSION, bits, int(delta), 0, shape[0], shape[1], codebook_size)
    crc = zlib.crc32(_HEADER.pack(*fields, 0)[:-4] + body)
    return _HEADER.pack(*fields, crc) + body


def encode_soft_labels(labels: np.ndarray, bits: int, previous: np.ndarray | None = None) -> bytes:
    """The payload of one set of soft labels on X^pub.

    Args:
        labels: bits == 32: float32 probabilities [N, C]. bits <= 16: the counts from :func:`quantize`.
        bits: 32 or 1..16.
        previous: last round's counts (same rows, same order); given, the labels are delta-coded
            (eq. 5.11). Not allowed with bits == 32.

    Returns:
        Header, then raw float32 (32 bits) or codebook of distinct rows + LZMA-coded row indices.
    """
    if bits == FULL_PRECISION:
        probs = np.asarray(labels, dtype="<f4")
        if previous is not None or probs.ndim != 2 or (probs.shape[0] and not probs.shape[1]):
            raise ValueError("32-bit labels must be a 2D [N, C] array with C >= 1 and cannot be delta-coded")
        return _pack(bits, False, probs.shape, 0, probs.tobytes())
    levels = _levels(bits)
    counts = _check_counts(labels, levels, False, "labels")
    if previous is not None:
        counts = delta_encode(counts, _check_counts(previous, levels, False, "previous"))
    codebook, symbols = np.unique(counts, axis=0, return_inverse=True)
    indices = symbols.reshape(-1).astype(_index_dtype(len(codebook)))
    body = codebook.tobytes() + lzma.compress(indices.tobytes(), format=lzma.FORMAT_RAW, filters=_FILTERS)
    return _pack(bits, previous is not None, counts.shape, len(codebook), body)


def _unpack(payload: bytes) -> tuple[tuple, bytes]:
    """Header fields and body, after the integrity checks."""
    if len(payload) < _HEADER.size:
        raise CorruptPayload(f"soft-label payload is truncated: {len(payload)} bytes, "
                             f"the header alone has {_HEADER.size}")
    magic, version, bits, delta, _, n, c, k, crc = _HEADER.unpack_from(payload)
    body = bytes(payload[_HEADER.size:])
    if magic != MAGIC or zlib.crc32(bytes(payload[:_HEADER.size - 4]) + body) != crc:
        raise CorruptPayload("soft-label payload failed its integrity check (truncated or altered)")
    if version != VERSION or not (bits == FULL_PRECISION or 1 <= bits <= MAX_BITS) or delta > 1:
        raise CorruptPayload(f"soft-label payload has unsupported version {version}, bits {bits} or delta flag {delta}")
    # the codebook holds distinct rows, a row at least one class, and the labels must fit in memory
    if k > n or (n and not c) or n * c * 4 > sys.maxsize:
        raise CorruptPayload(f"soft-label payload declares an impossible shape: {n} rows of {c} classes, "
                             f"{k} of them distinct")
    return (bits, bool(delta), n, c, k), body


def _decode_indices(data: bytes, n: int, dtype: np.dtype) -> np.ndarray:
    """The n row indices from the LZMA stream; CorruptPayload when it is not exactly that."""
    decoder = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_FILTERS)
    try:
        raw = decoder.decompress(data, max_length=n * dtype.itemsize + 1)
    except lzma.LZMAError as error:
        raise CorruptPayload(f"soft-label indices do not decode: {error}") from None
    if len(raw) != n * dtype.itemsize or not decoder.eof or decoder.unused_data:
        raise CorruptPayload(f"soft-label indices decode to {len(raw)} bytes, expected {n * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype)


def _decode_counts(body: bytes, bits: int, delta: bool, n: int, c: int, k: int) -> np.ndarray:
    levels = _levels(bits)
    dtype = _count_dtype(levels)
    book_bytes = k * c * dtype.itemsize
    if len(body) < book_bytes:
        raise CorruptPayload(f"soft-label payload has {len(body)} body bytes, its codebook alone needs {book_bytes}")
    codebook = np.frombuffer(body[:book_bytes], dtype=dtype).reshape(k, c)
    indices = _decode_indices(body[book_bytes:], n, _index_dtype(k))
    if indices.size and int(indices.max()) >= k:
        raise CorruptPayload(f"soft-label index {int(indices.max())} outside the codebook of {k} rows")
    try:
        _check_counts(codebook, levels, delta, "codebook")
    except ValueError as error:
        raise CorruptPayload(f"soft-label payload is inconsistent: {error}") from None
    return codebook[indices.astype(np.int64)]


def decode_soft_labels(payload: bytes, previous: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`encode_soft_labels`.

    Args:
        payload: the bytes from :func:`encode_soft_labels`.
        previous: last round's counts; needed when the payload is delta-coded, ignored otherwise.

    Returns:
        Float32 probabilities [N, C] (32 bits) or the counts [N, C] (bits <= 16).

    Raises:
        CorruptPayload: truncated or altered payload, or a delta-coded one without matching ``previous``.
    """
    (bits, delta, n, c, k), body = _unpack(payload)
    if bits == FULL_PRECISION:
        if len(body) != n * c * 4:
            raise CorruptPayload(f"32-bit soft-label payload has {len(body)} body bytes, expected {n * c * 4}")
        return np.frombuffer(body, dtype="<f4").astype(np.float32).reshape(n, c)
    counts = _decode_counts(body, bits, delta, n, c, k)
    if not delta:
        return counts
    if previous is None or np.shape(previous) != (n, c):
        got = "none" if previous is None else f"shape {np.shape(previous)}"
        raise CorruptPayload(f"soft-label payload is delta-coded against [{n}, {c}] previous labels, got {got}")
    return delta_decode(counts, np.asarray(previous).astype(counts.dtype))


def entropy_bits(counts: np.ndarray) -> float:
    """Empirical entropy H(Y~) in bits per row (eq. 5.2): each distinct row is one symbol."""
    rows = np.asarray(counts)
    if rows.shape[0] == 0:
        return 0.0
    _, freq = np.unique(rows.reshape(rows.shape[0], -1), axis=0, return_counts=True)
    p = freq / rows.shape[0]
    return float(-(p * np.log2(p)).sum() + 0.0)
