"""Client groups (label swap, label permutation, rotation) and adversaries (thesis chapter 6)."""

import numpy as np
import pytest
import torch

from fedray.assembly import make_clients
from fedray.attacks import ATTACKS, Noisy
from fedray.clients import ClientHost
from fedray.config import build_config
from fedray.data.bundle import DatasetBundle
from fedray.data.shifts import adversary_ids, apply_group, client_groups, label_map
from fedray.messages import ClientTask
from fedray.methods.base import task_seed
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.weights import get_weights


def test_groups_are_contiguous_equal_blocks():
    assert client_groups(10, 4).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert client_groups(5, 1).tolist() == [0] * 5
    with pytest.raises(ValueError, match="groups must lie in"):
        client_groups(3, 4)


def test_label_swap_keeps_group_0_and_swaps_a_distinct_pair_per_group():
    maps = [label_map("label_swap", g, 4, 10, seed=0) for g in range(4)]
    assert maps[0].tolist() == list(range(10))
    pairs = []
    for m in maps[1:]:
        moved = np.flatnonzero(m != np.arange(10))
        assert len(moved) == 2 and m[moved[0]] == moved[1] and m[moved[1]] == moved[0]
        pairs.append(set(moved.tolist()))
    assert all(a.isdisjoint(b) for i, a in enumerate(pairs) for b in pairs[i + 1:])
    with pytest.raises(ValueError, match="label_swap needs"):
        label_map("label_swap", 1, 7, 10, seed=0)


def test_label_permutations_differ_between_groups_and_repeat_for_train_and_test():
    maps = [label_map("label_permutation", g, 4, 10, seed=3) for g in range(4)]
    assert all(sorted(m.tolist()) == list(range(10)) for m in maps)
    assert len({tuple(m) for m in maps}) == 4
    y = np.array([0, 1, 2, 9])
    _, train = apply_group(np.zeros((4, 2)), y, "label_permutation", 2, 4, 10, seed=3)
    _, test = apply_group(np.zeros((4, 2)), y, "label_permutation", 2, 4, 10, seed=3)
    assert train.tolist() == test.tolist() == maps[2][y].tolist()


def test_rotation_turns_group_k_by_k_quarters_of_360_over_K():
    x = np.arange(2 * 1 * 3 * 3, dtype=np.float32).reshape(2, 1, 3, 3)
    turned, y = apply_group(x, np.array([1, 2]), "rotation", 1, 2, 10, seed=0)
    np.testing.assert_array_equal(turned, x[:, :, ::-1, ::-1])  # 180 degrees
    assert y.tolist() == [1, 2]
    unchanged, _ = apply_group(x, np.array([1, 2]), "rotation", 0, 2, 10, seed=0)
    np.testing.assert_array_equal(unchanged, x)
    quarter, _ = apply_group(x, np.array([1, 2]), "rotation", 1, 4, 10, seed=0)
    np.testing.assert_array_equal(quarter[0, 0], np.rot90(x[0, 0]))


def test_adversaries_are_a_seeded_fraction_with_their_attacks():
    ids = adversary_ids(100, 0.3, seed=0)
    assert len(ids) == 30 and len(set(ids.tolist())) == 30
    np.testing.assert_array_equal(ids, adversary_ids(100, 0.3, seed=0))
    x, y = np.zeros((50, 4), np.float32), np.arange(50) % 10
    _, flipped = ATTACKS["label_flip"]().data(x, y, seed=1)
    assert flipped.tolist() == [0] * 50
    noisy, same_y = Noisy(10.0).data(x, y, seed=1)
    assert np.abs(noisy).max() <= 10.0 and noisy.std() > 4.0 and same_y.tolist() == y.tolist()
    x2, y2 = ATTACKS["byzantine"]().data(x, y, seed=1)  # attacks updates, not data
    assert np.array_equal(x2, x) and np.array_equal(y2, y)


@pytest.fixture
def grouped():
    config = build_config({"federation": {"num_clients": 4, "clients_per_round": 4, "architectures": {"logreg": 4}},
                           "data": {"dataset": "iris", "groups": 2, "group_shift": "label_permutation",
                                    "adversaries": "byzantine", "adversary_fraction": 0.25},
                           "runtime": {"torch_threads": 1}})
    rng = np.random.default_rng(0)
    bundle = DatasetBundle("toy", rng.normal(size=(40, 4)).astype(np.float32), rng.integers(0, 3, 40),
                           np.zeros((3, 4), np.float32), np.zeros(3, np.int64), 3, (4,))
    specs = make_clients(config, bundle, pools_data=False)
    return config, bundle, specs


def test_clients_get_groups_and_roles_and_hosts_apply_the_shift(grouped):
    config, bundle, specs = grouped
    assert [s.group for s in specs] == [0, 0, 1, 1]
    assert [s.role for s in specs].count("byzantine") == 1
    host = ClientHost(config, resolve(config), specs, bundle.train_x, bundle.train_y, num_classes=3)
    for spec in specs:
        expected = label_map("label_permutation", spec.group, 2, 3, seed=0)[bundle.train_y[spec.indices]]
        assert host.clients[spec.client_id].y.tolist() == expected.tolist()


def test_a_byzantine_client_uploads_weights_plus_standard_normal_noise(grouped):
    config, bundle, specs = grouped
    host = ClientHost(config, resolve(config), specs, bundle.train_x, bundle.train_y, num_classes=3)
    bad = next(s for s in specs if s.role == "byzantine")
    torch.manual_seed(0)
    weights = get_weights(create_model("logreg", (4,), 3))
    update = host.run(ClientTask(bad.client_id, 1, "logreg", ("model/logreg",), task_seed(0, 1, bad.client_id)), weights)
    rng = np.random.default_rng(task_seed(0, 1, bad.client_id))
    for name, w in weights.items():
        np.testing.assert_allclose(update.payload[name] - w, rng.standard_normal(w.shape), atol=1e-5)
    assert np.isnan(update.metrics["loss"]) and update.metrics["steps"] == 0  # it did not train


def test_a_byzantine_dsgd_client_sends_a_standard_normal_gradient(grouped):
    """DSGD's clients send a gradient, not trained weights: the host's attack replaces it by N(0, I)
    (before, DSGD bypassed the attack and its Byzantine clients computed honest gradients)."""
    config, bundle, specs = grouped
    config = build_config({**config.to_dict(), "algorithm": {"name": "dsgd"}})
    host = ClientHost(config, resolve(config), specs, bundle.train_x, bundle.train_y, num_classes=3)
    bad, good = next(s for s in specs if s.role == "byzantine"), next(s for s in specs if s.role == "benign")
    torch.manual_seed(0)
    weights = get_weights(create_model("logreg", (4,), 3))
    task = ClientTask(bad.client_id, 1, "logreg", ("model/logreg",), task_seed(0, 1, bad.client_id))
    update = host.run(task, weights)
    rng = np.random.default_rng(task.seed)
    assert set(update.payload.grad) == set(weights) and update.payload.buffers == {}
    for name, w in weights.items():
        np.testing.assert_array_equal(update.payload.grad[name], rng.standard_normal(w.shape).astype(w.dtype))
    honest_task = ClientTask(good.client_id, 1, "logreg", ("model/logreg",), task.seed)
    honest = host.run(honest_task, weights)  # a benign client's upload is its real mini-batch gradient
    computed = host.client_half.train(honest_task, weights, host.clients[good.client_id])
    for name in weights:
        np.testing.assert_array_equal(honest.payload.grad[name], computed.grad[name])
    assert not np.isnan(honest.metrics["loss"]) and np.isnan(update.metrics["loss"])


def test_bad_group_settings_are_one_line_config_errors():
    from fedray.config import ConfigError
    base = {"federation": {"num_clients": 4, "clients_per_round": 4, "architectures": {"logreg": 4}},
            "data": {"dataset": "iris"}}
    with pytest.raises(ConfigError, match="^bad config: data.groups = 5 exceeds federation.num_clients = 4$"):
        build_config({**base, "data": {"dataset": "iris", "groups": 5}})
    with pytest.raises(ConfigError, match="groups must be 1, 2 or 4, got 3"):
        build_config({**base, "data": {"dataset": "iris", "groups": 3, "group_shift": "rotation"}})
