"""Data files: every kind of state comes back exactly, shared objects stay shared, what is not data
is refused when written (naming its key), and a file naming anything else is refused when read."""

import io
import json
import os
import math
import pickle
from collections import OrderedDict, defaultdict

import numpy as np
import pytest
import torch

from fedray.compression.updates import CodedUpdate
from fedray.datafile import DataFileError, NotData, Refused, read_skeleton, read_tree, safe_unpickle, write_tree
from fedray.methods.helpers import CatchUpCache
from fedray.parameter_tree import TreeNode
from tests.support import same

pytestmark = pytest.mark.security


def written(tree) -> bytes:
    f = io.BytesIO()
    write_tree(f, tree)
    return f.getvalue()


def read(data: bytes):
    return read_tree(io.BytesIO(data), len(data))


def round_trip(tree):
    return read(written(tree))


EVERY_KIND = {
    "round": 7, "big": 2**100, "neg": -3, "flag": True, "none": None, "text": "ü\n\"x\"", "raw": b"\x00\xff" * 3,
    "floats": [0.1, -0.0, float("inf"), float("-inf"), float("nan"), 1e-320, 1.7976931348623157e308],
    "keys": {1: "int", (2, "a"): "tuple", None: "none", 2.5: "float", "1": "str", False: "bool"},
    "tuple": (1, (2, [3])), "set": {3, 1, 2}, "frozen": frozenset({"a"}), "ordered": OrderedDict(b=1, a=2),
    "arrays": [np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
               np.array(3.5), np.zeros((0, 4), np.int64), np.array([True, False]), np.array([1 + 2j], np.complex64),
               np.array(["ab", "c"]), np.array([b"xy"]), np.arange(10, dtype=">i4"), np.arange(10)[::3],
               np.uint8(200), np.float32(np.nan), np.int64(-5), np.bool_(True)],
    "tensors": [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor(2.0, requires_grad=True),
                torch.ones(3, dtype=torch.bfloat16), torch.tensor([1, 2], dtype=torch.int64), torch.zeros(0, 3)],
    "objects": [CodedUpdate({"w": b"\x01\x02"}), TreeNode(1, [0, 2], {"w": np.ones(2, np.float32)}, parent=0)],
}


def test_every_kind_of_state_comes_back_exactly():
    back = round_trip(EVERY_KIND)
    assert same(EVERY_KIND, back)
    assert list(back["keys"]) == list(EVERY_KIND["keys"]) and back["arrays"][1].flags.f_contiguous
    assert back["arrays"][0].flags.writeable and back["tensors"][1].requires_grad
    parameter = round_trip([torch.nn.Parameter(torch.ones(2))])[0]  # back as a plain tensor that requires grad
    assert type(parameter) is torch.Tensor and parameter.requires_grad and parameter.tolist() == [1.0, 1.0]
    cache = CatchUpCache(["mlp"], 2)
    cache.add("mlp", 3, CodedUpdate({"w": b"\x07"}))
    cache.synced[4] = 3
    again = round_trip({"cache": cache})["cache"]
    assert type(again) is CatchUpCache and again.updates == cache.updates and again.synced == {4: 3}
    # a checkpoint written while the methods' package was fedray.algorithms names the class so
    data = written({"cache": cache})
    old = data.replace(b'"fedray.methods.helpers.CatchUpCache"', b'"fedray.algorithms.helpers.CatchUpCache"')
    assert old != data and type(read(old)["cache"]) is CatchUpCache and read(old)["cache"].synced == {4: 3}


def test_shared_arrays_containers_and_cycles_stay_shared():
    w = np.ones(3, np.float32)
    inner = {"w": w}
    loop: list = [1]
    loop.append(loop)
    back = round_trip({"a": inner, "b": inner, "c": [w, w], "loop": loop, "t": torch.ones(2)})
    assert back["a"] is back["b"] and back["c"][0] is back["c"][1] is back["a"]["w"]
    assert back["loop"][1] is back["loop"]
    data = written({"a": w, "b": w})
    assert len(json.loads(data.split(b"\n")[0])["arrays"]) == 1  # written once


@pytest.mark.parametrize("tree, key, kind", [
    ({"strategy": {"fn": len}}, "strategy.fn", "builtin_function_or_method"),
    ({"clients": {3: [1, object()]}}, "clients[3][1]", "object"),
    ({"a": np.array([object()], dtype=object)}, "a", "numpy.ndarray of dtype object"),
    ({"a": np.zeros(2, dtype=[("x", "f4")])}, "a", "numpy.ndarray of dtype [('x', '<f4')]"),
    ({"d": defaultdict(list)}, "d", "collections.defaultdict"),
    ({"t": torch.ones(2).to_sparse()}, "t", "torch.Tensor (only dense tensors)"),
    ({"s": type("Str", (str,), {})("x")}, "s", "test_datafile.Str"),
])
def test_what_is_not_data_is_refused_naming_its_key_before_anything_is_written(tree, key, kind):
    f = io.BytesIO()
    with pytest.raises(NotData) as info:
        write_tree(f, tree, "checkpoint state")
    message = str(info.value)
    assert message.startswith(f"checkpoint state {key} is a ") and kind in message and "\n" not in message
    assert f.getvalue() == b""


def crafted(tree_json, arrays=(), blobs=b"") -> bytes:
    return json.dumps({"tree": tree_json, "arrays": list(arrays)}).encode() + b"\n" + blobs


@pytest.mark.parametrize("data, reason", [
    (crafted({"object": "os.system", "fields": {}}), "names the class 'os.system'"),
    (crafted({"object": "subprocess.Popen", "fields": {"args": "touch x"}}), "names the class 'subprocess.Popen'"),
    (crafted({"dict": [["a", {"array": 0}]]}, [["|O", [1], "C", 0]], b"\x00" * 8), "not a plain array"),
    (crafted({"array": 0}, [["<f4", [2**40], "C", 0]]), "its arrays take 4398046511104 bytes where 0 follow"),
    (crafted({"array": 3}, [["<f4", [1], "C", 0]], b"\x00" * 4), "refers to an array that does not exist"),
    (crafted({"ref": 5}), "refers to an object that comes later"),
    (crafted({"ref": -1}), "refers to an object that comes later"),
    (crafted({"pickle": "gASV"}), "holds an unknown entry"),
    (crafted({"tensor": 0, "dtype": "float32", "shape": [100]}, [["|u1", [4], "C", 0]], b"\x00" * 4),
     "tensor whose shape does not match"),
    (crafted({"float": "1e999"}), "bad float"),
    (pickle.dumps({"round": 1}), "its JSON part is unterminated"),
    (pickle.dumps({"round": 1}) + b"\n", "its JSON part cannot be read"),
])
def test_a_file_naming_anything_but_data_is_refused(data, reason):
    with pytest.raises(DataFileError, match="^cannot be read as data: ") as info:
        read(data)
    assert reason in str(info.value)


def test_the_skeleton_is_checked_without_reading_arrays():
    data = written({"round": 3, "w": np.ones((1000,), np.float32)})
    skeleton, start = read_skeleton(io.BytesIO(data), len(data))
    assert skeleton["tree"]["dict"][0] == ["round", 3] and len(data) - start == 4000


class Payload:
    def __reduce__(self):
        return (os.getpid, ())


@pytest.mark.parametrize("payload, reason", [
    (Payload(), "names posix.getpid, which is not among the classes"),
    (np.array([Payload()], dtype=object), "holds an array of Python objects"),
    (defaultdict(list), "names collections.defaultdict, which is not among the classes"),
])
def test_the_unpickler_of_earlier_checkpoints_refuses_what_is_not_on_its_allow_list(payload, reason, capsys):
    with pytest.raises(Refused, match=reason):
        safe_unpickle(io.BytesIO(pickle.dumps({"round": 1, "x": payload}, protocol=5)))
    assert capsys.readouterr().out == ""


def test_the_unpickler_of_earlier_checkpoints_reads_what_they_hold():
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "f": np.asfortranarray(np.ones((2, 2))),
             "s": np.float64(1.5), "o": OrderedDict(a=torch.arange(3.0)), "set": {1}, "c": complex(1, 2),
             "cache": CatchUpCache(["m"], 1), "node": TreeNode(0, [1], {})}
    for protocol in (2, 4, 5):  # fedray wrote protocol 5; CIFAR's files are protocol 2
        back = safe_unpickle(io.BytesIO(pickle.dumps(state, protocol=protocol)))
        assert same(state, back), protocol
    # the cache's module as checkpoints written while the methods' package was fedray.algorithms name it
    old = pickle.dumps(state["cache"], protocol=2).replace(b"fedray.methods.helpers", b"fedray.algorithms.helpers")
    assert b"fedray.algorithms.helpers" in old and type(safe_unpickle(io.BytesIO(old))) is CatchUpCache
