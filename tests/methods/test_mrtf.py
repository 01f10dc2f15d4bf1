"""MrTF's server (section 4.4): targets from the modules, refinement on the test inputs that never
reads their labels, the ablations PA / AL / ST / ST+RD, feed-back of the refined model, and PA folded."""

import numpy as np
import pytest
import torch

from fedray.config import ConfigError, build_config
from fedray.distill import aggregate_teachers
from fedray.distill.ensemble import predict_features
from fedray.distill.refinery import (batch_stabilised_probs, cluster_refine, code_global_share, code_rectified_target,
                                     local_share, rectified_target, stabilised_probs)
from fedray.messages import ClientSpec, ClientUpdate
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.weights import get_weights, weighted_mean
from tests.support import aggregate, collects, make_strategy

RNG = np.random.default_rng(0)
TEST_X = RNG.normal(size=(60, 6)).astype(np.float32)
TEST_Y = RNG.integers(0, 3, 60)


def build(arch):
    torch.manual_seed(0)
    return create_model("mlp", (6,), 3, hidden=(8,))


def mrtf(test_y=TEST_Y, **params):
    config = build_config({"federation": {"num_clients": 4, "clients_per_round": 3, "architectures": {"mlp": 4}},
                           "algorithm": {"name": "mrtf", "distill": {"steps": 20, "lr": 1e-2, "batch_size": 16},
                                         **params}})
    specs = [ClientSpec(i, "mlp", np.arange(10)) for i in range(4)]
    return make_strategy(config, specs, build, test_x=TEST_X, test_y=test_y)


def updates(strategy, seed=1, losses=(0.9, 0.6, 0.3)):
    rng = np.random.default_rng(seed)
    base = strategy.models["mlp"]
    return [ClientUpdate(i, "mlp", 10, {k: (v + rng.normal(scale=0.5, size=v.shape)).astype(v.dtype) for k, v in base.items()},
                         0, {"loss": loss}) for i, loss in enumerate(losses)]


def test_refinement_never_reads_the_labels():
    a, b = mrtf(), mrtf(test_y=(TEST_Y + 1) % 3)  # every label changed
    logged = []
    for rnd in (1, 2, 7):  # 7: past cluster_after, with CLR
        ups = updates(a, seed=rnd)
        ma, mb = aggregate(a, rnd, ups), aggregate(b, rnd, ups)
        for name in a.models["mlp"]:
            np.testing.assert_array_equal(a.models["mlp"][name], b.models["mlp"][name])
        logged += [(ma[k], mb[k]) for k in ma if k.startswith("mrtf/accuracy")]
    assert any(x != y for x, y in logged)  # the labels reach the logs only


def test_mrtf_targets_are_st_then_rd_then_clr():
    s = mrtf()
    ups = updates(s)
    previous = dict(s.models["mlp"])
    average = weighted_mean([u.payload for u in ups], [1, 1, 1])
    x = torch.from_numpy(TEST_X)
    logits = torch.stack([s.logits("mlp", u.payload, x) for u in ups])
    q_prev, q_new = (stabilised_probs(s.logits("mlp", w, x), 4.0) for w in (previous, average))
    u = local_share(0.6, 3)  # the mean local loss
    rd = rectified_target(stabilised_probs(logits, 4.0), q_prev, q_new, u)
    target, info = s.targets(1, "mlp", [u.payload for u in ups], previous, average, 0.6)
    torch.testing.assert_close(target, rd)  # round 1: no CLR yet
    assert info == {"u": pytest.approx(0.25 + 0.75 * 0.6 / np.log(3))}
    target, _ = s.targets(6, "mlp", [u.payload for u in ups], previous, average, 0.6)
    torch.testing.assert_close(target, cluster_refine(predict_features(s.work_model("mlp", average), x), rd, 4.0))


def test_ablation_targets_al_and_st():
    al, st = mrtf(teachers="avg_logit", rectify=False, cluster=False), mrtf(rectify=False, cluster=False)
    ups = updates(al)
    x = torch.from_numpy(TEST_X)
    logits = torch.stack([al.logits("mlp", u.payload, x) for u in ups])
    args = ("mlp", [u.payload for u in ups], al.models["mlp"], al.models["mlp"], 0.5)
    torch.testing.assert_close(al.targets(9, *args)[0], aggregate_teachers(logits, "mean_logits"))  # eq. 3
    torch.testing.assert_close(st.targets(9, *args)[0], stabilised_probs(logits, 4.0).mean(dim=0))  # eq. 7
    # the authors' FedDF: q^0.75 renormalised (feddf.py:188), by hand on the mean-logit target
    soft = mrtf(teachers="avg_logit", rectify=False, cluster=False, target_power=0.75).targets(9, *args)[0]
    q = aggregate_teachers(logits, "mean_logits").double()
    by_hand = (q + 1e-8) ** 0.75 / ((q + 1e-8) ** 0.75).sum(dim=1, keepdim=True)
    torch.testing.assert_close(soft.double(), by_hand, rtol=1e-5, atol=1e-7)
    assert (soft.max(dim=1).values < q.max(dim=1).values.float()).all()  # softer where q is not uniform


def test_pa_is_fedavg_and_feed_back_off_broadcasts_the_plain_aggregate():
    pa = mrtf(refine=False)
    ups = updates(pa)
    aggregate(pa, 1, ups)
    config = build_config({"federation": {"num_clients": 4, "clients_per_round": 3, "architectures": {"mlp": 4}},
                           "algorithm": {"name": "fedavg"}})
    fedavg = make_strategy(config, [ClientSpec(i, "mlp", np.arange(10)) for i in range(4)], build)
    aggregate(fedavg, 1, ups)
    average = weighted_mean([u.payload for u in ups], [1, 1, 1])
    for name in average:  # both fold the same terms; weighted_mean adds the shares 1/3: one float32 ulp apart
        np.testing.assert_array_equal(pa.models["mlp"][name], fedavg.models["mlp"][name])
        assert np.all(np.abs(pa.models["mlp"][name] - average[name]) <= np.spacing(np.abs(average[name])))

    kept = mrtf(feed_back=False)
    metrics = aggregate(kept, 1, ups)
    for name in average:
        np.testing.assert_array_equal(kept.models["mlp"][name], average[name])  # broadcast next round
    assert any(not np.array_equal(kept.refined["mlp"][n], average[n]) for n in average)
    assert kept.models_to_evaluate() is kept.refined  # evaluated: the refined model
    assert {"mrtf/accuracy_aggregate", "mrtf/accuracy_targets", "mrtf/accuracy_refined", "mrtf/u",
            "mrtf/distill_loss", "train/loss"} <= set(metrics)


def test_refinement_moves_the_aggregate_towards_the_targets():
    s = mrtf(cluster=False)
    ups = updates(s)
    previous = dict(s.models["mlp"])
    average = weighted_mean([u.payload for u in ups], [1, 1, 1])
    target, _ = s.targets(1, "mlp", [u.payload for u in ups], previous, average, 0.6)
    aggregate(s, 1, ups)
    x = torch.from_numpy(TEST_X)

    def cross_entropy(weights):
        return float(-(target * torch.log_softmax(s.logits("mlp", weights, x), dim=1)).sum(dim=1).mean())

    assert cross_entropy(s.models["mlp"]) < cross_entropy(average) - 0.01  # eq. 8 went down


def test_refining_on_named_auxiliary_inputs_instead_of_the_test_inputs():
    aux = RNG.normal(size=(40, 6)).astype(np.float32)
    config = build_config({"federation": {"num_clients": 4, "clients_per_round": 3, "architectures": {"mlp": 4}},
                           "aux": {"size": 40}, "algorithm": {"name": "mrtf", "inputs": "aux", "cluster": False,
                                                               "distill": {"steps": 20, "lr": 1e-2, "batch_size": 16}}})
    specs = [ClientSpec(i, "mlp", np.arange(10)) for i in range(4)]
    s = make_strategy(config, specs, build, test_x=TEST_X, test_y=TEST_Y, aux_x=aux)
    ups = updates(s)
    previous = dict(s.models["mlp"])
    average = weighted_mean([u.payload for u in ups], [1, 1, 1])
    target, _ = s.targets(1, "mlp", [u.payload for u in ups], previous, average, 0.6)
    assert target.shape == (40, 3)  # on the auxiliary inputs
    metrics = aggregate(s, 1, ups)
    assert "mrtf/accuracy_targets" not in metrics and "mrtf/accuracy_refined" in metrics  # no labels for X_g
    with pytest.raises(ConfigError, match="aux.size = 0"):
        resolve(build_config({"algorithm": {"name": "mrtf", "inputs": "aux"}}))


def test_the_authors_code_rules_as_options():
    """std per batch, the code's eq. 10 from earlier rounds' losses, CLR at cluster_tau, EMA targets."""
    s = mrtf(tau=1.0, std="batch", std_batch_size=16, weights="code", ema=True, cluster_tau=8.0, cluster_after=0)
    x = torch.from_numpy(TEST_X)
    seen = []
    for rnd, losses in ((1, (0.9, 0.6, 0.3)), (2, (0.6, 0.3, 0.3))):
        ups = updates(s, seed=rnd, losses=losses)
        previous = dict(s.models["mlp"])
        average = weighted_mean([u.payload for u in ups], [1, 1, 1])
        logits = torch.stack([s.logits("mlp", u.payload, x) for u in ups])
        q_prev, q_new = (batch_stabilised_probs(s.logits("mlp", w, x), 16) for w in (previous, average))
        g = code_global_share(seen, 3)  # round 1: 0; round 2: from round 1's mean loss 0.6
        rd = code_rectified_target(batch_stabilised_probs(logits, 16), q_prev, q_new, g)
        expected = cluster_refine(predict_features(s.work_model("mlp", average), x), rd, 8.0)
        target, info = s.targets(rnd, "mlp", [u.payload for u in ups], previous, average, float(np.mean(losses)))
        torch.testing.assert_close(target, expected)
        assert info["u"] == pytest.approx(1 - g)
        before = s.previous_targets.get("mlp")
        aggregate(s, rnd, ups)
        mixed = expected if before is None else (1 - g) * expected + g * before
        torch.testing.assert_close(s.previous_targets["mlp"], mixed / mixed.sum(dim=1, keepdim=True))
        seen.append(float(np.mean(losses)))
    assert s.losses == pytest.approx(seen) and code_global_share(seen[:1], 3) > 0


def test_pa_folds_and_refinement_keeps_every_local_model():
    """PA needs the clients only through sum_k theta_{t,k}: the hosts fold it, and another split of the
    clients moves the sum by float64 rounding only. Refinement predicts with every local model on
    X_g, which only the server holds: every upload travels."""
    from tests.methods.test_aggregation import fold_alike

    base, k, rng = mrtf().models["mlp"], 10, np.random.default_rng(2)

    def weights():  # magnitudes over twelve orders, so that float64 sums in other orders round otherwise
        return {n: (rng.normal(size=v.shape) * 10.0 ** rng.integers(-6, 6)).astype(v.dtype) for n, v in base.items()}

    ups = [ClientUpdate(i, "mlp", 10, weights(), 0, {"loss": 0.5}) for i in range(k)]
    one, split, bound, moved = fold_alike(lambda: mrtf(refine=False), ups, lambda cid: cid // 3)
    assert moved
    assert one.refined["mlp"] is one.models["mlp"] and one.losses == split.losses == [0.5]  # PA broadcasts it
    assert collects(mrtf()) == "gather" and collects(mrtf(rectify=False, cluster=False, teachers="avg_logit")) == "gather"
