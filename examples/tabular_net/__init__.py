"""A plain PyTorch model for tabular inputs, for ``federation.architectures: {tabular_net:TabularNet: 10}``."""

from .model import TabularNet

__all__ = ["TabularNet"]
