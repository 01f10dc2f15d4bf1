"""Reading event files back: a resumed run's values win over the interrupted run's, in any file order."""

import time

import pytest
from torch.utils.tensorboard import SummaryWriter

from fedray.tracking import flatten, read_scalars


def test_resumed_values_win_whatever_order_the_files_are_read(tmp_path):
    resumed = SummaryWriter(str(tmp_path), purge_step=3, filename_suffix=".a")  # created (and named) first
    time.sleep(1.1)
    interrupted = SummaryWriter(str(tmp_path), filename_suffix=".b")
    for step, value in [(1, 0.1), (2, 0.2), (3, 0.3)]:  # written before the crash, round 3 not checkpointed
        interrupted.add_scalar("eval/accuracy", value, step, walltime=100.0 + step)
    for step, value in [(3, 0.33), (4, 0.44)]:  # written after resuming from the round-2 checkpoint
        resumed.add_scalar("eval/accuracy", value, step, walltime=200.0 + step)
    interrupted.close(), resumed.close()
    series = read_scalars(tmp_path)["eval/accuracy"]
    assert [step for step, _ in series] == [1, 2, 3, 4]
    assert [value for _, value in series] == pytest.approx([0.1, 0.2, 0.33, 0.44])  # float32 in the file


def test_flatten_for_hparams():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": None}) == \
        {"a.b": 1, "a.c.d": "x", "e": "[1, 2]", "f": "None"}
