"""Soft-label quantisation Q_b (eqs. 5.8, 5.9), delta coding (eq. 5.11) and the soft-label payload."""

import itertools

import numpy as np
import pytest

from fedray.compression import CorruptPayload
from fedray.distill.soft_labels import (FULL_PRECISION, decode_soft_labels, delta_decode, delta_encode, dequantize,
                                        encode_soft_labels, entropy_bits, quantize, quantize_soft_labels)

SKEW = np.array([0.5, 0.2, 0.1, 0.05, 0.05, 0.03, 0.03, 0.02, 0.01, 0.01])


def _dirichlet(n, c, seed=0, alpha=1.0):
    return np.random.default_rng(seed).dirichlet(np.full(c, alpha), size=n)


def _one_hot_counts(n, seed=0):
    classes = np.random.default_rng(seed).choice(10, size=n, p=SKEW)
    return np.eye(10, dtype=np.uint8)[classes]


def test_worked_example_by_hand():
    # p L = [1.8, 0.9, 0.3] -> floor [1, 0, 0], r = 2 units to fractions 0.9 and 0.8 -> [2, 1, 0]
    counts = quantize(np.array([[0.6, 0.3, 0.1]]), 2, np.random.default_rng(0))
    np.testing.assert_array_equal(counts, [[2, 1, 0]])
    np.testing.assert_allclose(dequantize(counts, 2), [[2 / 3, 1 / 3, 0]], rtol=1e-6)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8, 12, 16])
def test_quantized_rows_lie_on_the_grid_and_sum_to_one(bits):
    probs = _dirichlet(300, 7, seed=bits, alpha=0.5)
    counts = quantize(probs, bits, np.random.default_rng(1))
    levels = 2 ** bits - 1
    assert counts.dtype == (np.uint8 if levels < 256 else np.uint16) and counts.shape == (300, 7)
    np.testing.assert_array_equal(counts.astype(np.int64).sum(axis=1), levels)
    q = dequantize(counts, bits)
    assert q.dtype == np.float32
    np.testing.assert_allclose(q.sum(axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(q * levels, np.round(q * levels), atol=1e-2)
    np.testing.assert_array_equal(quantize_soft_labels(probs, bits, np.random.default_rng(1)), q)


@pytest.mark.parametrize("c,bits", list(itertools.product([2, 3, 4], [1, 2, 3])))
def test_l1_optimal_against_brute_force(c, bits):
    levels = 2 ** bits - 1
    grid = np.array([k for k in itertools.product(range(levels + 1), repeat=c) if sum(k) == levels]) / levels
    probs = _dirichlet(200, c, seed=10 * c + bits, alpha=0.7)
    best = np.abs(grid[None, :, :] - probs[:, None, :]).sum(axis=2).min(axis=1)
    got = np.abs(quantize(probs, bits, np.random.default_rng(2)) / levels - probs).sum(axis=1)
    np.testing.assert_allclose(got, best, rtol=0, atol=1e-9)


def test_one_bit_is_the_one_hot_argmax():
    probs = _dirichlet(500, 10, seed=3)
    counts = quantize(probs, 1, np.random.default_rng(0))
    np.testing.assert_array_equal(counts, np.eye(10, dtype=np.uint8)[probs.argmax(axis=1)])


def test_ties_are_broken_randomly_and_reproducibly():
    probs = np.full((2000, 2), 0.5)
    counts = quantize(probs, 1, np.random.default_rng(7))
    share = counts[:, 0].mean()
    assert 0.4 < share < 0.6
    np.testing.assert_array_equal(counts, quantize(probs, 1, np.random.default_rng(7)))
    assert not np.array_equal(counts, quantize(probs, 1, np.random.default_rng(8)))


def test_invalid_inputs_raise_value_error():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="full precision"):
        quantize(np.array([[1.0, 0.0]]), FULL_PRECISION, rng)
    for bits in (0, 17, 2.0):
        with pytest.raises(ValueError, match="bits"):
            quantize(np.array([[1.0, 0.0]]), bits, rng)
    with pytest.raises(ValueError, match="2D"):
        quantize(np.array([0.5, 0.5]), 1, rng)
    with pytest.raises(ValueError, match="sum to 1"):
        quantize(np.array([[0.5, 0.6]]), 1, rng)
    probs = np.array([[0.25, 0.75]])
    assert quantize_soft_labels(probs, FULL_PRECISION, rng).dtype == np.float32
    np.testing.assert_array_equal(quantize_soft_labels(probs, FULL_PRECISION, rng), probs)


def test_delta_encode_decode():
    previous = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.uint8)
    current = np.array([[1, 0, 0], [1, 0, 0], [0, 0, 1]], dtype=np.uint8)
    delta = delta_encode(current, previous)
    np.testing.assert_array_equal(delta, [[0, 0, 0], [1, 0, 0], [0, 0, 0]])  # eq. 5.11
    np.testing.assert_array_equal(delta_decode(delta, previous), current)
    first = delta_encode(current, None)
    np.testing.assert_array_equal(first, current)
    assert first is not current
    np.testing.assert_array_equal(delta_decode(first, None), current)
    with pytest.raises(ValueError, match="no previous"):
        delta_decode(delta, None)
    with pytest.raises(ValueError, match="shape"):
        delta_encode(current, previous[:2])


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
def test_payload_round_trip_with_and_without_delta(bits):
    rng = np.random.default_rng(bits)
    previous = quantize(_dirichlet(400, 5, seed=1, alpha=0.3), bits, rng)
    current = previous.copy()
    changed = rng.random(400) < 0.3
    current[changed] = quantize(_dirichlet(int(changed.sum()), 5, seed=2, alpha=0.3), bits, rng)
    plain = decode_soft_labels(encode_soft_labels(current, bits))
    assert plain.dtype == current.dtype
    np.testing.assert_array_equal(plain, current)
    delta = encode_soft_labels(current, bits, previous=previous)
    np.testing.assert_array_equal(decode_soft_labels(delta, previous=previous), current)
    with pytest.raises(CorruptPayload, match="delta-coded"):
        decode_soft_labels(delta)


def test_full_precision_payload_round_trip():
    probs = _dirichlet(50, 10, seed=4).astype(np.float32)
    payload = encode_soft_labels(probs, FULL_PRECISION)
    assert len(payload) == 32 + probs.nbytes
    out = decode_soft_labels(payload)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, probs)
    with pytest.raises(ValueError):
        encode_soft_labels(probs, FULL_PRECISION, previous=probs)


def test_payload_size_is_near_the_entropy():
    counts = _one_hot_counts(5000)
    payload = encode_soft_labels(counts, 1)
    ideal = 5000 * entropy_bits(counts) / 8
    assert len(payload) < 5000 * 10 / 8
    assert ideal < len(payload) < 1.5 * ideal + 200
    np.testing.assert_array_equal(decode_soft_labels(payload), counts)


def test_delta_coding_shrinks_mostly_unchanged_labels():
    previous = _one_hot_counts(5000, seed=0)
    current = previous.copy()
    current[:250] = _one_hot_counts(250, seed=1)
    assert len(encode_soft_labels(current, 1, previous)) < len(encode_soft_labels(current, 1)) / 2


def test_truncated_or_altered_payload_raises():
    counts = _one_hot_counts(300)
    payload = encode_soft_labels(counts, 1)
    for cut in (0, 10, 31, len(payload) - 1):
        with pytest.raises(CorruptPayload):
            decode_soft_labels(payload[:cut])
    for position in (5, 7, 20, 40, len(payload) - 1):  # 7: the reserved header byte, only the CRC sees it
        altered = bytearray(payload)
        altered[position] ^= 0x10
        with pytest.raises(CorruptPayload):
            decode_soft_labels(bytes(altered))
    swapped = payload[:32] + payload[42:52] + payload[32:42] + payload[52:]  # two codebook rows, both valid
    with pytest.raises(CorruptPayload, match="integrity"):
        decode_soft_labels(swapped)


def test_entropy_bits_by_hand():
    assert entropy_bits(np.array([[1, 0], [0, 1], [1, 0], [0, 1]])) == 1.0
    assert entropy_bits(np.array([[1, 0], [1, 0]])) == 0.0
    # 4 distinct rows, probabilities 1/2, 1/4, 1/8, 1/8 -> 1.75 bits
    rows = np.array([[3, 0]] * 4 + [[2, 1]] * 2 + [[1, 2], [0, 3]])
    assert entropy_bits(rows) == pytest.approx(1.75, abs=1e-12)
