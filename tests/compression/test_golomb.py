"""Golomb position coding (Algs. 16/17, eq. 3.9) and the payloads of compressed tensors."""

import numpy as np
import pytest

from fedray.compression import golomb
from fedray.compression import (CorruptPayload, decode_tensor, encode_tensor, golomb_decode, golomb_encode,
                                mean_position_bits, optimal_b, sbc, sign, stc, top_k)


def test_optimal_b_and_mean_bits_of_eq_3_9():
    assert optimal_b(0.01) == 6 and mean_position_bits(0.01) == pytest.approx(8.108, abs=5e-4)  # not 8.38
    assert optimal_b(1 / 400) == 8 and mean_position_bits(1 / 400) == pytest.approx(10.11, abs=5e-3)
    assert optimal_b(0.001) == 9 and mean_position_bits(0.001) == pytest.approx(11.49, abs=5e-3)


def test_golomb_code_words_by_hand():
    # 1-based positions 1, 4, 5 -> gaps d = 1, 3, 1 -> (q, r) = (0, 0), (1, 0), (0, 0) with b = 1
    np.testing.assert_array_equal(golomb_encode(np.array([0, 3, 4]), 1), [0, 0, 1, 0, 0, 0, 0])
    # b = 2, position 9: d - 1 = 9 -> q = 2, r = 1 -> 1 1 0 0 1
    np.testing.assert_array_equal(golomb_encode(np.array([9]), 2), [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(golomb_decode(np.array([1, 1, 0, 0, 1, 0, 1, 1]), 2), [9, 13])



def test_golomb_decode_rejects_streams_cut_inside_a_code_word():
    with pytest.raises(CorruptPayload, match="inside a quotient"):
        golomb_decode(np.array([0, 0, 0, 1, 1]), 2)  # second word: unary 1 1 never closed
    with pytest.raises(CorruptPayload, match="inside a remainder"):
        golomb_decode(np.array([1, 0, 0]), 2)  # closing 0 followed by 1 of 2 remainder bits
    np.testing.assert_array_equal(golomb_decode(np.array([0, 0, 0]), 2), [0])
    np.testing.assert_array_equal(golomb_decode(np.zeros(0, np.uint8), 3), [])

@pytest.mark.parametrize("n", [1, 7, 100, 4097, 200_000])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.01, 0.2, 0.9, 1.0])
def test_encode_decode_identity_on_random_sparse_sets(n, density):
    rng = np.random.default_rng(n)
    positions = np.sort(rng.choice(n, size=int(n * density), replace=False))
    for b in {optimal_b(max(len(positions), 1) / n), 0, 3}:
        np.testing.assert_array_equal(golomb_decode(golomb_encode(positions, b), b), positions)


def test_golomb_stream_length_matches_the_code():
    positions = np.sort(np.random.default_rng(1).choice(100_000, 1000, replace=False))
    b = optimal_b(0.01)
    gaps = np.diff(positions + 1, prepend=0) - 1
    assert len(golomb_encode(positions, b)) == int(np.sum((gaps >> b) + 1 + b))
    # geometric-like gaps: measured bits per position close to eq. 3.9's expectation
    assert len(golomb_encode(positions, b)) / 1000 == pytest.approx(mean_position_bits(0.01), rel=0.05)


@pytest.mark.parametrize("kind,compress", [("stc", stc), ("sbc", sbc), ("topk", top_k)])
@pytest.mark.parametrize("shape,p", [((5,), 0.4), ((64, 33), 0.01), ((3, 3, 16, 8), 1 / 400), ((1000,), 1.0)])
def test_payload_round_trip_sparse(kind, compress, shape, p):
    x = np.random.default_rng(sum(shape)).normal(size=shape).astype(np.float32)
    c = compress(x, p)
    np.testing.assert_array_equal(decode_tensor(encode_tensor(kind, c), shape), c)


def test_payload_round_trip_dense_and_sign():
    x = np.random.default_rng(3).normal(size=(17, 5)).astype(np.float32)
    np.testing.assert_array_equal(decode_tensor(encode_tensor("dense", x), x.shape), x)
    np.testing.assert_array_equal(decode_tensor(encode_tensor("sign", sign(x)), x.shape), sign(x))


def test_payload_bits_close_to_the_thesis_count():
    x = np.random.default_rng(4).normal(size=200_000).astype(np.float32)
    payload = encode_tensor("stc", stc(x, 0.01))
    k = 2000
    thesis_bits = k * (mean_position_bits(0.01) + 1) + 32  # positions, sign bits, mu
    assert len(payload) * 8 == pytest.approx(thesis_bits, rel=0.05)
    assert len(encode_tensor("sign", sign(x))) * 8 == pytest.approx(200_000, rel=0.01)  # 1 bit per element


def test_corrupted_or_truncated_payloads_fail_loudly():
    x = stc(np.random.default_rng(5).normal(size=(40, 40)).astype(np.float32), 0.05)
    payload = encode_tensor("stc", x)
    with pytest.raises(CorruptPayload, match="conv.weight is truncated"):
        decode_tensor(payload[:10], x.shape, "conv.weight")
    with pytest.raises(CorruptPayload, match="failed its integrity check"):
        decode_tensor(payload[:-3], x.shape)
    for where in (5, 20, len(payload) // 2, len(payload) - 1):
        altered = bytearray(payload)
        altered[where] ^= 0x10
        with pytest.raises(CorruptPayload):
            decode_tensor(bytes(altered), x.shape)
    with pytest.raises(CorruptPayload, match="holds 1600 elements, but the tensor has shape"):
        decode_tensor(payload, (10, 10))
    with pytest.raises(CorruptPayload, match="ends inside"):
        golomb_decode(np.array([1, 1]), 2)


def test_payload_kind_must_match_the_tensor():
    with pytest.raises(ValueError, match="'stc' payload needs all nonzero values at one magnitude"):
        encode_tensor("stc", np.array([2.0, 0.0, -1.0], np.float32))
    with pytest.raises(ValueError, match="'sbc' payload needs all nonzero values at one value"):
        encode_tensor("sbc", np.array([1.0, 0.0, -1.0], np.float32))


@pytest.mark.parametrize("level", [0, 1, 3, 10, 1000])
def test_int_payload_round_trip_and_width(level):
    values = np.random.default_rng(level).integers(-level, level + 1, size=(50, 7))
    values.flat[0] = level  # make the level exact
    payload = encode_tensor("int", values)
    np.testing.assert_array_equal(decode_tensor(payload, values.shape), values)
    width = max(1, int(np.ceil(np.log2(2 * level + 1))))  # eq. 4.10: log2(2 tau + 1) bits per value
    assert len(payload) - golomb._HEADER.size == int(np.ceil(350 * width / 8))
    with pytest.raises(ValueError, match="needs integer values"):
        encode_tensor("int", np.array([0.5]))
