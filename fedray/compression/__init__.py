"""Communication compression of Sattler's thesis, chapters 3 and 4: compressors and Golomb coding."""

from fedray.compression.golomb import (
    CorruptPayload,
    decode_tensor,
    encode_tensor,
    golomb_decode,
    golomb_encode,
    mean_position_bits,
    optimal_b,
)
from fedray.compression.sparse import COMPRESSORS, identity, majority_vote, num_kept, sbc, sign, stc, top_k
from fedray.compression.updates import CodedUpdate, compress_update, decode_update, encode_update

__all__ = ["COMPRESSORS", "CodedUpdate", "CorruptPayload", "compress_update", "decode_tensor", "decode_update", "encode_tensor",
           "encode_update", "golomb_decode", "golomb_encode", "identity", "majority_vote", "mean_position_bits",
           "num_kept", "optimal_b", "sbc", "sign", "stc", "top_k"]
