"""The paper-scale configs (configs/paper) and their sweep (scripts/repro/paper_scale.py): each config is a
valid Config with the values its paper states, its opening comment says what it follows and needs,
``fedray check`` refuses it in one line naming the missing data when the data are absent (an empty
data root: nothing is faked), and the sweep's dry run lists every method of each headline table
with the paper's settings, without data, Ray or a GPU."""

import importlib.util
from pathlib import Path

import pytest

from fedray.cli import main as fedray_main
from fedray.config import ConfigError, load_config
from fedray.data import DatasetNotFoundError, check_dataset
from fedray.data.auxiliary import aux_source
from fedray.plugins import is_import_path
from fedray.preflight import check_data
from tests.support import script

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "configs" / "paper"

# the values each paper states (digests in ../shared/notes), as (dotted key, value)
PINNED = {
    "fedaux_table1.yaml": {  # FedAUX Table I
        "data.dataset": "cifar10", "data.partition": "dirichlet", "data.alpha": 0.01,
        "aux.dataset": "stl10", "aux.options": {"split": "unlabeled", "size": 32, "stats": "cifar10"},
        "aux.size": 100000, "aux.negatives": 0.2,
        "federation.num_clients": 20, "federation.clients_per_round": 8, "federation.rounds": 100,
        "federation.architectures": {"resnet8": 20},
        "federation.model_options": {"resnet8": {"widths": [64, 128, 256, 512]}},  # 4.9 M parameters
        "training.optimizer": "adam", "training.lr": 1e-3, "training.batch_size": 32, "training.epochs": 1,
        "algorithm.name": "fedaux", "algorithm.lam": 0.1, "algorithm.eps": 0.1, "algorithm.delta": 1e-5,
        "algorithm.scorer": "logistic", "algorithm.regularization": "paper",
        "algorithm.distill": {"optimizer": "adam", "lr": 5e-5, "batch_size": 128, "epochs": 1, "temperature": 1.0},
        "pretrain.epochs": 100, "pretrain.batch_size": 512, "pretrain.lr": 1e-3,
    },
    "cfd_table52.yaml": {  # thesis Table 5.2, ResNet-18 rows
        "data.dataset": "cifar10", "data.partition": "dirichlet", "data.alpha": 100.0,
        "aux.dataset": "stl10", "aux.size": 80000,
        "federation.num_clients": 20, "federation.clients_per_round": 8, "federation.rounds": 50,
        "federation.architectures": {"torchvision.models:resnet18": 20},
        "training.optimizer": "adam", "training.lr": 1e-3,
        "algorithm.name": "cfd", "algorithm.mode": "dual", "algorithm.b_up": 1, "algorithm.b_down": 32,
        "algorithm.distill": {"optimizer": "adam", "lr": 1e-3},
    },
    "fedgen_table1.yaml": {  # FedGen Table 1, MNIST rows
        "data.dataset": "mnist", "data.partition": "dirichlet", "data.alpha": 0.1, "data.train_limit": 30000,
        "federation.num_clients": 20, "federation.clients_per_round": 10, "federation.rounds": 200,
        "federation.architectures": {"fedgen_cnn": 20},
        "training.optimizer": "sgd", "training.lr": 0.01, "training.batch_size": 32, "training.steps": 20,
        "algorithm.name": "fedgen", "algorithm.noise_dim": 32, "algorithm.hidden_dim": 256, "algorithm.gen_steps": 50,
    },
    "mrtf_fig7_mnist.yaml": {  # MrTF Fig. 7, MNIST
        "data.dataset": "mnist", "data.partition": "shards", "data.classes_per_client": 3, "data.train_limit": 55000,
        "federation.num_clients": 100, "federation.clients_per_round": 10, "federation.rounds": 200,
        "federation.architectures": {"mlp": 100}, "federation.model_options": {"mlp": {"hidden": [1024, 1024, 128]}},
        "training.optimizer": "sgd", "training.momentum": 0.9, "training.batch_size": 64, "training.epochs": 3,
        "algorithm.name": "mrtf", "algorithm.tau": 4.0, "algorithm.feed_back": True,
        "algorithm.distill": {"optimizer": "adam", "lr": 3e-4, "steps": 500, "batch_size": 64},
    },
    "mrtf_fig7_svhn.yaml": {  # MrTF Fig. 7, SVHN
        "data.dataset": "svhn", "data.partition": "shards", "data.classes_per_client": 3,
        "federation.num_clients": 100, "federation.clients_per_round": 10, "federation.rounds": 200,
        "training.optimizer": "sgd", "training.momentum": 0.9, "training.batch_size": 64, "training.epochs": 3,
        "algorithm.name": "mrtf", "algorithm.tau": 4.0,
        "algorithm.distill": {"optimizer": "adam", "lr": 3e-4, "steps": 500, "batch_size": 64},
    },
}
MISSING = {"cifar10": "cifar-10-batches-py", "mnist": "MNIST/raw", "svhn": "train_32x32.mat", "stl10": "stl10_binary"}


def value(tree, key):
    for part in key.split("."):
        tree = tree[part]
    return tree


def subset(got, want):
    """``want``'s keys have ``got``'s values (nested dicts: the keys given)."""
    if isinstance(want, dict):
        return all(k in got and subset(got[k], v) for k, v in want.items())
    return got == pytest.approx(want) if isinstance(want, float) else got == want


def test_every_config_is_pinned():
    assert sorted(p.name for p in PAPER.glob("*.yaml")) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_config_validates_with_the_papers_values(name):
    path = PAPER / name
    tree = load_config(path).to_dict()
    for key, want in PINNED[name].items():
        assert subset(value(tree, key), want), f"{name}: {key} = {value(tree, key)!r}, the paper's is {want!r}"
    comment = path.read_text().split("\nname:")[0]
    assert comment.startswith("# ") and "Needs" in comment and "Deviations" in comment
    assert tree["runtime"]["server_gpus"] > 0 and tree["runtime"]["actor_gpus"] > 0  # made for a GPU


@pytest.mark.parametrize("name", sorted(PINNED))
def test_check_names_the_missing_data(name, tmp_path, monkeypatch, capsys):
    """With an empty data root: the data check names the files and where they go, and ``fedray
    check`` exits 2 with one line (for a config whose model is torchvision's, without torchvision
    here, that line names torchvision: the model is resolved before the data are checked)."""
    monkeypatch.setenv("FEDRAY_DATA_ROOT", str(tmp_path))
    config = load_config(PAPER / name)
    with pytest.raises(DatasetNotFoundError, match=MISSING[config.data.dataset]) as raised:
        check_data(config)
    assert str(tmp_path) in str(raised.value) and "\n" not in str(raised.value)
    if config.aux.dataset:
        with pytest.raises(DatasetNotFoundError, match=f"aux.dataset {config.aux.dataset}: .*{MISSING[config.aux.dataset]}"):
            aux_source(check_dataset, config.aux.dataset, config.aux.root, **config.aux.options)
    assert fedray_main(["check", str(PAPER / name)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedray: error: ") and "\n" not in err
    plugins = [a for a in config.federation.architectures if is_import_path(a)]
    if plugins and importlib.util.find_spec(plugins[0].split(".")[0]) is None:
        assert plugins[0] in err
    else:
        assert MISSING[config.data.dataset] in err and str(tmp_path) in err


def paper_scale():
    """scripts/repro/paper_scale.py as a module."""
    return script("repro.paper_scale")


def test_the_sweeps_dry_run_lists_every_method_of_each_table(capsys):
    script = paper_scale()
    assert script.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    methods = {"fedaux": {"fedavg", "fedprox", "feddf", "fedbe", "fedavg_p", "fedprox_p", "feddf_p", "fedbe_p", "fedaux"},
               "cfd": {"fedavg", "fd", "cfd_1_32", "cfd_delta_1_32", "cfd_1_1", "cfd_delta_1_1"},
               "fedgen": {"fedavg", "fedprox", "fedensemble", "feddistill", "feddistill_plus", "feddfusion", "fedgen"},
               "mrtf_mnist": {"fedavg", "fedprox", "fedmmd", "scaffold", "fedavgm", "fedadam", "al", "mrtf"}}
    methods["mrtf_svhn"] = methods["mrtf_mnist"]
    scenes = {"fedaux": 6, "cfd": 3, "fedgen": 3, "mrtf_mnist": 4, "mrtf_svhn": 4}
    papers = script.papers()
    for name, paper in papers.items():
        assert set(paper.methods) == methods[name] and len(paper.scenes) == scenes[name]
        trials = len(methods[name]) * scenes[name] * 5
        assert f"{name}: configs/paper/" in out and f"= {trials} trials" in out
    total = sum(len(methods[n]) * scenes[n] * 5 for n in papers)
    assert sum(line.startswith("  run=") for line in out.splitlines()) == total
    assert f"{total} trials in all; nothing was run" in out


def test_the_sweeps_variants_carry_the_papers_settings():
    script = paper_scale()
    papers = script.papers()
    fedaux = papers["fedaux"]
    runtime = script.runtime_overrides(2, 0.25)
    configs = {v: load_config(fedaux.config, runtime + o) for v, o in fedaux.variants().items()}
    for variant, c in configs.items():
        method, scene = variant.split(",", 1)
        assert c.data.alpha == float(scene.split(",")[0].split("=")[1])
        assert c.federation.clients_per_round == round(float(scene.split("C=")[1]) * 20)
        assert c.pretrain.epochs == (0 if method in ("fedavg", "fedprox", "feddf", "fedbe") else 100)
        if c.algorithm.name in ("feddf", "fedbe", "fedaux"):
            assert c.algorithm.distill["lr"] == 5e-5
        assert c.runtime.server_gpus + c.runtime.actor_gpus <= 0.25
    assert configs["feddf_p,alpha=0.01,C=0.4"].algorithm.distill == {"optimizer": "adam", "lr": 5e-5, "epochs": 1,
                                                                        "batch_size": 128}
    assert configs["fedbe,alpha=100,C=0.8"].algorithm.samples == 10
    mu = {v: c.algorithm.mu for v, c in configs.items() if c.algorithm.name == "fedprox"}
    assert mu == {"fedprox,alpha=0.01,C=0.2": 0.01, "fedprox,alpha=0.01,C=0.4": 0.01, "fedprox,alpha=0.01,C=0.8": 0.01,
                  "fedprox_p,alpha=0.01,C=0.2": 0.01, "fedprox_p,alpha=0.01,C=0.4": 0.01, "fedprox_p,alpha=0.01,C=0.8": 0.01,
                  "fedprox,alpha=100,C=0.2": 1e-3, "fedprox,alpha=100,C=0.4": 1e-3, "fedprox,alpha=100,C=0.8": 1e-3,
                  "fedprox_p,alpha=100,C=0.2": 1e-4, "fedprox_p,alpha=100,C=0.4": 1e-4, "fedprox_p,alpha=100,C=0.8": 1e-4}
    mrtf = {v: load_config(papers["mrtf_svhn"].config, o) for v, o in papers["mrtf_svhn"].variants(["scaffold", "al"]).items()}
    assert all(c.data.dataset == "svhn" and c.federation.rounds == 200 for c in mrtf.values())
    assert mrtf["scaffold,C-bar=5"].training.momentum == 0 and mrtf["scaffold,C-bar=5"].data.classes_per_client == 5
    assert mrtf["al,alpha=0.1"].algorithm.teachers == "avg_logit" and mrtf["al,alpha=0.1"].data.alpha == 0.1
    with pytest.raises(ConfigError, match="below Ray's step"):
        script.runtime_overrides(2, 1e-4)
