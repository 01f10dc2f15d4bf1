"""Without torchvision (the main, CPU-only environment): what needs it is refused in one line. These
tests run in the main leg only; the vision leg (``-m vision``) deselects them."""

import importlib.util

import pytest

from fedray.config import ConfigError, build_config
from fedray.data import load_dataset
from fedray.models import create_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed")


def test_torchvision_augmentations_are_a_config_error():
    with pytest.raises(ConfigError) as caught:
        build_config({"pretrain": {"augment": "torchvision"}})
    assert str(caught.value) == ("bad config value pretrain.augment = 'torchvision': torchvision is not installed: "
                                 "install fedray's vision extra (bash scripts/setup/vision.sh, docs/vision.md), "
                                 "or use pretrain.augment: fedray")


def test_torchvision_models_and_data_sets_are_a_config_error():
    with pytest.raises(ConfigError, match="^bad config value data.dataset = 'torchvision.datasets:CIFAR10': "
                                          "no module named 'torchvision'"):
        load_dataset("torchvision.datasets:CIFAR10")
    with pytest.raises(ConfigError, match="no module named 'torchvision'"):
        create_model("torchvision.models:resnet18", (1, 28, 28), 10)


def test_torchvision_views_called_directly_are_a_config_error():
    import torch

    from fedray.pretrain import augment_torchvision

    with pytest.raises(ConfigError, match=r"^pretrain.augment = torchvision, but torchvision cannot be imported "
                                          r"\(ModuleNotFoundError: No module named 'torchvision'\); install"):
        augment_torchvision(torch.zeros(2, 3, 8, 8), torch.Generator())
