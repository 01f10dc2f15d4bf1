"""A run folder is data: a crafted checkpoint or pre-training cache entry runs nothing and is refused
(exit status 2, before Ray starts, through the CLI and through ``Result``), an edited header is
refused before a resume starts, a resume never starts a run over on its own, and a resume of a
config that names the user's code says so first (docs/security.md)."""

import hashlib
import io
import json
import os
import pickle
import shutil
import sys

import numpy as np
import pytest
import yaml

import fedray
from fedray.checkpoint import CHECKPOINT, LEGACY_CHECKPOINT, MAGIC, CheckpointError, read_checkpoint
from fedray.cli import main
from fedray.datafile import digest, write_tree
from fedray.observers import Observer
from fedray.tracking import read_scalars
from tests.support import same

pytestmark = [pytest.mark.security, pytest.mark.faults]

CONFIG = {"name": "sec", "checkpoint_every": 1, "data": {"dataset": "digits"},
          "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 2, "architectures": {"mlp": 6}},
          "training": {"lr": 0.1, "batch_size": 16}, "runtime": {"backend": "local", "torch_threads": 1}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-round run of the local backend."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    fedray.run(CONFIG, run_dir=run_dir, progress=False)
    return run_dir


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


class Payload:
    """What an attacker puts in a pickle: unpickling it runs a command that leaves ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def format_two(path, state, round, config=None):
    """A format-2 checkpoint (a header, its SHA-256 recomputed over the pickled body), as an
    attacker who knows the format writes it."""
    body = pickle.dumps(state, protocol=5)
    header = {"format": 2, "round": round, "body_bytes": f"{len(body):020d}", "sha256": hashlib.sha256(body).hexdigest(),
              "config": config}
    path.write_bytes(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body)


def format_three(path, body, round, config):
    """A format-3 header, its SHA-256 recomputed over the header and ``body``."""
    fields = {"format": 3, "round": round, "body_bytes": f"{len(body):020d}", "config": config}
    fields["sha256"] = digest(fields, hashlib.sha256(body).hexdigest())
    path.write_bytes(MAGIC + json.dumps(fields, sort_keys=True).encode() + b"\n" + body)


def craft(kind, run_dir, marker):
    """Replace the run's checkpoint by a crafted one of ``kind``; returns the crafted file's path."""
    real = run_dir / CHECKPOINT
    state, config = read_checkpoint(real), json.loads(real.read_bytes().split(b"\n")[1])["config"]
    real.unlink()
    legacy = run_dir / LEGACY_CHECKPOINT
    if kind == "format 2, an extra key":
        format_two(legacy, {**state, "extra": Payload(marker)}, 2, config)
    elif kind == "format 2, inside the models":
        state["strategy"]["models"]["mlp"] = Payload(marker)
        format_two(legacy, state, 2, config)
    elif kind == "format 1":
        legacy.write_bytes(pickle.dumps({"round": 2}, protocol=5) + pickle.dumps({**state, "x": Payload(marker)},
                                                                                  protocol=5))
    elif kind == "format 1, in its header":
        legacy.write_bytes(pickle.dumps({"round": 2, "x": Payload(marker)}, protocol=5))
    elif kind == "format 3, a class not on the list":
        f = io.BytesIO()
        write_tree(f, state)
        line, arrays = f.getvalue().split(b"\n", 1)
        skeleton = json.loads(line)
        skeleton["tree"]["dict"].append(["extra", {"object": "os.system", "fields": {"command": f"touch {marker}"}}])
        format_three(real, json.dumps(skeleton).encode() + b"\n" + arrays, 2, config)
    elif kind == "format 3, a pickled body":
        format_three(real, pickle.dumps({**state, "extra": Payload(marker)}, protocol=5), 2, config)
    return legacy if legacy.exists() else real


KINDS = ["format 2, an extra key", "format 2, inside the models", "format 1", "format 1, in its header",
         "format 3, a class not on the list", "format 3, a pickled body"]


def test_the_payload_runs_when_plainly_unpickled(tmp_path):
    """The crafted files below are real attacks: plain pickle runs them."""
    pickle.loads(pickle.dumps(Payload(tmp_path / "marker")))
    assert (tmp_path / "marker").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_crafted_checkpoint_is_refused_before_ray_starts_and_runs_nothing(run, tmp_path, capsys, kind):
    marker = tmp_path / "marker"
    path = craft(kind, run, marker)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["runtime"]["backend"] = "ray"  # a Ray run: refused before Ray is started
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()
    assert main(["resume", str(run), "--rounds", "4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"fedray: error: checkpoint {path} "), err
    assert "refused unread" in err or "cannot be read as data" in err or "damaged header" in err, err
    assert not marker.exists() and {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    with pytest.raises(CheckpointError, match=f"^checkpoint {path} "):
        fedray.Result.load(run).models()
    assert not marker.exists()


def test_an_edited_header_is_refused_before_the_resume_starts(run, capsys):
    path = run / CHECKPOINT
    data = path.read_bytes()
    assert data.count(b'"round": 2') == 1
    path.write_bytes(data.replace(b'"round": 2', b'"round": 1'))
    capsys.readouterr()
    assert main(["resume", str(run), "--rounds", "4", "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"fedray: error: checkpoint {path} is damaged or was edited: its SHA-256 does "
                                       f"not match its header\n")


def test_a_resume_without_a_checkpoint_never_starts_over_on_its_own(run, capsys):
    """A finished run whose checkpoint is gone: refused, nothing purged or rewritten; --restart is
    the explicit way, and it says what it discards."""
    (run / CHECKPOINT).unlink()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()
    assert main(["resume", str(run), "--rounds", "4", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"fedray: error: {run} holds no checkpoint ({CHECKPOINT}) but shows a run's progress (result.json, rounds 1-2 "
        f"in its event files): there is nothing to resume from, and nothing was changed; `fedray resume {run} "
        f"--restart` runs it again from round 1 and discards that\n")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert main(["resume", str(run), "--rounds", "3", "--restart", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"fedray: --restart: running {run} again from round 1, discarding result.json, rounds 1-2 in its " \
           f"event files\n" in err
    assert [step for step, _ in read_scalars(run)["eval/accuracy"]] == [1, 2, 3]
    assert json.loads((run / "result.json").read_text())["rounds"] == 3


def test_resume_names_the_code_a_config_imports_before_it_does(tmp_path, capsys):
    run_dir = tmp_path / "run"
    fedray.run({**CONFIG, "observers": ["tests.support:ClientCounter"]}, run_dir=run_dir, progress=False)
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--rounds", "3", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (f"fedray: resuming {run_dir} imports code its config names: "
                                   f"observers='tests.support:ClientCounter'")


def test_a_crafted_pretraining_cache_entry_runs_nothing_and_is_replaced(tmp_path, capsys):
    cache = tmp_path / "cache"
    config = {**CONFIG, "aux": {"size": 200}, "pretrain": {"epochs": 1, "batch_size": 64, "cache_dir": str(cache)},
              "federation": {**CONFIG["federation"], "rounds": 1}}
    first = fedray.run(config, run_dir=tmp_path / "a", progress=False).summary["pretrain"]["mlp"]
    entry = cache / "pretrain" / os.path.basename(first["path"])
    assert first["cached"] is False and entry.suffix == ".fedray" and entry.is_file()
    marker = tmp_path / "marker"
    good = entry.read_bytes()
    header, body = good[len(b"FEDRAY-PRETRAINED\n"):].split(b"\n", 1)
    line, arrays = body.split(b"\n", 1)
    skeleton = json.loads(line)
    skeleton["tree"]["dict"].append(["x", {"object": "subprocess.Popen", "fields": {"args": f"touch {marker}"}}])
    crafted = json.dumps(skeleton).encode() + b"\n" + arrays
    fields = {k: v for k, v in json.loads(header).items() if k != "sha256"} | {"body_bytes": f"{len(crafted):020d}"}
    fields["sha256"] = digest(fields, hashlib.sha256(crafted).hexdigest())
    entry.write_bytes(b"FEDRAY-PRETRAINED\n" + json.dumps(fields, sort_keys=True).encode() + b"\n" + crafted)
    entry.with_suffix(".pkl").write_bytes(pickle.dumps({"weights": Payload(marker), "loss": [0.0]}))  # an old entry
    second = fedray.run(config, run_dir=tmp_path / "b", progress=False).summary["pretrain"]["mlp"]
    assert not marker.exists()
    assert second["cached"] is False and "names the class 'subprocess.Popen'" in second["replaced"]
    assert entry.read_bytes() == good  # pre-trained again, to the same weights, and written back
    third = fedray.run(config, run_dir=tmp_path / "c", progress=False).summary["pretrain"]["mlp"]
    assert third["cached"] is True and "replaced" not in third
    a, b = (read_checkpoint(tmp_path / d / CHECKPOINT)["strategy"]["models"]["mlp"] for d in ("a", "c"))
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("algorithm, extra", [
    ("stc", {}),  # coded updates in its catch-up cache
    ("fedgen", {}),  # torch tensors: the generator's optimizer
    ("cfl", {"federation": {**CONFIG["federation"], "clients_per_round": 6}}),  # the parameter tree's nodes
])
def test_a_format_two_checkpoint_of_an_earlier_version_resumes_bit_for_bit(tmp_path, algorithm, extra):
    """Round 2 of a run rewritten as format 2 (pickled, as earlier versions wrote it) resumes through
    the allow-list to round 3 exactly as the run that never stopped, and is replaced by format 3."""
    config = {**CONFIG, "algorithm": {"name": algorithm}, **extra}
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    fedray.run({**config, "federation": {**config["federation"], "rounds": 3}}, run_dir=whole, progress=False)
    fedray.run(config, run_dir=resumed, progress=False)
    real = resumed / CHECKPOINT
    format_two(resumed / LEGACY_CHECKPOINT, read_checkpoint(real), 2,
               json.loads(real.read_bytes().split(b"\n")[1])["config"])
    real.unlink()
    fedray.resume(resumed, rounds=3, progress=False)
    assert sorted(p.name for p in resumed.iterdir() if "checkpoint" in p.name) == [CHECKPOINT]
    a, b = (read_checkpoint(d / CHECKPOINT) for d in (whole, resumed))
    assert a["round"] == b["round"] == 3 and same(a["strategy"], b["strategy"]) and same(a["clients"], b["clients"])


class Record:
    """An object of a user's own class: not data."""


class KeepsAnObject(Observer):
    key = "keeps"

    def __init__(self):
        self.rounds = 0

    def aggregated(self, fed, step):  # before the round's checkpoint
        self.rounds = step.number

    def state_dict(self):
        return {"rounds": self.rounds, "last": Record() if self.rounds >= 2 else None}


def test_an_observer_state_that_is_not_data_fails_the_checkpoint_naming_its_key(tmp_path):
    from fedray.runner import RunFailed

    run_dir = tmp_path / "run"
    with pytest.raises(RunFailed) as info:
        fedray.run(CONFIG, run_dir=run_dir, progress=False, observers=[KeepsAnObject()])
    line = str(info.value)
    assert "\n" not in line and line.startswith(
        "NotData: checkpoint state keeps.last is a tests.test_security.Record, which a fedray data file cannot hold")
    assert line.endswith(f"the checkpoint of round 1 is intact: fedray resume {run_dir}")
    assert read_checkpoint(run_dir / CHECKPOINT)["keeps"] == {"rounds": 1, "last": None}


def test_a_crafted_cifar_file_runs_nothing(tmp_path):
    """CIFAR's files are pickles; a data root from a shared drive is read through the allow-list."""
    from fedray.data import load_dataset
    from fedray.data.files import DatasetFormatError
    from tests.data.test_datasets import write_cifar10

    write_cifar10(tmp_path, np.random.default_rng(0))
    assert load_dataset("cifar10", root=str(tmp_path)).train_x.shape == (10, 3, 32, 32)
    marker = tmp_path / "marker"
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(pickle.dumps({"data": Payload(marker), "labels": [1, 7]}, protocol=2))
    with pytest.raises(DatasetFormatError, match=f"^{batch} is not a CIFAR pickle: it names posix.system, which is "
                                                 f"not among the classes"):
        load_dataset("cifar10", root=str(tmp_path))
    assert not marker.exists()
