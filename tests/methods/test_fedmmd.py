"""FedMMD (Yao et al. 2018): the squared MMD on hand-computed points, its invariants, and the client's
two-stream steps against the objective written out."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedray.config import build_config
from fedray.messages import ClientSpec, ClientTask, ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.fedmmd import MULTI_WIDTHS, mmd2
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import batch_indices
from fedray.weights import get_weights, set_weights
from tests.support import aggregate, collects, make_strategy, summed


def test_mmd_of_two_points_by_hand():
    x, y = torch.tensor([[0.0]]), torch.tensor([[1.0]])
    # k(x, x) = k(y, y) = sum_s exp(0) = 19; k(x, y) = sum_s exp(-1 / (2 s))
    expected = 2 * len(MULTI_WIDTHS) - 2 * sum(math.exp(-1 / (2 * s)) for s in MULTI_WIDTHS)
    assert mmd2(x, y).item() == pytest.approx(expected, rel=1e-6)
    # adaptive: the joint's mean squared distance is (1 + 1) / (4 - 2) = 1, bandwidths 1/4 .. 4
    expected = 2 * 5 - 2 * sum(math.exp(-1 / 2.0 ** i) for i in range(-2, 3))
    assert mmd2(x, y, "adaptive").item() == pytest.approx(expected, rel=1e-6)


def test_mmd_of_samples_by_hand():
    x, y = torch.tensor([[0.0, 0.0], [0.0, 1.0]]), torch.tensor([[0.0, 0.0], [0.0, 3.0]])

    def k(d2):
        return sum(math.exp(-d2 / (2 * s)) for s in MULTI_WIDTHS)

    kxx = (2 * k(0) + 2 * k(1)) / 4
    kyy = (2 * k(0) + 2 * k(9)) / 4
    kxy = (k(0) + k(9) + k(1) + k(4)) / 4
    assert mmd2(x, y).item() == pytest.approx(kxx + kyy - 2 * kxy, rel=1e-5)


def test_mmd_compares_distributions_not_pairs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 5, generator=g)
    shuffled = x[torch.randperm(32, generator=g)]
    assert (x - shuffled).abs().max() > 1  # a pairwise penalty would see these as far apart
    for kernel in ("multi", "adaptive"):
        assert mmd2(x, shuffled, kernel).item() == pytest.approx(0.0, abs=1e-5)
        assert mmd2(x, x + 2.0, kernel).item() > 0.1
        # symmetric, and a larger shift is a larger discrepancy
        assert mmd2(x, x + 1.0, kernel).item() == pytest.approx(mmd2(x + 1.0, x, kernel).item(), rel=1e-5)
        assert mmd2(x, x + 0.5, kernel).item() < mmd2(x, x + 1.0, kernel).item()


def test_mmd_gradient_is_finite_where_the_streams_agree():
    x = torch.randn(8, 3, requires_grad=True)
    mmd2(x, x.detach().clone()).backward()  # round start: the local model is the global one
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() < 1e-5


def config(**params):
    return build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}},
                         "algorithm": {"name": "fedmmd", **params},
                         "training": {"lr": 0.1, "batch_size": 4, "epochs": 2}})


def mlp():
    torch.manual_seed(0)
    return create_model("mlp", (1, 28, 28), 10)


def data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(10, 1, 28, 28, generator=g), torch.randint(0, 10, (10,), generator=g)


def run_client(**params):
    cfg = config(**params)
    client = resolve(cfg).make_client(cfg, lambda arch: mlp(), torch.device("cpu"), None, None)
    x, y = data()
    vc = VirtualClient(ClientSpec(0, "mlp", np.arange(10)), x, y, {})
    theta = get_weights(mlp())
    task = ClientTask(0, 1, "mlp", ("model/mlp",), 5)
    local = client.train(task, client.receive(task, (theta,), vc), vc)
    return theta, local


def reference(theta, lam, layer, kernel):
    """The two-stream objective of the module docstring, stepped with plain SGD on the same batches."""
    model, frozen = mlp(), mlp()
    set_weights(model, theta)
    set_weights(frozen, theta)
    frozen.eval()
    model.train()
    x, y = data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for idx in batch_indices(10, 4, 6, torch.Generator().manual_seed(5)):
        opt.zero_grad()
        features = model.features(x[idx])
        logits = model.head(features)
        with torch.no_grad():
            target = frozen.features(x[idx]) if layer == "features" else frozen(x[idx])
        local = features if layer == "features" else logits
        loss = F.cross_entropy(logits, y[idx]) + lam * mmd2(local, target, kernel)
        loss.backward()
        opt.step()
    return get_weights(model)


@pytest.mark.parametrize("layer,kernel", [("logits", "multi"), ("features", "adaptive")])
def test_client_steps_follow_the_two_stream_objective(layer, kernel):
    theta, local = run_client(lam=5.0, layer=layer, kernel=kernel)
    expected = reference(theta, 5.0, layer, kernel)
    plain = reference(theta, 0.0, layer, kernel)
    moved = max(np.abs(expected[k] - plain[k]).max() for k in expected)
    assert moved > 1e-4  # the term changes the steps
    for name in expected:
        np.testing.assert_allclose(local.weights[name], expected[name], rtol=1e-5, atol=1e-6)
    assert local.metrics["mmd"] > 0 and local.metrics["steps"] == 6


def test_lambda_zero_is_fedavg_bit_for_bit():
    theta, local = run_client(lam=0.0)
    cfg = build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}},
                        "algorithm": {"name": "fedavg"}, "training": {"lr": 0.1, "batch_size": 4, "epochs": 2}})
    client = resolve(cfg).make_client(cfg, lambda arch: mlp(), torch.device("cpu"), None, None)
    x, y = data()
    vc = VirtualClient(ClientSpec(0, "mlp", np.arange(10)), x, y, {})
    task = ClientTask(0, 1, "mlp", ("model/mlp",), 5)
    plain = client.train(task, client.receive(task, (theta,), vc), vc)
    assert all(np.array_equal(local.weights[k], plain.weights[k]) for k in plain.weights)
    assert "mmd" not in local.metrics


def test_server_averages_and_logs_the_clients_mmd():
    cfg = config(lam=0.1)
    specs = [ClientSpec(i, "mlp", np.arange(5)) for i in range(2)]
    s = make_strategy(cfg, specs, lambda arch: mlp())
    w = get_weights(mlp())
    ups = [ClientUpdate(i, "mlp", 1, {k: v + i for k, v in w.items()}, 5, {"loss": 1.0, "mmd": 0.2 + 0.2 * i})
           for i in range(2)]
    metrics = aggregate(s, 1, ups)
    assert metrics["fedmmd/mmd"] == pytest.approx(0.3)
    for k in w:
        np.testing.assert_allclose(s.models["mlp"][k], w[k] + 0.5, rtol=1e-6)


def test_the_mean_model_folds_on_the_hosts_and_the_mmd_is_still_logged():
    """FedAvg's fold (the clients' mean model) as in the server and within the float64 bound in
    any split; with ``share: head`` it does not fold (FedAvg's), and both log the clients' MMD^2."""
    from tests.methods.test_aggregation import Wide, fold, fold_alike, spread, strategy, ulp

    k = 40
    updates = [ClientUpdate(cid, "mlp", 2, {"w": x, "count": np.array(cid)}, 5, {"loss": 1.0, "mmd": 0.1 * (cid % 3)})
               for cid, x in enumerate(spread(k))]
    one, split, bound, moved = fold_alike(lambda: strategy("fedmmd", k, Wide, lam=0.1), updates, lambda cid: cid * 5 // k)
    assert moved
    mean = one.models["mlp"]["w"]
    assert np.all(np.abs(split.models["mlp"]["w"] - mean.astype(np.float64)) <= bound["mlp"]["model"]["w"] / k + ulp(mean))
    s = strategy("fedmmd", k, Wide, lam=0.1)
    folded = s.aggregate(summed(1, fold(s, updates, lambda cid: 0), updates))
    assert folded["fedmmd/mmd"] == pytest.approx(0.1 * np.mean([cid % 3 for cid in range(k)]))

    cfg = config(lam=0.1, share="head")
    heads = make_strategy(cfg, [ClientSpec(i, "mlp", np.arange(5)) for i in range(2)], lambda arch: mlp())
    assert collects(heads) == "gather"
    w = get_weights(mlp())
    ups = [ClientUpdate(i, "mlp", 1, {k: v + i for k, v in w.items()}, 5, {"loss": 1.0, "mmd": 0.2 + 0.2 * i})
           for i in range(2)]
    assert aggregate(heads, 1, ups)["fedmmd/mmd"] == pytest.approx(0.3)
