"""Checkpoints that cannot lie: a damaged, foreign or mismatched file is refused in one line."""

import json
import pickle

import numpy as np
import pytest

from fedray.checkpoint import (CHECKPOINT, MAGIC, CheckpointError, checkpoint_round, read_checkpoint,
                               read_header, verify_checkpoint, write_checkpoint)
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
    assert header["format"] == 2 and int(header["body_bytes"]) == saved.stat().st_size - header["offset"]
    assert saved.read_bytes().startswith(MAGIC) and not (saved.parent / "checkpoint.tmp").exists()


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
    refused(saved, "is damaged: its SHA-256 does not match its header")


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
    refused(saved, "has format 9; this fedray reads formats 1 and 2")
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


def test_a_failed_write_leaves_the_last_checkpoint_and_no_temporary_file(saved):
    with pytest.raises(Exception):
        write_checkpoint(saved, {"round": 8, "bad": lambda: 0})  # a lambda cannot be pickled
    assert read_checkpoint(saved)["round"] == 7 and sorted(p.name for p in saved.parent.iterdir()) == [CHECKPOINT]


def test_format_one_checkpoints_still_resume(tmp_path):
    path = tmp_path / CHECKPOINT
    with open(path, "wb") as f:  # how fedray wrote checkpoints before format 2
        pickle.dump({"round": 4}, f, protocol=5)
        pickle.dump({"round": 4, "strategy": {}}, f, protocol=5)
    assert checkpoint_round(tmp_path) == 4 and read_checkpoint(path, CONFIG) == {"round": 4, "strategy": {}}
    path.write_bytes(path.read_bytes()[:30])
    refused(path, "cannot be unpickled")
