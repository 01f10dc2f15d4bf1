"""examples/: FedNova, TabularNet and the WDBC loader, written outside fedray as a user writes them
and named in a config by import path (issue 33).

FedNova's server step against the paper (reduces to FedAvg when every client takes the same number
of steps; one round of two clients by hand); the example config through the Python API on the local
backend. ``tests/integration/test_job_submit.py`` runs it on a head node, as a job with
``--working-dir examples`` and through the ``fedray`` command from examples/, and both must end
where the local run does.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedray.assembly import assemble
from fedray.cli import main as fedray_main
from fedray.config import build_config
from fedray.executor import LocalExecutor
from fedray.federation import Federation
from fedray.messages import ClientSpec, ClientTask, ClientUpdate
from fedray.methods import ServerContext
from fedray.methods.base import Trained, VirtualClient
from fedray.resolve import resolve
from tests.support import aggregate, client_half, collects

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def in_examples(monkeypatch):
    """The current folder is examples/, where a user runs the examples (and where fedray finds them)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))


def example_config(**overrides):
    import fedray

    return fedray.load_config(EXAMPLES / "fednova.yaml", overrides)


def one_round(config, tmp_path):
    """The global model before and after round 1 of ``config`` on the local backend (whose host folds
    the clients' terms as an actor's does), and the round's metrics."""
    fed = Federation(assemble(config, LocalExecutor), tmp_path, checkpoints=False)
    assert collects(fed.strategy) == "fold"
    before = dict(fed.strategy.models["tabular_net:TabularNet"])
    fed.run_round()
    return before, fed.strategy.models["tabular_net:TabularNet"], fed.history[-1]


def test_fednova_is_fedavg_when_every_client_takes_the_same_steps(in_examples, tmp_path):
    """The paper: with ||a_i||_1 = tau for all i, tau_eff = tau and x^{t+1} = sum_i p_i x_i, FedAvg
    weighted by n_i. ``training.steps`` gives every client the same tau; with epochs their tau_i
    differ (clients of 16 to 90 samples) and FedNova moves elsewhere."""
    same = {"training.steps": 6}
    x, nova, metrics = one_round(example_config(**same), tmp_path / "nova")
    _, avg, _ = one_round(example_config(**same, **{"algorithm.name": "fedavg"}), tmp_path / "avg")
    assert metrics["fednova/tau_eff/tabular_net:TabularNet"] == 6.0
    for name, value in avg.items():  # d_i travels in float32: a few float32 roundings of x apart
        np.testing.assert_allclose(nova[name], value, rtol=0, atol=2e-7)
    assert max(float(np.abs(avg[n] - x[n]).max()) for n in x) > 1e-2  # the round did train

    _, nova, metrics = one_round(example_config(), tmp_path / "nova_epochs")
    _, avg, _ = one_round(example_config(**{"algorithm.name": "fedavg"}), tmp_path / "avg_epochs")
    tau_eff = metrics["fednova/tau_eff/tabular_net:TabularNet"]
    assert tau_eff != int(tau_eff) and 4 < tau_eff < 24  # a p-weighted mean of unequal tau_i
    assert max(float(np.abs(nova[n] - avg[n]).max()) for n in avg) > 1e-3


class Tiny(torch.nn.Module):
    """A parameter ``w`` and a buffer ``mean`` (as BatchNorm's running statistics); the config calls it mlp."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.register_buffer("mean", torch.zeros(2))


def tiny_fednova(in_examples, **training):
    config = build_config({"algorithm": {"name": "fednova:FedNova"}, "training": training,
                           "federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}}})
    specs = [ClientSpec(0, "mlp", np.arange(4)), ClientSpec(1, "mlp", np.arange(12))]
    strategy = resolve(config).make_strategy(ServerContext(config, specs, lambda arch: Tiny()))
    return strategy, specs


def upload(strategy, spec, theta, y, mean, steps):
    """Client ``spec``'s upload after local training ended at ``y`` in ``steps`` steps (its real client half)."""
    client = client_half(strategy)
    local = Trained({"w": np.array(y, np.float32), "mean": np.array(mean, np.float32)}, {"loss": 0.5, "steps": steps})
    task = ClientTask(spec.client_id, 1, "mlp", ("model/mlp",), 0)
    vc = VirtualClient(spec, torch.zeros(spec.num_samples, 1), torch.zeros(spec.num_samples, dtype=torch.long))
    payload = client.upload(task, theta, local, vc)
    return ClientUpdate(spec.client_id, "mlp", spec.num_samples, payload, 0, local.metrics)


def test_fednova_server_step_by_hand_with_two_clients_of_different_steps(in_examples):
    """x = [1, -2]; client 0 (n = 4) ends at [0.6, -1.0] after tau = 2 steps, client 1 (n = 12) at
    [1.6, -3.2] after tau = 6. p = [1/4, 3/4], d_0 = [0.2, -0.5], d_1 = [-0.1, 0.2],
    tau_eff = 2/4 + 18/4 = 5, x^{t+1} = x - 5 (p_0 d_0 + p_1 d_1) = [1.125, -2.125]
    (FedAvg: p_0 y_0 + p_1 y_1 = [1.35, -2.65]); the buffers are averaged, [3.5, 0.5]."""
    strategy, specs = tiny_fednova(in_examples)
    x = {"w": np.array([1.0, -2.0], np.float32), "mean": np.array([0.0, 0.0], np.float32)}
    strategy.models["mlp"] = dict(x)
    updates = [upload(strategy, specs[0], x, [0.6, -1.0], [2, 2], 2.0),
               upload(strategy, specs[1], x, [1.6, -3.2], [4, 0], 6.0)]
    assert [float(u.payload.a_norm) for u in updates] == [2.0, 6.0]
    assert set(updates[0].payload.d) == {"w"} and set(updates[0].payload.buffers) == {"mean"}
    metrics = aggregate(strategy, 1, updates)

    # by hand, from the uploads: p_i = n_i / sum n_j, tau_eff = sum p_i tau_i, x - tau_eff sum p_i d_i
    p = np.array([4.0, 12.0]) / 16.0
    tau_eff = sum(pi * float(u.payload.a_norm) for pi, u in zip(p, updates))
    step = sum(pi * u.payload.d["w"].astype(np.float64) for pi, u in zip(p, updates))
    expected = x["w"] - tau_eff * step
    assert tau_eff == 5.0 and metrics["fednova/tau_eff/mlp"] == 5.0
    np.testing.assert_allclose(strategy.models["mlp"]["w"], expected, rtol=1e-6)
    np.testing.assert_allclose(strategy.models["mlp"]["w"], [1.125, -2.125], rtol=1e-6)
    np.testing.assert_allclose(strategy.models["mlp"]["mean"], [3.5, 0.5], rtol=1e-6)
    assert metrics["train/loss"] == 0.5

    unweighted, _ = tiny_fednova(in_examples)  # weighted: false, p_i = 1/2: tau_eff = 4
    unweighted.params = unweighted.params.model_copy(update={"weighted": False})
    unweighted._test_client_half = None
    unweighted.models["mlp"] = dict(x)
    aggregate(unweighted, 1, [upload(unweighted, specs[0], x, [0.6, -1.0], [2, 2], 2.0),
                             upload(unweighted, specs[1], x, [1.6, -3.2], [4, 0], 6.0)])
    np.testing.assert_allclose(unweighted.models["mlp"]["w"], [1 - 4 * 0.05, -2 - 4 * -0.15], rtol=1e-6)


def test_momentum_steps_are_normalized_by_the_norm_of_a(in_examples):
    """With a constant gradient g, tau steps of PyTorch's SGD with momentum rho move x by
    eta g ||a||_1: the normalized update d is eta g whatever tau and rho (the paper's momentum a_i)."""
    g = torch.tensor([0.5, -2.0])
    for rho in (0.0, 0.9):
        strategy, specs = tiny_fednova(in_examples, momentum=rho, lr=0.1)
        for steps in (1, 7, 30):
            model = Tiny()
            x = {"w": model.w.detach().numpy().copy(), "mean": np.zeros(2, np.float32)}
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=rho)
            for _ in range(steps):
                opt.zero_grad()
                (model.w * g).sum().backward()  # a linear loss: the gradient is g at every step
                opt.step()
            up = upload(strategy, specs[0], x, model.w.detach().numpy(), [0, 0], float(steps))
            np.testing.assert_allclose(up.payload.d["w"], 0.1 * g.numpy(), rtol=2e-5)
            if rho == 0.0:
                assert float(up.payload.a_norm) == steps  # vanilla SGD: ||a||_1 = tau


def test_adam_is_refused_in_one_line(in_examples):
    from fedray.config import ConfigError

    with pytest.raises(ConfigError, match=r"training.optimizer = 'adam'.*set training.optimizer=sgd"):
        resolve(example_config(**{"training.optimizer": "adam"}))


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The example config through the Python API (examples/run_fednova.py) on the local backend."""
    mp = pytest.MonkeyPatch()
    mp.chdir(EXAMPLES)
    mp.syspath_prepend(str(EXAMPLES))
    try:
        import run_fednova

        runs = tmp_path_factory.mktemp("local")
        result = run_fednova.main(["runtime.backend=local", f"output_dir={runs}"])
    finally:
        mp.undo()
    return result


def majority_rate():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from wdbc_data import load
    finally:
        sys.path.remove(str(EXAMPLES))
    test_y = load()["test_y"]
    return np.bincount(test_y).max() / len(test_y)


def test_the_example_learns_through_the_python_api(local_run, capsys):
    majority = majority_rate()
    assert 0.55 < majority < 0.7  # WDBC: 357 of 569 benign
    accuracy = local_run.final["eval/accuracy"]
    assert accuracy > majority + 0.2, (accuracy, majority)
    assert local_run.summary["rounds"] == 20 and local_run.summary["executor"]["backend"] == "local"
    curve = local_run.metrics("eval/accuracy")
    assert [r for r, _ in curve] == list(range(1, 21))
    taus = [v for _, v in local_run.metrics("fednova/tau_eff/tabular_net:TabularNet")]
    assert len(set(taus)) > 1  # the rounds' clients differ, and so does their tau_eff


def test_check_passes_and_a_missing_class_is_one_line_and_no_run_folder(in_examples, tmp_path, capsys):
    assert fedray_main(["check", "fednova.yaml"]) == 0
    assert "config ok: fednova (fednova:FedNova, 10 clients, wdbc_data:load)" in capsys.readouterr().out
    runs = tmp_path / "runs"
    for command in ("check", "run"):
        status = fedray_main([command, "fednova.yaml", "algorithm.name=fednova:Missing", f"output_dir={runs}"])
        err = capsys.readouterr().err
        assert status == 2, err
        assert err.count("\n") == 1 and "'Missing'" in err and "algorithm.name" in err, err
    assert not runs.exists()
