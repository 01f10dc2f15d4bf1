"""CIFAR-style ResNet-8.

He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, §4.2 (the
6n+2 CIFAR family with n = 1), in the form used by Lin et al., "Ensemble
Distillation for Robust Model Fusion in Federated Learning" (FedDF), NeurIPS 2020;
with ``widths`` the wider four-stage net of Sattler et al., "FedAUX", IEEE TNNLS
2021. 1x1 conv + BN shortcuts where the shape changes, and a global average pool,
so any input of at least 1x1 works.
"""

from __future__ import annotations

from typing import Sequence

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
    """ResNet-8: a 3x3 conv stem, one BasicBlock a stage (the first at stride 1, the others at stride 2),
    global pool, fc.

    ``widths`` are the stages' channels, the stem's being the first. The default (16, 32, 64) is the
    CIFAR net of He et al. (6n+2, n = 1): 78,042 parameters on (3, 32, 32) with 10 classes, the form of
    FedDF's code. FedAUX's ResNet-8 (its digest, section 5) is torchvision's ResNet with one BasicBlock
    a stage, a 3x3 stride-1 stem and no max-pool: ``widths: [64, 128, 256, 512]``, 4.9M parameters.
    Takes images (C, H, W) of any size H, W >= 1. Convolutions get He-normal (fan-out) initialisation
    as in FedDF. The features are the pooled vector of the last stage's width.
    """

    name = "resnet8"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, widths: Sequence[int] = (16, 32, 64)):
        super().__init__(input_shape, num_classes)
        widths = [int(w) for w in widths]
        if not widths or min(widths) < 1:
            raise ValueError(f"resnet8's widths are the stages' channels, each at least 1, got {widths}")
        blocks = [BasicBlock(widths[max(i - 1, 0)], w, stride=1 if i == 0 else 2) for i, w in enumerate(widths)]
        body = nn.Sequential(
            _conv_bn(self.input_shape[0], widths[0], 3), nn.ReLU(), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.set_body(body, widths[-1])
        for module in self.body.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
