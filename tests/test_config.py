"""Config validation: every bad input is one line naming the key and the bad value."""

import pytest

from fedray.cli import main
from fedray.config import ConfigError, apply_overrides, build_config, load_config
from fedray.experiment import resolve


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def message(tree):
    """The one-line error of a config tree: from the schema, or from resolving its method and names."""
    with pytest.raises(ConfigError) as info:
        resolve(build_config(tree))
    text = str(info.value)
    assert "\n" not in text
    return text


def test_defaults_are_valid():
    config = build_config({})
    assert config.federation.num_clients == 100 and config.algorithm.name == "fedavg"
    assert resolve(config).params.weighted is False  # thesis Alg. 2 averages unweighted


def test_unknown_key_is_named():
    assert message({"federation": {"num_clientz": 3}}) == "unknown config key 'federation.num_clientz'"
    assert message({"trainig": {}}) == "unknown config key 'trainig'"


def test_wrong_type_names_key_and_value():
    text = message({"training": {"lr": "fast"}})
    assert text.startswith("bad config value training.lr = 'fast'")


def test_clients_per_round_above_num_clients():
    text = message({"federation": {"num_clients": 5, "clients_per_round": 7, "architectures": {"cnn": 5}}})
    assert "clients_per_round = 7 exceeds num_clients = 5" in text


def test_alpha_must_be_positive():
    text = message({"data": {"alpha": 0}})
    assert text.startswith("bad config value data.alpha = 0") and "greater than 0" in text


def test_architecture_counts_must_add_up():
    text = message({"federation": {"num_clients": 10, "clients_per_round": 2, "architectures": {"cnn": 4, "mlp": 5}}})
    assert "add up to 9 clients" in text


def test_unknown_model_dataset_and_algorithm():
    assert "unknown model 'resnet999'" in message({"federation": {"architectures": {"resnet999": 100}}})
    assert "data.dataset = 'imagenet'" in message({"data": {"dataset": "imagenet"}})
    assert "algorithm.name = 'fedfoo'" in message({"algorithm": {"name": "fedfoo"}})


def test_algorithm_params_are_checked_against_the_method():
    assert message({"algorithm": {"name": "fedavg", "mu": 0.1}}) == "unknown config key 'algorithm.mu'"
    assert "algorithm.mu = -1" in message({"algorithm": {"name": "fedprox", "mu": -1}})
    config = build_config({"algorithm": {"name": "fedprox", "mu": 0.5}})
    assert resolve(config).params.mu == 0.5


def test_overrides_are_typed(tmp_path):
    path = write(tmp_path, "name: t\nfederation: {num_clients: 10, clients_per_round: 2, architectures: {mlp: 10}}\n")
    config = load_config(path, ["federation.rounds=7", "training.lr=0.1", "data.partition=dirichlet",
                                "federation.architectures={mlp: 5, logreg: 5}"])
    assert config.federation.rounds == 7 and config.training.lr == 0.1
    assert config.federation.architectures == {"mlp": 5, "logreg": 5}
    with pytest.raises(ConfigError, match="unknown config key 'federation.roundz'"):
        load_config(path, ["federation.roundz=3"])
    with pytest.raises(ConfigError, match="not of the form key=value"):
        load_config(path, ["federation.rounds"])


def test_cli_exits_nonzero_with_one_line(tmp_path, capsys):
    path = write(tmp_path, "data: {alpha: -2}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("fedray: error: bad config value data.alpha = -2")


def test_cli_missing_dataset_is_one_line(tmp_path, capsys):
    path = write(tmp_path, f"data: {{dataset: fashion_mnist, root: {tmp_path}/nowhere}}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dataset-fashion-mnist" in err and "nowhere" in err


def test_cli_missing_config_file(tmp_path, capsys):
    assert main(["check", str(tmp_path / "absent.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_every_shipped_config_is_valid():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert len(configs) >= 8
    for path in configs:
        config = load_config(path)
        assert config.name, path


def test_gpu_shares_are_fractions_of_one_gpu_and_name_every_architecture():
    two = {"num_clients": 10, "architectures": {"mlp": 5, "cnn": 5}}
    config = build_config({"federation": two, "runtime": {"actor_gpus": {"mlp": 0.1, "cnn": 0.5}}})
    assert config.runtime.gpus_for("cnn") == 0.5 and config.runtime.gpus_for("mlp") == 0.1 and config.runtime.uses_gpus
    assert build_config({"runtime": {"actor_gpus": 0.25}}).runtime.gpus_for("anything") == 0.25
    assert not build_config({}).runtime.uses_gpus
    assert message({"federation": two, "runtime": {"actor_gpus": {"mlp": 0.1}}}) == (
        "bad config: runtime.actor_gpus names GPU shares for ['mlp'], but the run's architectures are "
        "['cnn', 'mlp']: give one share each")
    assert message({"runtime": {"actor_gpus": 1.5}}).startswith(
        "bad config value runtime.actor_gpus = 1.5: GPU shares must be between 0 and 1")
    assert message({"runtime": {"server_gpus": 2}}).startswith("bad config value runtime.server_gpus = 2")


def test_seeds_are_what_numpy_and_torch_take():
    top = 2**64 - 1  # torch.manual_seed's largest; numpy's generators take any non-negative integer
    config = build_config({"seed": top, "data": {"seed": top}, "aux": {"seed": 0}})
    assert config.seed == config.data.seed == top
    for tree in ({"seed": -1}, {"data": {"seed": -1}}, {"aux": {"seed": 2**64}}):
        assert "a seed is an integer from 0 to 2**64 - 1" in message(tree)


def test_the_name_must_make_a_folder_name():
    for bad in ("", "   ", "runs/a"):
        assert message({"name": bad}).startswith(f"bad config value name = {bad!r}: the run folder is named NAME-")
    assert build_config({"name": "fmnist fedavg.v2"}).name == "fmnist fedavg.v2"


def test_an_empty_config_file_is_not_the_defaults(tmp_path):
    for text in ("", "\n# a comment\n"):
        path = write(tmp_path, text)
        with pytest.raises(ConfigError, match=f"config file {path} is empty"):
            load_config(path)
    assert load_config(write(tmp_path, "{}\n")).name == "experiment"  # the defaults, asked for


@pytest.mark.parametrize("override", ["training.lr=.inf", "training.momentum=.nan", "algorithm.mu=.inf"])
def test_infinite_or_nan_settings_are_refused(override):
    """An infinite setting would train into NaN, and a saved config would write it as null."""
    from fedray.experiment import resolve

    with pytest.raises(ConfigError, match="Input should be a finite number"):
        resolve(build_config(apply_overrides({"algorithm": {"name": "fedprox"}}, [override])))
