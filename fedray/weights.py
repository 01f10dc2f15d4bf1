"""Model weights as plain ``{name: np.ndarray}`` dicts: the form they take on the wire.

numpy arrays travel through Ray's object store without copies, and a dict keyed by the model's
``state_dict`` names keeps buffers (BatchNorm statistics) alongside parameters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
import torch

Weights = dict[str, np.ndarray]


def get_weights(model: torch.nn.Module) -> Weights:
    """A copy of the model's state (parameters and buffers) as numpy arrays."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_weights(model: torch.nn.Module, weights: Weights) -> None:
    """Load ``weights`` into ``model`` in place (shapes and names must match)."""
    state = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in weights.items()}
    model.load_state_dict(state, strict=True)


def weighted_mean(states: Sequence[Weights], coefficients: Sequence[float]) -> Weights:
    """sum_i c_i * state_i / sum_i c_i, tensor by tensor, accumulated in float64.

    Integer tensors (e.g. BatchNorm's ``num_batches_tracked``) are averaged and rounded.
    The result depends only on the order of ``states``, which callers fix (sorted client ids).
    """
    if not states:
        raise ValueError("cannot average an empty list of weights")
    coef = np.asarray(coefficients, dtype=np.float64)
    if coef.shape != (len(states),) or np.any(coef < 0) or coef.sum() <= 0:
        raise ValueError(f"need one non-negative coefficient per state with a positive sum, got {coef}")
    coef = coef / coef.sum()
    out = {}
    for name, first in states[0].items():
        acc = np.zeros(first.shape, dtype=np.float64)
        for c, state in zip(coef, states):
            acc += c * state[name]
        # rint in place: on a 0-d array (the counter) np.rint would return a numpy scalar, not an array
        out[name] = np.rint(acc, out=acc).astype(first.dtype) if first.dtype.kind in "iub" else acc.astype(first.dtype)
    return out


def is_update(array: np.ndarray) -> bool:
    """Floating tensors are trained, updated and sent; integer buffers (BatchNorm's counter) are not."""
    return array.dtype.kind == "f"


def all_finite(payload) -> bool:
    """Whether every float in a payload (arrays, tensors and floats nested in dicts, lists, tuples
    or dataclasses) is finite; encoded bytes are not looked into."""
    if isinstance(payload, np.ndarray):
        return payload.dtype.kind not in "fc" or bool(np.isfinite(payload).all())
    if isinstance(payload, torch.Tensor):
        return not (payload.is_floating_point() or payload.is_complex()) or bool(torch.isfinite(payload).all())
    if isinstance(payload, float):
        return math.isfinite(payload)
    if isinstance(payload, dict):
        return all(all_finite(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return all(all_finite(v) for v in payload)
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        return all(all_finite(getattr(payload, f.name)) for f in dataclasses.fields(payload))
    return True


# metadata of a dataclass field that the simulator carries but a real client would not send (e.g. a
# model that never leaves the client, uploaded only to be evaluated): ``nbytes`` leaves it out
SIMULATION = {"simulation": True}


def nbytes(payload) -> int:
    """Bytes of a payload made of numpy arrays or encoded bytes (nested in dicts, lists, tuples or
    dataclasses; None is nothing)."""
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, (bytes, bytearray)):
        return len(payload)
    if isinstance(payload, dict):
        return sum(nbytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(nbytes(v) for v in payload)
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):  # fields marked SIMULATION do not travel
        return sum(nbytes(getattr(payload, f.name)) for f in dataclasses.fields(payload) if not f.metadata.get("simulation"))
    if payload is None:
        return 0
    if isinstance(payload, torch.Tensor):
        return int(payload.numel() * payload.element_size())
    raise TypeError(f"cannot count the bytes of a {type(payload).__name__}")
