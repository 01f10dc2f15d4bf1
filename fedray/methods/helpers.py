"""Pieces that several methods' server (and client) halves share, kept apart from any one method.

A method file imports from here, never from another method's file; a method that is a variant of
another (FedProx of FedAvg, DGC of STC, FedBE of FedDF) subclasses it instead.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from fedray.messages import ClientUpdate
from fedray.weights import Weights, get_weights, is_update


def group_by_arch(updates: list[ClientUpdate]) -> dict[str, list[ClientUpdate]]:
    """The updates of each architecture, in client-id order (so aggregation is reproducible)."""
    groups: dict[str, list[ClientUpdate]] = defaultdict(list)
    for update in sorted(updates, key=lambda u: u.client_id):
        groups[update.arch].append(update)
    return dict(groups)


def sample_weights(updates: list[ClientUpdate], weighted: bool) -> list[float]:
    """Aggregation weights: |D_i| (McMahan et al.; thesis Alg. 10, 15) or 1 each (thesis Alg. 2)."""
    return [float(u.num_samples) if weighted else 1.0 for u in updates]


def mean_client_loss(updates: list[ClientUpdate]) -> dict[str, float]:
    """``train/loss``: the mean local training loss of the round's clients (adversaries report nan)."""
    losses = [u.metrics["loss"] for u in updates if not np.isnan(u.metrics.get("loss", np.nan))]
    return {"train/loss": float(np.mean(losses))} if losses else {}


def initial_model(build_model: Callable[[str], torch.nn.Module], arch: str, seed: int) -> Weights:
    """theta^0 of ``arch``: the same seeded initialisation on the server and on every client."""
    torch.manual_seed(seed)
    return get_weights(build_model(arch))


def model_crc(weights: Weights) -> int:
    """CRC32 of a model's floating tensors, to check that a client's copy matches the server's."""
    crc = 0
    for name in sorted(weights):
        if is_update(weights[name]):
            crc = zlib.crc32(np.ascontiguousarray(weights[name]).tobytes(), crc)
    return crc


class OutOfSync(RuntimeError):
    """A client's copy of the model differs from the server's after the download."""


@dataclass(frozen=True)
class ModelCheck:
    """Task option: the CRC32 (``model_crc``) the client's model must have once its download is applied."""

    crc: int

    def verify(self, weights: Weights) -> None:
        if model_crc(weights) != self.crc:
            raise OutOfSync("model copy is out of sync with the server")


class CatchUpCache:
    """What the server remembers for clients that skip rounds (thesis section 4.2.2).

    Per architecture, the downstream updates of the last ``keep`` rounds, and per client the round
    whose model it holds (0: the initial model). A returning client downloads the updates it missed
    when they are all still cached (and cheaper than the whole model), else the whole model.
    """

    def __init__(self, architectures: Iterable[str], keep: int):
        self.keep = keep
        self.updates: dict[str, dict[int, Any]] = {arch: {} for arch in architectures}
        self.synced: dict[int, int] = {}

    def last_synced(self, client_id: int) -> int:
        return self.synced.get(client_id, 0)

    def missed(self, client_id: int, round: int) -> range:
        """The rounds whose downstream update the client has not applied before ``round``."""
        return range(self.last_synced(client_id) + 1, round)

    def cached(self, arch: str, rounds: range) -> Optional[list[Any]]:
        """The updates of ``rounds`` in order, or None when one of them is no longer cached."""
        if any(r not in self.updates[arch] for r in rounds):
            return None
        return [self.updates[arch][r] for r in rounds]

    def add(self, arch: str, round: int, update: Any) -> None:
        """Remember round ``round``'s downstream update; forget those older than ``keep`` rounds."""
        self.updates[arch][round] = update
        for stale in [r for r in self.updates[arch] if r <= round - self.keep]:
            del self.updates[arch][stale]

    def trained(self, client_ids: Iterable[int], round: int) -> None:
        """The clients trained in ``round`` from the model of round - 1, which is what they now hold."""
        for client_id in client_ids:
            self.synced[client_id] = round - 1
