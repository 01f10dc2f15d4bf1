"""The Python API (``fedray.api``) on the local backend with tiny runs: a run from a dict and its
Result (history, final metrics, the final models), a resume that extends it, ``check`` refusing
without creating anything, both kinds of overrides giving one config, and a cheap ``import fedray``."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fedray
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.tracking import read_scalars
from fedray.config import Config, ConfigError
from fedray.data import load_dataset
from fedray.runner import RunFailed
from fedray.observers import Observer
from tests.support import ClientCounter

ROOT = Path(__file__).resolve().parents[1]
TREE = {"name": "api", "checkpoint_every": 10, "data": {"dataset": "digits"},
        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1, "architectures": {"mlp": 4}},
        "training": {"lr": 0.1, "batch_size": 16}, "runtime": {"backend": "local", "torch_threads": 1}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run of 3 rounds, evaluated after rounds 2 and 3, from a dict with dict overrides."""
    run_dir = tmp_path_factory.mktemp("api") / "run"
    counter = ClientCounter()
    result = fedray.run(TREE, {"federation.rounds": 3, "federation.eval_every": 2}, run_dir=run_dir, progress=False,
                        observers=[counter])
    return result, counter


def test_a_run_from_a_dict_gives_its_result(finished):
    result, counter = finished
    assert isinstance(result.run_dir, Path) and result.run_dir.name == "run"
    saved = json.loads((result.run_dir / "result.json").read_text())
    assert result.summary == saved and result.final == saved["final"] and result.summary["rounds"] == 3
    accuracy = result.metrics("eval/accuracy")
    assert [step for step, _ in accuracy] == [2, 3]  # one point per evaluated round
    # the values the run computed (its checkpoint's history, float64), not TensorBoard's float32 roundings
    computed = [(h["round"], h["eval/loss"]) for h in read_checkpoint(result.run_dir / CHECKPOINT)["history"]
                if "eval/loss" in h]
    assert result.metrics("eval/loss") == computed and accuracy[-1][1] == result.final["eval/accuracy"]
    assert [v for _, v in read_scalars(result.run_dir)["eval/loss"]] == [float(np.float32(v)) for _, v in computed]
    assert any(float(np.float32(v)) != v for _, v in computed)  # a mean loss is no float32
    assert [step for step, _ in result.history["train/loss"]] == [1, 2, 3]
    assert result.summary["client_counter"]["total"] == counter.total == 6  # the user's observer ran
    with pytest.raises(KeyError, match="logged no 'eval/nothing'"):
        result.metrics("eval/nothing")
    assert fedray.Result.load(result.run_dir).summary == saved


def test_a_result_says_where_it_came_from(finished):
    from fedray.config import load_config
    from fedray.provenance import PACKAGE, config_hash

    result, _ = finished
    prov = result.summary["provenance"]
    config = load_config(result.run_dir / "config.yaml")
    assert prov["config_sha256"] == config_hash(config.to_dict()) != config_hash({**config.to_dict(), "seed": 1})
    assert prov["seeds"] == {"run": config.seed, "init": config.model_seed, "split": config.data.seed,
                             "aux": config.aux.seed}
    head = subprocess.run(["git", "-C", str(PACKAGE), "rev-parse", "HEAD"], capture_output=True, text=True)
    if (PACKAGE.parent / ".git").exists() and head.returncode == 0:  # a checkout: its commit, and whether it changed
        changed = subprocess.run(["git", "-C", str(PACKAGE.parent), "status", "--porcelain", "--untracked-files=no",
                                  "--", ".", ":(exclude)docs"], capture_output=True, text=True).stdout.strip()
        assert prov["commit"] == head.stdout.strip() and prov["dirty"] is bool(changed)
    else:
        assert prov["commit"] is None


def test_the_models_are_the_checkpoints_and_score_the_final_accuracy(finished):
    result, _ = finished
    models = result.models()
    saved = read_checkpoint(result.run_dir / CHECKPOINT)["strategy"]["models"]
    assert list(models) == list(saved) == ["mlp"]
    model = models["mlp"]
    assert isinstance(model, torch.nn.Module) and not model.training
    state = model.state_dict()
    assert sorted(state) == sorted(saved["mlp"])
    for name, value in saved["mlp"].items():
        np.testing.assert_array_equal(state[name].numpy(), value)
    data = load_dataset("digits")
    with torch.no_grad():
        predicted = model(torch.from_numpy(data.test_x)).argmax(dim=1).numpy()
    assert float(np.mean(predicted == data.test_y)) == pytest.approx(result.final["eval/accuracy"], abs=1e-9)


def test_resume_extends_the_run(tmp_path):
    first = fedray.run(TREE, run_dir=tmp_path / "run", progress=False)
    assert [s for s, _ in first.metrics()] == [1]
    extended = fedray.resume(tmp_path / "run", rounds=3, progress=False)
    assert extended.run_dir == first.run_dir and extended.summary["rounds"] == 3
    assert [s for s, _ in extended.metrics()] == [1, 2, 3]
    assert read_checkpoint(tmp_path / "run" / CHECKPOINT)["round"] == 3
    with pytest.raises(ConfigError, match="is already at round 3: extend it with --rounds 4"):
        fedray.resume(tmp_path / "run", progress=False)
    # stopped after its last round's checkpoint, before its summary: a resume writes the summary
    summary = (tmp_path / "run" / "result.json").read_text()
    (tmp_path / "run" / "result.json").unlink()
    finished = fedray.resume(tmp_path / "run", progress=False)
    assert finished.summary["rounds"] == 3 and json.loads(summary)["final"] == finished.final
    assert [s for s, _ in finished.metrics()] == [1, 2, 3]


@pytest.mark.parametrize("overrides, message", [
    ({"seed": -1}, "bad config value seed = -1: a seed is an integer"),
    (["federation.bogus=1"], "unknown config key 'federation.bogus'"),
    ({"algorithm.name": "nosuchmethod"}, "nosuchmethod"),  # the method is resolved
    ({"federation.num_clients": 5000, "federation.architectures.mlp": 5000},  # the data is checked
     "bad config value federation.num_clients = 5000: more clients than the 1347 training samples"),
    ({"output_dir": "afile/runs"}, "bad config value output_dir = 'afile/runs'"),  # the run folder too
])
def test_check_refuses_in_one_line_and_creates_nothing(tmp_path, monkeypatch, overrides, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ConfigError) as info:
        fedray.check(TREE, overrides)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1
    with pytest.raises(ConfigError) as again:  # run refuses alike, before anything is made
        fedray.run(TREE, overrides, progress=False)
    assert str(again.value) == str(info.value)
    assert sorted(tmp_path.rglob("*")) == before


def test_check_of_a_good_config_returns_it_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = fedray.check(TREE, {"federation.rounds": 7})
    assert isinstance(config, Config) and config.federation.rounds == 7
    assert list(tmp_path.iterdir()) == []


def test_a_failing_run_raises_run_failed_in_one_line(tmp_path):
    class Breaks(Observer):
        def ended(self, fed, step):
            raise RuntimeError("an observer broke")

    with pytest.raises(RunFailed) as info:
        fedray.run(TREE, run_dir=tmp_path / "run", progress=False, observers=[Breaks()])
    line = str(info.value)
    assert line.startswith("RuntimeError: an observer broke (traceback: ") and len(line.splitlines()) == 1
    assert (tmp_path / "run" / "error.log").is_file()


def test_dict_and_string_overrides_and_every_source_give_one_config(tmp_path):
    strings = ["federation.rounds=5", "federation.architectures={mlp: 2, cnn: 2}", "training.lr=1.0e-05",
               "name='yes'", "data.options={}", "runtime.num_cpus=null"]
    values = {"federation.rounds": 5, "federation.architectures": {"mlp": 2, "cnn": 2}, "training.lr": 1e-05,
              "name": "yes", "data.options": {}, "runtime.num_cpus": None}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(TREE))  # JSON is YAML
    configs = [fedray.load_config(path, strings), fedray.load_config(path, values),
               fedray.load_config(TREE, strings), fedray.load_config(TREE, values),
               fedray.load_config(fedray.load_config(TREE), values)]
    assert all(c == configs[0] for c in configs)
    c = configs[0]
    assert (c.federation.rounds, c.federation.architectures, c.training.lr, c.name) == (5, {"mlp": 2, "cnn": 2},
                                                                                       1e-05, "yes")
    # a bad value is the same line from a file and from a dict
    with pytest.raises(ConfigError) as from_file:
        fedray.load_config(path, ["federation.rounds=0"])
    with pytest.raises(ConfigError) as from_dict:
        fedray.load_config(TREE, {"federation.rounds": 0})
    assert str(from_file.value) == str(from_dict.value) == (
        "bad config value federation.rounds = 0: Input should be greater than or equal to 1")
    with pytest.raises(ConfigError, match="not one string"):
        fedray.load_config(TREE, "federation.rounds=5")
    with pytest.raises(ConfigError, match="a config is a YAML file's path, a dict or a fedray.config.Config"):
        fedray.load_config(42)


def test_import_fedray_imports_no_torch():
    code = ("import sys, fedray\n"
            "assert 'torch' not in sys.modules and 'fedray.api' not in sys.modules\n"
            "fedray.load_config  # the API, imported on first use\n"
            "assert 'torch' not in sys.modules and 'fedray.api' in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_models_of_clustered_fl_are_its_clusters(tmp_path):
    """cfl keeps its clusters' models in its parameter tree (its ``models`` stay the initial one):
    ``models()`` gives one per active cluster, named as its eval tags."""
    tree = {**TREE, "algorithm": {"name": "cfl", "norm_criteria": False, "alpha_thresh": 1.0},
            "data": {"dataset": "digits", "groups": 2, "group_shift": "label_swap"}}
    result = fedray.run(tree, {"federation.clients_per_round": 4, "federation.rounds": 2},
                        run_dir=tmp_path / "run", progress=False)
    models = result.models()
    tags = {tag.split("/")[2] for tag in result.final if tag.startswith("eval/accuracy/cluster")}
    assert sorted(models) == sorted(tags) and len(models) >= 2, (sorted(models), result.final)
    strategy = read_checkpoint(result.run_dir / CHECKPOINT)["strategy"]
    for name, model in models.items():
        saved = strategy["tree"]["nodes"][int(name.removeprefix("cluster"))].model
        for key, value in model.state_dict().items():
            np.testing.assert_array_equal(value.numpy(), saved[key])
    initial = strategy["models"]["mlp"]
    assert any(not np.array_equal(model.state_dict()[k].numpy(), initial[k]) for model in models.values()
               for k in initial)
