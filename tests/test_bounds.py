"""Bounds and types at load (issue 48): every value that would pass the schema and then fail or run
away mid-run is refused by `fedray check` and before `fedray run` makes a run folder, in one line
naming the key, with exit status 2. Integer settings above their caps, booleans given for numbers,
floats float32 cannot hold, keys given twice in YAML, NUL bytes in names and paths, a local Ray given
more CPUs, GPUs or actors than the machine has, and data files that are truncated, disagree with each
other or hold labels outside the classes. Nothing here starts Ray or trains."""

import gzip
import os
import sys
import textwrap

import numpy as np
import pytest
import yaml

import actors.preflight
from fedray.cli import main

pytestmark = pytest.mark.security

BASE = ("name: t\ndata: {dataset: digits}\n"
        "federation: {num_clients: 4, clients_per_round: 2, rounds: 1, architectures: {mlp: 4}}\n")
LOCAL = BASE + "runtime: {backend: local, torch_threads: 1}\n"
RAY = BASE + "runtime: {backend: ray, num_cpus: 1, num_gpus: 0}\n"  # a local Ray of 1 CPU and no GPU: any machine


def config_file(tmp_path, text=LOCAL):
    path = tmp_path / "c.yaml"
    path.write_text(text + f"output_dir: {tmp_path / 'runs'}\n")
    return path


def tree(tmp_path) -> list:
    """Every path under ``tmp_path``, Python's bytecode caches apart (importing a user's module writes them)."""
    return sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in p.parts)


def refused(tmp_path, capsys, *argv) -> str:
    """The one error line of ``fedray ARGV``, after checking exit status 2 and that nothing was made
    under ``tmp_path`` (which holds the config's output_dir, where a run would make its folder)."""
    before = tree(tmp_path)
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("fedray: error: "), err
    assert tree(tmp_path) == before and not (tmp_path / "runs").exists()
    return err.strip()[len("fedray: error: "):]


def accepted(capsys, *argv) -> None:
    """`fedray check ARGV` passes."""
    assert main(["check", *map(str, argv)]) == 0, capsys.readouterr().err
    capsys.readouterr()


# Integer settings: each has an upper bound -----------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("overrides, message", [
    (["runtime.fold_groups=4611686018427387904"],
     "bad config value runtime.fold_groups = 4611686018427387904: at most 2**20 = 1,048,576 (the server walks every "
     "group each round)"),
    (["runtime.fold_groups=128"],
     "bad config: runtime.fold_groups = 128 cuts 4 clients into more groups than clients; give at most 64 "
     "(num_clients rounded up to a power of two, or 64)"),
    (["federation.rounds=1000001"],
     "bad config value federation.rounds = 1000001: at most 1,000,000 rounds (11.6 days at one second a round)"),
    (["checkpoint_every=1000001"], "bad config value checkpoint_every = 1000001: at most 1,000,000 rounds"),
    (["federation.eval_every=2000000"], "bad config value federation.eval_every = 2000000: at most 1,000,000 rounds"),
    (["training.batch_size=16777217"],
     "bad config value training.batch_size = 16777217: at most 2**24 = 16,777,216 samples"),
    (["federation.eval_batch_size=4611686018427387904"],
     "bad config value federation.eval_batch_size = 4611686018427387904: at most 2**24 = 16,777,216 samples"),
    (["training.epochs=100001"], "bad config value training.epochs = 100001: at most 100,000 epochs"),
    (["training.steps=10000001"], "bad config value training.steps = 10000001: at most 10,000,000 steps"),
    (["pretrain.projection_dim=65537"], "bad config value pretrain.projection_dim = 65537: at most 2**16 = 65,536"),
    (["runtime.torch_threads=8193"], "bad config value runtime.torch_threads = 8193: at most 8,192"),
    (["federation.num_clients=1000000001", "federation.architectures.mlp=1000000001"],
     "bad config value federation.num_clients = 1000000001: at most 1,000,000,000 (a billion: more than any run "
     "holds or finishes)"),
    (["federation.architectures.mlp=4611686018427387904"],
     "bad config value federation.architectures.mlp = 4611686018427387904: at most 1,000,000,000"),
    (["aux.size=4611686018427387904"], "bad config value aux.size = 4611686018427387904: at most 1,000,000,000"),
    (["runtime.clients_per_actor=5"],
     "bad config: runtime.clients_per_actor = 5 exceeds federation.num_clients = 4: one actor then hosts every "
     "client; give at most 4"),
    (["runtime.actor_cpus=0.00001"],
     "bad config value runtime.actor_cpus = 1e-05: Ray counts CPUs and GPUs in steps of 0.0001"),
    # the methods' own integers: a cap of their own, else the generic one
    (["algorithm.name=fedgen", "algorithm.noise_dim=65537"],
     "bad config value algorithm.noise_dim = 65537: at most 2**16 = 65,536"),
    (["algorithm.name=fedgen", "algorithm.gen_batch_size=16777217"],
     "bad config value algorithm.gen_batch_size = 16777217: at most 2**24 = 16,777,216 samples"),
    (["algorithm.name=fedbe", "algorithm.samples=1001"],
     "bad config value algorithm.samples = 1001: at most 1,000 sampled models"),
    (["algorithm.name=stc", "algorithm.cache_rounds=4611686018427387904"],
     "bad config value algorithm.cache_rounds = 4611686018427387904: at most 1,000,000,000"),
    (["algorithm.name=fd", "algorithm.distill={steps: 4611686018427387904}"],
     "bad config value algorithm.distill.steps = 4611686018427387904: at most 1,000,000,000"),
])
def test_an_integer_above_its_bound_is_refused(tmp_path, capsys, command, overrides, message):
    assert refused(tmp_path, capsys, command, config_file(tmp_path), *overrides).startswith(message)


def test_large_real_runs_stay_within_the_bounds(tmp_path, capsys):
    """The bounds leave room: the largest values a real run uses pass the config's checks."""
    from fedray.config import load_config

    config = load_config(config_file(tmp_path), [
        "federation.num_clients=1000000", "federation.architectures.mlp=1000000", "federation.clients_per_round=1000",
        "federation.rounds=100000", "runtime.fold_groups=1048576", "training.batch_size=60000", "training.epochs=1000",
        "training.steps=1000000", "runtime.clients_per_actor=1000000", "seed=18446744073709551615"])
    assert config.runtime.fold_groups == 2**20 and config.federation.rounds == 100_000
    accepted(capsys, config_file(tmp_path), "runtime.fold_groups=64", "federation.rounds=1000000")


# Booleans are not numbers ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("override, message", [
    ("training.lr=true", "bad config value training.lr = True: a boolean is not a number; give a number"),
    ("federation.rounds=true", "bad config value federation.rounds = True: a boolean is not an integer; give an "
                               "integer"),
    ("training.momentum=yes", "bad config value training.momentum = True: a boolean is not a number"),
    ("federation.architectures={mlp: true}", "bad config value federation.architectures.mlp = True: a boolean is "
                                             "not an integer"),
    ("runtime.clients_per_actor=false", "bad config value runtime.clients_per_actor = False: a boolean is not an "
                                        "integer"),
    ("algorithm={name: fedprox, mu: false}", "bad config value algorithm.mu = False: a boolean is not a number"),
])
def test_a_boolean_given_for_a_number_is_refused(tmp_path, capsys, command, override, message):
    assert refused(tmp_path, capsys, command, config_file(tmp_path), override).startswith(message)


def test_booleans_and_integers_still_go_where_they_belong(tmp_path, capsys):
    from fedray.config import load_config

    config = load_config(config_file(tmp_path), ["training.lr=1", "runtime.fold=false", "pretrain.flip=false",
                                                 "runtime.vectorize=true", "runtime.server_hosts_clients=true"])
    assert config.training.lr == 1.0 and config.runtime.fold is False and config.pretrain.flip is False
    assert config.runtime.vectorize is True and config.runtime.server_hosts_clients is True
    accepted(capsys, config_file(tmp_path), "algorithm={name: fedprox, mu: 1, weighted: true}",
             "training.lr=1", "runtime.fold=false")


# Floats that float32 cannot hold ----------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("override, value", [
    ("training.lr=1.0e300", "1e+300"),  # torch: "value cannot be converted to type float without overflow" mid-run
    ("training.weight_decay=1e39", "1e+39"),
    ("training.lr=1e-50", "1e-50"),  # float32 makes it 0
    ("algorithm={name: fedprox, mu: 1.0e300}", "1e+300"),
    ("algorithm={name: fd, distill: {lr: 1.0e300}}", "1e+300"),
])
def test_a_float_beyond_float32_names_its_key(tmp_path, capsys, command, override, value):
    key = {"algorithm={name: fedprox, mu: 1.0e300}": "algorithm.mu",
           "algorithm={name: fd, distill: {lr: 1.0e300}}": "algorithm.distill.lr"}.get(override, override.split("=")[0])
    assert refused(tmp_path, capsys, command, config_file(tmp_path), override) == (
        f"bad config value {key} = {value}: a float setting must fit a 32-bit float, which torch computes in: 0, or "
        f"a finite magnitude from 1.4e-45 to 3.4e+38")


# Keys given twice -------------------------------------------------------------------------------------

def test_a_key_given_twice_in_a_config_file_is_refused_with_its_lines(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(LOCAL + "federation:\n  rounds: 2\n  rounds: 3\n" + f"output_dir: {tmp_path / 'runs'}\n")
    for command in ("check", "run"):
        assert refused(tmp_path, capsys, command, path) == (
            f"config file {path}: the key 'federation' is given twice in one mapping (lines 3 and 5); give it once")
    path.write_text("name: t\nfederation:\n  rounds: 2\n  eval_every: 1\n  rounds: 3\n")
    assert refused(tmp_path, capsys, "check", path) == (
        f"config file {path}: the key 'rounds' is given twice in one mapping (lines 3 and 5); give it once")


def test_a_key_given_twice_in_an_override_is_refused(tmp_path, capsys):
    line = refused(tmp_path, capsys, "check", config_file(tmp_path), "algorithm={name: fedavg, name: fedprox}")
    assert line == ("override 'algorithm': the key 'name' is given twice in one mapping (line 1, columns 2 and 16); "
                    "give it once")


def test_a_merge_may_still_give_a_key_again(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: t\ndata: {dataset: digits}\nfederation: &fed {num_clients: 4, clients_per_round: 2, "
                    "rounds: 1, architectures: {mlp: 4}}\nruntime: {backend: local}\n")
    accepted(capsys, path)
    path.write_text(path.read_text().replace("runtime:", "aux: {<<: {size: 0, seed: 1}, seed: 2}\nruntime:"))
    accepted(capsys, path)


# NUL bytes in names and paths -------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("key", ["name", "output_dir", "data.root", "aux.root", "pretrain.cache_dir"])
def test_a_nul_byte_in_a_name_or_path_is_refused(tmp_path, capsys, command, key):
    value = "runs\0x" if key != "name" else "t\0x"
    typed = value.replace("\0", "\\0")  # YAML's escape in a double-quoted string, as a user types it
    line = refused(tmp_path, capsys, command, config_file(tmp_path), f'{key}="{typed}"')
    assert line == f"bad config value {key} = {value!r}: a path cannot hold the character NUL (\\x00); remove it"
    config = yaml.safe_load(LOCAL)  # the same from a config file, where YAML writes NUL as "\0"
    *sections, leaf = key.split(".")
    (config.setdefault(sections[0], {}) if sections else config)[leaf] = value
    path = tmp_path / "nul.yaml"
    path.write_text(yaml.safe_dump(config))
    assert "\\0" in path.read_text()
    assert refused(tmp_path, capsys, command, path).endswith("a path cannot hold the character NUL (\\x00); remove it")


# A local Ray is given no more than the machine has ----------------------------------------------------

@pytest.fixture
def no_cluster(monkeypatch):
    """A local Ray, not started: no cluster named, none joined."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    yield
    assert not ray.is_initialized()


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_local_ray_given_more_cpus_than_the_machine_is_refused(tmp_path, capsys, no_cluster, command):
    cpus = os.cpu_count()
    line = refused(tmp_path, capsys, command, config_file(tmp_path, RAY), f"runtime.num_cpus={cpus + 1}")
    assert line == (f"bad config value runtime.num_cpus = {cpus + 1}: a local Ray runs on this machine, which has "
                    f"{cpus} CPUs; give at most {cpus}, leave it unset (the machine's) or join a cluster that has "
                    f"more (runtime.address)")
    line = refused(tmp_path, capsys, command, config_file(tmp_path, RAY), "runtime.num_cpus=1000")
    assert line.startswith("bad config value runtime.num_cpus = 1000: a local Ray runs on this machine")


def test_a_local_ray_given_more_gpus_than_the_machine_is_refused(tmp_path, capsys, no_cluster):
    gpus = actors.preflight.machine_gpus()
    line = refused(tmp_path, capsys, "check", config_file(tmp_path, RAY), f"runtime.num_gpus={gpus + 1}")
    assert line.startswith(f"bad config value runtime.num_gpus = {gpus + 1}: a local Ray runs on this machine, where "
                           f"Ray finds {gpus} GPUs; give at most {gpus}")


def test_a_cluster_is_not_held_to_this_machine(tmp_path, capsys, monkeypatch):
    """runtime.num_cpus is a local Ray's: with a cluster named, the machine's CPUs do not bound it."""
    from fedray.config import build_config

    config = build_config({"runtime": {"num_cpus": os.cpu_count() + 1, "address": "ray://nowhere:10001"}})
    monkeypatch.setattr(actors.preflight, "probe_ray", lambda address, key: None)
    actors.preflight.check_ray(config)


def test_more_local_actors_than_the_memory_holds_is_refused(tmp_path, capsys, no_cluster, monkeypatch):
    monkeypatch.setattr(actors.preflight, "machine_memory", lambda: 4 << 30)  # a machine of 4 GiB
    text = RAY.replace("num_clients: 4, clients_per_round: 2", "num_clients: 100, clients_per_round: 2")
    text = text.replace("{mlp: 4}", "{mlp: 100}")
    line = refused(tmp_path, capsys, "check", config_file(tmp_path, text), "runtime.actor_cpus=0.01")
    assert line == ("bad config value runtime.actor_cpus = 0.01: a local Ray would start 100 actors, Python processes "
                    "with torch of about 256 MB each (25.0 GB), and this machine has 4.0 GB; raise runtime.actor_cpus "
                    "or set runtime.clients_per_actor so that at most 16 start")
    accepted(capsys, config_file(tmp_path, text), "runtime.actor_cpus=0.01", "runtime.clients_per_actor=10")


# Data files: truncated, inconsistent, labels out of range --------------------------------------------

FMNIST = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def idx_header(*dims: int) -> bytes:
    return bytes([0, 0, 0x08, len(dims)]) + np.array(dims, ">i4").tobytes()


def fashion_mnist(tmp_path, train: int = 60000, labels: np.ndarray = None, data_images: int = None):
    """A Fashion-MNIST root of blank images (sparse files: nothing written) and labels 0; ``train``:
    the count the training images' header gives, ``data_images``: how many images their data holds,
    ``labels``: the training labels."""
    folder = tmp_path / "data" / "fashion-mnist"
    folder.mkdir(parents=True)
    for images, label_name, n in ((FMNIST[0], FMNIST[1], 60000), (FMNIST[2], FMNIST[3], 10000)):
        header_n, data_n = (train, data_images if data_images is not None else train) if n == 60000 else (n, n)
        with open(folder / images, "wb") as f:
            f.write(idx_header(header_n, 28, 28))
            f.truncate(16 + data_n * 28 * 28)
        y = labels if labels is not None and n == 60000 else np.zeros(header_n, np.uint8)
        (folder / label_name).write_bytes(idx_header(len(y)) + y.astype(np.uint8).tobytes())
    return folder


def data_refused(tmp_path, capsys, folder, command="check") -> str:
    return refused(tmp_path, capsys, command, config_file(tmp_path), "data.dataset=fashion_mnist",
                   f"data.root={folder.parent}")


def test_a_whole_fashion_mnist_passes(tmp_path, capsys):
    folder = fashion_mnist(tmp_path)
    accepted(capsys, config_file(tmp_path), "data.dataset=fashion_mnist", f"data.root={folder.parent}")


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_truncated_gzipped_idx_file_is_found_before_the_run(tmp_path, capsys, command):
    folder = fashion_mnist(tmp_path)
    whole = gzip.compress((folder / FMNIST[0]).read_bytes(), compresslevel=1)
    (folder / FMNIST[0]).unlink()
    (folder / (FMNIST[0] + ".gz")).write_bytes(whole[:len(whole) // 2])  # an interrupted download
    line = data_refused(tmp_path, capsys, folder, command)
    assert line == (f"{folder / FMNIST[0]}.gz is corrupt or truncated (Compressed file ended before the end-of-stream "
                    f"marker was reached); replace it (e.g. `apt-get install --reinstall dataset-fashion-mnist`)")


@pytest.mark.parametrize("command", ["check", "run"])
def test_an_idx_file_with_less_data_than_its_header_is_found(tmp_path, capsys, command):
    folder = fashion_mnist(tmp_path, data_images=59999)
    assert data_refused(tmp_path, capsys, folder, command) == (
        f"{folder / FMNIST[0]} is truncated or corrupt: 47039232 bytes of data, expected 47040016 for shape "
        f"(60000, 28, 28); replace it (e.g. `apt-get install --reinstall dataset-fashion-mnist`)")


def test_an_idx_header_that_disagrees_with_the_data_set_is_found(tmp_path, capsys):
    folder = fashion_mnist(tmp_path, train=50000)
    assert data_refused(tmp_path, capsys, folder) == (
        f"{folder / FMNIST[0]} holds an array of shape (50000, 28, 28), expected (60000, 28, 28); replace it (e.g. "
        f"`apt-get install --reinstall dataset-fashion-mnist`)")


def test_a_labels_file_that_disagrees_with_its_images_is_found(tmp_path, capsys):
    folder = fashion_mnist(tmp_path, labels=np.zeros(59999, np.uint8))
    assert data_refused(tmp_path, capsys, folder) == (
        f"{folder / FMNIST[1]} holds 59999 labels for the 60000 images of {folder / FMNIST[0]}; replace it (e.g. "
        f"`apt-get install --reinstall dataset-fashion-mnist`)")


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_label_outside_the_classes_is_found_before_the_run(tmp_path, capsys, command):
    labels = np.zeros(60000, np.uint8)
    labels[12345] = 10  # Fashion-MNIST has classes 0 .. 9
    folder = fashion_mnist(tmp_path, labels=labels)
    assert data_refused(tmp_path, capsys, folder, command) == (
        f"{folder / FMNIST[1]} holds the label 10, and the data set has 10 classes, labels 0 .. 9; replace it (e.g. "
        f"`apt-get install --reinstall dataset-fashion-mnist`)")


def test_emnist_letters_labels_are_checked_against_their_classes(tmp_path, capsys):
    folder = tmp_path / "data" / "EMNIST" / "raw"
    folder.mkdir(parents=True)
    for part, n in (("train", 6), ("test", 3)):
        images = idx_header(n, 28, 28) + bytes(n * 28 * 28)
        (folder / f"emnist-letters-{part}-images-idx3-ubyte.gz").write_bytes(gzip.compress(images))
        labels = bytes([1, 26, 5, 9, 2, 27][:n])  # EMNIST letters: 27 classes, 0 unused
        (folder / f"emnist-letters-{part}-labels-idx1-ubyte").write_bytes(idx_header(n) + labels)
    line = refused(tmp_path, capsys, "check", config_file(tmp_path), "data.dataset=emnist",
                   "data.options={split: letters}", f"data.root={tmp_path / 'data'}")
    assert line.startswith(f"{folder / 'emnist-letters-train-labels-idx1-ubyte'} holds the label 27, and the data set "
                           f"has 27 classes, labels 0 .. 26")


def test_stl10_labels_and_sizes_are_checked(tmp_path, capsys):
    folder = tmp_path / "data" / "stl10_binary"
    folder.mkdir(parents=True)
    image = 3 * 96 * 96
    for part, n in (("train", 4), ("test", 2)):
        with open(folder / f"{part}_X.bin", "wb") as f:
            f.truncate(n * image)
        (folder / f"{part}_y.bin").write_bytes(bytes([1, 10, 3, 11][:n]))
    base = [config_file(tmp_path), "data.dataset=stl10", f"data.root={tmp_path / 'data'}"]
    assert refused(tmp_path, capsys, "check", *base) == (
        f"{folder / 'train_y.bin'} holds the label 11; STL-10 stores labels 1 .. 10; replace it")
    (folder / "train_y.bin").write_bytes(bytes([1, 10, 3]))
    assert refused(tmp_path, capsys, "check", *base) == (
        f"{folder / 'train_y.bin'} has 3 labels for 4 images; replace it")
    with open(folder / "train_X.bin", "ab") as f:
        f.write(b"\0")
    assert refused(tmp_path, capsys, "check", *base) == (
        f"{folder / 'train_X.bin'} has {4 * image + 1} bytes, not a multiple of 3*96*96; replace it")


USER_DATA = '''
import numpy as np
from fedray.data import DatasetBundle

def labels_out_of_range():
    x = np.zeros((40, 4), np.float32)
    y = np.arange(40) % 3
    y[7] = 5
    return DatasetBundle("mine", x, y, x[:10], np.arange(10) % 3, num_classes=3, input_shape=(4,))

def lengths_differ():
    x = np.zeros((40, 4), np.float32)
    return {"train_x": x, "train_y": np.arange(39) % 3, "test_x": x[:10], "test_y": np.arange(10) % 3}
'''


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("loader, message", [
    ("labels_out_of_range", "data set {module}:labels_out_of_range: train_y holds the label 5, outside 0 .. 2 (or -1, "
                            "unlabelled) for num_classes = 3"),
    ("lengths_differ", "data set {module}:lengths_differ: train_x has 40 samples but train_y has 39 labels; give "
                       "one label per sample"),
])
def test_a_users_data_set_with_bad_labels_is_found_before_the_run(tmp_path, capsys, monkeypatch, command, loader,
                                                                   message):
    module = f"user_data_{command}_{loader}"  # one module a test: Python keeps the modules it imported
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(USER_DATA))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    line = refused(tmp_path, capsys, command, config_file(tmp_path), f"data.dataset={module}:{loader}")
    assert line.startswith(message.format(module=module))
