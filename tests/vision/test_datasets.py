"""torchvision's data set classes through ``data.dataset: torchvision.datasets:CIFAR10``: files the tests
write in torchvision's layout, as a folder or as the archive, read back exactly; the real Fashion-MNIST
through torchvision's FashionMNIST; a missing or damaged set is one line."""

import gzip
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchvision")

from fedray import api  # noqa: E402
from fedray.config import ConfigError  # noqa: E402
from fedray.data import DatasetFormatError, DatasetNotFoundError, load_dataset  # noqa: E402

pytestmark = pytest.mark.vision

CIFAR10 = "torchvision.datasets:CIFAR10"
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FASHION = "/usr/share/datasets/fashion-mnist"


def write_cifar10(folder, per_batch=4, test=6, seed=0):
    """A tiny CIFAR-10 in its exact python layout: ``folder/cifar-10-batches-py`` with data_batch_1..5,
    test_batch and batches.meta, each a pickled dict of rows of 3072 uint8 (1024 red, green, blue).
    Returns the train and test images (uint8 NCHW) and labels, in the order the batches hold them."""
    rng = np.random.default_rng(seed)
    base = folder / "cifar-10-batches-py"
    base.mkdir(parents=True)
    parts = {}
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", test)]:
        rows = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=n)]
        with open(base / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": rows,
                         "filenames": [f"{name}_{i}.png" for i in range(n)]}, f, protocol=2)
        parts[name] = (rows.reshape(n, 3, 32, 32), np.array(labels))
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"num_cases_per_batch": per_batch, "label_names": NAMES, "num_vis": 3072}, f, protocol=2)
    train = [parts[f"data_batch_{i}"] for i in range(1, 6)]
    return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), *parts["test_batch"])


def normalised(train_u8, images_u8):
    """The documented normalisation: [0, 1], then the training part's per-channel mean and std."""
    train = train_u8.astype(np.float64) / 255
    mean, std = train.mean(axis=(0, 2, 3)), train.std(axis=(0, 2, 3))
    return (images_u8.astype(np.float64) / 255 - mean[None, :, None, None]) / std[None, :, None, None]


def check_bundle(bundle, written):
    train_x, train_y, test_x, test_y = written
    assert bundle.input_shape == (3, 32, 32) and bundle.num_classes == 10 and bundle.classes == NAMES
    assert bundle.train_x.dtype == np.float32 and bundle.train_y.dtype == np.int64
    np.testing.assert_array_equal(bundle.train_y, train_y)
    np.testing.assert_array_equal(bundle.test_y, test_y)
    np.testing.assert_allclose(bundle.train_x, normalised(train_x, train_x), rtol=0, atol=1e-5)
    np.testing.assert_allclose(bundle.test_x, normalised(train_x, test_x), rtol=0, atol=1e-5)
    np.testing.assert_allclose(bundle.train_x.mean(axis=(0, 2, 3)), 0, atol=1e-5)


def test_cifar10_from_its_folder_reads_what_was_written(tmp_path):
    written = write_cifar10(tmp_path / "data")
    check_bundle(load_dataset(CIFAR10, str(tmp_path / "data")), written)


def test_cifar10_from_a_folder_holding_its_archive_unpacks_it_once(tmp_path):
    written = write_cifar10(tmp_path / "made")
    root = tmp_path / "data"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "made" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    shutil.rmtree(tmp_path / "made")
    check_bundle(load_dataset(CIFAR10, str(root)), written)
    assert sorted(os.listdir(root)) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]  # no scratch left
    (root / "cifar-10-python.tar.gz").unlink()  # the second load reads the unpacked folder
    check_bundle(load_dataset(CIFAR10, str(root)), written)


def test_a_config_names_cifar10_with_its_root_and_its_option(tmp_path):
    """The same path as a run's: ``fedray check`` loads the set to count it for the split."""
    write_cifar10(tmp_path / "data", per_batch=8)
    tree = {"name": "cifar", "data": {"dataset": CIFAR10, "root": str(tmp_path / "data")},
            "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1, "architectures": {"cnn": 4}},
            "runtime": {"backend": "local"}, "output_dir": str(tmp_path / "runs")}
    assert api.check(tree).data.dataset == CIFAR10
    with pytest.raises(ConfigError, match="unknown option 'size' for data set 'torchvision.datasets:CIFAR10'; "
                                          "valid options: none"):
        api.check({**tree, "data": {**tree["data"], "options": {"size": 16}}})


def test_a_missing_cifar10_is_one_line_saying_what_to_put_where(tmp_path):
    root = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as caught:
        load_dataset(CIFAR10, str(root))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"data set {CIFAR10}: {root}/cifar-10-batches-py/data_batch_1 is missing; "
                              f"put cifar-10-python.tar.gz (")
    assert message.endswith(f") or the folder cifar-10-batches-py it unpacks to in {root}")
    with pytest.raises(ConfigError, match="^data set torchvision.datasets:CIFAR10: .*data_batch_1 is missing"):
        api.check({"data": {"dataset": CIFAR10, "root": str(root)}, "federation": {
            "num_clients": 2, "clients_per_round": 2, "architectures": {"cnn": 2}}, "runtime": {"backend": "local"},
            "output_dir": str(tmp_path / "runs")})


def test_a_damaged_or_incomplete_cifar10_is_one_line(tmp_path):
    write_cifar10(tmp_path / "data")
    batch = tmp_path / "data" / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(DatasetFormatError, match=f"^data set {CIFAR10}: reading .* failed: .*; replace the files$"):
        load_dataset(CIFAR10, str(tmp_path / "data"))
    batch.unlink()
    with pytest.raises(DatasetNotFoundError, match="cifar-10-batches-py/data_batch_3 is missing"):
        load_dataset(CIFAR10, str(tmp_path / "data"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "cifar-10-python.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(DatasetFormatError, match="cifar-10-python.tar.gz cannot be unpacked: .*; replace it$"):
        load_dataset(CIFAR10, str(tmp_path / "bad"))


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not stop root from writing (CI runs as root)")
def test_an_archive_in_a_folder_that_cannot_be_written_is_unpacked_into_the_cache(tmp_path, monkeypatch):
    written = write_cifar10(tmp_path / "made")
    root, cache = tmp_path / "data", tmp_path / "cache"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "made" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    monkeypatch.setenv("FEDRAY_CACHE", str(cache))
    root.chmod(0o555)
    try:
        check_bundle(load_dataset(CIFAR10, str(root)), written)
        check_bundle(load_dataset(CIFAR10, str(root)), written)  # from the cache, unpacked once
    finally:
        root.chmod(0o755)
    assert os.listdir(root) == ["cifar-10-python.tar.gz"]  # the root untouched
    [unpacked] = os.listdir(cache / "datasets")
    assert os.listdir(cache / "datasets" / unpacked) == ["cifar-10-batches-py"]


@pytest.mark.skipif(not os.path.isfile(f"{FASHION}/train-images-idx3-ubyte.gz"),
                    reason="Debian's dataset-fashion-mnist is not installed (scripts/setup/vision.sh installs it)")
def test_fashion_mnist_through_torchvision_equals_fedrays_own_reader(tmp_path):
    """torchvision's FashionMNIST reads un-gzipped idx files from ROOT/FashionMNIST/raw; a raw folder
    with the gzipped files only (Debian's) is unpacked there first. The images are fedray's own
    reader's, normalised with their own statistics rather than the published ones."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in os.listdir(FASHION):
        os.symlink(f"{FASHION}/{name}", raw / name)
    bundle = load_dataset("torchvision.datasets:FashionMNIST", str(tmp_path))
    assert sorted(os.listdir(raw)) == sorted(os.listdir(FASHION) + [n[:-3] for n in os.listdir(FASHION)])
    own = load_dataset("fashion_mnist", "/usr/share/datasets")
    np.testing.assert_array_equal(bundle.train_y, own.train_y)
    np.testing.assert_array_equal(bundle.test_y, own.test_y)
    assert bundle.input_shape == (1, 28, 28) and bundle.num_classes == 10
    with gzip.open(f"{FASHION}/train-images-idx3-ubyte.gz") as f:
        train = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    mean, std = train.mean() / 255, (train / 255).std()
    for ours, theirs in ((bundle.train_x, own.train_x), (bundle.test_x, own.test_x)):
        np.testing.assert_allclose(ours * std + mean, theirs * 0.3530 + 0.2860, rtol=0, atol=2e-5)
