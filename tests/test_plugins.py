"""A user's own method, model, data set and observer, named in a config by import path.

The user's code is a real package written into a temporary folder, which the test makes the
current one (as a user's project folder is); each test names its package anew, so that no test
sees another's module from ``sys.modules``.
"""

import textwrap
import uuid

import numpy as np
import pytest
import torch
from torch import nn

from fedray.config import ConfigError, build_config
from fedray.data import load_dataset, train_size
from fedray.models import create_model
from fedray.models.wrap import WrappedModel
from fedray.plugins import load, plugin_paths, uses_plugins
from fedray.preflight import check_models
from fedray.resolve import resolve
from fedray.runner import run_experiment
from tests.support import uploads

USER_CODE = """
import numpy as np
import torch
from torch import nn

from fedray.methods import Client, Each, Params, Strategy, Sum
from fedray.methods.base import Trained
from fedray.methods.fedavg import FedAvg, FedAvgParams
from fedray.methods.head_sharing import HeadSharingClient
from fedray.attacks import Attack, Byzantine
from fedray.observers import Observer


class Avg(FedAvg):
    name = "user-avg"


class NoAggregate(Strategy):  # a server half without its server step
    name = "none"
    Params, Client = FedAvgParams, HeadSharingClient


def net(num_classes, hidden=16):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


class RGBNet(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def scaled(num_classes):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, num_classes)

        def forward(self, x):
            return 2 * self.fc(x.flatten(1))  # a step after the last linear layer
    return Scaled()


def no_head(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes + 1))


def digits(seed=0, as_tuple=False):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(x))
    train, test = order[:1400], order[1400:]
    parts = (x[train], d.target[train], x[test], d.target[test])
    if as_tuple:
        return parts
    return dict(zip(("train_x", "train_y", "test_x", "test_y"), parts), classes=[str(i) for i in range(10)])


def with_root(root, limit=100):
    return {"train_x": np.full((limit, 3), len(root), np.float32), "train_y": np.arange(limit) % 2,
            "test_x": np.zeros((4, 3)), "test_y": np.array([0, 1, 0, 1])}


def negative_labels():
    return np.zeros((4, 2)), np.array([0, 1, -1, 1]), np.zeros((2, 2)), np.array([0, 1])


def fractional_labels():
    return np.zeros((4, 2)), np.array([0, 1, 0.5, 1]), np.zeros((2, 2)), np.array([0, 1])


class Rounds(Observer):
    def __init__(self):
        self.seen = 0

    def aggregated(self, fed, step):
        self.seen += 1
        step.metrics["user/rounds_seen"] = float(self.seen)

    def state_dict(self):
        return self.seen

    def load_state_dict(self, state):
        self.seen = state

    key = "user-rounds"


class Reversed(Attack):  # sends -scale * theta on every tensor instead of training

    def __init__(self, scale=1.0):
        self.scale = scale

    def update(self, client, task, theta):
        return Trained({k: (-self.scale * v).astype(v.dtype) for k, v in theta.items()}, {"loss": 0.0, "steps": 0.0})


class MyByzantine(Byzantine):  # the built-in attack, as a user's subclass
    pass


class TwoArguments(FedAvg):  # aggregate with a parameter the hook does not have
    def aggregate(self, round, updates):
        return {}


class Misspelt(FedAvg):
    def agregate(self, round):
        return {}


class Bare(Strategy):  # no Params, no Client
    def aggregate(self, round):
        return {}


class NoStatistics(Strategy):  # a client half that declares nothing to read
    Params, Client = Params, Client

    def aggregate(self, round):
        return {}


class ReadsAMisspeltStatistic(FedAvg):
    def aggregate(self, round):
        return {"user/sum": float(sum(s.weight for s in round.total("modle").values()))}


class ExtraStatistic(HeadSharingClient):  # hands back a statistic it does not declare
    def statistics(self, update, client):
        return {**super().statistics(update, client), "extra": (1.0, np.zeros(1))}


class WithExtraStatistic(FedAvg):
    Client = ExtraStatistic


class SumDeclaredEach(HeadSharingClient):  # declares a Sum, hands back an Each
    @classmethod
    def collected(cls, params):
        return {"model": Sum}

    def statistics(self, update, client):
        return {"model": Each(update.payload)}


class WithSumDeclaredEach(FedAvg):
    Client = SumDeclaredEach


class ShortUpload(HeadSharingClient):
    def upload(self, task, theta, local):
        return local.weights


class WithShortUpload(FedAvg):
    Client = ShortUpload


NOT_A_CLASS = 3
"""


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """The name of a fresh user package in the current folder, holding ``things.py``."""
    name = f"userpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "things.py").write_text(textwrap.dedent(USER_CODE))
    (tmp_path / name / "broken.py").write_text("import numpy\nraise RuntimeError('the user module fails')\n")
    monkeypatch.chdir(tmp_path)
    return name


def config(pkg, **sections):
    tree = {"name": "plug", "seed": 3,
            "data": {"dataset": f"{pkg}.things:digits", "options": {"seed": 1}},
            "federation": {"num_clients": 8, "clients_per_round": 4, "rounds": 3, "eval_every": 1,
                           "architectures": {f"{pkg}.things:net": 8}},
            "training": {"lr": 0.5, "batch_size": 16, "epochs": 3},
            "algorithm": {"name": f"{pkg}.things:Avg"},
            "runtime": {"backend": "local"}}
    for section, values in sections.items():
        tree[section] = {**tree.get(section, {}), **values} if isinstance(values, dict) else values
    return build_config(tree)


@pytest.mark.parametrize("spec, says", [
    ("nowhere_{uuid}.mod:X", "no module named 'nowhere_"),
    ("{pkg}.missing:X", "no module named '{pkg}.missing'"),
    ("{pkg}.things:Missing", "has no 'Missing'"),
    ("{pkg}.broken:X", "importing {pkg}.broken failed: RuntimeError: the user module fails"),
    ("{pkg}.things", "an import path is written package.module:Attribute"),
    ("{pkg}.things:a:b", "an import path is written package.module:Attribute"),
])
def test_a_bad_import_path_is_one_line_naming_the_key(pkg, spec, says):
    spec, says = (s.format(pkg=pkg, uuid=uuid.uuid4().hex[:6]) for s in (spec, says))
    with pytest.raises(ConfigError) as err:
        load(spec, "algorithm.name")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"bad config value algorithm.name = {spec!r}: ")
    assert says in message


@pytest.mark.parametrize("section, value, says", [
    ("algorithm", {"name": "{pkg}.things:net"}, "algorithm.name = '{pkg}.things:net': function net is not a fedray Strategy"),
    ("algorithm", {"name": "{pkg}.things:NoAggregate"}, "NoAggregate implements no aggregate(round), its server step"),
    ("data", {"dataset": "{pkg}.things:Rounds", "options": {}}, "is neither a function that loads a data set nor a torch Dataset"),
    ("data", {"dataset": "{pkg}.things:NOT_A_CLASS", "options": {}}, "a int is not a function that loads a data set"),
    ("federation", {"architectures": {"{pkg}.things:Rounds": 8}}, "is class {pkg}.things.Rounds, not a torch.nn.Module class"),
    ("observers", ["{pkg}.things:net"], "observers[0] = '{pkg}.things:net': function net is not a subclass of fedray.observers.Observer"),
    ("algorithm", {"name": "{pkg}.things:TwoArguments"}, "TwoArguments.aggregate(self, round, updates) does not match the hook Strategy.aggregate(self, round): give it the hook's parameters"),
    ("algorithm", {"name": "{pkg}.things:Misspelt"}, "Misspelt.agregate is not a hook of Strategy; did you mean aggregate?"),
    ("algorithm", {"name": "{pkg}.things:Bare"}, "Bare sets no Params: set Params to its parameters' pydantic model"),
    ("algorithm", {"name": "{pkg}.things:NoStatistics"}, "its client half Client declares no statistics: implement Client.collected(params)"),
    ("algorithm", {"name": "{pkg}.things:ReadsAMisspeltStatistic"}, "ReadsAMisspeltStatistic.aggregate reads the statistic 'modle', which HeadSharingClient.collected never names"),
    ("algorithm", {"name": "{pkg}.things:WithShortUpload"}, "ShortUpload.upload(self, task, theta, local) does not match the hook Client.upload(self, task, theta, local, client)"),
    ("data", {"adversaries": "{pkg}.things:Rounds"}, "data.adversaries = '{pkg}.things:Rounds': class {pkg}.things.Rounds is not a subclass of fedray.attacks.Attack"),
    ("data", {"adversaries": "{pkg}.things:Reversed", "adversary_options": {"scael": 2}}, "data.adversary_options: {pkg}.things:Reversed refused them (TypeError"),
    ("data", {"adversaries": "noisy", "adversary_options": {"scale": 2}}, "they are for an attack of your own (package.module:Class); noisy takes none"),
])
def test_an_object_of_the_wrong_kind_is_refused_by_resolve(pkg, section, value, says):
    import json

    value = json.loads(json.dumps(value).replace("{pkg}", pkg))
    with pytest.raises(ConfigError) as err:
        resolve(config(pkg, **{section: value}))
    assert says.format(pkg=pkg) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("method, says", [
    ("WithExtraStatistic", "ExtraStatistic: its statistics do not match collected(): not declared ['extra']"),
    ("WithSumDeclaredEach", "its statistic 'model' is declared Sum in collected() but is an Each"),
])
def test_statistics_other_than_the_declared_ones_fail_the_round_in_one_line(pkg, tmp_path, method, says):
    from fedray.runner import RunFailed

    with pytest.raises(RunFailed) as err:
        run_experiment(config(pkg, algorithm={"name": f"{pkg}.things:{method}"}), tmp_path / "run", progress=False)
    message = str(err.value)
    assert "\n" not in message and "failed in round 1 during statistics: ValueError: " in message and says in message


def test_every_built_in_method_keeps_the_contract_the_check_asks_of_a_users():
    from fedray.methods import METHODS
    from fedray.plugins import contract_problem

    assert {name: contract_problem(s) for name, s in METHODS.items()} == {name: None for name in METHODS}


def test_models_of_the_wrong_kind_are_refused_before_the_run(pkg, tmp_path):
    with pytest.raises(ConfigError, match=r"model '.*things:digits' with options \{\} cannot be built for inputs of "
                                          r"shape \(1, 8, 8\) and 10 classes: TypeError"):
        check_models(config(pkg, federation={"architectures": {f"{pkg}.things:digits": 8}}))
    with pytest.raises(ConfigError, match="unknown option.s. width; .*things:net takes hidden"):
        resolve(config(pkg, federation={"model_options": {f"{pkg}.things:net": {"width": 3}}}))
    run_dir = tmp_path / "never"
    with pytest.raises(ConfigError, match="cannot be built"):
        run_experiment(config(pkg, federation={"architectures": {f"{pkg}.things:no_head": 8}}), run_dir, progress=False)
    assert not run_dir.exists()


def test_a_plain_module_becomes_features_and_head_with_the_same_output(pkg):
    torch.manual_seed(0)
    model = create_model(f"{pkg}.things:net", (1, 8, 8), 10, hidden=7)
    assert isinstance(model, WrappedModel) and model.feature_dim == 7
    assert [name for name, _ in model.named_parameters()] == ["body.1.weight", "body.1.bias", "classifier.weight",
                                                              "classifier.bias"]
    x = torch.randn(5, 1, 8, 8)
    assert model.features(x).shape == (5, 7)
    assert torch.equal(model(x), model.classifier(torch.relu(model.body[1](x.flatten(1)))))
    torch.manual_seed(0)
    again = create_model(f"{pkg}.things:net", (1, 8, 8), 10, hidden=7)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_a_first_convolution_for_other_channels_is_made_for_the_datas(pkg):
    model = create_model(f"{pkg}.things:RGBNet", (1, 8, 8), 10)
    assert model.body.conv.in_channels == 1 and model.body.conv.out_channels == 4
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert create_model(f"{pkg}.things:RGBNet", (3, 8, 8), 10).body.conv.in_channels == 3


def test_a_model_that_cannot_be_split_says_how_to_write_it(pkg):
    with pytest.raises(ValueError, match=r"its last nn.Linear \(fc\) is not its last step.*FedModel"):
        create_model(f"{pkg}.things:scaled", (1, 8, 8), 10)
    with pytest.raises(ValueError, match="no nn.Linear layer with num_classes = 10 outputs"):
        create_model(f"{pkg}.things:no_head", (1, 8, 8), 10)


def test_a_loaders_arrays_become_a_bundle(pkg):
    spec = f"{pkg}.things:digits"
    bundle = load_dataset(spec, seed=1)
    parts = load(spec, "data.dataset")(seed=1, as_tuple=True)
    assert bundle.train_x.dtype == np.float32 and bundle.train_y.dtype == np.int64
    assert np.array_equal(bundle.train_x, parts[0].astype(np.float32)) and np.array_equal(bundle.test_y, parts[3])
    assert (bundle.num_classes, bundle.input_shape, bundle.classes[:2]) == (10, (1, 8, 8), ["0", "1"])
    assert train_size(spec, seed=1) == 1400
    as_tuple = load_dataset(spec, seed=1, as_tuple=True)
    assert as_tuple.classes is None and np.array_equal(as_tuple.train_x, bundle.train_x)
    root = load_dataset(f"{pkg}.things:with_root", root="/data/here", limit=6)
    assert root.train_x[0, 0] == len("/data/here") and root.num_classes == 2 and train_size(
        f"{pkg}.things:with_root", "/data/here", limit=6) == 6
    with pytest.raises(ValueError, match=f"unknown option 'sed' for data set '{spec}'; valid options: seed, as_tuple"):
        load_dataset(spec, sed=1)
    with pytest.raises(ValueError, match="train_y holds the label -1"):
        load_dataset(f"{pkg}.things:negative_labels")
    with pytest.raises(ValueError, match="train_y must be a vector of integer class labels"):
        load_dataset(f"{pkg}.things:fractional_labels")


def test_a_run_of_the_users_method_model_data_and_observer(pkg, tmp_path):
    """The user's FedAvg subclass, model, loader and observer run and learn; the observer's metric is
    logged; and the same run with fedray's own FedAvg gives the same model, bit for bit."""
    from fedray.tracking import read_scalars

    cfg = config(pkg, observers=[f"{pkg}.things:Rounds"])
    assert uses_plugins(cfg) and not uses_plugins(build_config({}))
    summary = run_experiment(cfg, tmp_path / "user", progress=False)
    scalars = read_scalars(tmp_path / "user")
    assert [v for _, v in scalars["user/rounds_seen"]] == [1.0, 2.0, 3.0]
    accuracy = summary["final"]["eval/accuracy"]
    assert accuracy > 0.5  # ten digits, three rounds of 4 clients: chance is 0.1
    builtin = run_experiment(config(pkg, algorithm={"name": "fedavg"}), tmp_path / "builtin", progress=False)
    assert builtin["final"]["eval/accuracy"] == accuracy
    assert summary["algorithm"] == f"{pkg}.things:Avg"  # as the config names it


def test_a_users_attack_sends_what_it_says_and_a_subclass_of_byzantine_runs_as_the_built_in(pkg, tmp_path):
    """The adversaries (a quarter of the clients) upload -2 theta, as the user's attack with
    ``adversary_options: {scale: 2}`` says, and the honest clients train; a user's subclass of the
    built-in Byzantine attack ends its run where ``adversaries: byzantine`` does, bit for bit."""
    from fedray.assembly import assemble
    from fedray.checkpoint import CHECKPOINT, read_checkpoint
    from fedray.federation import Federation

    cfg = config(pkg, data={"adversaries": f"{pkg}.things:Reversed", "adversary_fraction": 0.25,
                            "adversary_options": {"scale": 2.0}}, federation={"clients_per_round": 8})
    assert ("data.adversaries", f"{pkg}.things:Reversed") in plugin_paths(cfg)
    fed = Federation(assemble(cfg), tmp_path / "reversed", checkpoints=False)
    theta = fed.strategy.models[f"{pkg}.things:net"]
    plan = fed.strategy.configure_round(1)
    updates = uploads(fed, plan)
    roles = {c.client_id: c.role for c in fed.experiment.clients}
    assert sorted(roles.values()).count(f"{pkg}.things:Reversed") == 2
    for u in updates:
        attacked = roles[u.client_id] != "benign"
        for k, v in theta.items():
            assert np.array_equal(u.payload[k], -2 * v) is attacked, (u.client_id, k)

    runs = {}
    for name, attack in (("user", f"{pkg}.things:MyByzantine"), ("builtin", "byzantine")):
        run_experiment(config(pkg, data={"adversaries": attack, "adversary_fraction": 0.25}), tmp_path / name,
                       progress=False)
        runs[name] = read_checkpoint(tmp_path / name / CHECKPOINT)["strategy"]["models"][f"{pkg}.things:net"]
    for k, v in runs["builtin"].items():
        np.testing.assert_array_equal(runs["user"][k], v)
