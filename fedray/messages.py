"""Typed messages that cross the actor boundary (frozen dataclasses, no string-keyed dicts).

A round is: the strategy makes a :class:`RoundPlan` (tasks plus broadcast payloads), every task is
run by the host of its client and answered by a :class:`ClientUpdate`, and the loop reports a
:class:`RoundResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class ClientSpec:
    """A virtual client: its id, architecture and the indices of its training samples.

    ``group`` is its data group and ``role`` is ``benign`` or an adversary kind
    (:mod:`fedray.data.shifts`).
    """

    client_id: int
    arch: str
    indices: np.ndarray
    group: int = 0
    role: str = "benign"

    @property
    def num_samples(self) -> int:
        return int(len(self.indices))


@dataclass(frozen=True)
class ClientTask:
    """What one client does in one round.

    Attributes:
        client_id: the client.
        round: 1-based round number.
        arch: the client's architecture.
        payload_keys: keys of the round's broadcast payloads this client downloads, in the order
            the host receives them (e.g. ``("model/cnn",)``).
        seed: seed of every random choice the client makes this round (batch order, dropout).
        options: what else the method tells this client this round, as a small frozen dataclass of
            that method (e.g. STC's ``ModelCheck``); None when there is nothing.
        lr_scale: the factor on ``training.lr`` of this task's local training (``training.lr_decay``).
    """

    client_id: int
    round: int
    arch: str
    payload_keys: tuple[str, ...]
    seed: int
    options: Any = None
    lr_scale: float = 1.0


@dataclass(frozen=True)
class ClientUpdate:
    """A client's answer to a task.

    Attributes:
        client_id: the client.
        arch: its architecture.
        num_samples: |D_i|, for weighted aggregation.
        payload: what the method uploads (dense weights, a gradient, a coded update, logits).
        bytes_up: the exact size of ``payload`` as it would travel over a network.
        metrics: scalar training metrics (``loss``, ``time_s``, ...).
    """

    client_id: int
    arch: str
    num_samples: int
    payload: Any
    bytes_up: int
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundPlan:
    """The round's tasks and the payloads broadcast to them (put in the object store once each).

    ``sizes`` overrides the byte count of a payload where what a real client downloads differs from
    what the simulation hands it: federated distillation's clients download soft labels and distil
    them into a model that is the same on every client, so the server actor distils once and hands
    out that model, while the bytes counted are those of the soft labels.
    """

    tasks: list[ClientTask]
    broadcast: dict[str, Any]
    sizes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundResult:
    """What one round produced; ``metrics`` uses the TensorBoard tag names."""

    round: int
    metrics: dict[str, float]
    faults: str = ""  # what the executor survived this round (``runtime/faults``), one line each


def one_line(err: BaseException) -> str:
    """``Type: first line of the message``, for a report that must stay on one line."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


class ClientFailure(RuntimeError):
    """A client failed; names the client, the round and the stage (``download``, ``local training``,
    ``upload`` or ``dispatch``). ``trace`` is the whole traceback where it failed, as text, so that it
    survives the trip out of a client actor."""

    def __init__(self, client_id: int, round: int, stage: str, reason: str, trace: str = ""):
        super().__init__(f"client {client_id} failed in round {round} during {stage}: {reason}")
        self.client_id, self.round, self.stage, self.reason, self.trace = client_id, round, stage, reason, trace

    def __reduce__(self):
        return ClientFailure, (self.client_id, self.round, self.stage, self.reason, self.trace)
