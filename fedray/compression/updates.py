"""Whole model updates through the compressors and the Golomb bitstream, one tensor at a time.

Each tensor is compressed on its own (its own k = max(floor(n p), 1) and its own mu) and travels
as its own CRC-guarded stream, so an update is ``{tensor name: bytes}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.compression.golomb import CorruptPayload, decode_tensor, encode_tensor
from fedray.compression.sparse import COMPRESSORS, identity

Tensors = dict[str, np.ndarray]


@dataclass(frozen=True)
class CodedUpdate:
    """An update as it travels: each tensor's own coded stream (``encode_tensor``), by tensor name."""

    tensors: dict[str, bytes]


def encode_update(kind: str, update: Tensors) -> dict[str, bytes]:
    """Every tensor of ``update`` coded as ``kind`` (``stc``, ``sign``, ``int``, ...; see ``encode_tensor``)."""
    return {name: encode_tensor(kind, x) for name, x in update.items()}


def decode_update(payload: dict[str, bytes], shapes: dict[str, tuple[int, ...]]) -> Tensors:
    """The tensors of a coded update; raises ``CorruptPayload`` on a damaged stream or when the update
    does not hold exactly the tensors of ``shapes``."""
    if payload.keys() != shapes.keys():
        missing, unexpected = sorted(shapes.keys() - payload.keys()), sorted(payload.keys() - shapes.keys())
        raise CorruptPayload(f"coded update does not match the model: missing {missing}, unexpected {unexpected}")
    return {name: decode_tensor(data, shapes[name], name) for name, data in payload.items()}


def compress_update(update: Tensors, kind: str, p: float) -> tuple[Tensors, dict[str, bytes]]:
    """The compressed update (what the receiver will decode) and its coded payload.

    ``kind``: ``stc``, ``sbc`` or ``topk`` with density ``p``, or ``none``: no loss, each tensor sent
    dense or as positions and float32 values, whichever is smaller.
    """
    if kind == "none":
        compressed = {name: identity(x) for name, x in update.items()}
        return compressed, {name: min(encode_tensor("dense", x), encode_tensor("topk", x), key=len)
                            for name, x in compressed.items()}
    compressed = {name: COMPRESSORS[kind](x, p) for name, x in update.items()}
    return compressed, encode_update(kind, compressed)
