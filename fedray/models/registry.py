"""Registry of the model zoo: names to constructors, and :func:`create_model`."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from fedray.models.base import FedModel
from fedray.models.mobile import MobileNetV2, ShuffleNetV2
from fedray.models.resnet import ResNet8
from fedray.models.wrap import build_wrapped
from fedray.plugins import is_import_path, load_model
from fedray.models.simple import MLP, FedAvgCNN, FedGenCNN, LeNet5, LogReg, LSTMClassifier, VGG11s

MODELS: dict[str, Callable[..., FedModel]] = {
    cls.name: cls
    for cls in (FedAvgCNN, FedGenCNN, LeNet5, LogReg, LSTMClassifier, MLP, MobileNetV2, ResNet8, ShuffleNetV2, VGG11s)
}


def model_names() -> list[str]:
    """Returns the registered model names, sorted."""
    return sorted(MODELS)


def model_options(name: str) -> list[str] | None:
    """Names of the keyword options model ``name`` takes beyond input_shape and num_classes; None for
    a model of the user's (an import path) that takes any keyword (``**kwargs``, as torchvision's do)."""
    if is_import_path(name):
        params = inspect.signature(load_model(name)).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return None
        return [p for p, v in params.items() if p not in ("self", "input_shape", "num_classes")
                and v.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params = inspect.signature(MODELS[name]).parameters
    return [p for p in params if p not in ("self", "input_shape", "num_classes")]


def create_model(name: str, input_shape: tuple[int, ...], num_classes: int, **kwargs) -> FedModel:
    """Builds a registered model, initialised from torch's global RNG.

    Args:
        name: Registry name, one of :func:`model_names`.
        input_shape: Shape of one sample without the batch dimension, e.g. (1, 28, 28) or (60,).
        num_classes: Number of classes, at least 2.
        **kwargs: Model options, e.g. ``hidden`` for ``mlp`` or ``width_mult`` for ``mobilenetv2``.

    Returns:
        The model, in training mode.

    Raises:
        ValueError: One line, for an unknown name, an unknown option, or an input
            shape or option value the model cannot take.
    """
    if is_import_path(name):
        return build_wrapped(load_model(name), name, tuple(input_shape), num_classes, **kwargs)
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(model_names())}")
    valid = model_options(name)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) for model {name!r}: {', '.join(unknown)}; valid options: {', '.join(valid) or 'none'}"
        )
    return MODELS[name](tuple(input_shape), num_classes, **kwargs)
