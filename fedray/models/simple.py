"""Small models of the federated-learning literature.

- ``logreg``: multinomial logistic regression (used on MNIST in Sattler et al., 2019).
- ``mlp``: the 2NN of McMahan et al., "Communication-Efficient Learning of Deep
  Networks from Decentralized Data", AISTATS 2017 (two hidden layers of 200).
- ``lenet5``: LeNet5-Caffe, the Caffe variant of LeCun et al., "Gradient-Based
  Learning Applied to Document Recognition", 1998; used in Sattler, "Communication-
  Efficient Federated and Distributed Learning", PhD thesis, TU Berlin, 2021, ch. 3.
- ``cnn``: the 2-conv CNN of McMahan et al., 2017.
- ``vgg11s``: VGG11* of Sattler et al., "Robust and Communication-Efficient
  Federated Learning from Non-IID Data", IEEE TNNLS 2019 (thesis §4.3).
- ``lstm``: the 2x128 many-to-one LSTM of the same paper (thesis §4.3).

Small inputs: ``lenet5`` switches both convolutions to padding 2 when a valid
(unpadded) chain would not fit, i.e. when min(H, W) < 16; ``vgg11s`` pools with
``ceil_mode=True`` (a 1x1 map stays 1x1, odd sizes round up) and ends with a global
average pool to 1x1. At 28x28 and 32x32 the published layouts are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from fedray.models.base import FedModel, flat_dim

_VGG11S_LAYOUT = (32, "M", 64, "M", 128, 128, "M", 128, 128, "M", 128, 128, "M")


def _positive_ints(model: str, key: str, values: Sequence[int]) -> tuple[int, ...]:
    """Returns ``values`` as a tuple, or raises ValueError if any is not a positive int."""
    values = tuple(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ValueError(f"model '{model}' needs {key} to be positive ints, got {values!r}")
    return values


class LogReg(FedModel):
    """Multinomial logistic regression: flatten, then one linear layer.

    Takes inputs of any shape. The features are the flattened input, so
    ``feature_dim = prod(input_shape)``.
    """

    name = "logreg"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes)
        self.set_body(nn.Flatten(), flat_dim(self.input_shape))


class MLP(FedModel):
    """Fully connected net with ReLU hidden layers (the "2NN" of McMahan et al., 2017).

    Takes inputs of any shape. The features are the activations of the last
    hidden layer (the flattened input if ``hidden`` is empty).

    Args:
        hidden: Widths of the hidden layers.
    """

    name = "mlp"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: Sequence[int] = (200, 200)):
        super().__init__(input_shape, num_classes)
        widths = (flat_dim(self.input_shape), *_positive_ints(self.name, "hidden", hidden))
        layers: list[nn.Module] = [nn.Flatten()]
        for d_in, d_out in zip(widths, widths[1:]):
            layers += [nn.Linear(d_in, d_out), nn.ReLU()]
        self.set_body(nn.Sequential(*layers), widths[-1])


def _two_conv_body(
    shape: tuple[int, ...], widths: tuple[int, int], fc: int, pad: int, conv_relu: bool
) -> nn.Sequential:
    """Body of LeNet5 and the FedAvg CNN: two 5x5 conv(-ReLU)-max-pool(2) blocks, flatten, fc + ReLU.

    Args:
        shape: Input image shape (C, H, W).
        widths: Output channels of the two convolutions.
        fc: Width of the fc layer (the feature dimension).
        pad: Padding of both convolutions.
        conv_relu: Whether a ReLU follows each convolution.
    """
    c, h, w = shape

    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 5, padding=pad), *([nn.ReLU()] if conv_relu else []), nn.MaxPool2d(2)]

    def side(n: int) -> int:
        return ((n + 2 * pad - 4) // 2 + 2 * pad - 4) // 2

    flat = widths[1] * side(h) * side(w)
    return nn.Sequential(*block(c, widths[0]), *block(*widths), nn.Flatten(), nn.Linear(flat, fc), nn.ReLU())


class LeNet5(FedModel):
    """LeNet5-Caffe: conv 20@5x5, pool, conv 50@5x5, pool, fc 500, ReLU, fc.

    431,080 parameters on (1, 28, 28) with 10 classes. The convolutions are
    unpadded as in Caffe; for inputs smaller than 16x16 they use padding 2, so
    that images (C, H, W) down to 4x4 work. The features are the 500 fc activations (``hidden``).
    """

    name = "lenet5"
    min_side = 4

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 500):
        super().__init__(input_shape, num_classes)
        _positive_ints(self.name, "hidden", (hidden,))
        pad = 0 if min(self.input_shape[1:]) >= 16 else 2
        self.set_body(_two_conv_body(self.input_shape, (20, 50), hidden, pad, conv_relu=False), hidden)


class FedAvgCNN(FedModel):
    """The CNN of McMahan et al., 2017: two 5x5 conv-ReLU-pool blocks (32, 64), fc 512, fc.

    1,663,370 parameters on (1, 28, 28) with 10 classes. Takes images (C, H, W)
    with H, W >= 4; the flatten size is ``64 * (H // 4) * (W // 4)``. The features
    are the 512 fc activations (``hidden``: another width, e.g. a latent size shared with other
    architectures for FedGen).
    """

    name = "cnn"
    min_side = 4

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 512):
        super().__init__(input_shape, num_classes)
        _positive_ints(self.name, "hidden", (hidden,))
        self.set_body(_two_conv_body(self.input_shape, (32, 64), hidden, pad=2, conv_relu=True), hidden)


class FedGenCNN(FedModel):
    """FedGen's MNIST CNN (the authors' code, digest B.1): conv 6@3x3 stride 2 - BN - ReLU, conv 16@3x3
    stride 2 - BN - ReLU, flatten, a linear layer to the latent z (32, ``latent``), then the linear
    predictor. No activation between the two linear layers: z is what FedGen's generator produces.
    The authors' convolutions have a bias, which BatchNorm cancels; here they have none.

    26,412 parameters on (1, 28, 28) with 10 classes (784 -> 32 -> 10). Images (C, H, W) with
    H, W >= 1.
    """

    name = "fedgen_cnn"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, latent: int = 32):
        super().__init__(input_shape, num_classes)
        _positive_ints(self.name, "latent", (latent,))
        c, h, w = self.input_shape

        def side(n: int) -> int:
            return ((n - 1) // 2 + 1 - 1) // 2 + 1  # two stride-2 convs, kernel 3, padding 1

        convs = [nn.Conv2d(c, 6, 3, stride=2, padding=1), nn.Conv2d(6, 16, 3, stride=2, padding=1)]
        for conv in convs:
            # No bias before BatchNorm: BN subtracts the batch mean, so the bias has a true gradient of
            # zero and moves only by rounding noise (about 4e-9), which Adam's normalisation turns
            # into steps of up to lr: two ways of summing the same sums (cohorts and one client after
            # another, or two CPUs) then end 1e-2 apart. It is drawn and dropped, so the other layers'
            # initial weights are those the recorded reproductions started from.
            conv.bias = None
        layers = [convs[0], nn.BatchNorm2d(6), nn.ReLU(), convs[1], nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                  nn.Linear(16 * side(h) * side(w), latent)]
        self.set_body(nn.Sequential(*layers), latent)


class VGG11s(FedModel):
    """VGG11* (Sattler et al., 2019): VGG-A layout with widths 32-128, FC 128-128-128, no BN.

    865,482 parameters on (3, 32, 32) with 10 classes. Max-pools use
    ``ceil_mode=True`` and a global average pool precedes the FC stack, so every
    image size (C, H, W), H, W >= 1, gives a 128-d vector; both are no-ops at 32x32.
    The features are the activations of the second 128-unit FC layer.
    """

    name = "vgg11s"
    min_side = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes)
        channels = self.input_shape[0]
        layers: list[nn.Module] = []
        for item in _VGG11S_LAYOUT:
            if item == "M":
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            else:
                layers += [nn.Conv2d(channels, item, 3, padding=1), nn.ReLU()]
                channels = item
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        layers += [nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU()]
        self.set_body(nn.Sequential(*layers), 128)


class LSTMClassifier(FedModel):
    """Many-to-one stacked LSTM (2x128 in Sattler et al., 2019) with a linear head.

    An image (C, H, W) is read as H steps of C*W features (row by row), a
    sequence (T, F) as T steps of F features, a flat (D,) vector as D steps of one
    feature. The features are the top layer's last hidden state. 214,282
    parameters on (1, 28, 28) with 10 classes.

    Args:
        hidden_size: Hidden units per LSTM layer.
        num_layers: Number of stacked LSTM layers.
    """

    name = "lstm"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden_size: int = 128, num_layers: int = 2):
        super().__init__(input_shape, num_classes)
        if len(self.input_shape) > 3:
            raise ValueError(f"model 'lstm' needs an input of shape (D,), (T, F) or (C, H, W), got {self.input_shape}")
        _positive_ints(self.name, "hidden_size and num_layers", (hidden_size, num_layers))
        step_dim = {1: 1, 2: self.input_shape[-1], 3: self.input_shape[0] * self.input_shape[-1]}
        self.lstm = nn.LSTM(step_dim[len(self.input_shape)], hidden_size, num_layers, batch_first=True)
        self.feature_dim = hidden_size
        self.classifier = nn.Linear(hidden_size, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(-1)
        elif x.dim() == 4:
            x = x.transpose(1, 2).flatten(2)
        if self.vmapped:
            return self._unrolled(x)
        _, (h, _) = self.lstm(x)
        return h[-1]

    def _unrolled(self, x: torch.Tensor) -> torch.Tensor:
        """The top layer's last hidden state, step by step: ``nn.LSTM``'s equations (gates i, f, g,
        o in its weight layout) in elementary ops, which ``vmap`` can batch over stacked weights."""
        lstm, h = self.lstm, x
        for layer in range(lstm.num_layers):
            w_hh, b_hh = getattr(lstm, f"weight_hh_l{layer}"), getattr(lstm, f"bias_hh_l{layer}")
            inputs = nn.functional.linear(h, getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"bias_ih_l{layer}"))
            h = c = x.new_zeros(x.shape[0], lstm.hidden_size)
            outputs = []
            for t in range(x.shape[1]):
                i, f, g, o = (inputs[:, t] + nn.functional.linear(h, w_hh, b_hh)).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            h = torch.stack(outputs, 1)
        return h[:, -1]
