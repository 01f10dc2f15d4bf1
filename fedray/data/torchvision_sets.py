"""A torch ``Dataset`` class, such as torchvision's, as a fedray data set (the ``fedray[vision]`` extra).

``data.dataset: torchvision.datasets:CIFAR10`` (with ``data.root``) is read by making the class twice,
``cls(root=ROOT, train=True/False, download=False, **data.options)`` (``split="train"/"test"`` for a
class that takes ``split`` and no ``train``, such as SVHN and STL10), and turning the two parts into
arrays:

- fast path: a part whose ``.data`` is a uint8 array of images, NHW (MNIST family), NHWC (CIFAR) or
  NCHW (SVHN, STL10), and whose ``.targets`` (or ``.labels``) holds the labels;
- otherwise every item is read, its image through ``transforms.v2`` ``ToImage`` and
  ``ToDtype(float32, scale=True)``: all images must have one size.

Inputs are scaled to [0, 1] and then normalised per channel with the mean and standard deviation of
the training part, computed from the data (``(x - mean) / std``, as ``fedray.data.images`` does with
the published statistics; on the whole of CIFAR-10 the two agree to about 1e-4).

Nothing is downloaded. A class that does not find its files is one :class:`DatasetNotFoundError` line
naming the folder and the file to put there. Two forms torchvision itself reads only after a download
are unpacked first: a root holding CIFAR's archive (``cifar-10-python.tar.gz``) but not its folder
(``cifar-10-batches-py``), and an MNIST-family ``raw`` folder with gzipped idx files only. They are
unpacked into the root, or, where it cannot be written, into ``$FEDRAY_CACHE/datasets/...``
(default ``~/.cache/fedray``), once. fedray checks that CIFAR's files are there and parse, not their
MD5 sums against the official release, so a set of one's own in CIFAR's layout loads too; a damaged
file is a :class:`DatasetFormatError` line.
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from fedray.data.bundle import DatasetBundle, DatasetFormatError, DatasetNotFoundError
from fedray.data.images import to_float_nchw

# keywords fedray sets itself (or that take callables, not config values)
FIXED = ("self", "root", "train", "download", "transform", "target_transform", "transforms")
_CHUNK = 4096


def _parameters(cls: type) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword parameters of ``cls``'s constructor, following ``**kwargs`` into the base classes'
    (EMNIST passes ``train`` on to MNIST), and whether an unresolved ``**kwargs`` remains."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        if klass is object:
            return params, True
        try:
            signature = inspect.signature(init)
        except (TypeError, ValueError):
            return params, True
        open_ended = False
        for name, p in signature.parameters.items():
            if p.kind is p.VAR_KEYWORD:
                open_ended = True
            elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in params:
                params[name] = p
        if not open_ended:
            return params, False
    return params, True


def _split_keyword(params: dict[str, inspect.Parameter]) -> str | None:
    """``train`` or ``split``: how the class is asked for its training or test part."""
    if "train" in params:
        return "train"
    return "split" if "split" in params else None


def options_of(cls: type) -> dict[str, Any] | None:
    """The constructor's keyword options besides ``root``, ``train``, ``download`` and the transforms
    (and ``split`` where it chooses the part), with their defaults (None for a required one); None
    when the constructor takes any keyword."""
    params, open_ended = _parameters(cls)
    if open_ended:
        return None
    chooser = _split_keyword(params)
    return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in params.items()
            if n not in FIXED and n != chooser}


def load_dataset_class(spec: str, cls: type, root: str, **options: Any) -> DatasetBundle:
    """Both parts of the data set ``cls`` reads from ``root`` as a normalised DatasetBundle (module
    docstring).

    Raises:
        DatasetNotFoundError: its files are not under ``root`` (one line: which file, where).
        DatasetFormatError: a file is there but cannot be read.
        ValueError: a required option is missing, or the class gives no images fedray can use.
    """
    params, _ = _parameters(cls)
    chooser = _split_keyword(params)
    if chooser is None:
        raise ValueError(f"data set {spec}: its constructor takes neither train= nor split=, so fedray cannot ask "
                         f"for its training and test parts; write a loader function (docs/extending.md)")
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in FIXED
               and n != chooser and n not in options]
    if missing:
        raise ValueError(f"data set {spec}: give its option {missing[0]!r} in data.options")
    root = _unpacked(cls, os.path.expanduser(root))
    parts = []
    for train in (True, False):
        choice = train if chooser == "train" else ("train" if train else "test")
        parts.append(_make(spec, cls, root, {chooser: choice, "download": False, **options}))
    (train_x, train_y, classes), (test_x, test_y, _) = (_arrays(spec, part) for part in parts)
    if train_x.shape[1:] != test_x.shape[1:]:
        raise DatasetFormatError(f"data set {spec}: training images of shape {train_x.shape[1:]} but test images "
                                 f"of shape {test_x.shape[1:]}")
    if not len(train_y):
        raise DatasetFormatError(f"data set {spec}: its training part holds no images")
    labels = np.concatenate([train_y, test_y])
    num_classes = len(classes) if classes is not None else int(labels.max()) + 1
    if labels.min() < 0 or labels.max() >= num_classes or num_classes < 2:
        raise DatasetFormatError(f"data set {spec}: labels from {labels.min()} to {labels.max()} for {num_classes} "
                                 f"classes; fedray needs labels 0 .. num_classes - 1 (at least 2 classes)")
    mean, std = channel_stats(train_x)
    train_x, test_x = (normalise(x, mean, std) for x in (train_x, test_x))
    return DatasetBundle(name=spec, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                         num_classes=num_classes, input_shape=tuple(train_x.shape[1:]), classes=classes)


def _make(spec: str, cls: type, root: str, kwargs: dict[str, Any]) -> Any:
    """``cls(root=root, **kwargs)``, its errors as one line each."""
    if "transform" in _parameters(cls)[0]:
        kwargs["transform"] = _to_tensor()
    try:
        return _without_checksums(cls)(root=root, **kwargs)
    except RuntimeError as err:
        if "download=True" in str(err) or "not found" in str(err).lower():
            raise DatasetNotFoundError(_not_found(spec, cls, root)) from None
        raise DatasetFormatError(f"data set {spec}: reading {root} failed: {_first_line(err)}") from None
    except FileNotFoundError as err:
        raise DatasetNotFoundError(f"data set {spec}: {err.filename or _first_line(err)} is missing; "
                                   f"{_not_found(spec, cls, root)}") from None
    except TypeError as err:
        raise ValueError(f"data set {spec}: {cls.__name__}(root={root!r}, ...) refused its options: "
                         f"{_first_line(err)}") from None
    except ValueError as err:  # a bad option value (torchvision's verify_str_arg), or a damaged file
        raise ValueError(f"data set {spec}: {cls.__name__} failed on {root}: {_first_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - a damaged file: pickle, zlib, numpy errors
        raise DatasetFormatError(f"data set {spec}: reading {root} failed: {type(err).__name__}: "
                                 f"{_first_line(err)}; replace the files") from None


def _without_checksums(cls: type) -> type:
    """``cls``, or for a class that checks its files' MD5 sums against the official release (CIFAR's
    ``train_list``, ``test_list`` and ``meta``), a subclass that checks only that they are there."""
    attrs: dict[str, Any] = {}
    for name in ("train_list", "test_list"):
        entries = getattr(cls, name, None)
        if isinstance(entries, list) and all(isinstance(e, (list, tuple)) and len(e) == 2 for e in entries):
            attrs[name] = [[entry[0], None] for entry in entries]
    meta = getattr(cls, "meta", None)
    if attrs and isinstance(meta, dict) and "md5" in meta:
        attrs["meta"] = {**meta, "md5": None}
    return type(cls.__name__, (cls,), {**attrs, "__module__": cls.__module__}) if attrs else cls


def _to_tensor() -> Any:
    """The transform of the slow path: an item's image as a float32 CHW tensor in [0, 1]."""
    from torchvision.transforms import v2
    import torch

    return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])


def _arrays(spec: str, part: Any) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """The part's images (uint8 NCHW, or float32 NCHW in [0, 1]), labels and class names."""
    data = getattr(part, "data", None)
    labels = getattr(part, "targets", getattr(part, "labels", None))
    images = _uint8_nchw(data)
    if images is not None and labels is not None and len(labels) == len(images):
        y = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels, dtype=np.int64)
    else:
        images, y = _items(spec, part)
    classes = getattr(part, "classes", None)
    classes = [str(c) for c in classes] if classes is not None and len(classes) else None
    return images, y, classes


def _uint8_nchw(data: Any) -> np.ndarray | None:
    """``.data`` as uint8 NCHW when it is a uint8 array of NHW, NHWC or NCHW images, else None."""
    if data is None or not hasattr(data, "shape"):
        return None
    array = data.numpy() if hasattr(data, "numpy") else data
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8:
        return None
    if array.ndim == 3:
        return array[:, None]
    if array.ndim == 4 and array.shape[-1] in (1, 3) and array.shape[1] not in (1, 3):
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
    if array.ndim == 4 and array.shape[1] in (1, 3):
        return array
    return None


def _items(spec: str, part: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every item of the part, read one by one (the slow path)."""
    import torch

    xs, ys = [], []
    for i in range(len(part)):
        x, y = part[i]
        if not isinstance(x, torch.Tensor) or x.ndim != 3:
            raise ValueError(f"data set {spec}: item {i} gives {type(x).__name__}, not an image fedray can read")
        if xs and x.shape != xs[0].shape:
            raise ValueError(f"data set {spec}: item {i} is an image of shape {tuple(x.shape)}, item 0 of "
                             f"{tuple(xs[0].shape)}; fedray needs one size (resize them in a loader function)")
        xs.append(x)
        ys.append(int(y))
    if not xs:
        raise ValueError(f"data set {spec}: it holds no items")
    return torch.stack(xs).numpy().astype(np.float32, copy=False), np.asarray(ys, dtype=np.int64)


def channel_stats(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of NCHW images scaled to [0, 1] (uint8 over 255)."""
    scale = 255.0 if images.dtype == np.uint8 else 1.0
    total = np.zeros(images.shape[1])
    squares = np.zeros(images.shape[1])
    for start in range(0, len(images), _CHUNK):
        chunk = images[start:start + _CHUNK].astype(np.float64) / scale
        total += chunk.sum(axis=(0, 2, 3))
        squares += np.square(chunk).sum(axis=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0.0))
    std = np.where(std > 0, std, 1.0)  # a constant channel is only shifted
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def normalise(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``(x - mean) / std`` per channel of the images scaled to [0, 1], float32."""
    if images.dtype == np.uint8:
        return to_float_nchw(images, mean, std)
    c = images.shape[1]
    return ((images - np.asarray(mean, np.float32).reshape(1, c, 1, 1))
            / np.asarray(std, np.float32).reshape(1, c, 1, 1)).astype(np.float32, copy=False)


# -- what to put where, and unpacking what torchvision would unpack after a download ----------------------------

def _not_found(spec: str, cls: type, root: str) -> str:
    """One line: the file the class looks for first that is missing under ``root``, and what to put there."""
    name = cls.__name__
    folder, files = _expected(cls, root)
    if folder is not None:
        missing = next((f for f in files if not os.path.isfile(os.path.join(folder, f))), files[0] if files else "")
        where = os.path.join(folder, missing) if missing else folder
        archive = getattr(cls, "filename", None)
        if archive and getattr(cls, "base_folder", None):
            url = getattr(cls, "url", None)
            return (f"data set {spec}: {where} is missing; put {archive}{f' ({url})' if url else ''} or the folder "
                    f"{cls.base_folder} it unpacks to in {root}")
        return (f"data set {spec}: {where} is missing; put the files {', '.join(files)} (gzipped or not) in {folder}, "
                f"as torchvision's {name}(download=True) leaves them")
    return (f"data set {spec}: torchvision's {name} found no files under {root}; put them where {name}(root={root!r}, "
            f"download=True) would, or set data.root to the folder that holds them")


def _expected(cls: type, root: str) -> tuple[str | None, list[str]]:
    """The folder the class reads its files from and their names, for the classes whose layout is known."""
    base = getattr(cls, "base_folder", None)
    lists = [getattr(cls, a, None) for a in ("train_list", "test_list")]
    if base and all(isinstance(entries, list) for entries in lists):  # CIFAR-10/100
        files = [entry[0] for entries in lists for entry in entries]
        meta = getattr(cls, "meta", None)
        if isinstance(meta, dict) and "filename" in meta:
            files.append(meta["filename"])
        return os.path.join(root, base), files
    resources = getattr(cls, "resources", None)
    if isinstance(resources, list) and resources and all(isinstance(r, tuple) for r in resources) \
            and issubclass(_defining(cls, "resources"), _defining(cls, "_check_exists")):
        # the MNIST family (not EMNIST, which reads other files than the resources it inherits)
        files = [os.path.basename(url).removesuffix(".gz") for url, *_ in resources]
        return os.path.join(root, cls.__name__, "raw"), files
    return None, []


def _defining(cls: type, attribute: str) -> type:
    """The class of ``cls``'s MRO that defines ``attribute`` (object when none does)."""
    return next((k for k in cls.__mro__ if attribute in vars(k)), object)


def _unpacked(cls: type, root: str) -> str:
    """The root to make the class with: ``root``, or a cache folder where what torchvision would unpack
    after a download (module docstring) had to be unpacked elsewhere."""
    folder, files = _expected(cls, root)
    if folder is None or all(os.path.isfile(os.path.join(folder, f)) for f in files):
        return root
    cache = _cache_root(root)
    cached_folder, _ = _expected(cls, cache)
    if all(os.path.isfile(os.path.join(cached_folder, f)) for f in files):
        return cache
    archive = getattr(cls, "filename", None)
    if getattr(cls, "base_folder", None) and archive:
        path = os.path.join(root, archive)
        if not os.path.isdir(folder) and os.path.isfile(path):
            target = root if _writable(root) else cache
            _extract(path, target, cls.base_folder)
            return target
        return root
    sources = [os.path.join(folder, f + ".gz") for f in files]
    if not all(os.path.isfile(os.path.join(folder, f)) or os.path.isfile(s) for f, s in zip(files, sources)):
        return root  # some file is missing either way: the class says which
    target = root if _writable(folder) else cache
    out = os.path.join(target, cls.__name__, "raw")
    os.makedirs(out, exist_ok=True)
    for f, source in zip(files, sources):
        plain = os.path.join(folder, f)
        if not os.path.isfile(os.path.join(out, f)):
            _gunzip(plain if os.path.isfile(plain) else source, os.path.join(out, f))
    return target


def _cache_root(root: str) -> str:
    base = os.environ.get("FEDRAY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "fedray")
    digest = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:16]
    return os.path.join(base, "datasets", digest)


def _writable(folder: str) -> bool:
    return os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)


def _extract(archive: str, target: str, folder: str) -> None:
    """Unpack ``archive`` (which holds ``folder``) into ``target``, atomically: parallel processes
    (actors loading the same set) may unpack it at once, and one of them wins."""
    from torchvision.datasets.utils import extract_archive

    os.makedirs(target, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".fedray-unpack-", dir=target)
    try:
        try:
            extract_archive(archive, scratch)
        except Exception as err:  # noqa: BLE001 - a damaged archive: tarfile, gzip, zlib errors
            raise DatasetFormatError(f"{archive} cannot be unpacked: {type(err).__name__}: {_first_line(err)}; "
                                     f"replace it") from None
        if not os.path.isdir(os.path.join(scratch, folder)):
            raise DatasetFormatError(f"{archive} holds no folder {folder}; replace it")
        try:
            os.rename(os.path.join(scratch, folder), os.path.join(target, folder))
        except OSError:
            if not os.path.isdir(os.path.join(target, folder)):  # else another process unpacked it first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _gunzip(source: str, out: str) -> None:
    """Copy ``source`` (gzipped when it ends in .gz) to ``out`` unpacked, atomically."""
    tmp = f"{out}.{os.getpid()}.tmp"
    try:
        with (gzip.open(source, "rb") if source.endswith(".gz") else open(source, "rb")) as f, open(tmp, "wb") as g:
            shutil.copyfileobj(f, g)
    except (OSError, EOFError) as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise DatasetFormatError(f"{source} cannot be unpacked: {_first_line(err)}; replace it") from None
    os.replace(tmp, out)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
