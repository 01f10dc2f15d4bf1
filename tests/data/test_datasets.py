"""Data-set registry and loaders: real Fashion-MNIST, error messages, and the file readers of the
sets that are not installed here (checked on tiny files written in torchvision's layout)."""

import gzip
import os
import pickle
import shutil

import numpy as np
import pytest

from fedray.data import (
    DATASETS,
    DatasetFormatError,
    DatasetNotFoundError,
    check_dataset,
    dataset_names,
    default_data_root,
    load_dataset,
)
from fedray.data.files import read_idx
from fedray.data.images import CHANNEL_STATS

FMNIST_ROOT = "/usr/share/datasets"  # Debian's dataset-fashion-mnist package
FMNIST_DIR = os.path.join(FMNIST_ROOT, "fashion-mnist")
IDX_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def idx_bytes(array: np.ndarray) -> bytes:
    """A uint8 array in idx format."""
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, ">i4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def raw_pixels(x: np.ndarray, name: str) -> np.ndarray:
    """Undoes the normalisation of a loaded image set: back to 0..255."""
    mean, std = (np.array(v).reshape(1, -1, 1, 1) for v in CHANNEL_STATS[name])
    return np.rint((x * std + mean) * 255).astype(np.int64)


# Registry ----------------------------------------------------------------------------------------


def test_registry_names():
    assert set(dataset_names()) == {"fashion_mnist", "mnist", "emnist", "cifar10", "cifar100", "svhn", "stl10",
                                    "digits", "iris", "synthetic"}  # fmt: skip
    assert dataset_names() == sorted(DATASETS)


def test_default_data_root(monkeypatch):
    monkeypatch.delenv("FEDRAY_DATA_ROOT", raising=False)
    assert default_data_root() == "/usr/share/datasets"
    monkeypatch.setenv("FEDRAY_DATA_ROOT", "/data/x")
    assert default_data_root() == "/data/x"


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown data set 'cifar11'.*cifar10, cifar100, digits") as err:
        check_dataset("cifar11")
    assert "\n" not in str(err.value)


def test_unknown_option_lists_valid_options():
    with pytest.raises(ValueError, match="unknown option 'splt'.*split, size, stats"):
        check_dataset("stl10", splt="unlabeled")
    with pytest.raises(ValueError, match="unknown option"):
        load_dataset("digits", seed=1)


def test_bad_option_values(tmp_path):
    with pytest.raises(ValueError, match="split must be one of"):
        check_dataset("emnist", str(tmp_path), split="letter")
    with pytest.raises(ValueError, match="stats must be None or one of"):
        check_dataset("cifar10", str(tmp_path), stats="mnist")


# Fashion-MNIST (real files) ----------------------------------------------------------------------


def test_fashion_mnist_shapes_and_classes(fmnist):
    assert fmnist.train_x.shape == (60000, 1, 28, 28) and fmnist.test_x.shape == (10000, 1, 28, 28)
    assert fmnist.train_x.dtype == np.float32 and fmnist.train_y.dtype == np.int64
    assert fmnist.input_shape == (1, 28, 28) and fmnist.num_classes == 10 and len(fmnist.classes) == 10
    assert np.bincount(fmnist.train_y).tolist() == [6000] * 10
    assert np.bincount(fmnist.test_y).tolist() == [1000] * 10
    assert fmnist.client_split is None


def test_fashion_mnist_normalisation(fmnist):
    np.testing.assert_allclose(fmnist.train_x.min(), -0.2860 / 0.3530, rtol=1e-5)
    np.testing.assert_allclose(fmnist.train_x.max(), (1 - 0.2860) / 0.3530, rtol=1e-5)
    assert abs(float(fmnist.train_x.mean())) < 0.01 and abs(float(fmnist.train_x.std()) - 1) < 0.01


def test_fashion_mnist_check_is_cheap_and_passes():
    check_dataset("fashion_mnist", FMNIST_ROOT)


def test_fashion_mnist_reads_uncompressed_files(tmp_path, fmnist):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    for name in IDX_NAMES[:2]:  # train files stay gzipped, test files are un-gzipped
        os.symlink(os.path.join(FMNIST_DIR, name + ".gz"), folder / (name + ".gz"))
    for name in IDX_NAMES[2:]:
        with gzip.open(os.path.join(FMNIST_DIR, name + ".gz"), "rb") as src, open(folder / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    bundle = load_dataset("fashion_mnist", root=str(tmp_path))
    assert np.array_equal(bundle.test_x, fmnist.test_x) and np.array_equal(bundle.test_y, fmnist.test_y)


def test_fashion_mnist_truncated_file(tmp_path):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    for name in IDX_NAMES[1:]:
        os.symlink(os.path.join(FMNIST_DIR, name + ".gz"), folder / (name + ".gz"))
    with open(os.path.join(FMNIST_DIR, IDX_NAMES[0] + ".gz"), "rb") as src:
        (folder / (IDX_NAMES[0] + ".gz")).write_bytes(src.read(100_000))
    with pytest.raises(DatasetFormatError, match="train-images-idx3-ubyte.gz is corrupt or truncated") as err:
        load_dataset("fashion_mnist", root=str(tmp_path))
    assert "\n" not in str(err.value) and "apt-get install --reinstall dataset-fashion-mnist" in str(err.value)


def test_fashion_mnist_missing_root(tmp_path):
    root = str(tmp_path / "nowhere")
    for call in (check_dataset, load_dataset):
        with pytest.raises(DatasetNotFoundError) as err:
            call("fashion_mnist", root)
        message = str(err.value)
        assert "\n" not in message
        assert "Fashion-MNIST not found under " + root in message
        assert "apt-get install dataset-fashion-mnist" in message
        assert os.path.join(root, "fashion-mnist") in message


def test_missing_files_are_named(tmp_path):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    os.symlink(os.path.join(FMNIST_DIR, IDX_NAMES[0] + ".gz"), folder / (IDX_NAMES[0] + ".gz"))
    with pytest.raises(DatasetNotFoundError, match="missing train-labels-idx1-ubyte, t10k-images"):
        check_dataset("fashion_mnist", str(tmp_path))


# idx reader --------------------------------------------------------------------------------------


def test_read_idx_validates(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    good = tmp_path / "good"
    good.write_bytes(idx_bytes(array))
    assert np.array_equal(read_idx(str(good), (None, 3, 4)), array)
    gz = tmp_path / "good.gz"
    gz.write_bytes(gzip.compress(idx_bytes(array)))
    assert np.array_equal(read_idx(str(gz), (2, 3, 4)), array)
    short = tmp_path / "short"
    short.write_bytes(idx_bytes(array)[:-5])
    with pytest.raises(DatasetFormatError, match="truncated or corrupt: 35 bytes of data, expected 40"):
        read_idx(str(short), (2, 3, 4))
    with pytest.raises(DatasetFormatError, match="magic number 00000803, expected 00000801"):
        read_idx(str(good), (2,))
    with pytest.raises(DatasetFormatError, match=r"shape \(2, 3, 4\), expected \(2, 4, 4\)"):
        read_idx(str(good), (2, 4, 4))


# Sets that are not installed: messages -----------------------------------------------------------


def test_cifar10_missing(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("cifar10", root=str(tmp_path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"CIFAR-10 not found under {tmp_path}")
    assert "put the extracted folder cifar-10-batches-py" in message and f"in {tmp_path}," in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in message


@pytest.mark.parametrize(
    "name, options, expected",
    [
        ("mnist", {}, "MNIST/raw"),
        ("emnist", {"split": "letters"}, "EMNIST/raw"),
        ("cifar100", {}, "cifar-100-python"),
        ("svhn", {}, "train_32x32.mat"),
        ("stl10", {"split": "unlabeled"}, "stl10_binary"),
    ],
)
def test_other_sets_missing(tmp_path, name, options, expected):
    with pytest.raises(DatasetNotFoundError, match=f"not found under {tmp_path}.*{expected}") as err:
        check_dataset(name, str(tmp_path), **options)
    assert "\n" not in str(err.value) and "data.root" in str(err.value)


# Readers of the other sets, on tiny files in torchvision's layout --------------------------------


def write_cifar10(root, rng):
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batches[name] = {"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), "labels": [1, 7]}
        (folder / name).write_bytes(pickle.dumps(batches[name]))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    return batches


def test_cifar10_reader(tmp_path):
    batches = write_cifar10(tmp_path, np.random.default_rng(0))
    bundle = load_dataset("cifar10", root=str(tmp_path))
    assert bundle.train_x.shape == (10, 3, 32, 32) and bundle.test_x.shape == (2, 3, 32, 32)
    assert bundle.train_y.tolist() == [1, 7] * 5 and bundle.classes[3] == "c3"
    pixels = raw_pixels(bundle.train_x, "cifar10")
    row = batches["data_batch_1"]["data"][0]
    assert pixels[0, 1, 2, 5] == row[1024 + 32 * 2 + 5]  # channel planes, each row-major
    assert np.array_equal(pixels[2].reshape(-1), batches["data_batch_2"]["data"][0])


def test_cifar10_resize_and_foreign_stats(tmp_path):
    write_cifar10(tmp_path, np.random.default_rng(0))
    bundle = load_dataset("cifar10", root=str(tmp_path), size=16, stats="stl10")
    assert bundle.train_x.shape == (10, 3, 16, 16) and bundle.input_shape == (3, 16, 16)


def test_stl10_reader(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    rng = np.random.default_rng(0)
    stored = {name: rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)
              for name, n in (("train_X", 2), ("test_X", 3), ("unlabeled_X", 4))}  # fmt: skip
    for name, array in stored.items():
        array.tofile(folder / f"{name}.bin")
    np.array([1, 10], np.uint8).tofile(folder / "train_y.bin")
    np.array([2, 3, 4], np.uint8).tofile(folder / "test_y.bin")
    bundle = load_dataset("stl10", root=str(tmp_path), split="train+unlabeled")
    assert bundle.train_x.shape == (6, 3, 96, 96) and bundle.train_y.tolist() == [0, 9, -1, -1, -1, -1]
    assert bundle.test_y.tolist() == [1, 2, 3]
    # The files store each channel column-major.
    assert np.array_equal(raw_pixels(bundle.train_x[:2], "stl10"), stored["train_X"].transpose(0, 1, 3, 2))
    small = load_dataset("stl10", root=str(tmp_path), split="unlabeled", size=32, stats="cifar10")
    assert small.train_x.shape == (4, 3, 32, 32) and (small.train_y == -1).all()


def test_svhn_reader(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (32, 32, 3, 3), dtype=np.uint8)  # (H, W, C, N) as in the .mat files
    for name in ("train_32x32.mat", "test_32x32.mat"):
        savemat(str(tmp_path / name), {"X": images, "y": np.array([[10], [1], [9]], np.uint8)})
    bundle = load_dataset("svhn", root=str(tmp_path))
    assert bundle.train_x.shape == (3, 3, 32, 32) and bundle.train_y.tolist() == [0, 1, 9]
    assert np.array_equal(raw_pixels(bundle.train_x, "svhn"), images.transpose(3, 2, 0, 1))


def test_emnist_reader_turns_images_upright(tmp_path):
    folder = tmp_path / "EMNIST" / "raw"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    stored = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    for part in ("train", "test"):
        (folder / f"emnist-digits-{part}-images-idx3-ubyte").write_bytes(idx_bytes(stored))
        labels = gzip.compress(idx_bytes(np.array([4, 0, 9])))
        (folder / f"emnist-digits-{part}-labels-idx1-ubyte.gz").write_bytes(labels)
    bundle = load_dataset("emnist", root=str(tmp_path), split="digits")
    assert bundle.train_x.shape == (3, 1, 28, 28) and bundle.train_y.tolist() == [4, 0, 9]
    assert np.array_equal(raw_pixels(bundle.train_x, "emnist")[:, 0], stored.transpose(0, 2, 1))


def test_corrupt_cifar_pickle(tmp_path):
    write_cifar10(tmp_path, np.random.default_rng(0))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DatasetFormatError, match="data_batch_3 is not a readable CIFAR pickle"):
        load_dataset("cifar10", root=str(tmp_path))


# scikit-learn sets -------------------------------------------------------------------------------


def test_digits():
    bundle = load_dataset("digits")
    assert bundle.train_x.shape == (1347, 1, 8, 8) and bundle.test_x.shape == (450, 1, 8, 8)
    assert bundle.train_x.dtype == np.float32 and bundle.train_y.dtype == np.int64 and bundle.num_classes == 10
    assert abs(float(bundle.train_x.mean())) < 1e-5 and abs(float(bundle.train_x.std()) - 1) < 1e-4
    per_class = np.bincount(bundle.train_y) + np.bincount(bundle.test_y)
    assert np.abs(np.bincount(bundle.test_y) - 0.25 * per_class).max() <= 1  # stratified
    again = load_dataset("digits")
    assert np.array_equal(bundle.train_x, again.train_x) and np.array_equal(bundle.test_y, again.test_y)


def test_iris():
    bundle = load_dataset("iris")
    assert bundle.train_x.shape == (100, 4) and bundle.test_x.shape == (50, 4) and bundle.input_shape == (4,)
    np.testing.assert_allclose(bundle.train_x.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(bundle.train_x.std(axis=0), 1, atol=1e-5)
    assert sorted(np.bincount(bundle.test_y).tolist()) == [16, 17, 17]
    assert bundle.classes == ["setosa", "versicolor", "virginica"]
    assert np.array_equal(bundle.test_x, load_dataset("iris").test_x)
