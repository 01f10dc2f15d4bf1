"""MobileNetV2 and ShuffleNetV2 x1.0 adapted to small (CIFAR-sized) images.

- Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018.
- Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture
  Design", ECCV 2018.

Both follow torchvision's layouts (same parameter counts for the same input
channels and classes) and are written in plain torch. The small-image
adaptation is the one of common CIFAR ports: MobileNetV2 uses stride 1 in the
stem and in the first strided stage (24 channels); ShuffleNetV2 uses stride 1 in
the stem and drops the stem max-pool. Either network downsamples by 8 in total,
and a global average pool makes any input of at least 1x1 work.
"""

from __future__ import annotations

import torch
from torch import nn

from fedray.models.base import FedModel

# (expansion t, channels c, repeats n, first stride s) per stage, as in Sandler et al.,
# Table 2, with the 24-channel stage's stride set to 1 for small images.
_MOBILENETV2_STAGES = (
    (1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Rounds a channel count to a multiple of ``divisor``, losing at most 10% (torchvision's rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(c_in: int, c_out: int, kernel: int = 1, stride: int = 1, groups: int = 1, act: type | None = None):
    """Bias-free convolution with 'same' padding, batch norm and an optional activation."""
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    return nn.Sequential(*layers, *([act(inplace=True)] if act else []))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, linear 1x1 project, residual if shapes match."""

    def __init__(self, c_in: int, c_out: int, stride: int, expansion: int):
        super().__init__()
        hidden = round(c_in * expansion)
        expand = [_conv_bn(c_in, hidden, act=nn.ReLU6)] if expansion != 1 else []
        self.conv = nn.Sequential(
            *expand,
            _conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            _conv_bn(hidden, c_out),
        )
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(FedModel):
    """MobileNetV2 for small images (stride 1 in the stem and the 24-channel stage).

    2,236,682 parameters on (3, 32, 32) with 10 classes at ``width_mult=1``, as
    torchvision's ``mobilenet_v2(num_classes=10)``; the classifier has no dropout,
    as in CIFAR ports. Initialisation follows torchvision. Takes images (C, H, W),
    any C and H, W >= 1. The features are the globally pooled 1280-d vector.

    Args:
        width_mult: Multiplier of every layer's channel count.
    """

    name = "mobilenetv2"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width_mult: float = 1.0):
        super().__init__(input_shape, num_classes)
        if isinstance(width_mult, bool) or not isinstance(width_mult, (int, float)) or width_mult <= 0:
            raise ValueError(f"model 'mobilenetv2' needs width_mult > 0, got {width_mult!r}")
        channels = _make_divisible(32 * width_mult)
        layers = [_conv_bn(self.input_shape[0], channels, 3, act=nn.ReLU6)]
        for expansion, c, repeats, stride in _MOBILENETV2_STAGES:
            c_out = _make_divisible(c * width_mult)
            for i in range(repeats):
                layers.append(InvertedResidual(channels, c_out, stride if i == 0 else 1, expansion))
                channels = c_out
        feature_dim = _make_divisible(1280 * max(1.0, width_mult))
        layers += [_conv_bn(channels, feature_dim, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.set_body(nn.Sequential(*layers), feature_dim)
        self._init_weights()

    def _init_weights(self) -> None:
        """torchvision's initialisation: He-normal (fan-out) convs, N(0, 0.01) classifier."""
        for module in self.body.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
        nn.init.normal_(self.classifier.weight, 0, 0.01)
        nn.init.zeros_(self.classifier.bias)


def _channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleaves the channels of ``groups`` equal groups (Ma et al., 2018, Fig. 3)."""
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit: channel split (stride 1) or two strided branches (stride 2), then shuffle."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        half = c_out // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(
                _conv_bn(c_in, c_in, 3, stride, groups=c_in), _conv_bn(c_in, half, act=nn.ReLU)
            )
        self.branch2 = nn.Sequential(
            _conv_bn(c_in if stride > 1 else half, half, act=nn.ReLU),
            _conv_bn(half, half, 3, stride, groups=half),
            _conv_bn(half, half, act=nn.ReLU),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            kept, x = x.chunk(2, dim=1)
        else:
            kept = self.branch1(x)
        return _channel_shuffle(torch.cat((kept, self.branch2(x)), dim=1), 2)


class ShuffleNetV2(FedModel):
    """ShuffleNetV2 x1.0 for small images (stride-1 stem, no stem max-pool).

    Stages of 4, 8 and 4 units with 116, 232 and 464 channels, then a 1x1 conv to
    1024. 1,263,854 parameters on (3, 32, 32) with 10 classes, as torchvision's
    ``shufflenet_v2_x1_0(num_classes=10)``. torch's default initialisation, as in
    torchvision. Takes images (C, H, W), any C and H, W >= 1. The features are the
    globally pooled 1024-d vector.
    """

    name = "shufflenetv2"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes)
        layers = [_conv_bn(self.input_shape[0], 24, 3, act=nn.ReLU)]
        channels = 24
        for repeats, c_out in ((4, 116), (8, 232), (4, 464)):
            layers.append(ShuffleUnit(channels, c_out, stride=2))
            layers += [ShuffleUnit(c_out, c_out, stride=1) for _ in range(repeats - 1)]
            channels = c_out
        layers += [_conv_bn(channels, 1024, act=nn.ReLU), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.set_body(nn.Sequential(*layers), 1024)
