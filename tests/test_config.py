"""Config validation: every bad input is one line naming the key and the bad value; inputs are
bounded (file size, values with aliases expanded, name and path lengths) and refused at load."""

import time

import pytest

from fedray.cli import main
from fedray.config import ConfigError, MAX_VALUES, apply_overrides, build_config, load_config
from fedray.resolve import resolve


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
    assert message({"algorithm": {"name": "fedavg", "mu": 0.1}}).startswith(
        "unknown config key 'algorithm.mu': fedavg has no parameter 'mu'")
    assert "algorithm.mu = -1" in message({"algorithm": {"name": "fedprox", "mu": -1}})
    config = build_config({"algorithm": {"name": "fedprox", "mu": 0.5}})
    assert resolve(config).params.mu == 0.5


def test_switching_the_method_by_override_replaces_its_section(tmp_path):
    """algorithm.name=stc keeps the file's FedProx mu, which STC refuses with the fix in the line;
    algorithm={name: stc} replaces the section and resolves."""
    path = write(tmp_path, "name: t\nalgorithm: {name: fedprox, mu: 0.1}\n")
    with pytest.raises(ConfigError) as err:
        resolve(load_config(path, ["algorithm.name=stc"]))
    assert str(err.value).startswith("unknown config key 'algorithm.mu': stc has no parameter 'mu'")
    assert "replace the whole section, algorithm={name: stc}" in str(err.value)
    assert resolve(load_config(path, ["algorithm={name: stc}"])).params.p_up == resolve(
        build_config({"algorithm": {"name": "stc"}})).params.p_up


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
    from fedray.resolve import resolve

    with pytest.raises(ConfigError, match=r"bad config value (training.lr|training.momentum|algorithm.mu) = (inf|nan): "
                                          r"a float setting must be a finite number"):
        resolve(build_config(apply_overrides({"algorithm": {"name": "fedprox"}}, [override])))


# Bounded inputs: refused at load, before anything walks them ---------------------------------------

def laughs(depth: int, where: str = "") -> str:
    """A "billion laughs" config: anchors a0..a{depth-1}, each a list of ten of the one before, then
    ``name: *a{depth-1}``; ``where`` is a section to put the anchors in."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, depth)]
    if where:
        lines = [f"{where}:"] + [f"  {line}" for line in lines]
    return "\n".join(lines) + f"\nname: *a{depth - 1}\n"


def test_a_billion_laughs_is_refused_while_it_is_read(tmp_path, capsys):
    """10**10 values to pydantic or repr (the unbounded loader ran 301 s before it was killed); the
    bounded one stops at the anchor that takes the count past MAX_VALUES, a4 (11,111 values)."""
    import tracemalloc

    path = write(tmp_path, laughs(10))
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_config(path)
    seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(info.value) == (f"config file {path} expands to more than 10000 values (a YAML alias, *name, counts "
                               f"as the whole tree it repeats); a config has at most 10000")
    assert seconds < 10 and peak < 50e6  # generous: measured 5 ms and 1 MB
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"fedray: error: {info.value}\n"


def test_the_value_bound_counts_every_value_once_an_alias_as_its_tree(tmp_path):
    # a mapping, data, a mapping, options, a mapping, x, a list: 7 values, then the list's items
    fits = write(tmp_path, "data: {options: {x: [" + ", ".join(["0"] * (MAX_VALUES - 7)) + "]}}\n")
    assert load_config(fits).data.options["x"] == [0] * (MAX_VALUES - 7)
    over = write(tmp_path, "data: {options: {x: [" + ", ".join(["0"] * (MAX_VALUES - 6)) + "]}}\n")
    with pytest.raises(ConfigError, match="expands to more than 10000 values"):
        load_config(over)
    # 1 + 2 + 11 + (1 + 10 * 11) + 1 + 1 + 111 * 89 aliases of a1 = 10006 values
    aliases = "a: &a0 [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\nb: &a1 [" + ", ".join(["*a0"] * 10) + "]\n"
    with pytest.raises(ConfigError, match="expands to more than 10000 values"):
        load_config(write(tmp_path, aliases + "c: [" + ", ".join(["*a1"] * 89) + "]\n"))
    with pytest.raises(ConfigError, match="unknown config key 'a'"):  # 88 aliases: 9895 values, read
        load_config(write(tmp_path, aliases + "c: [" + ", ".join(["*a1"] * 88) + "]\n"))


def test_a_value_in_a_message_is_cut_to_80_characters(tmp_path):
    """What the loader lets through is still too long to print: the value is cut, the line stays short."""
    path = write(tmp_path, laughs(3, where="data:\n  options"))  # name: a list of 1,111 values
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == ("bad config value name = [[['x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', ...], ['x', 'x', "
                               "'x', 'x', 'x', 'x...: Input should be a valid string")
    text = message({"training": {"lr": "x" * 3000}})
    assert text == f"bad config value training.lr = '{'x' * 37}...{'x' * 38}': Input should be a valid number, " \
                   f"unable to parse string as a number"
    assert message({("k" * 500): 1}) == f"unknown config key '{'k' * 77}...'"


def test_a_config_file_over_1_mib_is_refused_unread(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff" * (2 << 20))  # not even UTF-8: the size is what is refused
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config file {path} has 2097152 bytes; a config file has at most 1048576 (1 MiB)"
    path.write_bytes(b"name: t\n#" + b"x" * ((1 << 20) - 10) + b"\n")  # 1 MiB exactly: read
    assert load_config(path).name == "t"


def test_overrides_have_the_bounds_of_a_file(tmp_path):
    path = write(tmp_path, "name: t\n")
    bomb = laughs(10).replace("\n", ", ")  # the file's mapping as one flow mapping
    with pytest.raises(ConfigError, match=r"^override 'data.options' expands to more than 10000 values"):
        load_config(path, ["data.options={" + bomb.rstrip(", ") + "}"])
    with pytest.raises(ConfigError, match=r"^override 'name': the alias \*a repeats a tree that holds it"):
        load_config(path, ["name=&a [*a]"])
    with pytest.raises(ConfigError) as info:
        load_config(path, ["name=" + "x" * ((1 << 20) + 1)])
    assert str(info.value) == "override 'name': its value has 1048577 bytes; a value has at most 1048576 (1 MiB)"


def test_the_name_is_at_most_100_characters_so_that_its_folder_name_fits(tmp_path):
    assert build_config({"name": "n" * 100}).name == "n" * 100
    assert message({"name": "n" * 101}) == (
        f"bad config value name = '{'n' * 37}...{'n' * 38}': the run folder is named NAME-TIMESTAMP, and a folder "
        f"name has at most 255 bytes: give a name of at most 100 characters (and 231 bytes in UTF-8); this one has "
        f"101 (101 bytes)")
    assert build_config({"name": "字" * 77}).name == "字" * 77  # 231 bytes
    assert message({"name": "字" * 78}).endswith("this one has 78 (234 bytes)")
    for name in ("n" * 100, "字" * 77):  # the longest names' folders, with a timestamp and a numbered suffix
        (tmp_path / f"{name}-20260101-120000-1000").mkdir()


def test_a_folder_setting_must_fit_the_file_system(tmp_path):
    assert build_config({"output_dir": f"{tmp_path}/{'d' * 255}"}).output_dir.endswith("d" * 255)
    long = f"{tmp_path}/{'d' * 256}/runs"
    assert message({"output_dir": long}) == (
        f"bad config value output_dir = '{long[:37]}...{long[-38:]}': the folder name '{'d' * 37}...{'d' * 38}' has "
        f"256 bytes; a file system takes at most 255")
    assert "a path of 1500 bytes; fedray takes paths of at most 1024 bytes" in message(
        {"pretrain": {"cache_dir": "/" + "/".join(["d" * 99] * 15)}})
