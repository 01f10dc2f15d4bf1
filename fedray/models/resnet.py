"""CIFAR-style ResNet-8.

He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, §4.2 (the
6n+2 CIFAR family with n = 1), in the form used by Lin et al., "Ensemble
Distillation for Robust Model Fusion in Federated Learning" (FedDF), NeurIPS 2020,
and Sattler et al., "FedAUX", IEEE TNNLS 2021: 1x1 conv + BN shortcuts where the
shape changes, and a global average pool, so any input of at least 1x1 works.
"""

from __future__ import annotations

import torch
from torch import nn

from fedray.models.base import FedModel


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> nn.Sequential:
    """Bias-free convolution with 'same' padding followed by batch norm."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
    )


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity or 1x1 conv-BN shortcut (He et al., 2016)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = _conv_bn(c_in, c_out, 3, stride)
        self.conv2 = _conv_bn(c_out, c_out, 3)
        reshape = stride != 1 or c_in != c_out
        self.shortcut = _conv_bn(c_in, c_out, 1, stride) if reshape else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(torch.relu(self.conv1(x)))
        return torch.relu(out + self.shortcut(x))


class ResNet8(FedModel):
    """ResNet-8: conv 16, stages of one BasicBlock (16, 32/2, 64/2), global pool, fc.

    78,042 parameters on (3, 32, 32) with 10 classes; takes images (C, H, W) of any
    size H, W >= 1. Convolutions get He-normal (fan-out) initialisation as in FedDF.
    The features are the pooled 64-d vector.
    """

    name = "resnet8"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes)
        body = nn.Sequential(
            _conv_bn(self.input_shape[0], 16, 3), nn.ReLU(),
            BasicBlock(16, 16), BasicBlock(16, 32, stride=2), BasicBlock(32, 64, stride=2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.set_body(body, 64)
        for module in self.body.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
