"""The CLI end to end on the local backend: run, resume to extend a finished run, report; and every
bad input refused in one line with exit status 2 before any run folder is made or Ray starts."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from actors.driver import connect
from actors.placement import Node
from actors.preflight import check_placement
from fedray.checkpoint import CHECKPOINT, read_checkpoint, write_checkpoint
from fedray.cli import _parse, main
from fedray.config import ConfigError, RuntimeConfig, build_config, load_config, save_config
from fedray.data import load_dataset, train_size
from fedray.tracking import read_scalars

ROOT = Path(__file__).resolve().parents[1]


def test_run_then_extend_with_resume_matches_a_longer_run(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "name: cli\ncheckpoint_every: 1\ndata: {dataset: digits}\n"
        "federation: {num_clients: 10, clients_per_round: 5, rounds: 2, architectures: {mlp: 10}}\n"
        "training: {lr: 0.1, batch_size: 16}\nruntime: {backend: local, torch_threads: 1}\n")
    short, long = tmp_path / "short", tmp_path / "long"
    assert main(["run", str(config), "--run-dir", str(short), "--no-progress"]) == 0
    assert main(["resume", str(short), "--rounds", "4", "--no-progress"]) == 0
    assert main(["run", str(config), "federation.rounds=4", "--run-dir", str(long), "--no-progress"]) == 0
    a = read_checkpoint(short / CHECKPOINT)
    b = read_checkpoint(long / CHECKPOINT)
    assert a["round"] == b["round"] == 4
    for name, value in a["strategy"]["models"]["mlp"].items():
        np.testing.assert_array_equal(value, b["strategy"]["models"]["mlp"][name])
    assert [s for s, _ in read_scalars(short)["eval/accuracy"]] == [1, 2, 3, 4]
    assert "rounds: 4" in (short / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["report", str(short), "--target", "0.0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rounds"] == 4 and report["round_reached"] == 1


def test_resume_of_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["resume", str(tmp_path)]) == 2
    assert "is not a fedray run folder" in capsys.readouterr().err


def test_check_names_a_missing_auxiliary_data_set(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("data: {dataset: digits}\naux: {dataset: cifar100, size: 1000, root: " + str(tmp_path) + "}\n"
                      "federation: {num_clients: 4, clients_per_round: 2, architectures: {mlp: 4}}\n"
                      "algorithm: {name: feddf}\n")
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedray: error: aux.dataset cifar100: CIFAR-100 not found")
    assert str(tmp_path) in err and "set aux.root" in err


# Bad input: one line on stderr, exit status 2, and nothing made -------------------------------------

BASE = ("name: t\ndata: {dataset: digits}\n"
        "federation: {num_clients: 4, clients_per_round: 2, rounds: 1, architectures: {mlp: 4}}\n")
LOCAL = BASE + "runtime: {backend: local, torch_threads: 1}\n"
RAY = BASE + "runtime: {backend: ray, num_cpus: 2, num_gpus: 0}\n"  # a local Ray of 2 CPUs and no GPU, anywhere


def config_file(tmp_path, text=LOCAL):
    path = tmp_path / "c.yaml"
    path.write_text(text + f"output_dir: {tmp_path / 'runs'}\n")
    return path


def refused(tmp_path, capsys, *argv) -> str:
    """The one error line of ``fedray ARGV``, after checking exit status 2 and that nothing was made
    under ``tmp_path`` (which holds the config's output_dir)."""
    before = sorted(tmp_path.rglob("*"))
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit:  # a usage error, from argparse
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("fedray: error: "), err
    assert sorted(tmp_path.rglob("*")) == before
    return err.strip()[len("fedray: error: "):]


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("override, start", [
    ("seed=-1", "bad config value seed = -1: a seed is an integer from 0 to 2**64 - 1"),
    ("data.seed=-1", "bad config value data.seed = -1"),
    ("aux.seed=-1", "bad config value aux.seed = -1"),
    (f"seed={2**64}", f"bad config value seed = {2**64}: a seed is an integer from 0 to 2**64 - 1"),
    ("name=", "bad config value name = '': the run folder is named NAME-TIMESTAMP"),
    ("name=a/b", "bad config value name = 'a/b'"),
])
def test_check_and_run_refuse_a_bad_seed_or_name(tmp_path, capsys, command, override, start):
    assert refused(tmp_path, capsys, command, config_file(tmp_path), override).startswith(start)


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n"])
def test_an_empty_config_file_is_refused(tmp_path, capsys, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert refused(tmp_path, capsys, "run", path).startswith(f"config file {path} is empty")


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    config = config_file(tmp_path)
    for command in ("check", "run"):
        line = refused(tmp_path, capsys, command, config, f"output_dir={tmp_path / 'file' / 'runs'}")
        assert line == (f"bad config value output_dir = '{tmp_path / 'file' / 'runs'}': {tmp_path / 'file'} is a file, "
                        f"not a folder; name a folder to write the run in")
    line = refused(tmp_path, capsys, "run", config, "--run-dir", tmp_path / "file" / "run")
    assert line.startswith(f"--run-dir {tmp_path / 'file' / 'run'}: {tmp_path / 'file'} is a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders (the file-as-folder test covers root)")
def test_a_read_only_output_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        line = refused(tmp_path, capsys, "check", config_file(tmp_path), f"output_dir={locked / 'runs'}")
    finally:
        locked.chmod(0o755)
    assert line.endswith(f"{locked} is not writable; name a folder you can write to")


@pytest.mark.parametrize("files, held", [
    (["config.yaml", CHECKPOINT], f"a run ({CHECKPOINT}); continue it with"),
    (["config.yaml", "checkpoint.pkl"], "a run (checkpoint.pkl); continue it with"),
    (["config.yaml"], "a run that stopped before its first checkpoint; start it again with"),
])
def test_run_into_a_folder_that_holds_a_run_is_refused(tmp_path, capsys, files, held):
    old = tmp_path / "old"
    old.mkdir()
    for name in files:
        (old / name).write_text(LOCAL)
    line = refused(tmp_path, capsys, "run", config_file(tmp_path), "--run-dir", old)
    restart = " --restart" if "start it again" in held else ""
    assert line == f"--run-dir {old}: {old} already holds {held} `fedray resume {old}{restart}` or name another folder"


@pytest.mark.parametrize("command", ["run", "resume"])
def test_a_run_folder_name_too_long_for_a_file_system_is_refused(tmp_path, capsys, command):
    long = tmp_path / ("a" * 300)
    argv = ["run", config_file(tmp_path), "--run-dir", long] if command == "run" else ["resume", long]
    line = refused(tmp_path, capsys, *argv)
    assert line.startswith("run folder '/") and line.endswith(
        f"the folder name '{'a' * 37}...{'a' * 38}' has 300 bytes; a file system takes at most 255; name a shorter one")
    assert len(line) < 300


def test_a_run_that_stopped_before_its_first_checkpoint_starts_again_on_resume_with_restart(tmp_path, capsys,
                                                                                            monkeypatch):
    """Its config is in its folder, and round 1 in its events, but no checkpoint: a plain resume is
    refused and changes nothing; ``--restart`` runs it from round 1 there, saying what it discards,
    and the stopped attempt's events are purged (TensorBoard shows each round once, the new values)."""
    from fedray.methods import METHODS
    from fedray.methods.fedavg import FedAvg

    class FailsOnce(FedAvg.Client):
        failed = False

        def upload(self, task, theta, local, client):
            if task.round == 2 and not FailsOnce.failed:
                FailsOnce.failed = True
                raise RuntimeError("a fault of the moment")
            return super().upload(task, theta, local, client)

    monkeypatch.setitem(METHODS, "fails_once", type("FailsOnceStrategy", (FedAvg,), {"Client": FailsOnce}))
    text = LOCAL.replace("rounds: 1", "rounds: 3") + "checkpoint_every: 10\nalgorithm: {name: fails_once}\n"
    run_dir, whole = tmp_path / "run", tmp_path / "whole"
    assert main(["run", str(config_file(tmp_path, text)), "--run-dir", str(run_dir), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"no checkpoint was written in {run_dir}") and not (run_dir / CHECKPOINT).exists()
    assert [s for s, _ in read_scalars(run_dir)["eval/accuracy"]] == [1]  # the attempt logged round 1
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert main(["resume", str(run_dir), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fedray: error: {run_dir} holds no checkpoint ({CHECKPOINT}) but shows a run's progress (round 1 in its "
        f"event files): there is nothing to resume from, and nothing was changed; `fedray resume {run_dir} "
        f"--restart` runs it again from round 1 and discards that")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    assert main(["resume", str(run_dir), "--restart", "--no-progress"]) == 0
    assert f"fedray: --restart: running {run_dir} again from round 1, discarding round 1 in its event files" in \
        capsys.readouterr().err
    assert main(["run", str(config_file(tmp_path, text)), "--run-dir", str(whole), "--no-progress"]) == 0
    assert read_scalars(run_dir)["eval/accuracy"] == read_scalars(whole)["eval/accuracy"]
    assert len(read_scalars(whole)["eval/accuracy"]) == 3
    a, b = (read_checkpoint(d / CHECKPOINT) for d in (run_dir, whole))
    for name, value in a["strategy"]["models"]["mlp"].items():
        np.testing.assert_array_equal(value, b["strategy"]["models"]["mlp"][name])


@pytest.mark.parametrize("overrides, message", [
    (["federation.num_clients=1000000000", "federation.architectures.mlp=1000000000"],
     "bad config value federation.num_clients = 1000000000: more clients than the 1347 training samples (digits "
     "has 1347); use at most 1347 clients"),
    (["federation.num_clients=600", "federation.architectures.mlp=600", "aux.size=1000"],
     "bad config value federation.num_clients = 600: more clients than the 347 training samples (digits has 1347, "
     "less aux.size = 1000); use at most 347 clients"),
    (["federation.num_clients=600", "federation.architectures.mlp=600", "aux.size=100", "data.train_limit=500"],
     "bad config value federation.num_clients = 600: more clients than the 500 training samples (digits has 1347, "
     "less aux.size = 100, cut to data.train_limit = 500); use at most 500 clients"),
    (["federation.num_clients=700", "federation.architectures.mlp=700", "data.partition=shards"],
     "bad config value data.classes_per_client = 2: partition 'shards' cuts 700 clients x 2 = 1400 shards out of "
     "1347 training samples (digits has 1347); use at most 673 clients or fewer classes per client"),
])
def test_more_clients_than_samples_is_refused_before_anything_per_client(tmp_path, capsys, overrides, message):
    start = time.perf_counter()
    for command in ("check", "run"):
        assert refused(tmp_path, capsys, command, config_file(tmp_path), *overrides) == message
    assert time.perf_counter() - start < 20  # a list of a billion clients would take minutes and gigabytes


def test_the_training_set_sizes_are_those_the_loaders_give():
    assert [train_size(name) for name in ("digits", "iris")] == [1347, 100]
    assert [len(load_dataset(name).train_y) for name in ("digits", "iris")] == [1347, 100]
    options = {"num_clients": 7, "seed": 3}
    assert train_size("synthetic", **options) == len(load_dataset("synthetic", **options).train_y) == 3028
    if os.path.isdir("/usr/share/datasets/fashion-mnist"):  # Debian's dataset-fashion-mnist: from the idx header
        assert train_size("fashion_mnist", "/usr/share/datasets") == 60000


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("overrides, message", [
    (["runtime.server_gpus=1"],
     "bad config value runtime.server_gpus = 1: the server actor's node (this machine's local Ray) has 0 GPUs; lower "
     "runtime.server_gpus or join a cluster that has them (runtime.address)"),
    (["runtime.server_cpus=4"],
     "bad config value runtime.server_cpus = 4: the server actor's node (this machine's local Ray) has 2 CPUs; lower "
     "runtime.server_cpus or join a cluster that has them (runtime.address)"),
    (["runtime.clients_per_actor=1", "runtime.actor_cpus=1.5"],
     "4 client actors x 1.5 CPUs do not fit the cluster (1 nodes, 2 CPUs, 0 GPUs, server takes 0 CPUs and 0 GPUs): "
     "lower runtime.actor_cpus/actor_gpus, raise runtime.clients_per_actor, or use clients_per_actor: auto"),
    (["runtime.actor_gpus=0.5"], "4 client actors x 1 CPUs and 0.5 GPUs do not fit the cluster (1 nodes, 2 CPUs"),
])
def test_actors_that_a_local_ray_cannot_hold_are_refused_before_it_starts(tmp_path, capsys, command, overrides,
                                                                           message):
    assert refused(tmp_path, capsys, command, config_file(tmp_path, RAY), *overrides).startswith(message)
    assert not ray.is_initialized()


def closed_port() -> int:
    """A port on this machine where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_cluster_address_where_nothing_answers_is_refused_in_seconds(tmp_path, capsys, command, scheme):
    address = f"{scheme}127.0.0.1:{closed_port()}"
    start = time.perf_counter()
    line = refused(tmp_path, capsys, command, config_file(tmp_path, RAY), f"runtime.address={address}")
    assert line == f"no Ray cluster answers at {address}: start one with `ray start --head` or drop runtime.address"
    assert time.perf_counter() - start < 10 and not ray.is_initialized()


def test_ray_address_from_the_environment_is_probed_too(tmp_path, capsys, monkeypatch):
    address = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    line = refused(tmp_path, capsys, "run", config_file(tmp_path, RAY))
    assert line == f"no Ray cluster answers at {address}: start one with `ray start --head` or unset RAY_ADDRESS"
    with pytest.raises(ConfigError, match=f"no Ray cluster answers at {address}"):  # the driver's own call
        connect(RuntimeConfig())
    assert not ray.is_initialized()


def test_a_cluster_address_where_something_else_answers_is_refused_in_seconds(tmp_path, capsys):
    """A web server where the GCS should be: ray.init would take 20 s and print 20 lines of warnings."""
    quiet = type("Quiet", (http.server.BaseHTTPRequestHandler,), {"log_message": lambda self, *args: None})
    server = http.server.HTTPServer(("127.0.0.1", 0), quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        start = time.perf_counter()
        line = refused(tmp_path, capsys, "run", config_file(tmp_path, RAY), f"runtime.address={address}")
        assert line == (f"what answers at {address} is not a Ray cluster (it does not speak gRPC): give the address "
                        f"of a Ray head node's GCS (`ray start --head` prints it) or drop runtime.address")
        assert time.perf_counter() - start < 30 and not ray.is_initialized()
    finally:
        server.shutdown()


def test_plot_refuses_an_out_it_cannot_write(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    assert refused(tmp_path, capsys, "plot", tmp_path, "--out", tmp_path / "folder") == (
        f"--out {tmp_path / 'folder'} is a folder: name a file in it, e.g. {tmp_path / 'folder' / 'plot.png'}")
    assert refused(tmp_path, capsys, "plot", tmp_path, "--out", tmp_path / "missing" / "p.png") == (
        f"--out {tmp_path / 'missing' / 'p.png'}: the folder {tmp_path / 'missing'} does not exist; make it or name "
        f"a file in another")
    assert refused(tmp_path, capsys, "plot", tmp_path, "--out", tmp_path / "p.docx").startswith(
        f"--out {tmp_path / 'p.docx'}: matplotlib cannot write .docx files; end the name in .avif")


def finished_run(tmp_path, rounds: int):
    """A run folder as a finished run of ``rounds`` rounds leaves it: its config, its checkpoint and
    its summary (without the summary it stopped before finishing, and a resume finishes it)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = load_config(config_file(tmp_path), [f"federation.rounds={rounds}"])
    save_config(config, run_dir / "config.yaml")
    write_checkpoint(run_dir / CHECKPOINT, {"round": rounds}, config.to_dict())
    (run_dir / "result.json").write_text("{}")
    return run_dir


def test_resume_refuses_fewer_rounds_than_the_checkpoint_and_a_finished_run(tmp_path, capsys):
    run_dir = finished_run(tmp_path, 5)
    saved = (run_dir / "config.yaml").read_bytes()
    assert refused(tmp_path, capsys, "resume", run_dir, "--rounds", "3") == (
        f"--rounds 3 is below round 5 of the checkpoint in {run_dir}: a resume only extends a run; give --rounds 6 "
        f"or more")
    for rounds in ([], ["--rounds", "5"]):
        assert refused(tmp_path, capsys, "resume", run_dir, *rounds) == (
            f"the run in {run_dir} is already at round 5: extend it with --rounds 6 or more")
    assert (run_dir / "config.yaml").read_bytes() == saved


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-7], r"is truncated: \d+ bytes of state where the header says \d+"),
    (lambda b: b"", r"is empty \(0 bytes\)"),
    (lambda b: os.urandom(300), "is not a fedray checkpoint"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "is damaged or was edited: its SHA-256 does not match its header"),
])
def test_resume_refuses_a_damaged_checkpoint_and_touches_nothing(tmp_path, capsys, damage, message):
    run_dir = finished_run(tmp_path, 5)
    path = run_dir / CHECKPOINT
    path.write_bytes(damage(path.read_bytes()))
    line = refused(tmp_path, capsys, "resume", run_dir, "--rounds", "8")
    assert line.startswith(f"checkpoint {path} ") or line.startswith(f"{path} ")
    assert __import__("re").search(message, line), line


def test_resume_refuses_a_config_that_no_longer_matches_its_checkpoint(tmp_path, capsys):
    run_dir = finished_run(tmp_path, 5)
    text = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(text.replace("num_clients: 4", "num_clients: 3").replace("mlp: 4", "mlp: 3"))
    assert "was written with federation.architectures.mlp = 4, but the config says 3" in refused(
        tmp_path, capsys, "resume", run_dir, "--rounds", "8")


def test_model_options_a_model_cannot_take_are_refused_before_the_run_folder(tmp_path, capsys):
    config = config_file(tmp_path)
    for command in ("check", "run"):  # an unknown option: by name, without building the model
        assert refused(tmp_path, capsys, command, config, "federation.model_options={mlp: {bogus: 1}}") == (
            "bad config value federation.model_options.mlp: unknown option(s) bogus; mlp takes hidden")
    # a value the model cannot take: found when the run builds its models, still before the folder
    assert refused(tmp_path, capsys, "run", config, "federation.model_options={mlp: {hidden: [-5]}}").startswith(
        "bad config value federation.model_options.mlp = {'hidden': [-5]}: model 'mlp' cannot be built for inputs "
        "of shape (1, 8, 8): ValueError: model 'mlp' needs hidden to be positive ints, got (-5,)")


def test_overrides_may_follow_an_option(tmp_path, capsys):
    assert _parse(["run", "c.yaml", "a=1", "--no-progress", "b=2", "--run-dir", "x", "c=3"]).overrides == [
        "a=1", "b=2", "c=3"]
    assert refused(tmp_path, capsys, "run", config_file(tmp_path), "--no-progress", "seed=-1").startswith(
        "bad config value seed = -1")
    assert refused(tmp_path, capsys, "run", config_file(tmp_path), "--no-progress", "--bogus") == (
        "unrecognized arguments: --bogus (see `fedray run --help`)")
    assert refused(tmp_path, capsys, "run").startswith("the following arguments are required: config")


def test_the_checks_of_a_ray_run_import_no_torch(tmp_path):
    """The driver of a Ray run stays torch-free: data sizes, placement and the probe included."""
    config = config_file(tmp_path, RAY)
    code = ("import sys\n"
            "sys.modules['torch'] = None  # any 'import torch' now raises ImportError\n"
            "from fedray.cli import main\n"
            f"sys.exit(main(['run', {str(config)!r}, 'runtime.server_gpus=1']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("fedray: error: bad config value runtime.server_gpus = 1"), \
        out.stderr[-2000:]
    assert len(out.stderr.splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_a_cluster_is_checked_against_its_own_nodes():
    """As ``actors.driver.start_server`` checks a cluster it joined: the server on the driver's node."""
    config = build_config({"runtime": {"server_gpus": 1}})
    nodes = [Node("driver", 4.0), Node("gpu", 8.0, 1.0)]
    with pytest.raises(ConfigError, match=r"^bad config value runtime.server_gpus = 1: the server actor's node "
                                          r"\(the driver's node of the Ray cluster\) has 0 GPUs; lower "
                                          r"runtime.server_gpus$"):
        check_placement(config, nodes, "driver")
    assert check_placement(config, nodes, "gpu") is False  # on the GPU node it fits; a GPU server hosts no clients


def test_report_and_plot_refuse_what_is_not_a_run_folder(tmp_path, capsys):
    nope, afile, empty = tmp_path / "nope", tmp_path / "afile", tmp_path / "empty"
    afile.write_text("")
    empty.mkdir()
    for command in (["report"], ["plot", "--out", tmp_path / "p.png"]):
        assert refused(tmp_path, capsys, *command, nope) == f"run folder {nope} does not exist"
        assert refused(tmp_path, capsys, *command, afile) == f"{afile} is a file, not a run folder"
        assert refused(tmp_path, capsys, *command, empty) == (
            f"{empty} holds no TensorBoard event files (events.out.tfevents.*): name the folder of a run")


def test_plot_names_a_file_where_its_out_needs_a_folder(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out in (afile / "x.png", afile / "sub" / "x.png"):
        assert refused(tmp_path, capsys, "plot", tmp_path, "--out", out) == (
            f"--out {out}: {afile} is a file, not a folder; name a file in a folder")


def test_methods_and_schema_print_the_catalog(tmp_path, capsys):
    from fedray import catalog

    assert main(["methods"]) == 0
    assert capsys.readouterr().out == catalog.format_methods() + "\n"
    assert main(["methods", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing == json.loads(json.dumps(catalog.methods())) and "fedavg" in [m["name"] for m in listing]
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(catalog.config_schema()))
    assert refused(tmp_path, capsys, "schema", "extra") == "unrecognized arguments: extra (see `fedray schema --help`)"
