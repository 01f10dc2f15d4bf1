"""torchvision's models through fedray's import paths: adapted to grey 28x28 images and 10 classes,
and trained in a two-round run on both backends, which end with the same models."""

import numpy as np
import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from actors.driver import connect, shutdown_ray  # noqa: E402
from fedray.assembly import assemble  # noqa: E402
from fedray.checkpoint import CHECKPOINT, read_checkpoint  # noqa: E402
from fedray.config import RuntimeConfig, build_config  # noqa: E402
from fedray.federation import Federation  # noqa: E402
from fedray.models import create_model  # noqa: E402
from fedray.runner import run_experiment  # noqa: E402

pytestmark = pytest.mark.vision

MOBILENET = "torchvision.models:mobilenet_v3_small"


@pytest.mark.parametrize("name, options", [
    ("torchvision.models:resnet18", {}),
    ("torchvision.models:resnet18", {"weights": None}),
    (MOBILENET, {"weights": None}),  # head: the last Linear of classifier = Sequential(Linear, Hardswish, Dropout, Linear)
    ("torchvision.models:efficientnet_b0", {}),  # classifier = Sequential(Dropout, Linear)
])
def test_a_torchvision_model_takes_grey_28x28_images_and_ten_classes(name, options):
    torch.manual_seed(0)
    model = create_model(name, (1, 28, 28), 10, **options)
    first = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first.in_channels == 1  # made anew for grey images (torchvision's take 3)
    assert isinstance(model.classifier, nn.Linear) and model.classifier.out_features == 10
    x = torch.randn(4, 1, 28, 28)
    model.eval()
    with torch.no_grad():
        out = model(x)
        features = model.features(x)
    assert out.shape == (4, 10) and features.shape == (4, model.feature_dim)
    torch.testing.assert_close(model.classifier(features), out, rtol=0, atol=0)
    model.train()
    loss = nn.functional.cross_entropy(model(x), torch.arange(4))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_pretrained_weights_for_other_classes_are_one_line():
    with pytest.raises(ValueError, match="num_classes"):
        create_model("torchvision.models:resnet18", (3, 32, 32), 10, weights="IMAGENET1K_V1")


@pytest.fixture(scope="module")
def local_ray():
    connect(RuntimeConfig(num_cpus=2))
    yield
    shutdown_ray()


def config(backend):
    runtime = {"backend": "local", "torch_threads": 1} if backend == "local" else \
        {"backend": "ray", "actor_cpus": 1, "clients_per_actor": 2}  # each actor one torch thread
    return build_config({
        "name": f"tv-{backend}",
        "data": {"dataset": "fashion_mnist", "train_limit": 256, "test_limit": 200},
        "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2,
                       "architectures": {MOBILENET: 4}, "model_options": {MOBILENET: {"weights": None}}},
        "training": {"lr": 0.05, "momentum": 0.9, "batch_size": 32, "epochs": 1},
        "runtime": runtime,
    })


def test_mobilenet_trains_two_rounds_alike_on_both_backends(local_ray, tmp_path):
    summaries, models = {}, {}
    for backend in ("local", "ray"):
        summaries[backend] = run_experiment(config(backend), tmp_path / backend, progress=False)
        models[backend] = read_checkpoint(tmp_path / backend / CHECKPOINT)["strategy"]["models"][MOBILENET]
    assert summaries["ray"]["executor"]["backend"] == "ray"
    assert summaries["local"]["rounds"] == summaries["ray"]["rounds"] == 2
    local, remote = models["local"], models["ray"]
    assert sorted(local) == sorted(remote)
    assert local["body.features.0.0.weight"].shape == (16, 1, 3, 3)  # the stem fitted to grey images
    assert local["classifier.weight"].shape == (10, 1024)
    for name in local:
        np.testing.assert_array_equal(local[name], remote[name], err_msg=name)
    initial = Federation(assemble(config("local")), tmp_path / "init", checkpoints=False).strategy.models[MOBILENET]
    assert not np.array_equal(initial["classifier.weight"], local["classifier.weight"])  # two rounds trained it
    assert summaries["local"]["final"] == summaries["ray"]["final"]
    assert 0.0 <= summaries["ray"]["final"]["eval/accuracy"] <= 1.0
