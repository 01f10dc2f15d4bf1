"""The data-set registry: find, check and load a data set by name.

Nothing is downloaded at run time. Image sets are read from files under a data root
(:func:`default_data_root`), see :mod:`fedray.data.vision`; ``digits`` and ``iris`` ship with
scikit-learn; ``synthetic`` (FedProx's Synthetic(alpha, beta)) is generated and comes with its
natural client split.

Example:
    >>> check_dataset("fashion_mnist")          # reads the files through once: 0.3 s
    >>> train_size("fashion_mnist")             # 60000, from a file header
    >>> bundle = load_dataset("fashion_mnist")  # 60000 x 1 x 28 x 28 float32, ...
    >>> bundle = load_dataset("synthetic", alpha=0.5, beta=0.5, num_clients=30)
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from fedray.data import synthetic, toy, vision
from fedray.plugins import is_import_path
from fedray.data.bundle import DatasetBundle, DatasetFormatError, DatasetNotFoundError

__all__ = [
    "DATASETS",
    "DatasetBundle",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "DatasetSource",
    "check_dataset",
    "dataset_names",
    "default_data_root",
    "load_dataset",
    "train_size",
]

DEFAULT_DATA_ROOT = "/usr/share/datasets"


def default_data_root() -> str:
    """The data root: environment variable ``FEDRAY_DATA_ROOT`` if set, else ``/usr/share/datasets``."""
    return os.environ.get("FEDRAY_DATA_ROOT") or DEFAULT_DATA_ROOT


@dataclass(frozen=True)
class DatasetSource:
    """How to check and load one registered data set.

    Attributes:
        load: ``load(root, **options) -> DatasetBundle``.
        check: ``check(root, **options)``: options, files and their contents checked, nothing kept.
        description: One line for listings.
        size: ``size(root, **options)``: the number of training samples ``load`` returns, found
            cheaply (a file header, a known count), after ``check``; gets every option, defaults
            filled in.
    """

    load: Callable[..., DatasetBundle]
    check: Callable[..., None]
    description: str
    size: Callable[..., int]

    @property
    def options(self) -> Mapping[str, Any]:
        """The options ``load`` takes, with their defaults."""
        params = list(inspect.signature(self.load).parameters.values())[1:]
        return MappingProxyType({p.name: p.default for p in params})


def _no_root(load: Callable[..., DatasetBundle]) -> Callable[..., DatasetBundle]:
    """Adapts a loader that needs no files to the ``(root, **options)`` signature."""

    def load_ignoring_root(root: str, **options: Any) -> DatasetBundle:
        return load(**options)

    load_ignoring_root.__signature__ = inspect.Signature(
        [inspect.Parameter("root", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + list(inspect.signature(load).parameters.values())
    )
    return load_ignoring_root


def _check_synthetic(root: str, **options: Any) -> None:
    defaults = DATASETS["synthetic"].options
    merged = {**defaults, **options}
    synthetic.check_synthetic_options(*(merged[k] for k in ("alpha", "beta", "num_clients", "dim", "num_classes")))


def _always_present(root: str, **options: Any) -> None:
    """Check for data sets that ship with a package: nothing to look for."""


def _fixed_size(name: str) -> Callable[..., int]:
    return lambda root, **options: toy.TRAIN_SIZES[name]


def _image_size(name: str) -> Callable[..., int]:
    return partial(vision.train_size, name)


DATASETS: Mapping[str, DatasetSource] = MappingProxyType({
    "fashion_mnist": DatasetSource(vision.load_fashion_mnist, vision.check_fashion_mnist,
                                   "Fashion-MNIST, 60000/10000 28x28 grey images, 10 classes (idx files)",
                                   _image_size("fashion_mnist")),
    "mnist": DatasetSource(vision.load_mnist, vision.check_mnist, "MNIST, 60000/10000 28x28 digits",
                           _image_size("mnist")),
    "emnist": DatasetSource(vision.load_emnist, vision.check_emnist, "EMNIST (option split, default balanced)",
                            _image_size("emnist")),
    "cifar10": DatasetSource(vision.load_cifar10, vision.check_cifar10, "CIFAR-10, 50000/10000 32x32 colour images",
                             _image_size("cifar10")),
    "cifar100": DatasetSource(vision.load_cifar100, vision.check_cifar100, "CIFAR-100, 100 fine classes",
                              _image_size("cifar100")),
    "svhn": DatasetSource(vision.load_svhn, vision.check_svhn, "SVHN, 73257/26032 32x32 house numbers",
                          _image_size("svhn")),
    "stl10": DatasetSource(vision.load_stl10, vision.check_stl10, "STL-10, 96x96 (option split, e.g. unlabeled)",
                           _image_size("stl10")),
    "digits": DatasetSource(_no_root(toy.load_digits_bundle), _always_present, "scikit-learn 8x8 digits (1797)",
                            _fixed_size("digits")),
    "iris": DatasetSource(_no_root(toy.load_iris_bundle), _always_present, "scikit-learn iris (150, 4 features)",
                          _fixed_size("iris")),
    "synthetic": DatasetSource(_no_root(synthetic.load_synthetic), _check_synthetic,
                               "FedProx Synthetic(alpha, beta), generated, with a natural client split",
                               lambda root, **options: synthetic.train_size(**options)),
})  # fmt: skip


def dataset_names() -> list[str]:
    """Names of all registered data sets, sorted."""
    return sorted(DATASETS)


def _custom(name: str) -> DatasetSource:
    """A user's data set named by import path (``fedray.data.custom``)."""
    from fedray.data import custom
    from fedray.plugins import load_dataset_loader

    loader = load_dataset_loader(name)
    return DatasetSource(partial(custom.load_custom, name, loader),
                         lambda root, **options: custom.check_options(name, loader, options),
                         f"{name}, the user's", partial(custom.custom_size, name, loader))


def _resolve(name: str, options: Mapping[str, Any]) -> DatasetSource:
    """Looks ``name`` up and rejects unknown options, each with a one-line ValueError."""
    if is_import_path(name):
        source = _custom(name)
        source.check(default_data_root(), **options)
        return source
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid names: {', '.join(dataset_names())}")
    source = DATASETS[name]
    unknown = sorted(set(options) - set(source.options))
    if unknown:
        valid = ", ".join(source.options) or "none"
        raise ValueError(f"unknown option {unknown[0]!r} for data set {name!r}; valid options: {valid}")
    return source


def check_dataset(name: str, root: str | None = None, **options: Any) -> None:
    """Checks, without keeping anything, that a data set can be loaded: its options, its files there,
    and for the MNIST family's idx files and STL-10 their contents whole and consistent (counts that
    agree, labels within the classes; the idx files are read through once per process and file
    version, 0.3 s for Fashion-MNIST). A set of the user's is checked when its size is counted
    (``train_size`` loads it).

    Args:
        name: A registered name (see :func:`dataset_names`).
        root: Data root; :func:`default_data_root` when ``None``.
        **options: The data set's options (e.g. ``split="unlabeled"`` for ``stl10``).

    Raises:
        ValueError: Unknown name, unknown option or invalid option value (one line naming the valid ones).
        DatasetNotFoundError: Files are missing (one line saying what to put where).
        DatasetFormatError: A file is truncated, corrupt or inconsistent, or holds a label outside the
            classes (one line naming the file).
    """
    _resolve(name, options).check(root or default_data_root(), **options)


def train_size(name: str, root: str | None = None, **options: Any) -> int:
    """The number of training samples of a data set, without loading it (call :func:`check_dataset` first).

    Args:
        name: A registered name.
        root: Data root; :func:`default_data_root` when ``None``.
        **options: The data set's options (``split``, ``extra``, ``num_clients`` change the count).

    Raises:
        As :func:`check_dataset`, and DatasetFormatError for a file whose header is corrupt.
    """
    source = _resolve(name, options)
    defaults = {} if is_import_path(name) else source.options  # a user's loader fills in its own
    return source.size(root or default_data_root(), **{**defaults, **options})


def load_dataset(name: str, root: str | None = None, **options: Any) -> DatasetBundle:
    """Loads a data set into memory.

    Args:
        name: A registered name (see :func:`dataset_names`).
        root: Data root; :func:`default_data_root` when ``None``.
        **options: The data set's options.

    Returns:
        The data set as a :class:`DatasetBundle`.

    Raises:
        ValueError: As :func:`check_dataset`.
        DatasetNotFoundError: Files are missing.
        DatasetFormatError: A file is corrupt or truncated.
    """
    return _resolve(name, options).load(root or default_data_root(), **options)
