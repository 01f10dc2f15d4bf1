"""Data sets and their federated partitions.

- :mod:`fedray.data.datasets`: the registry (``load_dataset``, ``check_dataset``) and ``DatasetBundle``.
- :mod:`fedray.data.partition`: iid, Dirichlet (with Sinkhorn) and shard splits, balancedness (eq 2.5).
"""

from fedray.data.datasets import (
    DATASETS,
    DatasetBundle,
    DatasetFormatError,
    DatasetNotFoundError,
    DatasetSource,
    check_dataset,
    dataset_names,
    default_data_root,
    load_dataset,
    train_size,
)
from fedray.data.partition import (
    PARTITION_METHODS,
    balanced_sizes,
    dirichlet_split,
    iid_split,
    label_counts,
    partition,
    shard_split,
    sinkhorn,
)


__all__ = [
    "DATASETS",
    "PARTITION_METHODS",
    "DatasetBundle",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "DatasetSource",
    "balanced_sizes",
    "check_dataset",
    "dataset_names",
    "default_data_root",
    "dirichlet_split",
    "iid_split",
    "label_counts",
    "load_dataset",
    "partition",
    "shard_split",
    "sinkhorn",
    "train_size",
]
