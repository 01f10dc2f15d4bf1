"""Parameter counts, output shapes and the features/head split of every model."""

import pytest
import torch

from fedray.models import create_model, model_names

IMAGE_SHAPES = [(1, 28, 28), (3, 32, 32), (1, 8, 8), (3, 96, 96)]
FLAT_MODELS = ["logreg", "lstm", "mlp"]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "name, mnist, cifar",
    [
        ("cnn", 1_663_370, 2_156_490),  # McMahan et al. 2017
        ("lenet5", 431_080, 657_080),  # LeNet5-Caffe
        ("fedgen_cnn", 26_412, 34_200),  # FedGen's MNIST CNN: 784 -> 32 -> 10 (conv 54 + 864 without bias, BN 12 + 32, fc 25,120 + 330)
        ("vgg11s", 864_906, 865_482),  # Sattler et al. 2019
        ("lstm", 214_282, 249_098),  # 2x128 nn.LSTM + fc
        ("logreg", 7_850, 30_730),
        ("mlp", 199_210, 656_810),  # the 2NN of McMahan et al.
        ("resnet8", 77_754, 78_042),
        ("mobilenetv2", 2_236_106, 2_236_682),  # torchvision mobilenet_v2(num_classes=10) at 3 channels
        ("shufflenetv2", 1_263_422, 1_263_854),  # torchvision shufflenet_v2_x1_0(num_classes=10) at 3 channels
    ],
)
def test_parameter_counts(name, mnist, cifar):
    assert n_params(create_model(name, (1, 28, 28), 10)) == mnist
    assert n_params(create_model(name, (3, 32, 32), 10)) == cifar


def test_resnet8_at_fedaux_widths_is_the_papers_49m_net():
    # torchvision's ResNet with one BasicBlock a stage (64-128-256-512), 3x3 stride-1 stem, no max-pool:
    # stem 1,728 + 128; blocks 73,984 / 230,144 / 919,040 / 3,673,088 (with 1x1 shortcuts); fc 5,130
    assert n_params(create_model("resnet8", (3, 32, 32), 10, widths=[64, 128, 256, 512])) == 4_903_242
    with pytest.raises(ValueError, match="widths are the stages' channels"):
        create_model("resnet8", (3, 32, 32), 10, widths=[])


SHAPE_CASES = [(n, s) for n in model_names() for s in IMAGE_SHAPES] + [(n, (60,)) for n in FLAT_MODELS]


@pytest.mark.parametrize("num_classes", [10, 7])
@pytest.mark.parametrize("name, shape", SHAPE_CASES)
def test_output_and_feature_shapes(name, shape, num_classes):
    model = create_model(name, shape, num_classes)
    x = torch.randn(2, *shape)
    z = model.features(x)
    assert z.shape == (2, model.feature_dim)
    assert model.head(z).shape == (2, num_classes)
    assert model(x).shape == (2, num_classes)


EQUALITY_CASES = [(n, (3, 32, 32)) for n in model_names()] + [(n, (60,)) for n in FLAT_MODELS]


@pytest.mark.parametrize("name, shape", EQUALITY_CASES)
def test_forward_is_head_of_features(name, shape):
    model = create_model(name, shape, 10).eval()
    x = torch.randn(3, *shape)
    with torch.no_grad():
        assert torch.equal(model(x), model.head(model.features(x)))


@pytest.mark.parametrize("name, smallest", [("cnn", 4), ("lenet5", 4), ("vgg11s", 1), ("resnet8", 1)])
def test_smallest_supported_input(name, smallest):
    model = create_model(name, (2, smallest, smallest), 3)
    assert model(torch.randn(2, 2, smallest, smallest)).shape == (2, 3)


def test_lenet5_pads_only_small_inputs():
    assert create_model("lenet5", (1, 16, 16), 10).body[0].padding == (0, 0)
    assert create_model("lenet5", (1, 15, 15), 10).body[0].padding == (2, 2)
    assert create_model("lenet5", (1, 8, 8), 10).body[5].in_features == 50 * 2 * 2


def test_cnn_flatten_size_follows_input():
    assert create_model("cnn", (3, 96, 96), 10).body[7].in_features == 64 * 24 * 24


def test_vgg11s_reaches_1x1_at_32x32_before_global_pool():
    model = create_model("vgg11s", (3, 32, 32), 10)
    pool = [i for i, m in enumerate(model.body) if isinstance(m, torch.nn.AdaptiveAvgPool2d)][0]
    assert model.body[:pool](torch.randn(1, 3, 32, 32)).shape == (1, 128, 1, 1)


def test_lstm_reads_image_rows_as_steps():
    model = create_model("lstm", (3, 4, 5), 10)
    x = torch.randn(2, 3, 4, 5)
    rows = x.permute(0, 2, 1, 3).reshape(2, 4, 15)
    out, _ = model.lstm(rows)
    assert torch.allclose(model.features(x), out[:, -1])


def test_lstm_reads_flat_vector_as_scalar_steps():
    model = create_model("lstm", (60,), 10)
    x = torch.randn(2, 60)
    out, _ = model.lstm(x.unsqueeze(-1))
    assert model.lstm.input_size == 1
    assert torch.allclose(model.features(x), out[:, -1])


def test_small_image_nets_keep_cifar_resolution():
    for name in ["mobilenetv2", "shufflenetv2", "resnet8"]:
        model = create_model(name, (3, 32, 32), 10)
        trunk = model.body[:-2]  # drop the global pool and flatten
        side = {"resnet8": 8, "mobilenetv2": 4, "shufflenetv2": 4}[name]
        assert trunk(torch.randn(2, 3, 32, 32)).shape[-1] == side, name


def test_any_channel_count():
    for name in ["mobilenetv2", "shufflenetv2"]:
        assert create_model(name, (5, 8, 8), 4)(torch.randn(2, 5, 8, 8)).shape == (2, 4)


class _Zeros(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


def test_shuffle_unit_splits_then_interleaves_channels():
    from fedray.models.mobile import ShuffleUnit

    unit = ShuffleUnit(4, 4, stride=1)
    unit.branch2 = _Zeros()
    x = torch.arange(1.0, 5.0).view(1, 4, 1, 1)
    # split keeps channels (1, 2), branch2 gives (0, 0); the shuffle interleaves the halves
    assert unit(x).flatten().tolist() == [1.0, 0.0, 2.0, 0.0]
