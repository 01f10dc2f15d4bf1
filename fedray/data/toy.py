"""Small data sets shipped with scikit-learn: 8x8 digits and iris, with fixed stratified splits."""

from __future__ import annotations

import numpy as np

from fedray.data.bundle import DatasetBundle


TRAIN_SIZES = {"digits": 1347, "iris": 100}  # the training parts of the fixed splits below


def _split(x: np.ndarray, y: np.ndarray, test_size: float) -> tuple[np.ndarray, ...]:
    """Deterministic stratified train/test split (random_state=0)."""
    from sklearn.model_selection import train_test_split  # imported on use: keeps `import fedray.data` light

    return train_test_split(x, y, test_size=test_size, stratify=y, random_state=0)


def load_digits_bundle() -> DatasetBundle:
    """scikit-learn's 1797 8x8 digits, shape (1, 8, 8), 75/25 stratified split.

    Pixels are scaled by 1/16 (their maximum), then standardised with the scalar mean and standard
    deviation of the training pixels (per channel; per-pixel statistics are undefined for the
    always-blank border pixels).
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    train_x, test_x, train_y, test_y = _split(data.data / 16.0, data.target, 0.25)
    mean, std = train_x.mean(), train_x.std()
    return DatasetBundle(
        name="digits",
        train_x=((train_x - mean) / std).reshape(-1, 1, 8, 8).astype(np.float32),
        train_y=train_y.astype(np.int64),
        test_x=((test_x - mean) / std).reshape(-1, 1, 8, 8).astype(np.float32),
        test_y=test_y.astype(np.int64),
        num_classes=10,
        input_shape=(1, 8, 8),
        classes=[str(d) for d in range(10)],
    )


def load_iris_bundle() -> DatasetBundle:
    """scikit-learn's iris: 150 samples of 4 features, 2/3-1/3 stratified split, features standardised
    with the training mean and standard deviation."""
    from sklearn.datasets import load_iris

    data = load_iris()
    train_x, test_x, train_y, test_y = _split(data.data, data.target, 1 / 3)
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)
    return DatasetBundle(
        name="iris",
        train_x=((train_x - mean) / std).astype(np.float32),
        train_y=train_y.astype(np.int64),
        test_x=((test_x - mean) / std).astype(np.float32),
        test_y=test_y.astype(np.int64),
        num_classes=3,
        input_shape=(4,),
        classes=list(data.target_names),
    )
