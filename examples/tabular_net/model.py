"""TabularNet: a multilayer perceptron for rows of numeric features.

A plain ``torch.nn.Module``, deliberately not a ``fedray.models.FedModel``: fedray builds it with
``num_classes=`` and ``input_shape=`` (its signature names both) plus ``federation.model_options``
(here ``hidden``), and wraps it itself. The last ``nn.Linear`` with ``num_classes`` outputs
(``out``) becomes the model's head and the layers before it its feature extractor, which is what
fedray's methods that share heads or distil features use.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class TabularNet(nn.Module):
    """input -> Linear(hidden) -> ReLU -> Linear(hidden) -> ReLU -> Linear(num_classes)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 64):
        super().__init__()
        features = math.prod(input_shape)  # a row of 30 features has input_shape (30,)
        self.hidden = nn.Sequential(
            nn.Flatten(),
            nn.Linear(features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.hidden(x))
