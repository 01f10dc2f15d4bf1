"""Model zoo: every model is a :class:`FedModel` split into ``features`` and ``head``.

Build models by name with :func:`create_model`; :data:`MODELS` maps each name to its
constructor. See ``simple.py``, ``resnet.py`` and ``mobile.py`` for the papers.
"""

from fedray.models.base import FedModel
from fedray.models.registry import MODELS, create_model, model_names

__all__ = ["FedModel", "MODELS", "create_model", "model_names"]
