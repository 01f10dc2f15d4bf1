"""Wisconsin Diagnostic Breast Cancer (WDBC), as a fedray data set built from arrays.

569 real samples (212 malignant, 357 benign), 30 features each (mean, standard error and worst
value of ten measurements of cell nuclei), shipped inside scikit-learn, so nothing is downloaded
(``sklearn.datasets.load_breast_cancer``; Street, Wolberg and Mangasarian 1993, UCI repository).

A config names the loader ``data.dataset: wdbc_data:load``; fedray calls it with ``data.options`` as
keywords and splits the training part among the clients with its own partitioners.
"""

from __future__ import annotations

import numpy as np


def load(test_fraction: float = 0.25, seed: int = 0) -> dict:
    """The train and test arrays.

    A seeded permutation puts ``test_fraction`` of the samples into the test part; every feature is
    then standardised with the mean and standard deviation of the training part alone (the test
    part is not looked at), so that no statistic of the test samples leaks into training.

    Returns:
        ``train_x`` (N, 30) float32, ``train_y`` (N,) int64, ``test_x``, ``test_y``, ``num_classes``
        (2) and ``classes`` (``["malignant", "benign"]``: label 0 is malignant, as in scikit-learn).
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie between 0 and 1, got {test_fraction}")
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x, y = data.data.astype(np.float64), data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    std[std == 0] = 1.0  # a constant feature stays 0 rather than dividing by zero
    scale = lambda part: ((x[part] - mean) / std).astype(np.float32)  # noqa: E731
    return {"train_x": scale(train), "train_y": y[train], "test_x": scale(test), "test_y": y[test],
            "num_classes": 2, "classes": [str(c) for c in data.target_names]}
