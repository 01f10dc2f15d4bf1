"""Checkpoints that cannot lie: a damaged, edited, foreign or mismatched file is refused in one line."""

import hashlib
import json
import pickle

import numpy as np
import pytest

from fedray.checkpoint import (CHECKPOINT, CheckpointError, LEGACY_CHECKPOINT, MAGIC, NotData, checkpoint_round,
                               read_checkpoint, read_header, verify_checkpoint, write_checkpoint)
from fedray.config import build_config

CONFIG = build_config({"name": "ck", "federation": {"num_clients": 4, "clients_per_round": 2,
                                                    "architectures": {"mlp": 4}}}).to_dict()
pytestmark = pytest.mark.faults
STATE = {"round": 7, "strategy": {"models": {"mlp": {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}}}}


@pytest.fixture
def saved(tmp_path):
    write_checkpoint(tmp_path / CHECKPOINT, STATE, CONFIG)
    return tmp_path / CHECKPOINT


def refused(path, match, config=None):
    with pytest.raises(CheckpointError, match=match) as info:
        read_checkpoint(path, config)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    return str(info.value)


def test_the_state_and_its_round_come_back(saved):
    assert checkpoint_round(saved.parent) == 7 and verify_checkpoint(saved.parent, CONFIG) == 7
    state = read_checkpoint(saved, CONFIG)
    np.testing.assert_array_equal(state["strategy"]["models"]["mlp"]["w"], STATE["strategy"]["models"]["mlp"]["w"])
    header = read_header(saved)
    assert header["format"] == 3 and int(header["body_bytes"]) == saved.stat().st_size - header["offset"]
    assert saved.read_bytes().startswith(MAGIC) and [p.name for p in saved.parent.iterdir()] == [CHECKPOINT]


def test_a_killed_writers_temporary_file_goes_with_the_next_checkpoint(tmp_path):
    stale = tmp_path / f"{CHECKPOINT}.4242.tmp"  # what a writer killed mid-write leaves
    stale.write_bytes(MAGIC + b"half")
    other = tmp_path / "cache.fedray.4242.tmp"  # another file's: not the checkpoint's to remove
    other.write_bytes(b"x")
    write_checkpoint(tmp_path / CHECKPOINT, STATE, CONFIG)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CHECKPOINT, other.name])
    assert read_checkpoint(tmp_path / CHECKPOINT, CONFIG)["round"] == 7


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_a_truncated_checkpoint_is_refused(saved, cut):
    data = saved.read_bytes()
    saved.write_bytes(data[:-cut])
    refused(saved, r"is truncated: \d+ bytes of state where the header says \d+")
    assert checkpoint_round(saved.parent) == 7  # the header still names its round for the error line


def test_a_flipped_byte_in_the_state_is_refused(saved):
    data = bytearray(saved.read_bytes())
    data[-20] ^= 0x01
    saved.write_bytes(bytes(data))
    refused(saved, "is damaged or was edited: its SHA-256 does not match its header")


@pytest.mark.parametrize("edit", [(b'"round": 7', b'"round": 6'), (b'"lr": 0.05', b'"lr": 0.5')])
def test_an_edited_header_is_refused(saved, edit):
    """The SHA-256 covers the header's round and config, not only the state."""
    data = saved.read_bytes()
    assert data.count(edit[0]) == 1
    saved.write_bytes(data.replace(*edit))
    refused(saved, "is damaged or was edited: its SHA-256 does not match its header")
    with pytest.raises(CheckpointError, match="was edited"):
        verify_checkpoint(saved.parent)


def test_empty_garbage_and_foreign_files_are_refused(saved):
    saved.write_bytes(b"")
    refused(saved, r"is empty \(0 bytes\)")
    saved.write_bytes(b"\x00garbage" * 100)
    refused(saved, "is not a fedray checkpoint")
    saved.write_bytes(pickle.dumps({"round": 3}, protocol=4))  # someone else's pickle
    refused(saved, "is not a fedray checkpoint")
    saved.write_bytes(MAGIC + b"{not json\n" + b"x" * 10)
    refused(saved, "has a damaged header")
    header = json.dumps({"format": 9, "round": 1, "body_bytes": "0", "sha256": "0"}).encode()
    saved.write_bytes(MAGIC + header + b"\n")
    refused(saved, "has format 9; this fedray reads formats 1 to 3")
    saved.unlink()
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        verify_checkpoint(saved.parent)


def test_a_resume_with_another_config_is_refused(saved):
    other = build_config({"name": "renamed", "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 50,
                                                            "architectures": {"mlp": 4}},
                          "runtime": {"backend": "local"}}).to_dict()
    assert read_checkpoint(saved, other)["round"] == 7  # name, rounds and runtime may change
    more = build_config({"name": "ck", "federation": {"num_clients": 5, "clients_per_round": 2,
                                                      "architectures": {"mlp": 5}}}).to_dict()
    line = refused(saved, "was written with federation.architectures.mlp = 4, but the config says 5", more)
    assert "resume with the run's own config" in line
    with pytest.raises(CheckpointError, match=r"training.lr = 0.05, but the config says 0.1"):
        verify_checkpoint(saved.parent, {**CONFIG, "training": {**CONFIG["training"], "lr": 0.1}})


def test_a_state_that_is_not_data_is_refused_naming_its_key_and_the_last_checkpoint_stays(saved):
    with pytest.raises(NotData, match=r"checkpoint state observer\.bad\[2\] is a function, which a fedray data "
                                      r"file cannot hold"):
        write_checkpoint(saved, {"round": 8, "observer": {"bad": [1, 2, lambda: 0]}})
    assert read_checkpoint(saved)["round"] == 7 and sorted(p.name for p in saved.parent.iterdir()) == [CHECKPOINT]


def format_two(path, state, config=None):
    """A checkpoint as fedray wrote it before format 3: the header, its SHA-256 over the pickled state."""
    body = pickle.dumps(state, protocol=5)
    header = {"format": 2, "round": state["round"], "body_bytes": f"{len(body):020d}",
              "sha256": hashlib.sha256(body).hexdigest(), "config": config}
    path.write_bytes(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body)


def test_format_two_checkpoints_resume_through_the_allow_list_and_are_replaced(tmp_path):
    from collections import OrderedDict

    from fedray.methods.helpers import CatchUpCache
    from fedray.compression.updates import CodedUpdate

    cache = CatchUpCache(["mlp"], 2)
    cache.add("mlp", 3, CodedUpdate({"w": b"\x01\x02"}))
    state = {"round": 4, "strategy": {"cache": cache, "order": OrderedDict(a=np.float32(1.5)), "ids": {1, 2}}}
    legacy = tmp_path / LEGACY_CHECKPOINT
    format_two(legacy, state, CONFIG)
    assert checkpoint_round(tmp_path) == 4 and verify_checkpoint(tmp_path, CONFIG) == 4
    back = read_checkpoint(legacy, CONFIG)["strategy"]
    assert back["cache"].updates == {"mlp": {3: CodedUpdate({"w": b"\x01\x02"})}} and back["ids"] == {1, 2}
    assert type(back["order"]) is OrderedDict and back["order"]["a"] == np.float32(1.5)
    write_checkpoint(tmp_path / CHECKPOINT, {**state, "round": 5}, CONFIG)  # the resumed run's next checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT] and checkpoint_round(tmp_path) == 5


def test_format_one_checkpoints_still_resume(tmp_path):
    path = tmp_path / LEGACY_CHECKPOINT
    with open(path, "wb") as f:  # how fedray wrote checkpoints before format 2
        pickle.dump({"round": 4}, f, protocol=5)
        pickle.dump({"round": 4, "strategy": {}}, f, protocol=5)
    assert checkpoint_round(tmp_path) == 4 and read_checkpoint(path, CONFIG) == {"round": 4, "strategy": {}}
    path.write_bytes(path.read_bytes()[:30])
    refused(path, "cannot be unpickled")
