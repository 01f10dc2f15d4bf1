"""SimCLR pre-training: the loss by hand, the augmentations, that it learns on real digits, the cache."""

import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

import fedray.pretrain.simclr as simclr_module
from fedray.config import PretrainConfig
from fedray.data import load_dataset
from fedray.models import create_model
from fedray.pretrain import augment, nt_xent, pretrain_features, pretrained_weights


def test_nt_xent_by_hand():
    """N = 2 pairs of unit vectors at temperature 0.5: each anchor's loss is
    -log(exp(cos(pair)/t) / sum over the other three views of exp(cos/t))."""
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z2 = torch.tensor([[0.6, 0.8], [-0.8, 0.6]])  # cos(z1_0, z2_0) = 0.6, cos(z1_1, z2_1) = 0.6
    t = 0.5
    views = torch.cat([z1, z2])
    cos = views @ views.T
    by_hand = 0.0
    for a, b in ((0, 2), (1, 3), (2, 0), (3, 1)):
        others = [math.exp(cos[a, k] / t) for k in range(4) if k != a]
        by_hand += -math.log(math.exp(cos[a, b] / t) / sum(others))
    assert nt_xent(z1, z2, t).item() == pytest.approx(by_hand / 4, rel=1e-6)
    shuffled = nt_xent(z1, z2.flip(0), t)  # pairs no longer the most similar vectors
    assert nt_xent(z1, z2, t) < shuffled
    assert nt_xent(2 * z1, 3 * z2, t).item() == pytest.approx(by_hand / 4, rel=1e-6)  # cosine: scale-free


def images(n=16, c=1, side=12, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, c, side, side)).astype(np.float32))


def test_augment_is_seeded_batched_and_keeps_the_shape():
    x = images()
    a = augment(x, torch.Generator().manual_seed(1))
    assert a.shape == x.shape and a.dtype == x.dtype
    assert torch.equal(a, augment(x, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, augment(x, torch.Generator().manual_seed(2)))
    same = augment(x, torch.Generator().manual_seed(1), min_crop=1.0, flip=False, jitter=0.0)
    torch.testing.assert_close(same, x, atol=1e-5, rtol=0)  # a whole-image crop, resampled at the pixels


def test_flips_mirror_and_grey_images_are_not_jittered():
    x = images(n=200)
    views = augment(x, torch.Generator().manual_seed(3), min_crop=1.0, flip=True, jitter=5.0)
    mirrored = torch.tensor([torch.allclose(v, i.flip(-1), atol=1e-5) for v, i in zip(views, x)])
    kept = torch.tensor([torch.allclose(v, i, atol=1e-5) for v, i in zip(views, x)])
    assert (mirrored | kept).all()  # a grey image is mirrored or not, never colour-jittered (jitter 5)
    assert 70 < int(mirrored.sum()) < 130  # probability 1/2
    colour = augment(images(n=50, c=3), torch.Generator().manual_seed(3), min_crop=1.0, flip=False, jitter=0.4)
    assert not torch.allclose(colour, images(n=50, c=3), atol=1e-3)  # colour images are jittered
    with pytest.raises(ValueError, match="pre-training augments images"):
        augment(torch.zeros(4, 10), torch.Generator())


def probe(features: np.ndarray, labels: np.ndarray, labelled: int, test: int = 2000) -> float:
    """Few-label linear probe: logistic regression on the first ``labelled`` samples, tested on the last ``test``."""
    model = LogisticRegression(max_iter=3000).fit(features[:labelled], labels[:labelled])
    return float(model.score(features[-test:], labels[-test:]))


def test_simclr_features_beat_random_ones_and_leave_the_classifier_alone():
    """On 3,000 unlabelled Fashion-MNIST images, 8 epochs make the features better for a 100-label
    linear probe (measured, seeds 0/1/2: 0.680 -> 0.720, 0.689 -> 0.732, 0.690 -> 0.736; random
    ReLU features of Fashion-MNIST are already fairly linear-separable, so the gain is a few points)."""
    data = load_dataset("fashion_mnist")
    x, y = torch.from_numpy(data.train_x[:5000]), data.train_y[:5000]
    torch.manual_seed(0)
    model = create_model("mlp", (1, 28, 28), 10, hidden=(100,))
    classifier = {k: v.clone() for k, v in model.classifier.state_dict().items()}

    def features():
        model.eval()
        with torch.no_grad():
            return model.features(x).numpy()

    before = probe(features(), y, 100)
    params = PretrainConfig(epochs=8, batch_size=256, min_crop=0.6, temperature=0.1)
    stats = pretrain_features(model, x[:3000], params, torch.Generator().manual_seed(0))
    after = probe(features(), y, 100)
    assert after > before + 0.02, (before, after)
    assert stats["steps"] == 8 * math.ceil(3000 / 256) and stats["loss"][-1] < 0.7 * stats["loss"][0]
    for k, v in model.classifier.state_dict().items():
        assert torch.equal(v, classifier[k])
    untouched = create_model("logreg", (1, 28, 28), 10)  # no feature parameters: nothing to pre-train
    assert pretrain_features(untouched, x, params, torch.Generator()) == {"loss": [], "steps": 0}


def test_pretrained_weights_are_cached_by_everything_they_depend_on(tmp_path, monkeypatch):
    aux = load_dataset("digits").train_x[:300]
    params = PretrainConfig(epochs=2, batch_size=64, cache_dir=str(tmp_path))

    def build(arch):
        return create_model(arch, (1, 8, 8), 10)

    first, info = pretrained_weights(build, "mlp", aux, params, 0, torch.device("cpu"), {"options": {}})
    assert not info["cached"] and len(info["loss"]) == 2
    torch.manual_seed(0)
    initial = build("mlp").state_dict()
    assert torch.equal(torch.from_numpy(first["classifier.weight"]), initial["classifier.weight"])  # theta^0's head
    assert not np.array_equal(first["body.1.weight"], initial["body.1.weight"].numpy())  # trained features

    def no_training(*args, **kwargs):
        raise AssertionError("a cached entry must not be trained again")

    monkeypatch.setattr(simclr_module, "pretrain_features", no_training)
    again, info = pretrained_weights(build, "mlp", aux, params, 0, torch.device("cpu"), {"options": {}})
    assert info["cached"] and all(np.array_equal(first[k], again[k]) for k in first)
    changed = aux.copy()
    changed[5, 0, 3, 3] += 1.0
    for args in ((changed, params, 0), (aux, params, 1), (aux, params.model_copy(update={"temperature": 0.2}), 0)):
        with pytest.raises(AssertionError, match="must not be trained again"):  # a miss: it would train
            pretrained_weights(build, "mlp", args[0], args[1], args[2], torch.device("cpu"), {"options": {}})
    frozen = params.model_copy(update={"freeze_features": True})  # freezing is not part of the key
    assert pretrained_weights(build, "mlp", aux, frozen, 0, torch.device("cpu"), {"options": {}})[1]["cached"]
