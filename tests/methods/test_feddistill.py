"""FedGen's baselines: FedDistill's label-wise logit table and regulariser on hand-computed tensors,
FedDistill's private models and uncounted bytes, FedDistill+, and FedEnsemble's ensemble score."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedray.config import build_config
from fedray.messages import ClientSpec, ClientTask, ClientUpdate
from fedray.methods.base import VirtualClient
from fedray.methods.feddistill import LogitUpload, PrivateModelUpload, logit_table
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import batch_indices
from fedray.weights import get_weights, nbytes, set_weights
from tests.support import aggregate, collects, make_strategy
from tests.test_federation import digits, run


def test_logit_table_by_hand():
    logits = np.array([[[2.0, 0.0], [0.0, 0.0]],    # user 1 saw label 0 only
                       [[4.0, 2.0], [1.0, 3.0]]])   # user 2 saw both
    counts = np.array([[5, 0], [1, 7]])
    table, have = logit_table(logits, counts)
    np.testing.assert_allclose(table, [[3.0, 1.0], [1.0, 3.0]])  # label 0: mean of both users; label 1: user 2
    assert have.tolist() == [True, True]
    table, have = logit_table(logits[:1], counts[:1])
    assert have.tolist() == [True, False] and table[1].tolist() == [0.0, 0.0]


def mlp(arch="mlp"):
    torch.manual_seed(0)
    return create_model("mlp", (6,), 3, hidden=(8,))


def client_round(share_models, table=None, state=None, rule="round"):
    cfg = build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}},
                        "algorithm": {"name": "feddistill", "share_models": share_models, "reg": 0.5, "table": rule},
                        "training": {"lr": 0.1, "batch_size": 4, "epochs": 1}})
    client = resolve(cfg).make_client(cfg, mlp, torch.device("cpu"), None, None)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 6, generator=g), torch.tensor([0, 1, 1, 0, 1, 1, 0, 1])
    vc = VirtualClient(ClientSpec(0, "mlp", np.arange(8)), x, y, state if state is not None else {})
    theta = get_weights(mlp())
    keys = ("model/mlp", "logits") if share_models else ("logits",)
    task = ClientTask(0, 1, "mlp", keys, 5)
    downloads = (theta, table) if share_models else (table,)
    start = client.receive(task, downloads, vc)
    local = client.train(task, start, vc)
    return theta, (x, y), client.upload(task, start, local, vc), vc


def test_client_tracks_label_means_and_steps_with_the_kl_term():
    table = {"logits": np.array([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], np.float32),
             "have": np.array([True, True, False])}
    theta, (x, y), upload, _ = client_round(True, table)
    model = mlp()
    set_weights(model, theta)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sums, counts = torch.zeros(3, 3, dtype=torch.float64), torch.zeros(3)
    target = torch.softmax(torch.from_numpy(table["logits"]), dim=1)
    for idx in batch_indices(8, 4, 2, torch.Generator().manual_seed(5)):
        opt.zero_grad()
        logits = model(x[idx])
        for row, label in zip(logits.detach().double(), y[idx]):
            sums[label] += row
            counts[label] += 1
        kl = F.kl_div(F.log_softmax(logits, dim=1), target[y[idx]], reduction="batchmean")  # labels 0, 1: all known
        (F.cross_entropy(logits, y[idx]) + 0.5 * kl).backward()
        opt.step()
    assert isinstance(upload, LogitUpload)
    for name, value in get_weights(model).items():
        np.testing.assert_allclose(upload.weights[name], value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(upload.logits, (sums / counts.clamp_min(1)[:, None]).numpy(), rtol=1e-5, atol=1e-6)
    assert upload.counts.tolist() == [3, 5, 0] and upload.logits[2].tolist() == [0, 0, 0]


def test_feddistill_keeps_its_model_private():
    theta, _, upload, vc = client_round(False)  # round one: no table yet, plain local training
    assert isinstance(upload, PrivateModelUpload)
    assert nbytes(upload) == 3 * 3 * 4 + 3 * 8  # the logits and counts travel; the model does not
    assert vc.state["model"] is upload.weights
    _, _, again, _ = client_round(False, None, state=vc.state)  # the next round starts from its own model
    assert any(not np.array_equal(again.weights[k], upload.weights[k]) for k in theta)


def test_the_codes_tracker_runs_over_rounds_with_label_counts_from_one():
    """``table: code`` (the authors' LogitTracker): the sums run over every round a user trained and
    its label counts start at 1, so a label it never saw uploads a zero row that the server averages
    in; the training itself is the default rule's."""
    table = {"logits": np.array([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], np.float32),
             "have": np.array([True, True, False])}
    _, _, first, plain = client_round(False)
    _, _, code_first, vc = client_round(False, rule="code")
    sums = first.logits.astype(np.float64) * first.counts[:, None]
    assert code_first.counts.tolist() == [4, 6, 1]  # 3 and 5 samples of labels 0 and 1, none of 2, each from 1
    np.testing.assert_allclose(code_first.logits, sums / code_first.counts[:, None], rtol=1e-6)
    assert code_first.logits[2].tolist() == [0, 0, 0]
    _, _, second, _ = client_round(False, table, state=plain.state)
    _, _, code_second, _ = client_round(False, table, state=vc.state, rule="code")
    for k in second.weights:  # the same training from the same model: only what is uploaded differs
        np.testing.assert_array_equal(code_second.weights[k], second.weights[k])
    assert code_second.counts.tolist() == [7, 11, 1] and vc.state["tracker"]["counts"].tolist() == [7, 11, 1]
    both = sums + second.logits.astype(np.float64) * second.counts[:, None]
    np.testing.assert_allclose(code_second.logits, both / code_second.counts[:, None], rtol=1e-6)
    # the server: every user's row of every label, zero rows included (serverFedDistill.aggregate_logits)
    table, have = logit_table(np.array([[[2.0, 0.0], [0.0, 0.0]], [[4.0, 2.0], [1.0, 3.0]]]), np.array([[6, 1], [2, 8]]))
    np.testing.assert_allclose(table, [[3.0, 1.0], [0.5, 1.5]])
    assert have.tolist() == [True, True]


def test_feddistill_runs_share_what_they_should(tmp_path):
    fed, results = run(digits("feddistill", 3), tmp_path / "a")
    assert results[-1].metrics["comm/bytes_up"] == 5 * (10 * 10 * 4 + 10 * 8)  # 5 users: logits and counts only
    assert "model/mlp" not in fed.strategy.configure_round(4).broadcast
    assert results[-1].metrics["eval/accuracy"] > 0.3  # each user's own model, scored on all ten digits
    held = [fed.experiment.counts[cid] > 0 for cid, _, _ in fed.strategy.scored]  # and on test samples of the labels it holds
    scores = [fed.evaluate_model(arch, w, per_class=True) for _, arch, w in fed.strategy.scored]
    assert len(scores) == 5 and results[-1].metrics["eval/personal_accuracy"] == (
        sum(s["class_correct"][h].sum() for s, h in zip(scores, held)) / sum(s["class_total"][h].sum() for s, h in zip(scores, held)))
    plus = build_config({**digits("feddistill", 3).to_dict(), "algorithm": {"name": "feddistill", "share_models": True}})
    fed, results = run(plus, tmp_path / "b")
    assert results[-1].metrics["eval/accuracy"] > 0.75  # FedDistill+: FedAvg with the KL term


def test_fedensemble_scores_the_mean_logits_of_the_users_latest_models():
    rng = np.random.default_rng(0)
    test_x, test_y = rng.normal(size=(50, 6)).astype(np.float32), rng.integers(0, 3, 50)
    cfg = build_config({"federation": {"num_clients": 3, "clients_per_round": 2, "architectures": {"mlp": 3}},
                        "algorithm": {"name": "fedensemble"}})
    s = make_strategy(cfg, [ClientSpec(i, "mlp", np.arange(5)) for i in range(3)], mlp, test_x=test_x, test_y=test_y)
    base = get_weights(mlp())
    models = [{k: (v + rng.normal(scale=1.0, size=v.shape)).astype(v.dtype) for k, v in base.items()} for _ in range(3)]
    aggregate(s, 1, [ClientUpdate(0, "mlp", 5, models[0], 0, {"loss": 1.0}), ClientUpdate(1, "mlp", 5, models[1], 0, {"loss": 1.0})])
    aggregate(s, 2, [ClientUpdate(1, "mlp", 5, models[2], 0, {"loss": 1.0})])  # user 1's latest replaces its first
    metrics = s.evaluate(lambda arch, w, g: {"accuracy": 0.5, "loss": 1.0})

    def logits(w):
        m = mlp()
        set_weights(m, w)
        with torch.no_grad():
            return m(torch.from_numpy(test_x))

    mean = (logits(models[0]) + logits(models[2])) / 2
    assert metrics["eval/accuracy"] == pytest.approx(float((mean.argmax(1).numpy() == test_y).mean()))
    assert metrics["eval/accuracy_global"] == 0.5


def test_feddistill_plus_folds_the_logit_table_and_the_model():
    """FedDistill+'s table is a sum, sum_k s_k[y] t_k[y] / sum_k s_k[y] with s_k[y] = 1 where user k
    saw label y: the hosts fold it with FedAvg's term; whole uploads in the server are the one-unit
    fold bit for bit, another split moves the float64 sums by rounding only, and the table (float32)
    is the per-user table's to that and one rounding. FedDistill, whose server scores every user's
    own model, and FedDistill+ with ``share: head`` do not fold."""
    from tests.methods.test_aggregation import fold_alike, ulp

    def strategy(**params):
        cfg = build_config({"federation": {"num_clients": 12, "clients_per_round": 12, "architectures": {"mlp": 12}},
                            "algorithm": {"name": "feddistill", **params}})
        return make_strategy(cfg, [ClientSpec(i, "mlp", np.arange(8)) for i in range(12)], mlp)

    rng, w = np.random.default_rng(0), get_weights(mlp())
    ups = []
    for cid in range(12):
        counts = rng.integers(0, 3, 3)  # some labels unseen: their rows are zeros and weigh 0
        scale = 10.0 ** rng.integers(-6, 6, (3, 1))  # twelve orders: float64 sums in other orders round otherwise
        logits = (rng.normal(size=(3, 3)) * scale * (counts > 0)[:, None]).astype(np.float32)
        ups.append(ClientUpdate(cid, "mlp", 8, LogitUpload(logits, counts, w), 0, {"loss": 1.0}))
    one, split, bound, moved = fold_alike(lambda: strategy(share_models=True), ups, lambda cid: cid % 5)
    assert moved
    have = np.stack([u.payload.counts for u in ups]) > 0
    users = have.sum(axis=0)
    exact = np.sum([u.payload.logits.astype(np.float64) for u in ups], axis=0) / np.maximum(users, 1)[:, None]
    within = bound["mlp"]["logits"][""] / np.maximum(users, 1)[:, None] + ulp(exact)
    for s in (one, split):
        assert np.all(np.abs(s.table["logits"] - exact) <= within)
        np.testing.assert_array_equal(s.table["have"], users > 0)
    assert collects(strategy()) == "gather" and collects(strategy(share_models=True, share="head")) == "gather"
