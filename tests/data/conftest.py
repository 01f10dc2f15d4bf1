"""Shared fixtures for the data tests: the real Fashion-MNIST files installed by Debian's
``dataset-fashion-mnist`` package under /usr/share/datasets/fashion-mnist."""

import os

import numpy as np
import pytest

from fedray.data import load_dataset
from fedray.data.files import read_idx

FMNIST_ROOT = "/usr/share/datasets"
FMNIST_DIR = os.path.join(FMNIST_ROOT, "fashion-mnist")


@pytest.fixture(scope="session")
def fmnist_labels() -> np.ndarray:
    """The 60000 Fashion-MNIST training labels (read alone: cheap)."""
    path = os.path.join(FMNIST_DIR, "train-labels-idx1-ubyte.gz")
    return read_idx(path, (60000,)).astype(np.int64)


@pytest.fixture(scope="session")
def fmnist():
    """The whole Fashion-MNIST bundle, loaded once."""
    return load_dataset("fashion_mnist", root=FMNIST_ROOT)
