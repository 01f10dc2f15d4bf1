"""The in-memory form of a data set and the errors raised while finding or reading one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are not under the data root.

    The message is one line: which data set, what was looked for where, and what to put where.
    """


class DatasetFormatError(ValueError):
    """A data set's file exists but is corrupt, truncated or of the wrong format (one-line message)."""


@dataclass
class DatasetBundle:
    """A whole data set as arrays, ready for partitioning and training.

    Attributes:
        name: Registry name, e.g. ``"fashion_mnist"``.
        train_x: Training inputs, float32, shape ``(N, *input_shape)``, normalised.
        train_y: Training labels, int64, shape ``(N,)``; ``-1`` marks unlabelled samples.
        test_x: Test inputs, float32, shape ``(N_test, *input_shape)``.
        test_y: Test labels, int64, shape ``(N_test,)``.
        num_classes: Number of classes.
        input_shape: Shape of one input, e.g. ``(1, 28, 28)``.
        client_split: A natural per-client split of the train indices, only for data sets that
            come federated (e.g. ``synthetic``); ``None`` otherwise.
        classes: Class names, if known.
        aux_x: Unlabelled auxiliary inputs for distillation (``fedray.data.auxiliary``), or ``None``.
        negatives_x: The part of the auxiliary inputs set apart as FedAUX's negative set D^-
            (``aux.negatives``), disjoint from ``aux_x``, or ``None``.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    client_split: list[np.ndarray] | None = None
    classes: list[str] | None = None
    aux_x: np.ndarray | None = None
    negatives_x: np.ndarray | None = None

    def __post_init__(self) -> None:
        for part, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if len(x) != len(y):
                raise ValueError(f"{self.name}: {part}_x has {len(x)} samples but {part}_y has {len(y)}")
            if tuple(x.shape[1:]) != tuple(self.input_shape):
                raise ValueError(f"{self.name}: {part}_x has shape {x.shape}, expected (N, *{self.input_shape})")
