"""Model zoo: every model is a :class:`FedModel` split into ``features`` and ``head``.

Build models by name with :func:`create_model`; :data:`MODELS` maps each name to its
constructor. See ``simple.py``, ``resnet.py`` and ``mobile.py`` for the papers.
"""

from __future__ import annotations

from typing import Any, Callable

from fedray.models.base import FedModel
from fedray.models.registry import MODELS, create_model, model_names


def model_builder(options: dict[str, dict[str, Any]], input_shape: tuple[int, ...],
                  num_classes: int) -> Callable[[str], FedModel]:
    """``arch -> new model`` for a data shape, with each architecture's options
    (``federation.model_options``); the server and every client host build their models with it."""

    def build(arch: str) -> FedModel:
        return create_model(arch, tuple(input_shape), num_classes, **options.get(arch, {}))

    return build


__all__ = ["FedModel", "MODELS", "create_model", "model_builder", "model_names"]
