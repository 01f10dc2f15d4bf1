"""FedAvg, DSGD and FedProx server/client arithmetic on hand-computed tensors."""

import numpy as np
import torch

from fedray.algorithms.dsgd import GradientUpload
from fedray.algorithms.fedprox import FedProxClient, FedProxParams
from fedray.config import build_config
from fedray.messages import ClientSpec, ClientUpdate
from fedray.weights import nbytes, weighted_mean
from tests.support import make_strategy


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))


def strategy(name, **params):
    config = build_config({"federation": {"num_clients": 3, "clients_per_round": 3, "architectures": {"mlp": 3}},
                           "algorithm": {"name": name, **params}, "training": {"lr": 0.5}})
    specs = [ClientSpec(i, "mlp", np.arange(n)) for i, n in enumerate([1, 1, 2])]
    return make_strategy(config, specs, lambda arch: Tiny())


def update(cid, n, w, count=0):
    return ClientUpdate(cid, "mlp", n, {"w": np.array(w, np.float32), "count": np.array(count)}, 8, {"loss": float(cid)})


def test_weighted_mean_by_hand():
    out = weighted_mean([{"a": np.array([1.0, 2.0], np.float32)}, {"a": np.array([3.0, 6.0], np.float32)}], [1, 3])
    np.testing.assert_array_equal(out["a"], np.array([2.5, 5.0], np.float32))
    assert out["a"].dtype == np.float32


def test_weighted_mean_keeps_a_zero_d_counter_an_array():
    """BatchNorm's num_batches_tracked is a 0-d int64 array; its mean must stay one (nbytes, Ray)."""
    out = weighted_mean([{"n": np.array(3, np.int64)}, {"n": np.array(6, np.int64)}], [1, 1])
    assert isinstance(out["n"], np.ndarray) and out["n"].shape == () and out["n"] == 4 and out["n"].dtype == np.int64
    assert nbytes(out) == 8


def test_fedavg_unweighted_is_plain_mean():
    s = strategy("fedavg")
    metrics = s.aggregate(1, [update(2, 2, [3, 3], 4), update(0, 1, [0, 3], 1), update(1, 1, [3, 0], 1)])
    np.testing.assert_allclose(s.models["mlp"]["w"], [2.0, 2.0])  # (0+3+3)/3, (3+0+3)/3
    assert s.models["mlp"]["count"] == 2  # round((1+1+4)/3)
    assert metrics["train/loss"] == 1.0


def test_fedavg_weighted_by_samples():
    s = strategy("fedavg", weighted=True)
    s.aggregate(1, [update(0, 1, [0, 4]), update(1, 1, [4, 0]), update(2, 2, [1, 1])])
    np.testing.assert_allclose(s.models["mlp"]["w"], [1.5, 1.5])  # (0*1 + 4*1 + 1*2)/4, (4 + 0 + 2)/4


def test_dsgd_steps_against_mean_gradient():
    s = strategy("dsgd")
    s.models["mlp"] = {"w": np.array([1.0, 1.0], np.float32), "count": np.array(0)}
    grads = [GradientUpload({"w": np.array(g, np.float32)}, {"count": np.array(c)})
             for g, c in [([2, 0], 2), ([0, 2], 2), ([1, 1], 2)]]
    s.aggregate(1, [ClientUpdate(i, "mlp", 1, g, 8, {"loss": 0.0}) for i, g in enumerate(grads)])
    np.testing.assert_allclose(s.models["mlp"]["w"], [0.5, 0.5])  # 1 - 0.5 * mean([2,0],[0,2],[1,1])
    assert s.models["mlp"]["count"] == 2


def test_sampling_is_seeded_and_uniform_without_replacement():
    s = strategy("fedavg")
    s.config.federation.clients_per_round = 2
    first = [c.client_id for c in s.sample_clients(1)]
    assert first == [c.client_id for c in s.sample_clients(1)] and len(set(first)) == 2
    seen = {tuple(c.client_id for c in s.sample_clients(r)) for r in range(1, 40)}
    assert len(seen) == 3  # all three pairs occur


def test_fedprox_proximal_term_and_gradient():
    config = build_config({"algorithm": {"name": "fedprox", "mu": 0.5}})
    client = FedProxClient(FedProxParams(mu=0.5), config, lambda arch: Tiny(), torch.device("cpu"))
    model = Tiny()
    with torch.no_grad():
        model.w.copy_(torch.tensor([1.0, -1.0]))
    prox = client.extra_loss(model, None)
    with torch.no_grad():
        model.w.copy_(torch.tensor([3.0, 1.0]))
    value = prox(model, None)
    assert value.item() == 0.5 * 0.5 * (4 + 4)  # mu/2 ||w - w_t||^2
    value.backward()
    assert torch.equal(model.w.grad, torch.tensor([1.0, 1.0]))  # mu (w - w_t)


def test_one_broadcast_entry_per_architecture():
    config = build_config({"federation": {"num_clients": 6, "clients_per_round": 4, "architectures": {"mlp": 3, "logreg": 3}}})
    specs = [ClientSpec(i, "mlp" if i < 3 else "logreg", np.arange(5)) for i in range(6)]
    s = make_strategy(config, specs, lambda arch: Tiny())
    for rnd in range(1, 6):
        plan = s.configure_round(rnd)
        archs = {t.arch for t in plan.tasks}
        assert set(plan.broadcast) == {f"model/{a}" for a in archs}
        assert all(t.payload_keys == (f"model/{t.arch}",) for t in plan.tasks) and len(plan.tasks) == 4
