"""Registry, option checking, error messages and reproducibility of fedray.models."""

import pytest
import torch
from torch import nn

from fedray.models import MODELS, FedModel, create_model, model_names

ALL = ["cnn", "fedgen_cnn", "lenet5", "logreg", "lstm", "mlp", "mobilenetv2", "resnet8", "shufflenetv2", "vgg11s"]
CONV = ["cnn", "fedgen_cnn", "lenet5", "mobilenetv2", "resnet8", "shufflenetv2", "vgg11s"]


def test_model_names_are_sorted_registry_keys():
    assert model_names() == ALL
    assert sorted(MODELS) == ALL
    assert all(issubclass(MODELS[n], FedModel) and MODELS[n].name == n for n in ALL)


def test_unknown_model_lists_valid_names_on_one_line():
    with pytest.raises(ValueError) as err:
        create_model("foo", (1, 28, 28), 10)
    assert str(err.value) == f"unknown model 'foo'; valid models: {', '.join(ALL)}"


@pytest.mark.parametrize(
    "name, valid",
    [("cnn", "hidden"), ("logreg", "none"), ("mlp", "hidden"), ("mobilenetv2", "width_mult"), ("lstm", "hidden_size, num_layers")],
)
def test_unknown_option_names_it_and_lists_valid_ones(name, valid):
    with pytest.raises(ValueError) as err:
        create_model(name, (1, 28, 28), 10, depth=3, zeta=1)
    message = str(err.value)
    assert "\n" not in message and name in message
    assert "depth, zeta" in message and message.endswith(f"valid options: {valid}")


@pytest.mark.parametrize("name", CONV)
@pytest.mark.parametrize("shape", [(4,), (60,), (28, 28)])
def test_conv_model_rejects_non_image_input(name, shape):
    with pytest.raises(ValueError) as err:
        create_model(name, shape, 10)
    message = str(err.value)
    assert "\n" not in message
    assert f"'{name}'" in message and str(shape) in message and "(C, H, W)" in message


@pytest.mark.parametrize("name, shape", [("cnn", (1, 3, 28)), ("lenet5", (1, 28, 3)), ("lstm", (1, 2, 3, 4))])
def test_too_small_or_high_rank_input_is_rejected(name, shape):
    with pytest.raises(ValueError, match=f"'{name}'"):
        create_model(name, shape, 10)


@pytest.mark.parametrize("num_classes", [1, 0, 2.0, True])
def test_bad_num_classes_is_rejected(num_classes):
    with pytest.raises(ValueError, match="num_classes"):
        create_model("logreg", (4,), num_classes)


@pytest.mark.parametrize("name, kwargs", [("mlp", {"hidden": (200, 0)}), ("mobilenetv2", {"width_mult": -1.0})])
def test_bad_option_value_is_rejected(name, kwargs):
    with pytest.raises(ValueError, match=f"'{name}'"):
        create_model(name, (1, 8, 8), 10, **kwargs)


def test_options_change_the_model():
    assert create_model("mlp", (60,), 3, hidden=[16]).feature_dim == 16
    assert create_model("mlp", (60,), 3, hidden=()).feature_dim == 60
    assert create_model("lstm", (60,), 3, hidden_size=8, num_layers=1).lstm.num_layers == 1
    assert create_model("mobilenetv2", (3, 8, 8), 3, width_mult=0.5).body[0][0].out_channels == 16


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_state_dict(name):
    def build(seed):
        torch.manual_seed(seed)
        return create_model(name, (1, 8, 8), 10).state_dict()

    first, again, other = build(0), build(0), build(1)
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_subclass_may_not_override_forward():
    with pytest.raises(TypeError, match="forward"):

        class Bad(FedModel):
            def forward(self, x):
                return x


def test_subclass_head_defaults_to_classifier():
    class Tiny(FedModel):
        name = "tiny"

        def __init__(self):
            super().__init__((3,), 2)
            self.feature_dim = 3
            self.classifier = nn.Linear(3, 2)

        def features(self, x):
            return x * 2

    model, x = Tiny(), torch.ones(1, 3)
    assert torch.equal(model(x), model.classifier(x * 2))
