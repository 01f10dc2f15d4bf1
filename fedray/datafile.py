"""Files fedray writes and reads back, as data: reading one never runs code.

A *data tree* is what a checkpoint or a cache holds: ``None``, booleans, integers, floats,
strings, ``bytes``, lists, tuples, dicts (any of these as keys), sets, numpy arrays and scalars of
plain dtypes (booleans, numbers, fixed-width strings), torch tensors, and the few plain classes of
fedray's own state named in :data:`CLASSES`. It is written as

    <one line of JSON: the tree, arrays replaced by their index in the array table, and the table>
    <the arrays' bytes, one after another>

so a reader parses JSON and copies bytes into arrays it allocates itself; nothing in the file names
code to import or call, except a class of :data:`CLASSES`, which is filled field by field without
running its constructor. A tree that holds anything else (a user's object, a function, an object
array) is refused when it is written (:class:`NotData`, one line naming the key), and a file that
holds anything else is refused when it is read (:class:`DataFileError`).

Shared objects stay shared: an array, container or object that the tree holds twice is written
once, and read back as one object held twice, as pickle would give it back.

:class:`SafeUnpickler` reads the pickles of earlier fedray versions with an allow-list of the
classes those pickles hold, as torch's ``weights_only`` loading does: any other class or function
a pickle names is refused before it is looked up.
"""

from __future__ import annotations

import _compat_pickle
import base64
import hashlib
import importlib
import io
import json
import math
import os
import pickle
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

# the plain classes of fedray's state a checkpoint may hold: name -> (module, class name)
CLASSES = {
    "fedray.methods.helpers.CatchUpCache": ("fedray.methods.helpers", "CatchUpCache"),
    # the name it had in checkpoints written before the package was ``fedray.methods``: read alike
    "fedray.algorithms.helpers.CatchUpCache": ("fedray.methods.helpers", "CatchUpCache"),
    "fedray.compression.updates.CodedUpdate": ("fedray.compression.updates", "CodedUpdate"),
    "fedray.parameter_tree.TreeNode": ("fedray.parameter_tree", "TreeNode"),
}
ARRAY_KINDS = "biufcSU"  # booleans, integers, floats, complex numbers, byte and unicode strings
MAX_SKELETON_BYTES = 1 << 30  # the JSON line; a state of 10**7 keys is about 200 MB of it


class NotData(TypeError):
    """A value that a data file cannot hold, in one line naming its key."""


class DataFileError(ValueError):
    """A data file that cannot be read as data (damaged, or naming what it may not hold)."""


def _key_text(path: tuple) -> str:
    text = ""
    for part in path:
        text += f".{part}" if isinstance(part, str) and part.isidentifier() else f"[{part!r}]"
    return text.lstrip(".") or "(the whole state)"


class _Encoder:
    """Turns a data tree into its JSON form and the list of arrays it refers to."""

    def __init__(self, what: str):
        self.what = what
        self.arrays: list[np.ndarray] = []
        self.table: list[list] = []
        self.seen: dict[int, int] = {}  # id of a container, array or object -> its reference number
        self.refs = 0
        self.keep: list[Any] = []  # the originals of arrays copied here, so that no id is reused

    def refuse(self, path: tuple, value: Any, why: str = "") -> NotData:
        kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
        return NotData(f"{self.what} {_key_text(path)} is a {kind}{why}, which a fedray data file cannot hold: "
                       f"keep state as numbers, strings, lists, dicts, numpy arrays and torch tensors "
                       f"(docs/extending.md#state-and-checkpoints)")

    def _shared(self, value: Any) -> Any:
        """The reference to ``value`` when it was written already; else None, and it is numbered."""
        ref = self.seen.get(id(value))
        if ref is not None:
            return {"ref": ref}
        self.seen[id(value)] = self.refs
        self.refs += 1
        return None

    def encode(self, value: Any, path: tuple = ()) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"float": repr(value)}
        if kind in (list, dict, OrderedDict, set, frozenset, np.ndarray) or _is_tensor(value) \
                or self._class_name(value):  # the kinds numbered for references, in the reader's order
            ref = self._shared(value)
            if ref is not None:
                return ref
        if kind is list:
            return [self.encode(v, path + (i,)) for i, v in enumerate(value)]
        if kind is tuple:
            return {"tuple": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if kind in (dict, OrderedDict):
            items = [[self.encode(k, path + ("<key>",)), self.encode(v, path + (k,))] for k, v in value.items()]
            return {"odict" if kind is OrderedDict else "dict": items}
        if kind in (set, frozenset):
            return {kind.__name__: [self.encode(v, path + ("<item>",)) for v in value]}
        if kind is bytes:
            return {"bytes": self._array(np.frombuffer(value, np.uint8), path, value)}
        if kind is np.ndarray:
            return {"array": self._array(value, path, value)}
        if isinstance(value, np.generic) and kind.__module__ == "numpy":
            if value.dtype.kind not in ARRAY_KINDS:
                raise self.refuse(path, value, f" of dtype {value.dtype}")
            return {"scalar": [value.dtype.str, base64.b64encode(value.tobytes()).decode()]}
        if _is_tensor(value):
            return self._tensor(value, path)
        name = self._class_name(value)
        if name:
            fields = {k: self.encode(v, path + (k,)) for k, v in vars(value).items()}
            return {"object": name, "fields": fields}
        raise self.refuse(path, value)

    @staticmethod
    def _class_name(value: Any) -> str:
        kind = type(value)
        name = f"{kind.__module__}.{kind.__qualname__}"
        return name if CLASSES.get(name) == (kind.__module__, kind.__qualname__) else ""

    def _array(self, array: np.ndarray, path: tuple, original: Any) -> int:
        if array.dtype.kind not in ARRAY_KINDS or array.dtype.fields is not None:
            raise self.refuse(path, original, f" of dtype {array.dtype}")
        order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
        stored = array.T if order == "F" else array  # F-ordered: its transpose's C bytes
        self.keep.append(original)
        self.arrays.append(np.ascontiguousarray(stored))
        self.table.append([array.dtype.str, list(array.shape), order])
        return len(self.table) - 1

    def _tensor(self, tensor: Any, path: tuple) -> dict:
        import torch

        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided \
                or tensor.is_quantized:
            raise self.refuse(path, tensor, " (only dense tensors)")
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        index = self._array(flat.view(torch.uint8).numpy(), path, tensor)
        return {"tensor": index, "dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                "requires_grad": bool(tensor.requires_grad)}


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # a tree can hold tensors only where torch is imported
    return torch is not None and isinstance(value, torch.Tensor)


def write_tree(f: BinaryIO, tree: Any, what: str = "state") -> None:
    """Write ``tree`` to the binary file ``f`` (anything with ``write``); raises NotData naming the
    first key whose value a data file cannot hold (``what`` names the tree), before writing anything."""
    encoder = _Encoder(what)
    skeleton = encoder.encode(tree)
    offset, table = 0, []
    for (dtype, shape, order), array in zip(encoder.table, encoder.arrays):
        table.append([dtype, shape, order, offset])
        offset += array.nbytes
    line = json.dumps({"tree": skeleton, "arrays": table}, separators=(",", ":"), allow_nan=False).encode()
    f.write(line + b"\n")
    for array in encoder.arrays:
        if array.nbytes:
            f.write(memoryview(array.reshape(-1)).cast("B"))


def _read_skeleton(f: BinaryIO, size: int) -> tuple[dict, int]:
    """The JSON line of a data file of ``size`` bytes read from ``f`` at its start, checked (every
    tag known, every class allowed, the array table consistent with the bytes that follow), and
    where the arrays start. Reads no array. Raises DataFileError with the reason."""
    start = f.tell()
    line = f.readline(MAX_SKELETON_BYTES + 1)
    if not line.endswith(b"\n"):
        raise DataFileError("its JSON part is unterminated or too long")
    try:
        skeleton = json.loads(line)
        table = skeleton["arrays"]
        skeleton["tree"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise DataFileError("its JSON part cannot be read") from None
    data_start = f.tell() - start
    expected = 0
    try:
        for entry in table:
            dtype, shape, order, offset = entry
            dtype = np.dtype(dtype) if isinstance(dtype, str) else None
            if dtype is None or dtype.kind not in ARRAY_KINDS or dtype.fields is not None or order not in ("C", "F") \
                    or not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape) \
                    or len(shape) > 64 or offset != expected:
                raise DataFileError(f"its array table holds an entry that is not a plain array: {str(entry)[:80]}")
            expected += dtype.itemsize * math.prod(shape)
    except (TypeError, ValueError) as err:
        if isinstance(err, DataFileError):
            raise
        raise DataFileError("its array table cannot be read") from None
    if data_start + expected != size:
        raise DataFileError(f"its arrays take {expected} bytes where {size - data_start} follow its JSON part")
    _check(skeleton["tree"], len(table))
    return skeleton, data_start


_TAGS = {"float", "tuple", "dict", "odict", "set", "frozenset", "bytes", "array", "scalar", "tensor", "object", "ref"}


def _check(node: Any, arrays: int) -> None:
    """Every tagged node of a skeleton is one this module writes, naming arrays that exist and
    classes of the allow-list."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            tags = set(node) & _TAGS
            if len(tags) != 1:
                raise DataFileError(f"its JSON part holds an unknown entry {str(sorted(node))[:80]}")
            tag = tags.pop()
            if tag == "object" and node["object"] not in CLASSES:
                raise DataFileError(f"its JSON part names the class {str(node['object'])[:80]!r}, which is not one of the "
                                    f"classes a fedray data file may hold")
            if tag in ("array", "bytes", "tensor") and not (type(node[tag]) is int and 0 <= node[tag] < arrays):
                raise DataFileError("its JSON part refers to an array that does not exist")
            if tag == "object":
                if not isinstance(node.get("fields"), dict):
                    raise DataFileError("its JSON part holds an object without fields")
                stack.extend(node["fields"].values())
            elif tag not in ("array", "bytes", "tensor", "scalar", "float", "ref"):
                stack.append(node[tag])


class _Decoder:
    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.shared: list[Any] = []

    def decode(self, node: Any) -> Any:
        if not isinstance(node, (list, dict)):
            return node
        if isinstance(node, list):
            out: list = []
            self.shared.append(out)
            out.extend(self.decode(v) for v in node)
            return out
        if "ref" in node:
            ref = node["ref"]
            if type(ref) is not int or not 0 <= ref < len(self.shared):
                raise DataFileError("its JSON part refers to an object that comes later")
            return self.shared[ref]
        if "float" in node:
            if node["float"] not in ("nan", "inf", "-inf"):
                raise DataFileError(f"its JSON part holds a bad float {str(node['float'])[:20]!r}")
            return float(node["float"])
        if "tuple" in node:
            return tuple(self.decode(v) for v in node["tuple"])
        if "dict" in node or "odict" in node:
            out = {} if "dict" in node else OrderedDict()
            self.shared.append(out)
            for key, value in node.get("dict", node.get("odict")):
                key = self.decode(key)  # before the value: the references are numbered in this order
                out[key] = self.decode(value)
            return out
        if "set" in node or "frozenset" in node:
            if "set" in node:
                out = set()
                self.shared.append(out)
                out.update(self.decode(v) for v in node["set"])
                return out
            index = len(self.shared)
            self.shared.append(None)
            self.shared[index] = frozenset(self.decode(v) for v in node["frozenset"])
            return self.shared[index]
        if "bytes" in node:
            return self.arrays[node["bytes"]].tobytes()
        if "array" in node:
            return self._keep(self.arrays[node["array"]])
        if "scalar" in node:
            dtype, data = node["scalar"]
            dtype = np.dtype(dtype)
            if dtype.kind not in ARRAY_KINDS:
                raise DataFileError(f"its JSON part holds a scalar of dtype {dtype}")
            return np.frombuffer(base64.b64decode(data), dtype, count=1)[0]
        if "tensor" in node:
            return self._keep(_tensor(self.arrays[node["tensor"]], node))
        module, name = CLASSES[node["object"]]
        cls = getattr(importlib.import_module(module), name)
        obj = object.__new__(cls)
        self.shared.append(obj)
        fields = {key: self.decode(value) for key, value in node["fields"].items()}
        obj.__dict__.update(fields)  # as pickle fills an object: no constructor runs
        return obj

    def _keep(self, value: Any) -> Any:
        self.shared.append(value)
        return value


def _tensor(raw: np.ndarray, node: dict) -> Any:
    import torch

    dtype = getattr(torch, str(node.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise DataFileError(f"its JSON part holds a tensor of unknown dtype {str(node.get('dtype'))[:20]!r}")
    shape = node.get("shape")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape) \
            or math.prod(shape) * dtype.itemsize != raw.nbytes:
        raise DataFileError("its JSON part holds a tensor whose shape does not match its bytes")
    tensor = torch.from_numpy(raw).view(dtype).reshape(shape) if raw.nbytes else torch.empty(shape, dtype=dtype)
    return tensor.requires_grad_(True) if node.get("requires_grad") is True else tensor


def _read_tree(f: BinaryIO, size: int) -> Any:
    skeleton, _ = _read_skeleton(f, size)
    arrays = []
    for dtype, shape, order, _offset in skeleton["arrays"]:
        dtype = np.dtype(dtype)
        array = np.empty(shape[::-1] if order == "F" else shape, dtype)
        if array.nbytes and f.readinto(memoryview(array.reshape(-1).view(np.uint8))) != array.nbytes:
            raise DataFileError("it ends inside an array")
        arrays.append(array.T if order == "F" else array)
    try:
        return _Decoder(arrays).decode(skeleton["tree"])
    except (KeyError, TypeError, ValueError, IndexError, RecursionError, RuntimeError, OverflowError) as err:
        if isinstance(err, DataFileError):
            raise
        raise DataFileError(f"its JSON part does not describe a data tree ({type(err).__name__})") from None


def read_skeleton(f: BinaryIO, size: int) -> tuple[dict, int]:
    """The checked JSON line of a data file and where its arrays start (``_read_skeleton``)."""
    try:
        return _read_skeleton(f, size)
    except DataFileError as err:
        raise DataFileError(f"cannot be read as data: {err}") from None


def read_tree(f: BinaryIO, size: int) -> Any:
    """The data tree ``write_tree`` wrote, read from ``f`` at its start (``size``: its bytes).
    Raises DataFileError for a file that is damaged or holds anything but data."""
    try:
        return _read_tree(f, size)
    except DataFileError as err:
        raise DataFileError(f"cannot be read as data: {err}") from None


# -- files: a magic line, a JSON header, a data tree --------------------------------------------------

_LENGTH_DIGITS = 20
_CHUNK = 1 << 22


class _HashingWriter:
    """A file that hashes what is written to it (the arrays stream straight through)."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(memoryview(data).cast("B"))
        return self.f.write(data)


def digest(fields: dict[str, Any], body_sha256: str) -> str:
    """The SHA-256 a header records: over its other fields (as sorted JSON) and the body's own
    SHA-256, so that editing either is found."""
    text = json.dumps({k: v for k, v in fields.items() if k != "sha256"}, sort_keys=True)
    return hashlib.sha256(f"{text}\n{body_sha256}".encode()).hexdigest()


def _header_line(fields: dict[str, Any], size: int, body_sha256: str) -> bytes:
    fields = {**fields, "body_bytes": f"{size:0{_LENGTH_DIGITS}d}"}
    fields["sha256"] = digest(fields, body_sha256)
    return json.dumps(fields, sort_keys=True).encode() + b"\n"


def write_file(path: Path, magic: bytes, fields: dict[str, Any], tree: Any, what: str) -> None:
    """Atomically write ``magic``, a one-line JSON header of ``fields`` (with the body's length and
    a SHA-256 over the header and the body) and the data tree ``tree``: it goes to a temporary file
    beside ``path``, fsynced, which then replaces ``path``. Raises NotData (naming the key; ``what``
    names the tree) before anything is written, and leaves no temporary file when a write fails."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes that write one cache entry at once
    placeholder = _header_line(fields, 0, "")
    try:
        with open(tmp, "wb") as f:
            f.write(magic + placeholder)
            body = _HashingWriter(f)
            write_tree(body, tree, what)
            header = _header_line(fields, body.size, body.sha.hexdigest())
            assert len(header) == len(placeholder)  # fixed-width length and digest: same size
            f.seek(len(magic))
            f.write(header)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # what was there stays, and nothing half-written beside it
        raise
    os.replace(tmp, path)


def read_header(f: BinaryIO, size: int, recorded: Callable[[dict, str], str] = digest,
                check: Callable[[dict], None] = lambda header: None) -> dict[str, Any]:
    """The JSON header line of a file of ``size`` bytes opened as ``f`` and read past its magic line,
    with ``check(header)`` run on it, then its body's length and SHA-256 checked (``recorded``: the
    SHA-256 the header should hold, given the header and the body's own); ``offset`` and ``size``
    added: where the body starts, the file's length. Raises DataFileError, its message a predicate
    ("is truncated: ...") for the caller to put behind the file's name."""
    line = f.readline(1 << 24)
    try:
        header = json.loads(line)
        length, written = int(header["body_bytes"]), str(header["sha256"])
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):  # e.g. "body_bytes": Infinity
        raise DataFileError("has a damaged header") from None
    check(header)
    offset = f.tell()
    if size - offset != length:
        what = "truncated" if size - offset < length else "longer than its header says"
        raise DataFileError(f"is {what}: {size - offset} bytes of state where the header says {length}")
    sha = hashlib.sha256()
    while chunk := f.read(_CHUNK):
        sha.update(chunk)
    try:
        expected = recorded(header, sha.hexdigest())
    except (ValueError, TypeError, RecursionError):  # fields json cannot write back (nested too deep)
        raise DataFileError("has a damaged header") from None
    if expected != written:
        raise DataFileError("is damaged or was edited: its SHA-256 does not match its header")
    return {**header, "offset": offset, "size": size}


def read_file(path: Path, magic: bytes) -> tuple[dict[str, Any], Any]:
    """The header fields and the data tree of a file ``write_file`` wrote with ``magic``, both
    checked. Raises DataFileError (``OSError`` when the file cannot be opened)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if f.read(len(magic)) != magic:
            raise DataFileError(f"does not start with {magic.decode(errors='replace').strip()}")
        header = read_header(f, size)
        f.seek(header["offset"])
        return header, read_tree(f, size - header["offset"])


# -- pickles of earlier fedray versions ---------------------------------------------------------------

class Refused(pickle.UnpicklingError):
    """A pickle names what :class:`SafeUnpickler` does not look up."""


def _dtype(*args: Any) -> np.dtype:
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise Refused("it holds an array of Python objects")
    return dtype


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of Python 3 use it for bytes, and only that way."""
    if encoding != "latin1" or not isinstance(text, str):
        raise Refused(f"it calls _codecs.encode with {encoding!r}, which is not how a pickle writes bytes")
    return text.encode("latin1")


def _storage_from_bytes(data: bytes) -> Any:
    """A tensor's storage as pickle writes it: torch's own file format, read with torch's
    allow-listed loader."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _torch_rebuild(name: str) -> Callable:
    def rebuild(*args: Any) -> Any:
        import torch._utils

        return getattr(torch._utils, name)(*args)
    return rebuild


def _numpy_core(submodule: str, name: str) -> Callable:
    """``numpy._core.<submodule>.<name>`` (``numpy.core`` before numpy 2), whichever name a pickle
    gives it: numpy 1 wrote ``numpy.core``, numpy 2 writes ``numpy._core``."""
    try:
        module = importlib.import_module(f"numpy._core.{submodule}")
    except ImportError:
        module = importlib.import_module(f"numpy.core.{submodule}")
    return getattr(module, name)


SAFE_GLOBALS: dict[tuple[str, str], Callable[[], Any]] = {
    **{(f"{prefix}.{submodule}", name): (lambda submodule=submodule, name=name: _numpy_core(submodule, name))
       for prefix in ("numpy._core", "numpy.core")
       for submodule, name in (("numeric", "_frombuffer"), ("multiarray", "_reconstruct"), ("multiarray", "scalar"))},
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: _dtype,
    ("collections", "OrderedDict"): lambda: OrderedDict,
    ("builtins", "set"): lambda: set,
    ("builtins", "frozenset"): lambda: frozenset,
    ("builtins", "complex"): lambda: complex,
    ("_codecs", "encode"): lambda: _latin1_bytes,
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _torch_rebuild("_rebuild_tensor_v2"),
    ("torch.storage", "_load_from_bytes"): lambda: _storage_from_bytes,
    **{tuple(tag.rsplit(".", 1)): (lambda pair=pair: getattr(importlib.import_module(pair[0]), pair[1]))
       for tag, pair in CLASSES.items()},
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that looks up only the classes and functions of :data:`SAFE_GLOBALS`: numpy
    arrays and scalars, ordered dicts, sets, torch tensors (their storage read by torch's
    ``weights_only`` loader) and the plain classes of :data:`CLASSES`. Anything else a pickle names
    is refused (:class:`Refused`) before it is imported."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _compat_pickle.NAME_MAPPING:  # Python 2's names, as pickle's own lookup maps them
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        get = SAFE_GLOBALS.get((module, name))
        if get is None:
            raise Refused(f"it names {module}.{name}, which is not among the classes a fedray checkpoint holds")
        return get()

    def persistent_load(self, pid: Any) -> Any:
        raise Refused("it holds a persistent reference")


def safe_unpickle(f: BinaryIO, encoding: str = "ASCII") -> Any:
    """One pickle read from ``f`` with :class:`SafeUnpickler`; ``encoding``: of Python 2's strings."""
    return SafeUnpickler(f, encoding=encoding).load()
