"""Golomb position coding (thesis Algorithms 16 and 17, eq. 3.9) and the payload of a compressed tensor.

The gaps between the nonzero positions of a sparse update are close to geometric with parameter p,
for which a Golomb code with ``2**b*`` as divisor is optimal (eq. 3.9):

    b* = 1 + floor(log2(log(phi - 1) / log(1 - p))),   phi = (sqrt(5) + 1) / 2
    mean bits per position = b* + 1 / (1 - (1 - p) ** (2 ** b*))

(p = 0.01 gives b* = 6 and 8.108 bits; the thesis's 8.38 is a known typo, see the digest.)

:func:`encode_tensor` packs a compressed tensor into bytes, and :func:`decode_tensor` unpacks it. The
layout is a header, the Golomb bits, then values: one sign bit per position for STC, nothing for
SBC (the sign is mu's), float32 values for top-k, one bit per element for signSGD, float32 for dense,
and for integers in [-L, L] (summed sign votes) ceil(log2(2L + 1)) bits each, as eq. 4.10 counts.
A CRC32 covers the whole message, so a truncated or corrupted payload raises
:class:`CorruptPayload` and never decodes into a wrong tensor. The bits counted for an update are the
payload's true length, header included.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np

PHI = (math.sqrt(5) + 1) / 2
MAGIC = b"FRC1"
KINDS = ("stc", "sbc", "topk", "sign", "dense", "int")
# magic, kind, b*, reserved, numel n, nonzeros k, mu, Golomb bit count, CRC32 of everything after it
_HEADER = struct.Struct("<4sBBHQQfQI")


class CorruptPayload(ValueError):
    """A payload that is truncated, altered, or inconsistent with the tensor it should decode into."""


def optimal_b(p: float) -> int:
    """b* of eq. 3.9 for nonzero density p (0 < p < 1); at least 0."""
    if not 0 < p < 1:
        return 0
    return max(0, 1 + math.floor(math.log2(math.log(PHI - 1) / math.log(1 - p))))


def mean_position_bits(p: float) -> float:
    """Expected bits per position with the optimal Golomb code (eq. 3.9, App. A.2)."""
    b = optimal_b(p)
    return b + 1 / (1 - (1 - p) ** (2 ** b))


def golomb_encode(positions: np.ndarray, b: int) -> np.ndarray:
    """Algorithm 16: bits (uint8 0/1) coding sorted, distinct 0-based positions with divisor 2**b.

    For each gap d (1-based positions, I_0 = 0): q = (d-1) div 2**b ones, a 0, then (d-1) mod 2**b
    in b bits, most significant first.
    """
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and (pos[0] < 0 or np.any(np.diff(pos) <= 0)):
        raise ValueError("positions must be sorted, distinct and non-negative")
    gaps = np.diff(pos + 1, prepend=0) - 1  # d - 1
    q, r = gaps >> b, gaps & ((1 << b) - 1)
    lengths = q + 1 + b
    starts = np.cumsum(lengths) - lengths
    bits = np.zeros(int(lengths.sum()), dtype=np.uint8)
    ones = np.repeat(starts, q) + (np.arange(int(q.sum())) - np.repeat(np.cumsum(q) - q, q))
    bits[ones] = 1
    for j in range(b):  # remainder bits, most significant first
        bits[starts + q + 1 + j] = (r >> (b - 1 - j)) & 1
    return bits


def golomb_decode(bits: np.ndarray, b: int) -> np.ndarray:
    """Algorithm 17: the 0-based positions coded in ``bits``.

    The box reads bit by bit. Here the scan is vectorised: a codeword starting at bit i is a quotient
    of ones up to the first 0 at or after i, then b remainder bits, so the next codeword starts at
    next[i] = first_zero[i] + b + 1. The codeword starts are the orbit of bit 0 under ``next``,
    found by pointer doubling (log2(k) numpy steps for k positions).
    """
    msg = np.asarray(bits, dtype=np.uint8).reshape(-1)
    n = msg.size
    # a gap is at most (q + 1) 2^b with q < n, and the positions add up to less than 2n 2^b: int64 holds them
    if not 0 <= b <= 62 - n.bit_length():
        raise CorruptPayload(f"Golomb parameter b = {b} is out of range for a stream of {n} bits "
                             f"(0 to {62 - n.bit_length()})")
    if n == 0:
        return np.zeros(0, np.int64)
    first_zero = np.where(msg == 0, np.arange(n), n)
    first_zero = np.minimum.accumulate(first_zero[::-1])[::-1]
    # index n: the stream ended cleanly; index n + 1: it ended inside a codeword (both absorbing)
    jump = np.append(np.minimum(first_zero + b + 1, n + 1), [n, n + 1])
    starts = np.zeros(1, np.int64)
    while starts[-1] < n:  # starts holds orbit steps 0 .. 2^j - 1; jump is next applied 2^j times
        starts = np.concatenate([starts, jump[starts]])
        jump = jump[jump]
    starts = starts[starts < n]
    last = starts[-1]
    if first_zero[last] == n:
        raise CorruptPayload("Golomb stream ends inside a quotient")
    if first_zero[last] + b >= n:
        raise CorruptPayload("Golomb stream ends inside a remainder")
    padded = np.concatenate([msg, np.zeros(b, np.uint8)]).astype(np.int64)
    ends = first_zero[starts]  # the 0 closing each quotient
    remainder = np.zeros(starts.size, np.int64)
    for j in range(1, b + 1):  # most significant bit first
        remainder = 2 * remainder + padded[ends + j]
    gaps = ((ends - starts) << b) + remainder + 1  # d = q * 2^b + r + 1
    return np.cumsum(gaps) - 1


def _pack(bits: np.ndarray) -> bytes:
    return np.packbits(bits).tobytes()


def _unpack(data: bytes, count: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=count)


def encode_tensor(kind: str, x: np.ndarray) -> bytes:
    """The payload of one compressed tensor (the output of the matching compressor)."""
    if kind not in KINDS:
        raise ValueError(f"unknown payload kind {kind!r}; valid: {', '.join(KINDS)}")
    flat = np.asarray(x, dtype=np.float32).reshape(-1)
    n, mu, golomb, tail = flat.size, 0.0, np.zeros(0, np.uint8), b""
    b = 0
    if kind in ("stc", "sbc", "topk"):
        positions = np.flatnonzero(flat)
        b = optimal_b(len(positions) / n) if n else 0
        golomb = golomb_encode(positions, b)
        values = flat[positions]
        levels = np.abs(values) if kind == "stc" else values
        if kind in ("stc", "sbc") and len(values) and np.any(levels != levels[0]):
            raise ValueError(f"a '{kind}' payload needs all nonzero values at one "
                             f"{'magnitude' if kind == 'stc' else 'value'}; compress with {kind}() first")
        if kind == "stc":
            mu = float(np.abs(values[0])) if len(values) else 0.0
            tail = _pack((values > 0).astype(np.uint8))
        elif kind == "sbc":
            mu = float(values[0]) if len(values) else 0.0
        else:
            tail = values.astype("<f4").tobytes()
        k = len(positions)
    elif kind == "sign":
        k, tail = n, _pack((flat >= 0).astype(np.uint8))
    elif kind == "int":
        ints = np.asarray(x).reshape(-1).astype(np.int64)
        if not np.array_equal(ints, np.asarray(x).reshape(-1)):
            raise ValueError("an 'int' payload needs integer values")
        level = int(np.abs(ints).max()) if n else 0
        b = max(1, math.ceil(math.log2(2 * level + 1)))  # bits per value
        shifted = (ints + level).astype(np.uint64)
        bits = ((shifted[:, None] >> np.arange(b - 1, -1, -1, dtype=np.uint64)) & 1).astype(np.uint8)
        k, mu, tail = n, float(level), _pack(bits.reshape(-1))
    else:
        k, tail = n, flat.astype("<f4").tobytes()
    body = _pack(golomb) + tail
    fields = (MAGIC, KINDS.index(kind), b, 0, n, k, mu, len(golomb))
    crc = zlib.crc32(_HEADER.pack(*fields, 0)[:-4] + body)
    return _HEADER.pack(*fields, crc) + body


def _check_layout(name: str, kind_id: int, b: int, n: int, k: int, mu: float, nbits: int, size: int) -> str:
    """The payload's kind, after checking that its header fields are in range and add up to its body
    length ``size`` (a CRC only shows that the bytes are the ones that were sent)."""
    if kind_id >= len(KINDS):
        raise CorruptPayload(f"payload of {name} has unknown kind {kind_id}; valid: 0 to {len(KINDS) - 1}")
    kind = KINDS[kind_id]
    if k > n or (kind in ("sign", "dense", "int") and (k != n or nbits)):
        raise CorruptPayload(f"payload of {name} ({kind}) declares {k} values and {nbits} position bits "
                             f"for {n} elements")
    if kind == "int" and not (1 <= b <= 63 and math.isfinite(mu) and 0 <= 2 * mu < 2 ** b and mu == int(mu)):
        raise CorruptPayload(f"payload of {name} (int) has out-of-range bits per value {b} or level {mu}")
    golomb_bytes = (nbits + 7) // 8
    expected = {"stc": golomb_bytes + (k + 7) // 8, "sbc": golomb_bytes, "topk": golomb_bytes + 4 * k,
                "sign": (n + 7) // 8, "dense": 4 * n, "int": (n * b + 7) // 8}[kind]
    if size != expected:
        raise CorruptPayload(f"payload of {name} ({kind}) has {size} body bytes, its header says {expected}")
    return kind


def decode_tensor(payload: bytes, shape: tuple[int, ...], name: str = "tensor") -> np.ndarray:
    """Inverse of :func:`encode_tensor`; raises :class:`CorruptPayload` naming ``name``."""
    if len(payload) < _HEADER.size:
        raise CorruptPayload(f"payload of {name} is truncated: {len(payload)} bytes, the header alone has {_HEADER.size}")
    magic, kind_id, b, _, n, k, mu, nbits, crc = _HEADER.unpack_from(payload)
    body = payload[_HEADER.size:]
    if magic != MAGIC or zlib.crc32(payload[:_HEADER.size - 4] + body) != crc:
        raise CorruptPayload(f"payload of {name} failed its integrity check (truncated or altered)")
    if n != math.prod(shape):
        raise CorruptPayload(f"payload of {name} holds {n} elements, but the tensor has shape {shape}")
    kind = _check_layout(name, kind_id, b, n, k, mu, nbits, len(body))
    if kind == "int":
        bits = _unpack(body, n * b).reshape(n, b).astype(np.int64)
        return (bits @ (1 << np.arange(b - 1, -1, -1)) - int(mu)).reshape(shape)
    if kind in ("sign", "dense"):
        values = _unpack(body, n).astype(np.float32) * 2 - 1 if kind == "sign" else np.frombuffer(body, "<f4")
        return values.reshape(shape).copy()
    golomb_bytes = (nbits + 7) // 8
    try:
        positions = golomb_decode(_unpack(body[:golomb_bytes], nbits), b)
    except CorruptPayload as err:
        raise CorruptPayload(f"payload of {name}: {err}") from None
    if len(positions) != k or (k and positions[-1] >= n):
        raise CorruptPayload(f"payload of {name} decodes to {len(positions)} positions, expected {k} below {n}")
    out = np.zeros(n, dtype=np.float32)
    tail = body[golomb_bytes:]
    if kind == "stc":
        out[positions] = np.where(_unpack(tail, k) == 1, mu, -mu)
    elif kind == "sbc":
        out[positions] = mu
    else:
        out[positions] = np.frombuffer(tail, "<f4", count=k)
    return out.reshape(shape)
