"""Base class of every fedray model and the input-shape checks the models share.

A :class:`FedModel` is split into a feature extractor and a head, so that
methods that treat the two parts differently (personalised heads, feature
distillation, prototype methods) work on every architecture in the zoo.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class FedModel(nn.Module):
    """A classifier written as ``head(features(x))``.

    Most subclasses build a feature extractor and hand it to :meth:`set_body`, which also
    adds a linear ``self.classifier``; the default :meth:`features` applies ``self.body``
    and the default :meth:`head` applies ``self.classifier``. A subclass may override
    either instead (then it sets ``feature_dim`` and what its head needs itself), but
    not :meth:`forward`. Parameters are initialised with torch's global RNG, so
    ``torch.manual_seed(s)`` before construction makes a model reproducible.

    Every model is built as ``Model(input_shape, num_classes, **options)`` (see
    :meth:`__init__`); a subclass's docstring lists only its own options.

    Attributes:
        name: Registry name of the architecture, e.g. ``"cnn"``.
        min_side: ``None`` for a model that takes any input shape; otherwise the model
            takes images ``(C, H, W)`` with ``H, W >= min_side``, which ``__init__`` checks.
        input_shape: Shape of one sample, without the batch dimension.
        num_classes: Number of output logits.
        feature_dim: Length ``D`` of the per-sample feature vector.
        vmapped: True while the forward pass runs under ``torch.func.vmap`` over stacked weights
            (``fedray.cohort``); a layer whose kernel ``vmap`` cannot batch then takes another form.
    """

    name: str = ""
    min_side: int | None = None
    feature_dim: int
    vmapped: bool = False  # set while a cohort trains under vmap (``fedray.cohort.cohort_mode``)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            raise TypeError(f"{cls.__name__} must not override forward; implement features and head")

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        """Checks and stores the input shape and class count.

        Args:
            input_shape: Shape of one sample, without the batch dimension.
            num_classes: Number of classes, at least 2.

        Raises:
            ValueError: If the shape has a non-positive entry, num_classes < 2, or the model
                takes images (``min_side`` set) and the shape is not one it can take.
        """
        super().__init__()
        shape = tuple(input_shape)
        if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"model '{self.name}' needs an input shape of positive ints, got {shape}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"model '{self.name}' needs num_classes >= 2, got {num_classes!r}")
        if self.min_side is not None:
            check_image(self.name, shape, self.min_side)
        self.input_shape = shape
        self.num_classes = num_classes

    def set_body(self, body: nn.Module, feature_dim: int) -> None:
        """Sets the feature extractor and a linear classifier ``feature_dim -> num_classes`` after it.

        The classifier's parameters are created here, after the body's, so a model that calls this
        once it has built its body initialises them in that order.

        Args:
            body: Module mapping a batch ``(B, *input_shape)`` to features ``(B, feature_dim)``.
            feature_dim: Length of the body's output per sample.
        """
        self.body = body
        self.feature_dim = feature_dim
        self.classifier = nn.Linear(feature_dim, self.num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Maps a batch of inputs ``(B, *input_shape)`` to features ``(B, feature_dim)``: ``self.body(x)``."""
        return self.body(x)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """Maps features ``(B, feature_dim)`` to logits ``(B, num_classes)``."""
        return self.classifier(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns the logits ``head(features(x))``."""
        return self.head(self.features(x))


def flat_dim(shape: tuple[int, ...]) -> int:
    """Number of entries in one sample of the given shape."""
    return math.prod(shape)


def check_image(name: str, shape: tuple[int, ...], min_hw: int = 1) -> tuple[int, int, int]:
    """Checks that ``shape`` is an image ``(C, H, W)`` with ``H, W >= min_hw``.

    Args:
        name: Model name used in the error message.
        shape: Shape of one sample.
        min_hw: Smallest height and width the model can take.

    Returns:
        The triple ``(C, H, W)``.

    Raises:
        ValueError: One line naming the model, the shape and what it needs.
    """
    if len(shape) != 3 or min(shape[1:]) < min_hw:
        raise ValueError(
            f"model '{name}' needs an image input (C, H, W) with H, W >= {min_hw}, got shape {tuple(shape)}"
        )
    return shape[0], shape[1], shape[2]
