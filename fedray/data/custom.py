"""A user's data set, named by import path (``data.dataset: my_pkg.data:load``).

The loader is a function called with ``data.options`` as keywords (and ``root=``, the data root,
when its signature names it). It returns the whole set as arrays, which fedray's partitioners then
split among the clients:

- a dict with ``train_x``, ``train_y``, ``test_x``, ``test_y`` and optionally ``num_classes`` and
  ``classes`` (class names), or
- a tuple ``(train_x, train_y, test_x, test_y)``, or
- a :class:`DatasetBundle`.

Inputs become float32 as they are (normalising is the loader's), labels int64 in
``0 .. num_classes - 1`` (``num_classes``: the largest label plus one unless given). Whatever the
loader returns, a bundle too, is checked before a run starts: as many labels as inputs, every label
in range (``-1``, unlabelled, only in a bundle's ``train_y``). A torch
``Dataset`` class, such as torchvision's ``CIFAR10``, is read through ``fedray.data.torchvision_sets``
(the ``fedray[vision]`` extra). The driver's check of the split loads the set once to count its
samples (:func:`custom_size`), so a loader should be quick to call twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from fedray.data.bundle import DatasetBundle
from fedray.plugins import first_line

KEYS = ("train_x", "train_y", "test_x", "test_y")
_sizes: dict[tuple, int] = {}  # (spec, root, options) -> training samples, counted once per process


def options_of(loader: Callable[..., Any]) -> dict[str, Any] | None:
    """The keyword options the loader takes with their defaults (``root`` apart); None when it takes any."""
    if _is_dataset_class(loader):
        from fedray.data.torchvision_sets import options_of as dataset_options

        return dataset_options(loader)
    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in params.items()
            if n != "root" and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}


def check_options(spec: str, loader: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Unknown options are a one-line ValueError naming the valid ones."""
    valid = options_of(loader)
    unknown = sorted(set(options) - set(valid)) if valid is not None else []
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for data set {spec!r}; valid options: "
                         f"{', '.join(valid) or 'none'}")


def load_custom(spec: str, loader: Callable[..., Any], root: str, **options: Any) -> DatasetBundle:
    """The set ``loader`` returns, checked and converted (module docstring). Raises ValueError (one
    line) for a loader that fails or returns something else."""
    check_options(spec, loader, options)
    if _is_dataset_class(loader):
        from fedray.data.torchvision_sets import load_dataset_class

        bundle = load_dataset_class(spec, loader, root, **options)
    else:
        wants_root = "root" in inspect.signature(loader).parameters
        try:
            out = loader(**({"root": root} if wants_root else {}), **options)
        except (FileNotFoundError, ValueError) as err:  # the loader's own one-line errors, named
            raise type(err)(f"data set {spec}: {first_line(err)}") from None
        except Exception as err:  # noqa: BLE001 - whatever the user's loader raises: one line
            raise ValueError(f"data set {spec}: the loader failed: {type(err).__name__}: {first_line(err)}") from None
        bundle = to_bundle(spec, out)
    check_bundle(spec, bundle)
    return bundle


def check_bundle(spec: str, bundle: DatasetBundle) -> None:
    """A set's arrays agree: as many labels as inputs in each part, every label in ``0 .. num_classes
    - 1`` (or ``-1``, an unlabelled training sample: ``DatasetBundle``'s mark), so that a bad label is
    found before a run starts, not by the loss of a client mid-run. ValueError (one line) otherwise."""
    k = bundle.num_classes
    for part, x, y, low in (("train", bundle.train_x, bundle.train_y, -1), ("test", bundle.test_x, bundle.test_y, 0)):
        if len(x) != len(y):
            raise ValueError(f"data set {spec}: {part}_x has {len(x)} samples but {part}_y has {len(y)} labels; "
                             f"give one label per sample")
        if not y.size:
            continue
        bad = y[(y < low) | (y >= k)]
        if bad.size:
            unlabelled = " (or -1, unlabelled)" if low < 0 else ""
            raise ValueError(f"data set {spec}: {part}_y holds the label {int(bad[0])}, outside 0 .. {k - 1}"
                             f"{unlabelled} for num_classes = {k}")


def custom_size(spec: str, loader: Callable[..., Any], root: str, **options: Any) -> int:
    """The number of training samples: the set is loaded (once per process and options) and counted."""
    key = (spec, root, repr(sorted(options.items())))
    if key not in _sizes:
        _sizes[key] = len(load_custom(spec, loader, root, **options).train_y)
    return _sizes[key]


def to_bundle(spec: str, out: Any) -> DatasetBundle:
    """A loader's return value as a DatasetBundle (module docstring); ValueError (one line) otherwise."""
    if isinstance(out, DatasetBundle):
        return out
    if isinstance(out, Mapping):
        missing = [k for k in KEYS if k not in out]
        if missing:
            raise ValueError(f"data set {spec}: the loader's dict lacks {', '.join(missing)} "
                             f"(it needs {', '.join(KEYS)}, and may give num_classes and classes)")
        parts, extra = [out[k] for k in KEYS], out
    elif isinstance(out, (tuple, list)) and len(out) == 4:
        parts, extra = list(out), {}
    else:
        raise ValueError(f"data set {spec}: the loader returned {type(out).__name__}; return a dict with "
                         f"{', '.join(KEYS)}, or the tuple (train_x, train_y, test_x, test_y)")
    try:
        train_x, test_x = (np.asarray(a, dtype=np.float32) for a in parts[0::2])
        train_y, test_y = (np.asarray(a) for a in parts[1::2])
    except (TypeError, ValueError) as err:
        raise ValueError(f"data set {spec}: its arrays cannot be read as numbers: {first_line(err)}") from None
    for part, y in (("train_y", train_y), ("test_y", test_y)):
        if y.ndim != 1 or (y.size and (not np.issubdtype(y.dtype, np.integer) and not np.all(np.mod(y, 1) == 0))):
            raise ValueError(f"data set {spec}: {part} must be a vector of integer class labels, "
                             f"got shape {y.shape} of {y.dtype}")
        if y.size and y.min() < 0:
            raise ValueError(f"data set {spec}: {part} holds the label {int(y.min())}; labels are 0 .. num_classes - 1")
    for part, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if (len(x) if x.ndim else 0) != len(y):
            raise ValueError(f"data set {spec}: {part}_x has {len(x) if x.ndim else 0} samples but {part}_y has "
                             f"{len(y)} labels; give one label per sample")
    if not len(train_y) or train_x.ndim < 2:
        raise ValueError(f"data set {spec}: train_x must hold at least one sample as (N, *input_shape), "
                         f"got shape {train_x.shape}")
    if not np.all(np.isfinite(train_x)) or not np.all(np.isfinite(test_x)):
        raise ValueError(f"data set {spec}: the inputs hold NaN or Inf")
    largest = int(max(train_y.max(), test_y.max() if test_y.size else 0))
    num_classes = int(extra.get("num_classes", largest + 1))
    if largest >= num_classes or num_classes < 2:
        raise ValueError(f"data set {spec}: num_classes = {num_classes}, but the labels go up to {largest} "
                         f"(at least 2 classes)")
    classes = extra.get("classes")
    if classes is not None and len(classes) != num_classes:
        raise ValueError(f"data set {spec}: {len(classes)} class names for {num_classes} classes")
    return DatasetBundle(name=spec, train_x=train_x, train_y=train_y.astype(np.int64), test_x=test_x,
                         test_y=test_y.astype(np.int64), num_classes=num_classes,
                         input_shape=tuple(train_x.shape[1:]), classes=list(classes) if classes is not None else None)


def _is_dataset_class(obj: Any) -> bool:
    """Whether ``obj`` is a torch ``Dataset`` class (torchvision's data sets are), not a loader function."""
    if not isinstance(obj, type):
        return False
    from torch.utils.data import Dataset

    return issubclass(obj, Dataset)
