"""FedOpt's server optimisers (Reddi et al. 2021, Alg. 2) and FedAvgM on hand-computed tensors."""

import numpy as np
import pytest

from tests.methods.test_aggregation import strategy, update
from tests.support import aggregate


def two_rounds(optimizer, **params):
    """x_0 = [0, 0]; round 1 the clients' mean is [1, -2], round 2 it is x_1 + [1, 0]."""
    s = strategy("fedopt", optimizer=optimizer, server_lr=0.1, beta1=0.5, beta2=0.75, tau=0.5, **params)
    aggregate(s, 1, [update(0, 1, [0, -2], 1), update(1, 1, [2, -2], 3), update(2, 2, [1, -2], 2)])
    first = s.models["mlp"]["w"].astype(np.float64).copy()
    target = first + np.array([1.0, 0.0])
    aggregate(s, 2, [update(i, 1, target, 2) for i in range(3)])
    return s, first, s.models["mlp"]["w"].astype(np.float64)


def test_fedadam_by_hand():
    s, first, second = two_rounds("adam")
    # round 1: Delta = [1, -2]; m = 0.5 * [1, -2]; v = 0.75 * 0.25 + 0.25 * [1, 4] = [0.4375, 1.1875]
    m1, v1 = np.array([0.5, -1.0]), np.array([0.4375, 1.1875])
    np.testing.assert_allclose(first, 0.1 * m1 / (np.sqrt(v1) + 0.5), rtol=1e-6)
    # round 2: Delta = [1, 0]; m = 0.5 m1 + 0.5 [1, 0]; v = 0.75 v1 + 0.25 [1, 0]
    m2, v2 = 0.5 * m1 + np.array([0.5, 0.0]), 0.75 * v1 + np.array([0.25, 0.0])
    np.testing.assert_allclose(second, first + 0.1 * m2 / (np.sqrt(v2) + 0.5), rtol=1e-6)
    assert s.models["mlp"]["count"] == 2  # buffers: the clients' mean, as FedAvg
    m, v = s.moments["mlp"]["w"]
    np.testing.assert_allclose(m, m2)
    np.testing.assert_allclose(v, v2)
    assert set(s.moments["mlp"]) == {"w"}  # the optimiser moves parameters only


def test_fedyogi_and_fedadagrad_by_hand():
    _, first, second = two_rounds("yogi")
    m1 = np.array([0.5, -1.0])
    # v_0 = tau^2 = 0.25 < Delta^2 = [1, 4]: sign -1, so v grows by (1 - beta2) Delta^2
    v1 = 0.25 + 0.25 * np.array([1.0, 4.0])
    np.testing.assert_allclose(first, 0.1 * m1 / (np.sqrt(v1) + 0.5), rtol=1e-6)
    # round 2: Delta^2 = [1, 0]; v1 = [0.5, 1.25]: sign(v1 - Delta^2) = [-1, +1]
    v2 = v1 - 0.25 * np.array([1.0, 0.0]) * np.array([-1.0, 1.0])
    np.testing.assert_allclose(second, first + 0.1 * (0.5 * m1 + [0.5, 0]) / (np.sqrt(v2) + 0.5), rtol=1e-6)

    _, first, second = two_rounds("adagrad")
    v1 = 0.25 + np.array([1.0, 4.0])
    np.testing.assert_allclose(first, 0.1 * m1 / (np.sqrt(v1) + 0.5), rtol=1e-6)
    np.testing.assert_allclose(second, first + 0.1 * (0.5 * m1 + [0.5, 0]) / (np.sqrt(v1 + [1, 0]) + 0.5), rtol=1e-6)


def test_fedavgm_by_hand_and_fedavg_as_its_special_case():
    _, first, second = two_rounds("momentum")
    np.testing.assert_allclose(first, 0.1 * np.array([1.0, -2.0]), rtol=1e-6)  # m = Delta
    np.testing.assert_allclose(second, first + 0.1 * (0.5 * np.array([1.0, -2.0]) + [1, 0]), rtol=1e-6)
    plain = strategy("fedopt", optimizer="momentum", server_lr=1.0, beta1=0.0)
    avg = strategy("fedavg")
    ups = [update(0, 1, [0, -2], 1), update(1, 1, [2, -2], 3), update(2, 2, [1, -2], 2)]
    aggregate(plain, 1, ups), aggregate(avg, 1, ups)
    np.testing.assert_array_equal(plain.models["mlp"]["w"], avg.models["mlp"]["w"])


def test_moments_are_checkpointed():
    s, _, _ = two_rounds("adam")
    fresh = strategy("fedopt", optimizer="adam", server_lr=0.1, beta1=0.5, beta2=0.75, tau=0.5)
    fresh.load_state_dict(s.state_dict())
    ups = [update(i, 1, [3, 3], 2) for i in range(3)]
    aggregate(s, 3, ups), aggregate(fresh, 3, ups)
    np.testing.assert_array_equal(s.models["mlp"]["w"], fresh.models["mlp"]["w"])


def test_unknown_optimizer_is_a_config_error():
    from fedray.config import ConfigError

    with pytest.raises(ConfigError, match="optimizer"):
        strategy("fedopt", optimizer="lamb")


@pytest.mark.parametrize("optimizer", ["momentum", "adagrad", "yogi", "adam"])
def test_the_mean_model_folds_on_the_hosts(optimizer):
    """Delta_t from the |D_i|-weighted mean folded on the hosts: as in the server, and in any split of
    the clients into fold units within the float64 bound of the mean, carried through the server step."""
    from tests.methods.test_aggregation import Wide, fold, fold_alike, spread, ulp

    k = 40
    params = dict(optimizer=optimizer, weighted=True, server_lr=0.1, beta1=0.5, beta2=0.75, tau=0.5)

    def make():
        return strategy("fedopt", k, Wide, **params)

    updates = [update(cid, 1 + cid % 7, x, cid) for cid, x in enumerate(spread(k))]
    one, split, bound, moved = fold_alike(make, updates, lambda cid: cid * 5 // k)
    assert moved
    # the first round's step is monotone in each entry of the mean model (Alg. 2 lines 9-13, m and v
    # from 0 and tau^2), and the split moves that mean by at most the bound over sum_i |D_i|, rounded
    mean = fold(make(), updates, lambda cid: 0)["mlp"]["model"].mean()
    d = bound["mlp"]["model"]["w"] / sum(u.num_samples for u in updates) + ulp(mean["w"])
    ends = []
    for sign in (-1, 1):
        s = make()
        ends.append(s.server_step(s.models["mlp"], {**mean, "w": mean["w"] + sign * d}, s.moments["mlp"])["w"])
    w = split.models["mlp"]["w"]
    assert np.all(w >= np.minimum(*ends) - ulp(w)) and np.all(w <= np.maximum(*ends) + ulp(w))
    assert split.models["mlp"]["count"] == one.models["mlp"]["count"]
