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

__all__ = ["COMPRESSORS", "CorruptPayload", "decode_tensor", "encode_tensor", "golomb_decode", "golomb_encode",
           "identity", "majority_vote", "mean_position_bits", "num_kept", "optimal_b", "sbc", "sign", "stc", "top_k"]
