"""A user's model, named by import path, as a :class:`FedModel`.

fedray's methods read a model as ``head(features(x))`` (distillation on features, shared heads,
FedGen's generator), so a model of the user's is brought to that form:

- a ``FedModel`` subclass is built as fedray's own are, ``Model(input_shape, num_classes, **options)``;
- any other ``torch.nn.Module`` class or function is called with ``num_classes=`` (and
  ``input_shape=`` when its signature names it) and the options, as torchvision's are
  (``torchvision.models:resnet18``). Its last ``nn.Linear`` with ``num_classes`` outputs becomes the
  head and the rest, with that layer taken out, the feature extractor; a first ``nn.Conv2d`` made for
  other channels than the data's (torchvision's 3 on grey images) is made anew for the data's.

The split is checked once per process and model: ``head(features(x))`` must give the wrapped
module's own output on a batch, so a model whose last linear layer is not its last step is refused
with a line saying to write it as a ``FedModel``.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch import nn

from fedray.models.base import FedModel

_checked: set[str] = set()  # models whose split was checked in this process


class WrappedModel(FedModel):
    """``head(features(x))`` of a user's ``nn.Module``: ``body`` is the module with its head layer
    replaced by the identity, ``classifier`` that layer."""

    def __init__(self, module: nn.Module, head_path: str, name: str, input_shape: tuple[int, ...],
                 num_classes: int):
        super().__init__(input_shape, num_classes)
        self.name = name
        head = module.get_submodule(head_path)
        _replace(module, head_path, nn.Identity())
        self.body = module
        self.classifier = head
        self.feature_dim = head.in_features

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.body(x), 1)


def build_wrapped(factory: Callable[..., Any], name: str, input_shape: tuple[int, ...], num_classes: int,
                  **options: Any) -> FedModel:
    """The model ``factory`` (a user's class or function) builds, as a FedModel (module docstring).

    Raises:
        ValueError: one line, when the factory fails, returns no ``nn.Module``, or its model has no
            head to split off.
    """
    if isinstance(factory, type) and issubclass(factory, FedModel):
        return factory(tuple(input_shape), num_classes, **options)
    params = inspect.signature(factory).parameters
    shape = {"input_shape": tuple(input_shape)} if "input_shape" in params else {}
    module = factory(num_classes=num_classes, **shape, **options)
    if isinstance(module, FedModel):
        return module
    if not isinstance(module, nn.Module):
        raise ValueError(f"model {name!r} returned {type(module).__name__}, not a torch.nn.Module")
    if len(input_shape) == 3:
        _fit_channels(module, input_shape[0])
    head_path = _head(module, num_classes, name)
    if name in _checked:
        return WrappedModel(module, head_path, name, input_shape, num_classes)
    was_training = module.training
    module.eval()
    x = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))  # not torch's global RNG
    with torch.no_grad():
        whole = module(x)
        model = WrappedModel(module, head_path, name, input_shape, num_classes)
        split = model(x)
    model.train(was_training)
    if not isinstance(whole, torch.Tensor) or whole.shape != split.shape or not torch.equal(whole, split):
        raise ValueError(f"model {name!r}: its last nn.Linear ({head_path}) is not its last step, so fedray cannot "
                         f"split it into features and head; write it as a fedray.models.FedModel")
    _checked.add(name)
    return model


def _head(module: nn.Module, num_classes: int, name: str) -> str:
    """The qualified name of the module's last ``nn.Linear`` with ``num_classes`` outputs."""
    heads = [path for path, m in module.named_modules() if isinstance(m, nn.Linear) and m.out_features == num_classes]
    if not heads:
        raise ValueError(f"model {name!r} has no nn.Linear layer with num_classes = {num_classes} outputs to use "
                         f"as its head; write it as a fedray.models.FedModel")
    return heads[-1]


def _fit_channels(module: nn.Module, channels: int) -> None:
    """Make the first Conv2d take ``channels`` input channels where it was made for others."""
    first = next(((p, m) for p, m in module.named_modules() if isinstance(m, nn.Conv2d)), None)
    if first is None or first[1].in_channels == channels:
        return
    path, conv = first
    if conv.groups != 1:
        raise ValueError(f"the first convolution {path} is grouped; it cannot be fitted to {channels} channels")
    _replace(module, path, nn.Conv2d(channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                                     padding=conv.padding, dilation=conv.dilation, bias=conv.bias is not None,
                                     padding_mode=conv.padding_mode))


def _replace(module: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, child = path.rpartition(".")
    setattr(module.get_submodule(parent) if parent else module, child, new)
