"""Finding a data set's files under the data root, and reading and checking idx files (the MNIST
family format).

Every failure becomes a one-line error that says what was looked for where and what to put where.
:func:`check_idx_pair` checks a pair of idx files through (truncated, corrupt, counts that disagree,
labels out of range) without keeping them, once per process and file version.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass

import numpy as np

from fedray.data.bundle import DatasetFormatError, DatasetNotFoundError


@dataclass(frozen=True)
class FileLayout:
    """Where a data set's files lie under the data root.

    Attributes:
        display: Human name, e.g. ``"CIFAR-10"``.
        folders: Candidate folders relative to the root (``""`` is the root itself), tried in order;
            all files must lie in one of them.
        files: File names that must all exist.
        advice: What to put where; ``{root}`` is replaced by the data root.
        gz_ok: Accept ``name.gz`` in place of ``name``.
    """

    display: str
    folders: tuple[str, ...]
    files: tuple[str, ...]
    advice: str
    gz_ok: bool = False


def _join(root: str, rel: str) -> str:
    return os.path.join(root, rel) if rel else root


def _find(folder: str, name: str, gz_ok: bool) -> str | None:
    for candidate in (name, name + ".gz") if gz_ok else (name,):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def _folder_report(folder: str, layout: FileLayout) -> str:
    if not os.path.isdir(folder):
        return f"{folder} (no such folder)"
    missing = [name for name in layout.files if _find(folder, name, layout.gz_ok) is None]
    return f"{folder} (missing {', '.join(missing)})"


def locate(layout: FileLayout, root: str) -> dict[str, str]:
    """Returns the path of every file of ``layout``, from the first folder that holds them all.

    Args:
        layout: What to look for.
        root: The data root.

    Returns:
        A mapping from each name in ``layout.files`` to its path (possibly ending in ``.gz``).

    Raises:
        DatasetNotFoundError: No candidate folder holds all files; the one-line message names the
            folders looked in, what is missing there, and what to put where.
    """
    for rel in layout.folders:
        folder = _join(root, rel)
        paths = {name: _find(folder, name, layout.gz_ok) for name in layout.files}
        if all(paths.values()):
            return paths
    looked = "; ".join(_folder_report(_join(root, rel), layout) for rel in layout.folders)
    raise DatasetNotFoundError(
        f"{layout.display} not found under {root}: looked in {looked}; "
        f"{layout.advice.format(root=root)}, or set data.root (or FEDRAY_DATA_ROOT) to the folder that holds it"
    )


def _read_bytes(path: str, hint: str) -> bytes:
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as stream:
            return stream.read()
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetFormatError(f"{path} is corrupt or truncated ({err}){hint}") from None


_checked: set[tuple] = set()  # the pairs check_idx_pair passed: (file versions, count, classes)
_CHUNK = 1 << 20


def _version(path: str) -> tuple:
    """What tells one version of a file from another: its path, size and modification time."""
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns


def _idx_header(path: str, ndim: int, hint: str) -> tuple[int, ...]:
    """The dimensions in a uint8 idx file's header, after checking its magic number."""
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as stream:
            head = stream.read(4 + 4 * ndim)
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetFormatError(f"{path} is corrupt or truncated ({err}){hint}") from None
    if len(head) < 4 + 4 * ndim or head[:3] != b"\x00\x00\x08" or head[3] != ndim:
        raise DatasetFormatError(f"{path} is not a uint8 idx file with {ndim} dimensions (magic number "
                                 f"{head[:4].hex() or 'missing'}, expected 000008{ndim:02x}){hint}")
    return tuple(int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))


def _data_length(path: str, hint: str) -> int:
    """The length of a file's content, a gzipped one decompressed through (its CRC checked), kept nowhere:
    0.3 s for Fashion-MNIST's 55 MB on one core."""
    if not path.endswith(".gz"):
        return os.path.getsize(path)
    buffer, total = bytearray(_CHUNK), 0
    try:
        with gzip.open(path, "rb") as stream:
            while n := stream.readinto(buffer):
                total += n
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetFormatError(f"{path} is corrupt or truncated ({err}){hint}") from None
    return total


def check_idx_pair(images: str, labels: str, shape: tuple[int | None, ...], num_classes: int, hint: str = "") -> int:
    """Checks an idx file of images and the idx file of their labels through, as loading them would
    find them: the images' header of ``shape`` (None: any size), their data whole (no byte missing or
    over, a gzipped file's CRC right), as many labels as images, each in ``0 .. num_classes - 1``.
    Nothing is kept; a pair that passed is not read again in this process while its files are unchanged.

    Returns:
        The number of images.

    Raises:
        DatasetFormatError: one line naming the file, what is wrong and ``hint`` (what to do).
    """
    key = (_version(images), _version(labels), shape, num_classes)
    dims = _idx_header(images, len(shape), hint)
    if key in _checked:
        return dims[0]
    if any(want is not None and want != got for want, got in zip(shape, dims)):
        raise DatasetFormatError(f"{images} holds an array of shape {dims}, expected {shape}{hint}")
    expected, found = 4 + 4 * len(dims) + math.prod(dims), _data_length(images, hint)
    if found != expected:
        raise DatasetFormatError(f"{images} is truncated or corrupt: {found} bytes of data, expected {expected} for "
                                 f"shape {dims}{hint}")
    y = read_idx(labels, (None,), hint)
    if len(y) != dims[0]:
        raise DatasetFormatError(f"{labels} holds {len(y)} labels for the {dims[0]} images of {images}{hint}")
    if y.size and int(y.max()) >= num_classes:
        raise DatasetFormatError(f"{labels} holds the label {int(y.max())}, and the data set has {num_classes} "
                                 f"classes, labels 0 .. {num_classes - 1}{hint}")
    _checked.add(key)
    return dims[0]


def idx_length(path: str) -> int:
    """The first dimension (the sample count) of an idx file (gzipped or not), from its header alone."""
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as stream:
            head = stream.read(8)
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetFormatError(f"{path} is corrupt or truncated ({err}); replace it") from None
    if len(head) < 8 or head[:3] != b"\x00\x00\x08" or head[3] < 1:
        raise DatasetFormatError(f"{path} is not a uint8 idx file (magic number {head[:4].hex() or 'missing'}); "
                                 "replace it")
    return int.from_bytes(head[4:8], "big")


def read_idx(path: str, shape: tuple[int | None, ...], hint: str = "") -> np.ndarray:
    """Reads a uint8 idx file (gzipped or not) and checks its magic number, size and shape.

    Args:
        path: File path; a name ending in ``.gz`` is decompressed.
        shape: Expected shape; ``None`` entries accept any size.
        hint: Text appended to error messages, e.g. how to replace the file.

    Returns:
        The array, dtype uint8, of the stored shape.

    Raises:
        DatasetFormatError: The file is truncated, corrupt, not a uint8 idx file or of another shape.
    """
    raw = _read_bytes(path, hint)
    ndim = len(shape)
    if len(raw) < 4 + 4 * ndim or raw[:2] != b"\x00\x00" or raw[2] != 0x08 or raw[3] != ndim:
        raise DatasetFormatError(
            f"{path} is not a uint8 idx file with {ndim} dimensions (magic number {raw[:4].hex() or 'missing'}, "
            f"expected 000008{ndim:02x}){hint}"
        )
    dims = tuple(int(d) for d in np.frombuffer(raw, ">i4", count=ndim, offset=4))
    expected = 4 + 4 * ndim + int(np.prod(dims))
    if len(raw) != expected:
        raise DatasetFormatError(
            f"{path} is truncated or corrupt: {len(raw)} bytes of data, expected {expected} for shape {dims}{hint}"
        )
    if any(want is not None and want != got for want, got in zip(shape, dims)):
        raise DatasetFormatError(f"{path} holds an array of shape {dims}, expected {shape}{hint}")
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)
