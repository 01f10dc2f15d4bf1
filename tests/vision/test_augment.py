"""``pretrain.augment: torchvision``: SimCLR's views made with ``torchvision.transforms.v2``, and a
FedAUX-style pre-training (SimCLR on auxiliary images, in the server's way) with them."""

import numpy as np
import pytest

pytest.importorskip("torchvision")

import torch  # noqa: E402

from fedray.config import PretrainConfig, build_config  # noqa: E402
from fedray.models import create_model  # noqa: E402
from fedray.pretrain import augment, augment_torchvision, pretrained_weights  # noqa: E402

pytestmark = pytest.mark.vision


def images(n=16, c=3, side=16, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, c, side, side)).astype(np.float32))


def test_views_keep_shape_and_range_and_are_seeded_per_image():
    x = images(n=32)
    state = torch.get_rng_state()
    a = augment_torchvision(x, torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), state)  # torch's global generator untouched
    assert a.shape == x.shape and a.dtype == torch.float32
    assert a.min() >= x.min() - 1e-5 and a.max() <= x.max() + 1e-5  # the batch's range
    assert torch.equal(a, augment_torchvision(x, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, augment_torchvision(x, torch.Generator().manual_seed(2)))
    again = augment_torchvision(x.repeat(2, 1, 1, 1), torch.Generator().manual_seed(1))
    assert not torch.allclose(again[:32], again[32:], atol=1e-3)  # each image its own crop, not the batch's


def test_without_crop_flip_or_jitter_a_view_is_the_image():
    x = images(c=3)
    same = augment_torchvision(x, torch.Generator().manual_seed(1), min_crop=1.0, flip=False, jitter=0.0)
    torch.testing.assert_close(same, x, atol=1e-5, rtol=0)
    fedray = augment(x, torch.Generator().manual_seed(1), min_crop=1.0, flip=False, jitter=0.0)
    torch.testing.assert_close(same, fedray, atol=1e-5, rtol=0)


def test_grey_images_are_mirrored_or_kept_never_jittered_and_colour_ones_are_jittered():
    x = images(n=200, c=1)
    views = augment_torchvision(x, torch.Generator().manual_seed(3), min_crop=1.0, flip=True, jitter=5.0)
    mirrored = torch.tensor([torch.allclose(v, i.flip(-1), atol=1e-5) for v, i in zip(views, x)])
    kept = torch.tensor([torch.allclose(v, i, atol=1e-5) for v, i in zip(views, x)])
    assert (mirrored | kept).all() and 70 < int(mirrored.sum()) < 130
    colour = images(n=50, c=3)
    jittered = augment_torchvision(colour, torch.Generator().manual_seed(3), min_crop=1.0, flip=False, jitter=0.4)
    changed = torch.tensor([not torch.allclose(v, i, atol=1e-3) for v, i in zip(jittered, colour)])
    assert 30 <= int(changed.sum()) < 50  # probability 0.8 of a jitter
    with pytest.raises(ValueError, match="pre-training augments images"):
        augment_torchvision(torch.zeros(4, 10), torch.Generator())


def test_fedaux_style_pretraining_runs_with_torchvision_views(tmp_path):
    """As FedAUX's server does before round one: h_0 of each architecture pre-trained on the auxiliary
    images (here 64 colour 16x16 ones), cached by its settings, the classifier left as initialised."""
    config = build_config({"aux": {"size": 64}, "pretrain": {
        "epochs": 2, "batch_size": 32, "augment": "torchvision", "cache_dir": str(tmp_path)}})
    params = config.pretrain
    assert params.augment == "torchvision"
    aux = images(n=64, c=3).numpy()

    def build(arch):
        return create_model(arch, (3, 16, 16), 10)

    torch.manual_seed(0)
    initial = build("lenet5").state_dict()
    weights, info = pretrained_weights(build, "lenet5", aux, params, seed=0, device=torch.device("cpu"), key_extra={})
    assert not info["cached"] and len(info["loss"]) == 2 and all(np.isfinite(info["loss"]))
    changed = [k for k in initial if not np.array_equal(np.asarray(weights[k]), initial[k].numpy())]
    assert changed and not any(k.startswith("classifier.") for k in changed)
    again, info = pretrained_weights(build, "lenet5", aux, params, seed=0, device=torch.device("cpu"), key_extra={})
    assert info["cached"]
    own = PretrainConfig(**{**params.model_dump(), "augment": "fedray"})
    _, info = pretrained_weights(build, "lenet5", aux, own, seed=0, device=torch.device("cpu"), key_extra={})
    assert not info["cached"]  # the augmentations are part of the cache key
