"""Image data sets read from files already on disk, in torchvision's folder layout.

Fashion-MNIST is read from Debian's ``dataset-fashion-mnist`` folder (``<root>/fashion-mnist``) or
torchvision's (``<root>/FashionMNIST/raw``). MNIST, EMNIST, CIFAR-10/100, SVHN and STL-10 are read
from the folders torchvision's dataset classes use with ``download=False``, so a folder torchvision
downloaded works as is. The files are parsed with numpy (idx, pickle, ``.mat``, raw binary) rather
than through torchvision: the readers are a few lines each and keep torchvision out of client actors.
Nothing is ever downloaded; a missing file raises :class:`DatasetNotFoundError` saying what to put where.
The checks (``check_*``, run before a run starts) read the MNIST family's idx files through and
STL-10's sizes and labels, so a truncated or inconsistent file is found before a run folder exists.

Every image set takes two options: ``size`` (resize to ``size x size``, e.g. STL-10 to 32 for FedAUX)
and ``stats`` (normalise with another set's channel statistics, e.g. ``"cifar10"``).
"""

from __future__ import annotations

import os
import pickle
import string

import numpy as np

from fedray.data.bundle import DatasetBundle, DatasetFormatError
from fedray.data.files import FileLayout, check_idx_pair, idx_length, locate, read_idx
from fedray.data.images import CHANNEL_STATS, check_image_options, to_float_nchw

FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]  # fmt: skip
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
STL10_CLASSES = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
_MERGED = set("cijklmopsuvwxyz")  # EMNIST letters whose upper and lower case are merged
EMNIST_CLASSES = {
    "byclass": sorted(string.digits + string.ascii_letters),
    "bymerge": sorted(set(string.digits + string.ascii_letters) - _MERGED),
    "balanced": sorted(set(string.digits + string.ascii_letters) - _MERGED),
    "letters": ["N/A"] + list(string.ascii_lowercase),
    "digits": list(string.digits),
    "mnist": list(string.digits),
}
STL10_SPLITS = ("train", "unlabeled", "train+unlabeled")
# training images of the sets whose count is read neither from a file header nor from a file's size
# (the published counts)
TRAIN_COUNTS = {"cifar10": 50000, "cifar100": 50000, "svhn": 73257, "svhn extra": 531131}
_IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _bundle(name: str, parts: tuple, classes: list[str], size: int | None, stats: str | None) -> DatasetBundle:
    """Builds the bundle from uint8 NCHW train/test images and their labels."""
    train_u8, train_y, test_u8, test_y = parts
    mean, std = CHANNEL_STATS[stats or name]
    train_x = to_float_nchw(train_u8, mean, std, size)
    test_x = to_float_nchw(test_u8, mean, std, size)
    return DatasetBundle(name=name, train_x=train_x, train_y=np.asarray(train_y, np.int64), test_x=test_x,
                         test_y=np.asarray(test_y, np.int64), num_classes=len(classes),
                         input_shape=tuple(train_x.shape[1:]), classes=list(classes))  # fmt: skip


def _locate(name: str, channels: int, layout: FileLayout, root: str, size: int | None, stats: str | None) -> dict:
    """Checks the options ``size`` and ``stats`` of the image set ``name``, then returns the paths of its files."""
    check_image_options(name, channels, size, stats)
    return locate(layout, root)


def _check_idx(name: str, layout: FileLayout, root: str, size: int | None, stats: str | None, classes: list[str],
               counts: tuple[int | None, int | None] = (60000, 10000), hint: str = "; replace it") -> None:
    """Checks the options, then the train and test idx files of a 1-channel 28x28 set through, as
    :func:`_load_idx` reads them (``fedray.data.files.check_idx_pair``): whole, counts that agree,
    labels below ``len(classes)``."""
    paths = _locate(name, 1, layout, root, size, stats)
    for (images, labels), count in zip((layout.files[:2], layout.files[2:]), counts):
        check_idx_pair(paths[images], paths[labels], (count, 28, 28), len(classes), hint)


def _load_idx(
    name: str,
    layout: FileLayout,
    root: str,
    size: int | None,
    stats: str | None,
    classes: list[str],
    counts: tuple[int | None, int | None] = (60000, 10000),
    hint: str = "; replace it",
    transposed: bool = False,
) -> DatasetBundle:
    """Loads a 1-channel 28x28 idx set (the MNIST family) into a bundle.

    Args:
        name: Data set name (options check, channel statistics, bundle name).
        layout: Its files: train images, train labels, test images, test labels, in that order.
        root: Data root.
        size: Optional side length to resize to.
        stats: Optional name of another set whose channel statistics to normalise with.
        classes: Class names.
        counts: Number of train and test images the files must hold (None: any).
        hint: What to do about a corrupt file, appended to the error.
        transposed: The files store every image transposed (EMNIST); turn them upright.
    """
    paths = _locate(name, 1, layout, root, size, stats)
    parts = []
    for (images, labels), count in zip((layout.files[:2], layout.files[2:]), counts):
        x = read_idx(paths[images], (count, 28, 28), hint)
        y = read_idx(paths[labels], (x.shape[0],), hint)
        parts += [x[:, None].transpose(0, 1, 3, 2) if transposed else x[:, None], y]
    return _bundle(name, tuple(parts), classes, size, stats)


# Fashion-MNIST --------------------------------------------------------------------------------

FASHION_MNIST_LAYOUT = FileLayout(
    display="Fashion-MNIST",
    folders=("fashion-mnist", os.path.join("FashionMNIST", "raw")),
    files=_IDX_NAMES,
    advice="run `apt-get install dataset-fashion-mnist` (it puts them in /usr/share/datasets/fashion-mnist) "
    "or put the four idx files, gzipped or not, from https://github.com/zalandoresearch/fashion-mnist "
    "in {root}/fashion-mnist",
    gz_ok=True,
)


FASHION_MNIST_HINT = "; replace it (e.g. `apt-get install --reinstall dataset-fashion-mnist`)"


def check_fashion_mnist(root: str, size: int | None = None, stats: str | None = None) -> None:
    """Checks the four Fashion-MNIST idx files through (see :func:`load_fashion_mnist`)."""
    _check_idx("fashion_mnist", FASHION_MNIST_LAYOUT, root, size, stats, FASHION_MNIST_CLASSES,
               hint=FASHION_MNIST_HINT)


def load_fashion_mnist(root: str, size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads Fashion-MNIST: 60000 train / 10000 test, shape (1, 28, 28), ``(x/255 - 0.2860)/0.3530``.

    Args:
        root: Data root holding ``fashion-mnist/`` (Debian) or ``FashionMNIST/raw/`` (torchvision).
        size: Optional side length to resize to.
        stats: Optional name of another set whose channel statistics to normalise with.

    Raises:
        DatasetNotFoundError: A file is missing.
        DatasetFormatError: A file is truncated or corrupt.
    """
    return _load_idx("fashion_mnist", FASHION_MNIST_LAYOUT, root, size, stats, FASHION_MNIST_CLASSES,
                     hint=FASHION_MNIST_HINT)


# MNIST and EMNIST -----------------------------------------------------------------------------

MNIST_LAYOUT = FileLayout(
    display="MNIST",
    folders=(os.path.join("MNIST", "raw"),),
    files=_IDX_NAMES,
    advice="put the four MNIST idx files, gzipped or not (from https://ossci-datasets.s3.amazonaws.com/mnist/), "
    "in {root}/MNIST/raw (torchvision's layout)",
    gz_ok=True,
)


def check_mnist(root: str, size: int | None = None, stats: str | None = None) -> None:
    """Checks the four MNIST idx files under ``<root>/MNIST/raw`` through."""
    _check_idx("mnist", MNIST_LAYOUT, root, size, stats, list(string.digits))


def load_mnist(root: str, size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads MNIST from ``<root>/MNIST/raw``: 60000 / 10000 images of shape (1, 28, 28)."""
    return _load_idx("mnist", MNIST_LAYOUT, root, size, stats, list(string.digits))


def _emnist_layout(split: str) -> FileLayout:
    names = tuple(f"emnist-{split}-{part}-{kind}-ubyte"
                  for part in ("train", "test") for kind in ("images-idx3", "labels-idx1"))  # fmt: skip
    return FileLayout(
        display=f"EMNIST ({split})",
        folders=(os.path.join("EMNIST", "raw"),),
        files=names,
        advice="put the extracted idx files emnist-<split>-*-ubyte from https://biometrics.nist.gov/cs_links/"
        "EMNIST/gzip.zip (gzipped or not) in {root}/EMNIST/raw (torchvision's layout)",
        gz_ok=True,
    )


def _emnist_split(split: str) -> None:
    if split not in EMNIST_CLASSES:
        raise ValueError(f"emnist: split must be one of {', '.join(EMNIST_CLASSES)}, got {split!r}")


def check_emnist(root: str, split: str = "balanced", size: int | None = None, stats: str | None = None) -> None:
    """Checks the EMNIST ``split`` (one of byclass, bymerge, balanced, letters, digits, mnist) through."""
    _emnist_split(split)
    _check_idx("emnist", _emnist_layout(split), root, size, stats, EMNIST_CLASSES[split], counts=(None, None))


def load_emnist(root: str, split: str = "balanced", size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads one EMNIST split from ``<root>/EMNIST/raw``, images turned upright (the files store them transposed).

    Class names follow torchvision (``letters`` has 27 classes, class 0 unused).
    """
    _emnist_split(split)
    layout, classes = _emnist_layout(split), EMNIST_CLASSES[split]
    return _load_idx("emnist", layout, root, size, stats, classes, counts=(None, None), transposed=True)


# CIFAR-10 and CIFAR-100 -----------------------------------------------------------------------

CIFAR10_LAYOUT = FileLayout(
    display="CIFAR-10",
    folders=("cifar-10-batches-py",),
    files=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
    advice="put the extracted folder cifar-10-batches-py (from the python version, "
    "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) in {root}",
)
CIFAR100_LAYOUT = FileLayout(
    display="CIFAR-100",
    folders=("cifar-100-python",),
    files=("train", "test", "meta"),
    advice="put the extracted folder cifar-100-python (from the python version, "
    "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz) in {root}",
)


def _unpickle(path: str) -> dict:
    """A CIFAR file (a pickle of Python 2) read with fedray's allow-listed unpickler: the arrays,
    lists and strings it holds, and nothing that runs code (``fedray.datafile.SafeUnpickler``)."""
    from fedray.datafile import Refused, safe_unpickle

    try:
        with open(path, "rb") as stream:
            return safe_unpickle(stream, encoding="latin1")
    except Refused as err:
        raise DatasetFormatError(f"{path} is not a CIFAR pickle: {err} (nothing in it was run); replace it") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise DatasetFormatError(f"{path} is not a readable CIFAR pickle ({err}); replace it") from None


def _read_cifar_batches(paths: list[str], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    images, labels = [], []
    for path in paths:
        entry = _unpickle(path)
        if "data" not in entry or label_key not in entry:
            raise DatasetFormatError(f"{path} lacks the keys 'data' and '{label_key}'; replace it")
        images.append(np.asarray(entry["data"], np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(entry[label_key], np.int64))
    return np.concatenate(images), np.concatenate(labels)


def _load_cifar(
    name: str,
    layout: FileLayout,
    root: str,
    size: int | None,
    stats: str | None,
    label_key: str,
    names_key: str,
    default_classes: list[str],
) -> DatasetBundle:
    """Loads CIFAR-10 or -100 from the pickles of ``layout.files``: the train batches, the test batch, the meta file.

    ``label_key`` names the labels in a batch, ``names_key`` the class names in the meta file (else
    ``default_classes``).
    """
    paths = _locate(name, 3, layout, root, size, stats)
    *train_files, test_file, meta_file = layout.files
    train = _read_cifar_batches([paths[f] for f in train_files], label_key)
    test = _read_cifar_batches([paths[test_file]], label_key)
    classes = _unpickle(paths[meta_file]).get(names_key) or default_classes
    return _bundle(name, (*train, *test), classes, size, stats)


def check_cifar10(root: str, size: int | None = None, stats: str | None = None) -> None:
    """Checks that ``<root>/cifar-10-batches-py`` holds the five train batches, test batch and meta file."""
    _locate("cifar10", 3, CIFAR10_LAYOUT, root, size, stats)


def load_cifar10(root: str, size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads CIFAR-10 from ``<root>/cifar-10-batches-py``: 50000 / 10000 images of shape (3, 32, 32)."""
    return _load_cifar("cifar10", CIFAR10_LAYOUT, root, size, stats, "labels", "label_names", CIFAR10_CLASSES)


def check_cifar100(root: str, size: int | None = None, stats: str | None = None) -> None:
    """Checks that ``<root>/cifar-100-python`` holds ``train``, ``test`` and ``meta``."""
    _locate("cifar100", 3, CIFAR100_LAYOUT, root, size, stats)


def load_cifar100(root: str, size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads CIFAR-100 (fine labels) from ``<root>/cifar-100-python``: 50000 / 10000 images, 100 classes."""
    default = [str(i) for i in range(100)]
    return _load_cifar("cifar100", CIFAR100_LAYOUT, root, size, stats, "fine_labels", "fine_label_names", default)


# SVHN -----------------------------------------------------------------------------------------


def _svhn_layout(extra: bool) -> FileLayout:
    files = ("train_32x32.mat", "test_32x32.mat") + (("extra_32x32.mat",) if extra else ())
    return FileLayout(
        display="SVHN",
        folders=("svhn", ""),
        files=files,
        advice=f"put {', '.join(files)} (from http://ufldl.stanford.edu/housenumbers/) in {{root}}/svhn "
        "(or directly in {root}, torchvision's layout)",
    )


def _read_svhn(path: str) -> tuple[np.ndarray, np.ndarray]:
    from scipy.io import loadmat

    try:
        mat = loadmat(path)
        images, labels = mat["X"], mat["y"]
    except (ValueError, KeyError, OSError, TypeError) as err:
        raise DatasetFormatError(f"{path} is not a readable SVHN .mat file ({err}); replace it") from None
    # X is (H, W, C, N); the digit 0 is stored as label 10.
    return np.ascontiguousarray(images.transpose(3, 2, 0, 1), np.uint8), labels.reshape(-1).astype(np.int64) % 10


def check_svhn(root: str, extra: bool = False, size: int | None = None, stats: str | None = None) -> None:
    """Checks that the SVHN ``.mat`` files exist in ``<root>/svhn`` or ``<root>``."""
    _locate("svhn", 3, _svhn_layout(bool(extra)), root, size, stats)


def load_svhn(root: str, extra: bool = False, size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads SVHN (73257 train, 26032 test, shape (3, 32, 32)); ``extra=True`` adds the 531131 extra images to train."""
    paths = _locate("svhn", 3, _svhn_layout(bool(extra)), root, size, stats)
    train = [_read_svhn(paths["train_32x32.mat"])] + ([_read_svhn(paths["extra_32x32.mat"])] if extra else [])
    train_x, train_y = np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train])
    return _bundle("svhn", (train_x, train_y, *_read_svhn(paths["test_32x32.mat"])), list(string.digits), size, stats)


# STL-10 ---------------------------------------------------------------------------------------


def _stl10_layout(split: str) -> FileLayout:
    train_files = {"train": ("train_X.bin", "train_y.bin"), "unlabeled": ("unlabeled_X.bin",)}
    files = tuple(f for part in split.split("+") for f in train_files[part]) + ("test_X.bin", "test_y.bin")
    return FileLayout(
        display="STL-10",
        folders=("stl10_binary",),
        files=files,
        advice="put the extracted folder stl10_binary (from http://ai.stanford.edu/~acoates/stl10/"
        "stl10_binary.tar.gz) in {root}",
    )


STL10_IMAGE_BYTES = 3 * 96 * 96


def _stl10_images(path: str) -> int:
    """The number of images in an STL-10 ``*_X.bin`` file, from its size (one that is not a whole
    number of images is refused)."""
    size = os.path.getsize(path)
    if size % STL10_IMAGE_BYTES:
        raise DatasetFormatError(f"{path} has {size} bytes, not a multiple of 3*96*96; replace it")
    return size // STL10_IMAGE_BYTES


def _check_stl10_files(paths: dict[str, str], split: str) -> None:
    """The image files hold whole images, and each labels file one label in 1 .. 10 per image."""
    for part in split.split("+") + ["test"]:
        images = _stl10_images(paths[f"{part}_X.bin"])
        if part == "unlabeled":
            continue
        labels = paths[f"{part}_y.bin"]
        y = np.fromfile(labels, dtype=np.uint8)
        if len(y) != images:
            raise DatasetFormatError(f"{labels} has {len(y)} labels for {images} images; replace it")
        if y.size and (y.min() < 1 or y.max() > len(STL10_CLASSES)):
            bad = int(y.min() if y.min() < 1 else y.max())
            raise DatasetFormatError(f"{labels} holds the label {bad}; STL-10 stores labels 1 .. "
                                     f"{len(STL10_CLASSES)}; replace it")


def _read_stl10_images(path: str) -> np.ndarray:
    _stl10_images(path)
    return np.fromfile(path, dtype=np.uint8).reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)  # stored column-major


def _read_stl10_part(paths: dict[str, str], part: str) -> tuple[np.ndarray, np.ndarray]:
    if part == "unlabeled":
        x = _read_stl10_images(paths["unlabeled_X.bin"])
        return x, np.full(len(x), -1, np.int64)
    x = _read_stl10_images(paths[f"{part}_X.bin"])
    y = np.fromfile(paths[f"{part}_y.bin"], dtype=np.uint8).astype(np.int64) - 1  # stored as 1..10
    if len(y) != len(x):
        raise DatasetFormatError(f"{paths[f'{part}_y.bin']} has {len(y)} labels for {len(x)} images; replace it")
    return x, y


def _stl10_split(split: str) -> None:
    if split not in STL10_SPLITS:
        raise ValueError(f"stl10: split must be one of {', '.join(STL10_SPLITS)}, got {split!r}")


def check_stl10(root: str, split: str = "train", size: int | None = None, stats: str | None = None) -> None:
    """Checks that ``<root>/stl10_binary`` holds the files of ``split`` and the test split, of whole
    images and one label in range for each (from the sizes and the small labels files)."""
    _stl10_split(split)
    _check_stl10_files(_locate("stl10", 3, _stl10_layout(split), root, size, stats), split)


def load_stl10(root: str, split: str = "train", size: int | None = None, stats: str | None = None) -> DatasetBundle:
    """Loads STL-10 (shape (3, 96, 96) unless resized): ``split`` picks the training part, the test part is
    always the 8000 labelled test images.

    Args:
        root: Data root holding ``stl10_binary/``.
        split: ``"train"`` (5000 labelled), ``"unlabeled"`` (100000, labels -1) or ``"train+unlabeled"``.
        size: Optional side length, e.g. 32 for use as auxiliary data next to CIFAR-10.
        stats: Optional name of another set whose channel statistics to normalise with, e.g. ``"cifar10"``.
    """
    _stl10_split(split)
    paths = _locate("stl10", 3, _stl10_layout(split), root, size, stats)
    train = [_read_stl10_part(paths, part) for part in split.split("+")]
    train_x, train_y = np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train])
    return _bundle("stl10", (train_x, train_y, *_read_stl10_part(paths, "test")), STL10_CLASSES, size, stats)


# Training-set sizes ------------------------------------------------------------------------------


def train_size(name: str, root: str, **options) -> int:
    """How many training images ``load_dataset(name, root, **options)`` holds, without loading them:
    the idx header of the training labels for the MNIST family, the image files' sizes for STL-10,
    :data:`TRAIN_COUNTS` for the others.
    ``options``: the loader's, every one given (``fedray.data.train_size`` fills in the defaults);
    only ``split`` (EMNIST, STL-10) and ``extra`` (SVHN) change the count."""
    if name in ("fashion_mnist", "mnist", "emnist"):
        layout = {"fashion_mnist": FASHION_MNIST_LAYOUT, "mnist": MNIST_LAYOUT}.get(name)
        layout = layout or _emnist_layout(options["split"])
        return idx_length(locate(layout, root)[layout.files[1]])
    if name == "svhn":
        return TRAIN_COUNTS["svhn"] + (TRAIN_COUNTS["svhn extra"] if options["extra"] else 0)
    if name == "stl10":
        paths = locate(_stl10_layout(options["split"]), root)
        return sum(_stl10_images(paths[f"{part}_X.bin"]) for part in options["split"].split("+"))
    return TRAIN_COUNTS[name]
