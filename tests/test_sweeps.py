"""fedray.sweeps and actors.sweep without running Ray: the trials of a grid over seeds, the placement group of a trial, and
the CLI's grid and seed arguments."""

import pytest

from actors.sweep import trial_bundles
from fedray.cli import _grid, _seeds
from fedray.config import ConfigError, build_config
from fedray.sweeps import plan, seed_overrides


def test_plan_crosses_the_grid_with_the_seeds_and_seeds_split_and_run():
    trials = plan({"training.lr": [0.05, 0.1], "algorithm.name": ["fedavg"]}, [0, 2])
    assert [t.name for t in trials] == ["training.lr=0.05,algorithm.name=fedavg,seed=0",
                                        "training.lr=0.05,algorithm.name=fedavg,seed=2",
                                        "training.lr=0.1,algorithm.name=fedavg,seed=0",
                                        "training.lr=0.1,algorithm.name=fedavg,seed=2"]
    assert trials[1].overrides == {"training.lr": 0.05, "algorithm.name": "fedavg", "seed": 2, "data.seed": 2, "aux.seed": 2}
    assert trials[1].point == {"training.lr": 0.05, "algorithm.name": "fedavg"} and trials[1].seed == 2
    # hold the split: every seed sees the base config's clients; hold the run: only the split moves
    assert plan({}, [3], hold=["split"])[0].overrides == {"seed": 3}
    assert plan({}, [3], hold=["run"])[0].overrides == {"data.seed": 3, "aux.seed": 3}
    assert plan({"data.alpha": [{"a": 1}, "x y"]}, [0])[0].name == "data.alpha=a_1,seed=0"


def test_plan_takes_axes_of_named_variants_beside_config_keys():
    methods = {"fedavg": {"algorithm.name": "fedavg"},
               "scaffold": ["algorithm={name: scaffold}", "training.momentum=0"]}
    trials = plan({"method": methods, "data.alpha": [0.1]}, [4], hold=["run"])
    assert [t.name for t in trials] == ["method=fedavg,data.alpha=0.1,seed=4", "method=scaffold,data.alpha=0.1,seed=4"]
    assert trials[1].point == {"method": "scaffold", "data.alpha": 0.1}
    # the variant's strings are read as YAML, as the CLI's overrides are
    assert trials[1].overrides == {"algorithm": {"name": "scaffold"}, "training.momentum": 0, "data.alpha": 0.1,
                                   "data.seed": 4, "aux.seed": 4}


@pytest.mark.parametrize("grid, seeds, hold, message", [
    ({"training.lr": []}, [0], (), "grid 'training.lr': give a non-empty list of values"),
    ({"training.lr": "0.1"}, [0], (), "grid 'training.lr': give a non-empty list"),
    ({"seed": [1, 2]}, [0], (), r"grid 'seed': the sweep's seeds set it; give seeds, or hold sampling \(or run\)"),
    ({"init_seed": [1, 2]}, [0], ("sampling",), r"grid 'init_seed': the sweep's seeds set it; give seeds, or hold init"),
    ({"data.seed": [1, 2]}, [0], (), "grid 'data.seed': the sweep's seeds set it; give seeds, or hold split"),
    ({"method": {"a": ["data.seed=3"]}}, [0], (), "grid 'method', variant 'a', sets 'data.seed': the sweep's seeds"),
    ({"method": {"a": ["data.seed"]}}, [0], (), "grid 'method', variant 'a': 'data.seed' is not 'key=value'"),
    ({"method": {"a": "x=1"}}, [0], (), "grid 'method', variant 'a': give its overrides as a dict or a list"),
    ({}, [], (), "a sweep needs at least one seed"),
    ({}, [0], ("model",), "hold 'model' is not one of split, init, sampling, run"),
])
def test_plan_refuses_what_cannot_be_swept(grid, seeds, hold, message):
    with pytest.raises(ConfigError, match=message):
        plan(grid, seeds, hold)
    assert plan({"seed": [1, 2]}, [0], hold=["run"])[1].overrides["seed"] == 2  # held: the grid may set it
    assert plan({"init_seed": [1, 2]}, [0], hold=["init"])[1].overrides["init_seed"] == 2


@pytest.mark.parametrize("hold, base, wanted", [
    ((), (0, None), {"data.seed": 3, "aux.seed": 3, "seed": 3}),  # the initial model follows seed
    ((), (5, 7), {"data.seed": 3, "aux.seed": 3, "seed": 3, "init_seed": 3}),  # a base init_seed moves too
    (("split",), (0, None), {"seed": 3}),
    (("init",), (5, None), {"data.seed": 3, "aux.seed": 3, "seed": 3, "init_seed": 5}),  # the base's theta^0, pinned
    (("init",), (5, 7), {"data.seed": 3, "aux.seed": 3, "seed": 3, "init_seed": 7}),
    (("sampling",), (5, None), {"data.seed": 3, "aux.seed": 3, "init_seed": 3}),  # seed stays 5
    (("run",), (5, 7), {"data.seed": 3, "aux.seed": 3}),
    (("init", "sampling"), (5, None), {"data.seed": 3, "aux.seed": 3}),
    (("init", "split"), (5, None), {"seed": 3, "init_seed": 5}),
])
def test_a_seed_sets_split_initial_model_and_sampling_unless_held(hold, base, wanted):
    assert seed_overrides(3, hold, base) == wanted
    assert plan({}, [3], hold, base)[0].overrides == wanted


def test_init_seed_sets_the_initial_model_and_seed_the_sampling():
    """Two runs whose seeds differ but whose init_seed is the same start from the same theta^0 and sample
    other clients; without init_seed the initial model follows the seed."""
    import torch

    from fedray.methods.base import round_rng
    from fedray.assembly import assemble

    def start(**seeds):
        config = build_config({"data": {"dataset": "digits"}, "federation": {
            "num_clients": 20, "clients_per_round": 5, "rounds": 1, "architectures": {"mlp": 20}}, **seeds})
        experiment = assemble(config)
        return experiment.initial["mlp"], sorted(round_rng(config.seed, 1).choice(20, 5, replace=False))

    same = lambda a, b: all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
    (w1, c1), (w2, c2), (w3, _) = start(seed=1, init_seed=0), start(seed=2, init_seed=0), start(seed=2)
    (w0, _) = start(seed=0)
    assert same(w1, w2) and same(w1, w0)  # init_seed 0 is seed 0's theta^0
    assert not same(w2, w3)  # seed 2 alone: its own theta^0
    assert c1 != c2


def test_a_trial_with_bad_method_parameters_is_refused_before_anything_runs(tmp_path):
    from fedray.sweeps import sweep

    base = {"data": {"dataset": "digits"}, "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1,
                                                          "architectures": {"mlp": 4}},
            "algorithm": {"name": "fedprox"}}
    with pytest.raises(ConfigError, match=r"trial algorithm.mu=-1,seed=0: .*algorithm.mu"):
        sweep(base, {"algorithm.mu": [0.1, -1]}, out=tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()


def config(**runtime):
    return build_config({"federation": {"num_clients": 10, "clients_per_round": 4, "rounds": 1,
                                        "architectures": {"mlp": 10}}, "runtime": runtime})


def test_a_trials_bundles_are_the_server_then_one_per_client_actor():
    # one client actor's CPUs: the server hosts every client, one bundle
    assert trial_bundles(config()) == [{"CPU": 1.0}]
    # 3 CPUs: the server (hosting a share) and two client actors
    assert trial_bundles(config(), 3) == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    assert trial_bundles(config(actor_cpus=0.5), 2) == [{"CPU": 0.5}] * 4
    # GPU shares: the server hosts no clients; its bundle is a token, each actor asks for CPU and GPU
    assert trial_bundles(config(actor_gpus=0.5, device="cuda"), 2, 1) == [{"CPU": 0.01}, {"CPU": 1.0, "GPU": 0.5},
                                                                          {"CPU": 1.0, "GPU": 0.5}]
    # the local backend: the trial's own process runs the loop, one bundle of its CPUs
    assert trial_bundles(config(backend="local")) == [{"CPU": 1.0}]
    assert trial_bundles(config(backend="local", torch_threads=2)) == [{"CPU": 2.0}]
    assert trial_bundles(config(backend="local"), 3) == [{"CPU": 3.0}]
    with pytest.raises(ConfigError, match="a trial of 2 CPUs and 0 GPUs: 10 client actors x 1 CPUs do not fit"):
        trial_bundles(config(clients_per_actor=1, server_hosts_clients=False), 2)


def test_the_clis_grid_and_seeds():
    assert _grid(["training.lr=0.05,0.1", "algorithm.name=fedavg,fedprox"]) == {
        "training.lr": [0.05, 0.1], "algorithm.name": ["fedavg", "fedprox"]}
    assert _seeds("0-4") == [0, 1, 2, 3, 4] and _seeds("0,3,7") == [0, 3, 7] and _seeds("1,4-5") == [1, 4, 5]
    with pytest.raises(ConfigError, match="--grid 'training.lr': give KEY=V1,V2"):
        _grid(["training.lr"])
    with pytest.raises(ConfigError, match="--seeds 'a-b': give a range like 0-4"):
        _seeds("a-b")


def test_a_trial_folder_saved_before_a_setting_existed_is_the_same_run(tmp_path):
    """A run saved before fedray had ``init_seed`` holds no such key: at its default it is the same
    run (a grown sweep folder resumes), while a setting that differs is still named."""
    import yaml

    from fedray.sweeps import _other_run

    config = build_config({"federation": {"num_clients": 10, "clients_per_round": 4, "rounds": 2,
                                          "architectures": {"mlp": 10}}})
    saved = config.to_dict()
    del saved["init_seed"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert _other_run(tmp_path, config) is None
    saved["federation"]["rounds"] = 3
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert _other_run(tmp_path, config) == "federation.rounds = 3, not 2"


def test_the_table_says_what_the_seeds_held(tmp_path):
    import json

    from fedray.sweeps import _summarise

    result = _summarise(plan({"training.lr": [0.1]}, [0, 1], ["split"]), tmp_path, ["split"])
    assert result.hold == ["split"] and [r["status"] for r in result.rows] == ["not run"] * 2
    assert json.loads((tmp_path / "sweep.json").read_text())["hold"] == ["split"]
