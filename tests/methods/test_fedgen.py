"""FedGen (Zhu et al. 2021): the generator's losses on hand-computed tensors, a generator that
learns to speak the heads' language, the client's eq. 5 steps, FedAvg at alpha 0, and what folds."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedray.assembly import assemble
from fedray.config import ConfigError, build_config
from fedray.distill.generator import (Generator, diversity_loss, draw_labels, draw_noise, head_logits, teacher_loss,
                                      train_generator)
from fedray.federation import Federation
from fedray.messages import ClientSpec, ClientTask, ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.fedgen import FedGenUpload, seen_labels
from fedray.methods.head_sharing import personal_accuracy
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import batch_indices, evaluate
from fedray.weights import get_weights, nbytes, set_weights
from tests.support import aggregate, collects, make_strategy
from tests.test_federation import digits


def test_diversity_loss_by_hand():
    eps = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    z = torch.tensor([[0.0], [2.0]])
    # pairs (i, j): noise mean squared distance 1 and latent mean absolute distance 2 off the diagonal
    assert diversity_loss(eps, z).item() == pytest.approx(math.exp(-(0 + 2 + 2 + 0) / 4))


def test_teacher_losses_by_hand():
    logits = torch.tensor([[[2.0, 0.0]], [[0.0, 0.0]]])  # two users, one sample of label 0
    y = torch.tensor([0])
    # eq. 4: CE of the mean logits [1, 0]
    assert teacher_loss(logits, y, torch.ones(2, 2), "mean_logits").item() == pytest.approx(math.log(1 + math.exp(-1)))
    # the code: user 1 holds 3 of label 0's 4 samples
    counts = torch.tensor([[3.0, 0.0], [1.0, 5.0]])
    expected = 0.75 * math.log(1 + math.exp(-2)) + 0.25 * math.log(2)
    assert teacher_loss(logits, y, counts, "counts").item() == pytest.approx(expected)


def test_the_codes_teacher_loss_is_mean_ce_times_mean_weight_with_counts_from_one():
    """The authors' code multiplies per-sample CE (N,) by weights (N, 1): the N x N product's mean is
    each user's mean CE times its mean weight, not the mean of their products."""
    logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 3.0]]])  # two users, samples of labels 0, 1
    y = torch.tensor([0, 1])
    counts = torch.tensor([[3.0, 0.0], [1.0, 5.0]])  # from 1: [[4, 1], [2, 6]], per label 6 and 7
    ce = [[math.log(1 + math.exp(-2)), math.log(2)], [math.log(2), math.log(1 + math.exp(-3))]]
    w = [[4 / 6, 1 / 7], [2 / 6, 6 / 7]]
    code = sum((ce[k][0] + ce[k][1]) / 2 * (w[k][0] + w[k][1]) / 2 for k in range(2))
    assert teacher_loss(logits, y, counts, "counts_code").item() == pytest.approx(code, rel=1e-6)
    per_sample = sum((ce[k][0] * w[k][0] + ce[k][1] * w[k][1]) / 2 for k in range(2))
    assert abs(code - per_sample) > 0.05  # the broadcast is not the weighting it stands for
    # the code's own numbers, from the digest's check: CE [1, 2, 3] and weights [.1, .5, .9] give 1.0
    torch_ce, omega = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[0.1], [0.5], [0.9]])
    assert (torch_ce * omega).mean().item() == pytest.approx(torch_ce.mean().item() * omega.mean().item())


def test_label_and_noise_draws():
    rng = torch.Generator().manual_seed(0)
    prior = torch.tensor([0.0, 0.9, 0.1], dtype=torch.float64)
    y = draw_labels(4000, prior, "prior", rng)
    assert (y == 0).sum() == 0 and abs(float((y == 1).float().mean()) - 0.9) < 0.02
    y = draw_labels(4000, prior, "available", rng)  # uniform over the labels someone holds
    assert (y == 0).sum() == 0 and abs(float((y == 1).float().mean()) - 0.5) < 0.03
    u = draw_noise(1000, 4, "uniform", rng)
    assert u.min() >= 0 and u.max() < 1
    assert abs(float(draw_noise(4000, 4, "gaussian", rng).std()) - 1) < 0.03


@pytest.mark.parametrize("teacher", ["mean_logits", "counts", "counts_code"])
def test_generator_learns_to_produce_what_the_heads_call_its_label(teacher):
    """Three fixed random heads (10 classes, d = 16): after training, the heads' mean logits label
    the generator's samples as their conditioning label far above chance (0.1)."""
    torch.manual_seed(0)
    weight, bias = torch.randn(3, 10, 16), torch.randn(3, 10)
    counts = torch.ones(3, 10)
    gen = Generator(10, 16, noise_dim=8, hidden_dim=64)
    opt = torch.optim.Adam(gen.parameters(), lr=1e-2)
    rng = torch.Generator().manual_seed(1)
    before = train_generator(gen, opt, weight, bias, counts, 1, 64, rng, teacher=teacher)
    after = train_generator(gen, opt, weight, bias, counts, 300, 64, rng, teacher=teacher)
    assert before["accuracy"] < 0.4 and after["teacher_loss"] < before["teacher_loss"]
    gen.eval()
    y = torch.arange(10).repeat(50)
    with torch.no_grad():
        z = gen(draw_noise(500, 8, "gaussian", rng), y)
        hits = (head_logits(z, weight, bias).mean(dim=0).argmax(dim=1) == y).float().mean()
    assert hits > 0.9
    assert z[y == 0].std(dim=0).mean() > 1e-3  # not one point per label


def test_seen_labels_replay_the_batches():
    y = torch.tensor([0, 1, 1, 2, 2, 2, 0])
    assert seen_labels(y, 4, 3, 6, 5).tolist() == [4, 4, 6, 0]  # two epochs of 3 batches: all of y twice
    expected = np.zeros(4, np.int64)
    for idx in batch_indices(7, 3, 2, torch.Generator().manual_seed(5)):
        expected += np.bincount(y[idx].numpy(), minlength=4)
    assert seen_labels(y, 4, 3, 2, 5).tolist() == expected.tolist()  # two steps only: the batches drawn


def config(**params):
    return build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2},
                                        "model_options": {"mlp": {"hidden": [16, 8]}}},
                         "algorithm": {"name": "fedgen", **params},
                         "training": {"lr": 0.1, "batch_size": 4, "epochs": 2}})


def mlp(arch="mlp"):
    torch.manual_seed(0)
    return create_model("mlp", (6,), 3, hidden=(16, 8))


def test_client_steps_follow_eq_5():
    cfg = config(alpha=2.0, noise="uniform", labels="prior")
    client = resolve(cfg).make_client(cfg, mlp, torch.device("cpu"), None, None)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g)
    torch.manual_seed(7)
    gen = Generator(3, 8, 32, 256)
    gen.eval()
    prior = np.array([0.5, 0.5, 0.0])
    vc = VirtualClient(ClientSpec(0, "mlp", np.arange(10)), x, y, {})
    theta = get_weights(mlp())
    task = ClientTask(0, 1, "mlp", ("model/mlp", "generator"), 5)
    start = client.receive(task, (theta, {"weights": get_weights(gen), "prior": prior}), vc)
    local = client.train(task, start, vc)
    upload = client.upload(task, start, local, vc)

    model = mlp()
    set_weights(model, theta)
    opt, rng = torch.optim.SGD(model.parameters(), lr=0.1), torch.Generator().manual_seed(6)
    for idx in batch_indices(10, 4, 6, torch.Generator().manual_seed(5)):
        opt.zero_grad()
        y_hat = torch.multinomial(torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), len(idx), True, generator=rng)
        with torch.no_grad():
            z = gen(torch.rand(len(idx), 32, generator=rng), y_hat)
        loss = F.cross_entropy(model(x[idx]), y[idx]) + 2.0 * F.cross_entropy(model.head(z), y_hat)
        loss.backward()
        opt.step()
    for name, value in get_weights(model).items():
        np.testing.assert_allclose(local.weights[name], value, rtol=1e-5, atol=1e-6)
    assert isinstance(upload, FedGenUpload)
    np.testing.assert_array_equal(upload.label_counts, 2 * np.bincount(y.numpy(), minlength=3))  # 2 epochs


def test_alpha_zero_is_fedavg_bit_for_bit(tmp_path):
    def final(algorithm, path):
        cfg = digits(algorithm["name"], 3, federation={"model_options": {"mlp": {"hidden": [32, 16]}}})
        cfg = build_config({**cfg.to_dict(), "algorithm": algorithm})
        fed = Federation(assemble(cfg), path)
        for _ in range(3):
            fed.run_round()
        fed.finish()
        return fed.strategy.models["mlp"]

    plain = final({"name": "fedavg"}, tmp_path / "a")
    fedgen = final({"name": "fedgen", "alpha": 0.0}, tmp_path / "b")
    regularised = final({"name": "fedgen", "alpha": 1.0}, tmp_path / "c")
    assert all(np.array_equal(plain[k], fedgen[k]) for k in plain)
    assert any(not np.array_equal(plain[k], regularised[k]) for k in plain)


def test_server_trains_the_generator_on_the_heads_and_updates_the_prior():
    cfg = config(gen_steps=20)
    s = make_strategy(cfg, [ClientSpec(i, "mlp", np.arange(5)) for i in range(2)], mlp)
    plan = s.configure_round(1)
    assert all(t.payload_keys == ("model/mlp", "generator") for t in plan.tasks)
    np.testing.assert_allclose(plan.broadcast["generator"]["prior"], [1 / 3] * 3)
    before = s.generator
    w = get_weights(mlp())
    ups = [ClientUpdate(i, "mlp", 5, FedGenUpload({k: v + i for k, v in w.items()}, np.array([3, 1, 0]) * (i + 1)),
                        0, {"loss": 1.0}) for i in range(2)]
    metrics = aggregate(s, 1, ups)
    np.testing.assert_allclose(s.prior, [9 / 12, 3 / 12, 0])
    assert any(not np.array_equal(before[k], s.generator[k]) for k in before)
    assert {"fedgen/teacher_loss", "fedgen/diversity", "fedgen/accuracy", "train/loss"} <= set(metrics)
    for k in w:
        np.testing.assert_allclose(s.models["mlp"][k], w[k] + 0.5, rtol=1e-6)


def test_architectures_must_share_the_latent_size():
    cfg = build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 1, "logreg": 1}},
                        "algorithm": {"name": "fedgen"}})

    def build(arch):
        return create_model(arch, (6,), 3, **({"hidden": (16, 8)} if arch == "mlp" else {}))

    specs = [ClientSpec(0, "mlp", np.arange(5)), ClientSpec(1, "logreg", np.arange(5))]
    with pytest.raises(ConfigError, match="one feature size across architectures"):
        make_strategy(cfg, specs, build)


@pytest.mark.parametrize("name", ["fedavg", "fedgen"])
def test_sharing_only_the_head_keeps_each_feature_extractor_at_home(tmp_path, name):
    """Table 4's setting: heads travel both ways; each client's feature extractor stays in its state,
    and the score is each round's clients' own extractor under the new global head."""
    cfg = digits(name, 3, federation={"model_options": {"mlp": {"hidden": [32, 16]}}})
    cfg = build_config({**cfg.to_dict(), "algorithm": {"name": name, "share": "head"}})
    fed = Federation(assemble(cfg), tmp_path)
    results = [fed.run_round() for _ in range(3)]
    head = 16 * 10 * 4 + 10 * 4  # classifier.weight and .bias, float32
    extra_up = 10 * 8 if name == "fedgen" else 0  # FedGen's label counts
    assert all(r.metrics["comm/bytes_up"] == 5 * (head + extra_up) for r in results)
    gen = nbytes(fed.strategy.generator) + 10 * 8 if name == "fedgen" else 0
    assert all(r.metrics["comm/bytes_down"] == 5 * (head + gen) for r in results)
    initial = fed.strategy.ctx.initial("mlp")
    body_keys = [k for k in initial if not k.startswith("classifier.")]
    server = fed.strategy.models["mlp"]
    assert all(np.array_equal(server[k], initial[k]) for k in body_keys)  # the server never sees a body
    assert any(not np.array_equal(server[k], initial[k]) for k in ("classifier.weight", "classifier.bias"))
    bodies = [b for _, _, b in fed.strategy.bodies]
    assert len(bodies) == 5 and all(set(b) == set(body_keys) for b in bodies)
    assert any(not np.array_equal(bodies[0][k], bodies[1][k]) for k in body_keys)  # each its own
    assert results[-1].metrics["eval/accuracy"] > 0.2  # own extractors under one head; chance 0.1
    # the authors' code's measure: each client on the test samples of the labels it holds, pooled
    head_now = {k: fed.strategy.models["mlp"][k] for k in ("classifier.weight", "classifier.bias")}
    test_y = fed.strategy.ctx.test_y
    correct = total = 0
    for cid, arch, body in fed.strategy.bodies:
        model = fed.experiment.build(arch)
        set_weights(model, {**body, **head_now})
        held = np.flatnonzero(fed.experiment.counts[cid])
        assert fed.experiment.counts[cid].sum() == fed.experiment.clients[cid].num_samples
        mine = np.isin(test_y, held)
        with torch.no_grad():
            predicted = model.eval()(torch.from_numpy(fed.strategy.ctx.test_x[mine])).argmax(1).numpy()
        correct, total = correct + int((predicted == test_y[mine]).sum()), total + int(mine.sum())
    assert results[-1].metrics["eval/personal_accuracy"] == correct / total


def test_class_counts_and_the_personal_accuracy_by_hand():
    logits_are_x = torch.nn.Identity()
    x = torch.tensor([[1.0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]])
    scores = evaluate(logits_are_x, x, torch.tensor([0, 1, 1, 2]), batch_size=3, num_classes=4)
    assert scores["accuracy"] == 0.75
    assert scores["class_correct"].tolist() == [1, 1, 1, 0] and scores["class_total"].tolist() == [1, 2, 1, 0]
    a = {"class_correct": np.array([8, 3, 0]), "class_total": np.array([10, 10, 10])}
    b = {"class_correct": np.array([1, 9, 6]), "class_total": np.array([10, 10, 10])}
    # user a holds labels 0 and 2 (one sample is enough), b holds 1: (8 + 0 + 9) / 30, whatever the counts
    assert personal_accuracy([a, b], [np.array([50, 0, 1]), np.array([0, 7, 0])]) == 17 / 30
    assert math.isnan(personal_accuracy([a], [np.zeros(3)]))


@pytest.mark.parametrize("name", ["feddistill_plus", "feddfusion"])
def test_table4_baselines_broadcast_only_heads_and_keep_each_feature_extractor_at_home(tmp_path, name):
    """Table 4's FedDistill+ (heads and the logit table shared) and FedDFusion (whole models up, the
    server averages and distils them, heads down): every client keeps its own extractor."""
    algorithm = {"feddistill_plus": {"name": "feddistill", "share_models": True, "share": "head"},
                 "feddfusion": {"name": "feddf", "share": "head", "log_before": False, "log_ensemble": False,
                                "distill": {"steps": 5}}}[name]
    cfg = digits("fedavg", 3, federation={"model_options": {"mlp": {"hidden": [32, 16]}}}, aux={"size": 200})
    cfg = build_config({**cfg.to_dict(), "algorithm": algorithm})
    fed = Federation(assemble(cfg), tmp_path)
    results = [fed.run_round() for _ in range(3)]
    initial = fed.strategy.ctx.initial("mlp")
    head_keys = ("classifier.weight", "classifier.bias")
    body_keys = [k for k in initial if k not in head_keys]
    head = 16 * 10 * 4 + 10 * 4
    model = sum(v.nbytes for v in initial.values())
    if name == "feddistill_plus":  # heads and the (C, C) float32 logit table with its (C,) bool mask down
        assert all(r.metrics["comm/bytes_up"] == 5 * (head + 10 * 10 * 4 + 10 * 8) for r in results)
        assert results[0].metrics["comm/bytes_down"] == 5 * head  # no table before round one's
        assert results[-1].metrics["comm/bytes_down"] == 5 * (head + 10 * 10 * 4 + 10)
        server_body_moves = False
    else:  # whole models and 200 logit rows up, heads down
        assert all(r.metrics["comm/bytes_up"] == 5 * (model + 200 * 10 * 4) for r in results)
        assert all(r.metrics["comm/bytes_down"] == 5 * head for r in results)
        server_body_moves = True
    server = fed.strategy.models["mlp"]
    assert any(not np.array_equal(server[k], initial[k]) for k in body_keys) == server_body_moves
    bodies = {cid: b for cid, _, b in fed.strategy.bodies}
    assert len(bodies) == 5 and all(set(b) == set(body_keys) for b in bodies.values())
    for cid, body in bodies.items():  # the client's state holds the extractor the server scored
        kept = fed.executor.client_states()[cid]["body"]
        assert all(np.array_equal(kept[k], body[k]) for k in body_keys)
    assert results[-1].metrics["eval/accuracy"] > 0.2 and results[-1].metrics["eval/personal_accuracy"] > 0.2


@pytest.mark.parametrize("algorithm, message", [
    ({"name": "feddistill", "share": "head"}, "share: head needs share_models: true"),
    ({"name": "fedbe", "share": "head"}, "fedbe needs whole models; share: head is for fedavg, feddf, feddistill, fedgen, fedmmd, fedprox$"),
    ({"name": "fedaux", "share": "head"}, "fedaux needs whole models"),
    ({"name": "central", "share": "head"}, "central needs whole models; share: head is for fedavg, "),
    ({"name": "fedopt", "share": "all"}, "fedopt needs whole models"),
    ({"name": "stc", "share": "head"}, "^bad config value algorithm.share: stc needs whole models; share: head is for ")])
def test_share_head_is_refused_where_a_method_needs_whole_models(algorithm, message):
    cfg = digits("fedavg", 1, aux={"size": 200})
    with pytest.raises(ConfigError, match=message):
        resolve(build_config({**cfg.to_dict(), "algorithm": algorithm}))


def test_the_mean_logits_teacher_is_the_mean_heads_logits():
    """Eq. 4's teacher (1/K) sum_k g(z; theta_k^p) with linear heads is g(z; (1/K) sum_k theta_k^p):
    why the hosts may fold the heads and the server train the generator against their mean."""
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(5, 10, 16, generator=g), torch.randn(5, 10, generator=g)
    z, y = torch.randn(64, 16, generator=g), torch.randint(0, 10, (64,), generator=g)
    every = teacher_loss(head_logits(z, weight, bias), y, torch.ones(5, 10), "mean_logits")
    mean = teacher_loss(head_logits(z, weight.mean(0)[None], bias.mean(0)[None]), y, torch.ones(1, 10), "mean_logits")
    torch.testing.assert_close(mean, every)  # float32 rounding apart


def test_fedgen_folds_its_models_heads_and_label_counts():
    """The hosts fold theta_k (FedAvg's term), theta_k^p and c_k; whole uploads aggregated in the
    server are the one-unit fold bit for bit, generator and optimiser state included; another split
    moves the float64 sums by rounding only; the label counts, integers, not at all. With the code's
    teacher (``counts``) or ``share: head`` every upload travels."""
    from tests.methods.test_aggregation import fold_alike

    k, rng = 12, np.random.default_rng(0)
    specs = [ClientSpec(i, "mlp", np.arange(5)) for i in range(k)]
    w = get_weights(mlp())

    def weights():  # magnitudes over twelve orders, so that float64 sums in other orders round otherwise
        return {n: (rng.normal(size=v.shape) * 10.0 ** rng.integers(-6, 6)).astype(v.dtype) for n, v in w.items()}

    ups = [ClientUpdate(i, "mlp", 5 + i, FedGenUpload(weights(), rng.integers(0, 40, 3)), 0, {"loss": 1.0})
           for i in range(k)]
    one, split, bound, moved = fold_alike(lambda: make_strategy(config(gen_steps=3, weighted=True), specs, mlp), ups,
                                          lambda cid: cid // 5)
    assert moved
    counts = np.sum([u.payload.label_counts for u in ups], axis=0)
    np.testing.assert_array_equal(one.prior, counts / counts.sum())
    np.testing.assert_array_equal(split.prior, one.prior)
    assert collects(make_strategy(config(teacher="counts"), specs, mlp)) == "gather"
    assert collects(make_strategy(config(share="head"), specs, mlp)) == "gather"
