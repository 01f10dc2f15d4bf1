"""FedAvg, DSGD and FedProx server/client arithmetic on hand-computed tensors; what every method whose
statistics are sums (``fedray.fold``, ``fedray.round``) owes, checked here for DSGD and used by the
other methods' tests."""

from dataclasses import replace

import numpy as np
import torch

from fedray.config import build_config
from fedray.fold import Folder, add_terms
from fedray.messages import ClientSpec, ClientUpdate
from fedray.methods import EachModelClient, Params, ServerContext, Strategy
from fedray.methods.dsgd import GradientUpload
from fedray.methods.fedprox import FedProxClient, FedProxParams
from fedray.weights import nbytes, weighted_mean
from tests.support import aggregate, bare_client, client_half, collects, make_strategy, summed


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))


class Wide(Tiny):
    """Tiny with 64 parameters: room for the rounding of sums in different orders to show."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(64))


def strategy(name, clients=3, build=Tiny, **params):
    """The method's server half over ``clients`` clients of 1, 1, 2, 1, 1, 2, ... samples."""
    config = build_config({"federation": {"num_clients": clients, "clients_per_round": clients,
                                          "architectures": {"mlp": clients}},
                           "algorithm": {"name": name, **params}, "training": {"lr": 0.5}})
    specs = [ClientSpec(i, "mlp", np.arange(1 + (i % 3 == 2))) for i in range(clients)]
    return make_strategy(config, specs, lambda arch: build())


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
    metrics = aggregate(s, 1, [update(2, 2, [3, 3], 4), update(0, 1, [0, 3], 1), update(1, 1, [3, 0], 1)])
    np.testing.assert_allclose(s.models["mlp"]["w"], [2.0, 2.0])  # (0+3+3)/3, (3+0+3)/3
    assert s.models["mlp"]["count"] == 2  # round((1+1+4)/3)
    assert metrics["train/loss"] == 1.0


def test_fedavg_weighted_by_samples():
    s = strategy("fedavg", weighted=True)
    aggregate(s, 1, [update(0, 1, [0, 4]), update(1, 1, [4, 0]), update(2, 2, [1, 1])])
    np.testing.assert_allclose(s.models["mlp"]["w"], [1.5, 1.5])  # (0*1 + 4*1 + 1*2)/4, (4 + 0 + 2)/4


def test_dsgd_steps_against_mean_gradient():
    s = strategy("dsgd")
    s.models["mlp"] = {"w": np.array([1.0, 1.0], np.float32), "count": np.array(0)}
    grads = [GradientUpload({"w": np.array(g, np.float32)}, {"count": np.array(c)})
             for g, c in [([2, 0], 2), ([0, 2], 2), ([1, 1], 2)]]
    aggregate(s, 1, [ClientUpdate(i, "mlp", 1, g, 8, {"loss": 0.0}) for i, g in enumerate(grads)])
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
    prox = client.extra_loss(model, None, None)
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


# -- folding (fedray.fold) ------------------------------------------------------------------------
def spread(k, seed=0):
    """``k`` float32 vectors of Wide's size whose magnitudes span twelve orders (more than float64
    holds beyond float32's 24 bits): float64 sums of them in different orders do round differently."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(64) * 10.0 ** rng.integers(-6, 6)).astype(np.float32) for _ in range(k)]


def fold(s, updates, unit):
    """The round's sums as hosts fold them: the clients of each unit (``unit(client_id)``) in
    client-id order through the client half's ``statistics``, the units' sums added in unit order
    (here they arrive last unit first)."""
    client, parts = client_half(s), {}
    for u in sorted(updates, key=lambda u: u.client_id):
        add_terms(parts.setdefault(unit(u.client_id), {}), u.arch, client.statistics(u, bare_client(u)))
    folder = Folder(sorted(parts))
    for key in sorted(parts, reverse=True):
        folder.add(key, parts[key])
    return folder.result()


def leaves(tree, path=""):
    """(path, array) for every value in a strategy's state: dicts, tuples, objects' attributes."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    elif hasattr(tree, "__dict__"):
        items = vars(tree).items()
    else:
        yield path, np.asarray(tree)
        return
    for key, value in items:
        yield from leaves(value, f"{path}/{key}")


def assert_same_state(a, b):
    left, right = dict(leaves(a.state_dict())), dict(leaves(b.state_dict()))
    assert left.keys() == right.keys()
    for key, value in left.items():
        np.testing.assert_array_equal(value, right[key], err_msg=key)


def float64_bound(s, updates):
    """How far two orders of float64 addition may leave each folded sum sum_i c_i x_i apart: each
    order is within (K - 1) 2**-53 sum_i |c_i x_i| of the exact sum, so K 2**-52 sum_i |c_i x_i|
    bounds them both (per architecture, name and tensor)."""
    client, out = client_half(s), {}
    for u in updates:
        for name, (c, x) in client.statistics(u, bare_client(u)).items():
            into = out.setdefault(u.arch, {}).setdefault(name, {})
            for key, v in (x.items() if isinstance(x, dict) else [("", x)]):
                into[key] = into.get(key, 0.0) + np.abs(np.multiply(c, v, dtype=np.float64))
    return {arch: {name: {key: len(updates) * 2.0**-52 * v for key, v in named.items()}
                   for name, named in by_name.items()} for arch, by_name in out.items()}


def fold_alike(make, updates, unit):
    """What every method whose statistics are sums owes: ``make()``'s strategy folds; the server's
    sum of the gathered statistics (``runtime.fold: false``) is the one-unit fold bit for bit; the
    same split folded twice gives the same bits; and folded in the split ``unit``, each sum stays
    within the float64 bound of the one-unit fold's. Returns the one-unit and the split strategy (state after the round), their sums
    and the bounds (``float64_bound``) for the method's own checks of its state."""
    server = make()
    assert collects(server) == "fold"
    aggregate(server, 1, updates)
    bare = [replace(u, payload=None) for u in updates]
    out = []
    for split in (lambda cid: 0, unit, unit):
        s = make()
        sums = fold(s, updates, split)
        s.aggregate(summed(1, sums, bare))
        out.append((s, sums))
    (one, sums_one), (split, sums_split), (again, _) = out
    assert_same_state(one, server)
    assert_same_state(split, again)
    bound = float64_bound(one, updates)
    moved = False
    for arch, by_name in sums_one.items():
        for name, total in by_name.items():
            mine, theirs = total.value(), sums_split[arch][name].value()
            for key, b in bound[arch][name].items():
                x, y = (mine[key], theirs[key]) if key else (mine, theirs)
                assert np.all(np.abs(x - y) <= b), (arch, name, key)
                moved |= not np.array_equal(x, y)
    return one, split, bound, moved


def ulp(x):
    """One float32 unit in the last place of ``x``."""
    return np.spacing(np.abs(np.asarray(x, np.float32)))


def test_dsgd_folds_the_mean_gradient_and_the_buffers():
    k, eta = 40, 0.5
    updates = [ClientUpdate(cid, "mlp", 1, GradientUpload({"w": g}, {"count": np.array(cid)}), 8, {"loss": 0.0})
               for cid, g in enumerate(spread(k))]
    one, split, bound, moved = fold_alike(lambda: strategy("dsgd", k, Wide), updates, lambda cid: cid * 5 // k)
    assert moved  # the split does change the float64 sum's last bits here
    # theta - eta g, g the sum's mean rounded to float32: each moves by the bound over K, rounded
    g = one.models["mlp"]["w"]  # theta = 0: -eta g
    within = eta * (bound["mlp"]["grad"]["w"] / k + ulp(g / eta)) + ulp(g)
    assert np.all(np.abs(split.models["mlp"]["w"].astype(np.float64) - g) <= within)
    assert split.models["mlp"]["count"] == one.models["mlp"]["count"] == round(sum(range(k)) / k)


def test_a_robust_aggregator_reads_every_model_in_client_order():
    """extending.md's coordinate-wise median: ``EachModelClient`` hands every model back on its own,
    so the run gathers, and ``round.each`` gives them in client-id order whatever order they came in."""
    class CoordinateMedian(Strategy):
        Params, Client = Params, EachModelClient

        def aggregate(self, round):
            self.order = [i.client_id for i in round.each("model")]
            for arch, items in round.each_by_arch("model").items():
                self.models[arch] = {k: np.median([i.value[k] for i in items], axis=0).astype(v.dtype)
                                     for k, v in self.models[arch].items()}
            return round.mean_loss()

    config = build_config({"federation": {"num_clients": 3, "clients_per_round": 3, "architectures": {"mlp": 3}}})
    s = CoordinateMedian(Params(), ServerContext(config, [ClientSpec(i, "mlp", np.arange(2)) for i in range(3)],
                                                 lambda arch: Tiny()))
    assert collects(s) == "gather"
    metrics = aggregate(s, 1, [update(2, 2, [9, -1], 4), update(0, 1, [0, 3], 1), update(1, 1, [3, 100], 1)])
    np.testing.assert_array_equal(s.models["mlp"]["w"], [3, 3])  # the median of 0, 3, 9 and of 3, 100, -1
    assert s.models["mlp"]["count"] == 1 and s.order == [0, 1, 2] and metrics == {"train/loss": 1.0}


def test_fedensemble_keeps_every_upload():
    """Its ensemble holds every user's latest model, which no sum over the clients gives: it gathers."""
    config = build_config({"federation": {"num_clients": 3, "clients_per_round": 3, "architectures": {"mlp": 3}},
                           "algorithm": {"name": "fedensemble"}})
    specs = [ClientSpec(i, "mlp", np.arange(2)) for i in range(3)]
    s = make_strategy(config, specs, lambda arch: Tiny(), test_x=np.zeros((1, 2), np.float32), test_y=np.zeros(1, np.int64))
    assert collects(s) == "gather"
    aggregate(s, 1, [update(2, 2, [3, 3], 4), update(0, 1, [0, 3], 1), update(1, 1, [3, 0], 1)])
    np.testing.assert_allclose(s.models["mlp"]["w"], [2.0, 2.0])  # FedAvg's mean, in the server
    assert sorted(s.latest) == [0, 1, 2]
