"""SCAFFOLD (Karimireddy et al. 2020, Alg. 1): the client's corrected steps and control variate,
the server's model and control update, on hand-computed tensors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedray.config import ConfigError, build_config
from fedray.messages import ClientSpec, ClientTask, ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.scaffold import ScaffoldUpload
from fedray.resolve import resolve
from fedray.training import batch_indices
from fedray.weights import get_weights
from tests.support import aggregate, make_strategy


def linear(arch="lin"):
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def config(**params):
    return build_config({"federation": {"num_clients": 3, "clients_per_round": 2, "architectures": {"mlp": 3}},
                         "algorithm": {"name": "scaffold", **params},
                         "training": {"lr": 0.1, "batch_size": 2, "epochs": 2}})


def run_client(control_rule: str, server_c: dict, own_c: dict | None):
    """One SCAFFOLD task on 5 samples (3 batches an epoch, 2 epochs: K = 6 steps)."""
    cfg = config(control=control_rule)
    method = resolve(cfg)
    client = method.make_client(cfg, linear, torch.device("cpu"), None, None)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 3, generator=g), torch.tensor([0, 1, 1, 0, 1])
    vc = VirtualClient(ClientSpec(0, "lin", np.arange(5)), x, y, {} if own_c is None else {"control": own_c})
    theta = get_weights(linear())
    task = ClientTask(0, 1, "lin", ("model/lin", "control/lin"), 7)
    start = client.receive(task, (theta, server_c), vc)
    local = client.train(task, start, vc)
    upload = client.upload(task, start, local, vc)
    return theta, (x, y), local, upload, vc


def reference_steps(theta, data, server_c, own_c, steps=6, lr=0.1, seed=7):
    """Line 10 written out: y <- y - lr (g_i(y) - c_i + c), the same batches as the client."""
    x, y = data
    w, b = (torch.tensor(theta[k], requires_grad=True) for k in ("weight", "bias"))
    for idx in batch_indices(len(x), 2, steps, torch.Generator().manual_seed(seed)):
        loss = F.cross_entropy(x[idx] @ w.T + b, y[idx])
        gw, gb = torch.autograd.grad(loss, (w, b))
        with torch.no_grad():
            w -= lr * (gw - torch.from_numpy(own_c["weight"]) + torch.from_numpy(server_c["weight"]))
            b -= lr * (gb - torch.from_numpy(own_c["bias"]) + torch.from_numpy(server_c["bias"]))
    return {"weight": w.detach().numpy(), "bias": b.detach().numpy()}


def test_client_takes_corrected_steps_and_option_two_control():
    rng = np.random.default_rng(0)
    server_c = {"weight": rng.normal(size=(2, 3)).astype(np.float32), "bias": rng.normal(size=2).astype(np.float32)}
    own_c = {"weight": rng.normal(size=(2, 3)).astype(np.float32), "bias": rng.normal(size=2).astype(np.float32)}
    theta, data, local, upload, vc = run_client("II", server_c, own_c)
    expected = reference_steps(theta, data, server_c, own_c)
    assert local.metrics["steps"] == 6
    for k in expected:
        np.testing.assert_allclose(local.weights[k], expected[k], rtol=1e-5, atol=1e-6)
        # option II: c_i^+ = c_i - c + (x - y_i) / (K eta_l)
        new = own_c[k] - server_c[k] + (theta[k] - local.weights[k]) / (6 * 0.1)
        np.testing.assert_allclose(vc.state["control"][k], new, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(upload.control_delta[k], new - own_c[k], rtol=1e-5, atol=1e-6)
    assert isinstance(upload, ScaffoldUpload) and upload.weights is local.weights


def test_first_round_controls_are_zero_and_option_one_is_the_full_gradient():
    zero = {"weight": np.zeros((2, 3), np.float32), "bias": np.zeros(2, np.float32)}
    theta, (x, y), local, upload, vc = run_client("I", zero, None)
    expected = reference_steps(theta, (x, y), zero, zero)  # c = c_i = 0: plain SGD
    np.testing.assert_allclose(local.weights["weight"], expected["weight"], rtol=1e-5, atol=1e-6)
    w, b = (torch.tensor(theta[k], requires_grad=True) for k in ("weight", "bias"))
    gw, gb = torch.autograd.grad(F.cross_entropy(x @ w.T + b, y), (w, b))  # g_i(x) over all of D_i
    np.testing.assert_allclose(vc.state["control"]["weight"], gw.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(upload.control_delta["bias"], gb.numpy(), rtol=1e-5, atol=1e-7)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.register_buffer("mean", torch.zeros(2))


def test_server_moves_the_model_and_the_control_by_hand():
    cfg = config(server_lr=0.5)
    specs = [ClientSpec(i, "mlp", np.arange(4)) for i in range(3)]
    s = make_strategy(cfg, specs, lambda arch: Tiny())
    plan = s.configure_round(1)
    assert set(plan.broadcast) == {"model/mlp", "control/mlp"} and len(plan.tasks) == 2
    assert all(t.payload_keys == ("model/mlp", "control/mlp") for t in plan.tasks)
    s.models["mlp"] = {"w": np.array([1.0, 1.0], np.float32), "mean": np.array([0.0, 0.0], np.float32)}
    s.controls["mlp"] = {"w": np.array([0.3, -0.3], np.float32)}

    def up(cid, w, mean, dc):
        payload = ScaffoldUpload({"w": np.array(w, np.float32), "mean": np.array(mean, np.float32)},
                                 {"w": np.array(dc, np.float32)})
        return ClientUpdate(cid, "mlp", 4, payload, 16, {"loss": 1.0})

    aggregate(s, 1, [up(0, [3, 1], [2, 2], [0.6, 0.0]), up(2, [1, -3], [4, 0], [0.0, -1.2])])
    # x + eta_g mean(y_i - x) = [1, 1] + 0.5 * mean([2, 0], [0, -4]) = [1.5, 0]
    np.testing.assert_allclose(s.models["mlp"]["w"], [1.5, 0.0])
    np.testing.assert_allclose(s.models["mlp"]["mean"], [3.0, 1.0])  # buffers: the mean
    # c + 1/N sum_S delta c_i = [0.3, -0.3] + (0.6 + 0, 0 - 1.2) / 3 = [0.5, -0.7]
    np.testing.assert_allclose(s.controls["mlp"]["w"], [0.5, -0.7], rtol=1e-6)
    assert set(s.state_dict()) == {"models", "controls"}


def test_option_two_with_momentum_or_adam_is_refused_in_one_line():
    for training, message in (({"momentum": 0.9}, "training.momentum = 0.9"), ({"optimizer": "adam"}, "training.optimizer = 'adam'")):
        cfg = build_config({"algorithm": {"name": "scaffold"}, "training": training})
        with pytest.raises(ConfigError, match=message + ".*set .*or algorithm.control=I"):
            resolve(cfg)
    resolve(build_config({"algorithm": {"name": "scaffold", "control": "I"}, "training": {"momentum": 0.9}}))


def test_server_step_folds_the_models_and_the_control_deltas():
    """Lines 16-17 from sums folded on the hosts: as in the server, and any split of the clients into
    fold units within the float64 bound (N = 50 clients, |S| = 40 of them, eta_g = 0.5)."""
    from tests.methods.test_aggregation import Wide, fold_alike, spread, strategy, ulp

    n, k, eta_g = 50, 40, 0.5
    x0, c0 = spread(2, seed=1)

    def make():
        s = strategy("scaffold", n, Wide, server_lr=eta_g)
        s.models["mlp"] = {"w": x0, "count": np.array(5)}
        s.controls["mlp"] = {"w": c0}
        return s

    ys, dcs = spread(k, seed=2), spread(k, seed=3)
    updates = [ClientUpdate(cid, "mlp", 2, ScaffoldUpload({"w": y, "count": np.array(cid)}, {"w": dc}), 16, {"loss": 1.0})
               for cid, (y, dc) in enumerate(zip(ys, dcs))]
    one, split, bound, moved = fold_alike(make, updates, lambda cid: cid * 7 // k)
    assert moved
    # by hand, in float64: x + eta_g (mean_S y_i - x) and c + 1/N sum_S delta c_i, rounded to float32
    mean_y, sum_dc = np.mean(np.array(ys, np.float64), axis=0), np.sum(np.array(dcs, np.float64), axis=0)
    np.testing.assert_allclose(one.models["mlp"]["w"], x0 + eta_g * (mean_y - x0), rtol=1e-6)
    np.testing.assert_allclose(one.controls["mlp"]["w"], c0 + sum_dc / n, rtol=1e-6)
    assert one.models["mlp"]["count"] == round(sum(range(k)) / k)
    # another split moves each sum by at most its bound: the model by eta_g / |S| of it, the control by 1/N
    w, c = one.models["mlp"]["w"], one.controls["mlp"]["w"]
    assert np.all(np.abs(split.models["mlp"]["w"] - w.astype(np.float64)) <= eta_g * bound["mlp"]["model"]["w"] / k + ulp(w))
    assert np.all(np.abs(split.controls["mlp"]["w"] - c.astype(np.float64)) <= bound["mlp"]["control"]["w"] / n + ulp(c))
