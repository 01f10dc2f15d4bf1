"""Vectorised local training (``runtime.vectorize``, ``fedray.cohort``) against the sequential path.

Each client of a cohort must end where ``local_train`` alone would have taken it. Tolerances (max
absolute difference of any weight or buffer, weights of order 0.1):

- SGD (momentum, weight decay): 1e-6. Batched matrix products add in another order, so results
  differ in the last bits (measured at most 6e-8 here).
- Adam: 99.9% of the entries within 1e-4, all within 2e-3 (two steps of lr = 1e-3). This is where
  the two paths cannot agree. Adam steps by lr m / (sqrt(v) + 1e-8), nearly the same size for a
  gradient of 1e-9 as for one of 1: where a ReLU's input lies within rounding of zero in one path and
  not in the other, the weights it feeds get a gradient of rounding size in one path and none in the
  other, and Adam turns that into steps of up to lr. Measured: the CNN (whose convolutions sum in
  another order under vmap) has 0.2% of its entries 1e-5 or more apart, at most 1.1e-3, all but a few
  in the fully connected layer fed by its last ReLU; the other models are within 4e-6. A weight
  whose true gradient is zero is the worst case: FedGen's CNN had a bias before each BatchNorm,
  which BN cancels, and those biases ended 1.8e-2 apart; the model has none now
  (``test_fedgen_cnn_has_no_weight_left_to_rounding_under_adam``).

How a cohort is cut into chunks (``runtime.vectorize_chunk``) changes no MLP weight (chunks of 2 or
more clients); the CNN's by float rounding: ``test_chunks_of_any_size_train_the_same_models``.

The data are real (scikit-learn's 8x8 digits); clients hold shards of different sizes, so their
step counts and their last batches differ.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from actors.dispatch import Dispatcher
from fedray.assembly import assemble
from fedray.cli import main
from fedray.cohort import CHUNK_BUDGET_BYTES, CohortClient, chunk_size, chunks, memory_budget, shared_rows, train_cohort
from fedray.config import ConfigError, TrainingConfig, build_config
from fedray.data import load_dataset
from fedray.federation import Federation
from fedray.messages import ClientSpec, ClientTask
from fedray.methods import METHODS
from fedray.methods.base import VirtualClient
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import local_train
from fedray.weights import get_weights, set_weights
from tests.test_federation import digits as digits_config, run as run_rounds

SIZES = (37, 50, 21, 64)  # 3, 4, 2 and 4 batches of 16 an epoch; last batches of 5, 2, 5 and 16
SGD = TrainingConfig(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4, batch_size=16, epochs=2)
ADAM = TrainingConfig(optimizer="adam", lr=0.001, weight_decay=1e-4, batch_size=16, epochs=2)
TOLERANCE = {"sgd": 1e-6, "adam": 1e-4}  # for all entries (SGD) or 99.9% of them (Adam)
WORST = {"sgd": 1e-6, "adam": 2e-3}


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")
    return torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)


def cohort(digits, arch, sizes=SIZES):
    x, y = digits
    torch.manual_seed(0)
    model = create_model(arch, tuple(x.shape[1:]), 10)
    theta, ends = get_weights(model), np.cumsum((0,) + sizes)
    return model, [CohortClient(theta, x[a:b], y[a:b], 100 + i) for i, (a, b) in enumerate(zip(ends, ends[1:]))]


def one_by_one(model, clients, cfg, extra_loss=None, freeze_features=False):
    out = []
    for c in clients:
        set_weights(model, c.start)
        torch.manual_seed(c.seed)
        stats = local_train(model, c.x, c.y, cfg, torch.Generator().manual_seed(c.seed),
                            extra_loss(model) if extra_loss else None, freeze_features)
        out.append((get_weights(model), stats))
    return out


def assert_same(sequential, together, optimizer="sgd"):
    for (w_seq, m_seq), (w_vec, m_vec) in zip(sequential, together):
        assert list(w_vec) == list(w_seq) and all(w_vec[k].dtype == w_seq[k].dtype for k in w_seq)
        assert m_vec["steps"] == m_seq["steps"] and m_vec["loss"] == pytest.approx(m_seq["loss"], abs=1e-5)
    diffs = np.concatenate([np.abs(a[k].astype(float) - b[k]).ravel() for (a, _), (b, _) in zip(sequential, together)
                            for k in a])
    assert np.quantile(diffs, 0.999) <= TOLERANCE[optimizer] and diffs.max() <= WORST[optimizer]


@pytest.mark.parametrize("arch", ["mlp", "cnn", "lstm", "fedgen_cnn"])  # fedgen_cnn: BatchNorm
@pytest.mark.parametrize("cfg", [SGD, ADAM], ids=["sgd", "adam"])
def test_a_cohort_ends_where_each_client_alone_would(digits, arch, cfg):
    model, clients = cohort(digits, arch)
    sequential = one_by_one(model, clients, cfg)
    together = train_cohort(model, clients, cfg)
    assert [m["steps"] for _, m in together] == [6, 8, 4, 8]  # 2 epochs each: clients stop at their own count
    assert_same(sequential, together, cfg.optimizer)
    moved = [max(float(np.abs(w[k] - clients[0].start[k]).max()) for k in w) for w, _ in together]
    assert min(moved) > 10 * TOLERANCE[cfg.optimizer]  # the comparison is not between untrained models


def test_fedgen_cnn_has_no_weight_left_to_rounding_under_adam(digits):
    """A bias right before BatchNorm has a true gradient of zero, so Adam moved it by rounding noise
    alone: in a longer run the paths ended 1.8e-2 apart there and their eval logits 4.7e-3 (an
    independent check; in these 8 steps, 1e-6). So the model has none. Every weight then agrees
    within 1.2e-7 and the logits within 6e-8 here (AVX2 and default kernels); their bound is 1e-4."""
    model, clients = cohort(digits, "fedgen_cnn")
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 2 and all(c.bias is None for c in convs)
    sequential = one_by_one(model, clients, ADAM)
    together = train_cohort(model, clients, ADAM)
    assert_same(sequential, together, "adam")
    logits = []
    for weights in (sequential[0][0], together[0][0]):
        set_weights(model, weights)
        model.eval()
        with torch.no_grad():
            logits.append(model(digits[0][:500]).numpy())
    assert np.abs(logits[0] - logits[1]).max() <= 1e-4


def test_batchnorm_keeps_each_clients_running_statistics(digits):
    model, clients = cohort(digits, "fedgen_cnn")
    together = train_cohort(model, clients, SGD)
    means = [w["body.1.running_mean"] for w, _ in together]
    assert [int(w["body.1.num_batches_tracked"]) for w, _ in together] == [6, 8, 4, 8]
    assert min(float(np.abs(a - b).max()) for i, a in enumerate(means) for b in means[i + 1:]) > 1e-3


def test_a_frozen_feature_extractor_and_its_statistics_stay_put(digits):
    model, clients = cohort(digits, "fedgen_cnn")
    together = train_cohort(model, clients, SGD, freeze_features=True)
    assert_same(one_by_one(model, clients, SGD, freeze_features=True), together)
    for weights, _ in together:
        for k, v in weights.items():
            assert np.array_equal(v, clients[0].start[k]) != k.startswith("classifier.")


def client_half(algorithm, digits, **params):
    config = build_config({"data": {"dataset": "digits"}, "algorithm": {"name": algorithm, **params},
                           "federation": {"num_clients": 4, "clients_per_round": 4, "architectures": {"mlp": 4}},
                           "training": SGD.model_dump(), "runtime": {"backend": "local"}})
    x, y = digits
    model, clients = cohort(digits, "mlp")
    algo = resolve(config).make_client(config, lambda arch: create_model(arch, tuple(x.shape[1:]), 10),
                                       torch.device("cpu"))
    virtual = [VirtualClient(ClientSpec(i, "mlp", np.arange(len(c.x))), c.x, c.y) for i, c in enumerate(clients)]
    tasks = [ClientTask(i, 1, "mlp", ("model/mlp",), c.seed) for i, c in enumerate(clients)]
    return algo, tasks, [c.start for c in clients], virtual


def test_fedprox_proximal_term_is_the_same_in_a_cohort(digits):
    algo, tasks, thetas, clients = client_half("fedprox", digits, mu=1.0)
    sequential = [algo.train(t, theta, c) for t, theta, c in zip(tasks, thetas, clients)]
    together = algo.train_cohort(tasks, thetas, clients)
    assert_same([(s.weights, s.metrics) for s in sequential], [(v.weights, v.metrics) for v in together])
    plain, *_ = client_half("fedavg", digits)  # the term matters: without it clients go elsewhere
    free = plain.train_cohort(tasks, thetas, clients)
    assert max(float(np.abs(f.weights[k] - v.weights[k]).max()) for f, v in zip(free, together) for k in thetas[0]) > 1e-3


def test_methods_that_train_otherwise_say_why():
    plain = {"fedavg", "fedprox", "stc", "fd", "feddf", "fedbe", "cfl", "fedaux"}
    assert all(METHODS[name].Client.cohort_refusal() is None for name in plain)
    assert "FedMMDClient.train" in METHODS["fedmmd"].Client.cohort_refusal()
    assert "ScaffoldClient.extra_loss" in METHODS["scaffold"].Client.cohort_refusal()
    assert "DSGDClient.train" in METHODS["dsgd"].Client.cohort_refusal()


def test_check_names_a_method_that_cannot_vectorize(capsys, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("data: {dataset: digits}\nalgorithm: {name: fedmmd}\n"
                      "federation: {num_clients: 4, clients_per_round: 4, architectures: {mlp: 4}}\nruntime: {vectorize: true}\n")
    assert main(["check", str(config)]) == 0
    assert "fedmmd's clients train one after another: its local step is its own (FedMMDClient.train)" in capsys.readouterr().err


def test_vectorize_names_architectures_of_the_run():
    tree = {"federation": {"architectures": {"mlp": 50, "cnn": 50}}}
    runtime = build_config({**tree, "runtime": {"vectorize": ["mlp"]}}).runtime
    assert runtime.vectorizes("mlp") and not runtime.vectorizes("cnn")
    assert build_config({**tree, "runtime": {"vectorize": True}}).runtime.vectorizes("cnn")
    with pytest.raises(ConfigError, match=r"runtime.vectorize names \['lstm'\], which are not among the run's"):
        build_config({**tree, "runtime": {"vectorize": ["mlp", "lstm"]}})


def test_chunks_are_bounded_by_the_memory_budget(digits, monkeypatch):
    model, clients = cohort(digits, "mlp")
    sample = clients[0].x[0]
    one = chunk_size(model, sample, SGD, budget_bytes=1)
    per_client = next(b for b in range(1 << 16, 1 << 30, 1 << 12) if chunk_size(model, sample, SGD, b) == 2) // 2
    assert one == 1  # never none
    assert chunk_size(model, sample, SGD, 10 * per_client) == 10
    assert chunk_size(model, sample, SGD, 10 * per_client, data_bytes=per_client) == 5
    weights = sum(p.numel() for p in model.parameters())
    assert 5 * 4 * weights < per_client < 20 * 4 * weights  # weights, gradient, momentum, copies
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    # the budget is fixed, never the memory free at the moment: a machine's load changes no chunk
    def no_free_memory(*args):
        raise AssertionError("the budget read the free memory")
    monkeypatch.setattr("os.sysconf", no_free_memory)
    monkeypatch.setattr(torch.cuda, "mem_get_info", no_free_memory)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=8 << 30))
    assert memory_budget(torch.device("cpu"), 0.0) == CHUNK_BUDGET_BYTES == 1 << 30
    assert memory_budget(torch.device("cuda"), 0.25) == 1 << 30  # half the actor's share of the device
    assert memory_budget(torch.device("cuda"), 0.0) == memory_budget(torch.device("cuda"), 1.0) == 4 << 30


def test_shards_of_one_array_are_read_in_place_and_others_copied_together():
    whole = torch.arange(24.0).view(8, 3)
    rows, starts = shared_rows([whole[5:7], whole[0:2], whole[2:5]])
    assert rows.data_ptr() == whole.data_ptr() and starts == [5, 0, 2]
    assert torch.equal(rows[starts[2]:starts[2] + 3], whole[2:5])
    apart = [torch.ones(2, 3), whole[3:4]]
    rows, starts = shared_rows(apart)
    assert starts == [0, 2] and torch.equal(rows, torch.cat(apart))


def federation(tmp_path, vectorize, chunk="auto", algorithm="fedavg"):
    config = build_config({
        "data": {"dataset": "digits"}, "algorithm": {"name": algorithm},
        "federation": {"num_clients": 10, "clients_per_round": 5, "rounds": 3, "architectures": {"mlp": 6, "cnn": 4}},
        "training": {"lr": 0.05, "momentum": 0.9, "batch_size": 16, "epochs": 1},
        "runtime": {"backend": "local", "torch_threads": 1, "vectorize": vectorize, "vectorize_chunk": chunk}})
    fed = Federation(assemble(config), tmp_path)
    return fed, [fed.run_round() for _ in range(3)]


def test_a_whole_fedavg_run_matches_the_sequential_one(tmp_path):
    sequential, seq_results = federation(tmp_path / "seq", False)
    together, results = federation(tmp_path / "vec", True, chunk=2)  # cohorts of 2, 2 and 1 (mlp)
    assert together.describe_executor()["vectorize"] == "cohorts"
    for arch, weights in sequential.strategy.models.items():
        for k, v in weights.items():
            np.testing.assert_allclose(together.strategy.models[arch][k], v, rtol=0, atol=1e-5)
    for a, b in zip(seq_results, results):
        assert b.metrics["eval/accuracy"] == pytest.approx(a.metrics["eval/accuracy"], abs=0.005)
        assert b.metrics["train/loss"] == pytest.approx(a.metrics["train/loss"], rel=1e-4)
    assert results[-1].metrics["eval/accuracy"] > 0.6  # and it learns (measured 0.73; chance 0.1)
    only_mlp, _ = federation(tmp_path / "mlp", ["mlp"])  # the CNN's clients train one after another
    assert only_mlp.describe_executor()["vectorize"] == "cohorts of mlp"
    assert all(np.array_equal(v, sequential.strategy.models["cnn"][k]) for k, v in only_mlp.strategy.models["cnn"].items())


def test_chunks_of_any_size_train_the_same_models(tmp_path):
    """A FedAvg run whose cohorts train in chunks of 2 ends with the models of one whose cohorts
    train whole (4 MLP, 8 CNN clients a round; shards of 64 to 180 samples, so step counts differ).

    - MLP: bit for bit. Each client's matrix products are its slice of one batched product, computed
      by the same kernel whatever the number of slices; the gradient of the chunk's summed loss with
      respect to each client's term is exactly 1; the optimiser is elementwise. Measured on a CPU,
      with torch's vectorised and default (``ATEN_CPU_CAPABILITY=default``) kernels: chunks of 2 to
      40 clients give identical weights. A chunk of one client trains alone (``local_train``, plain
      matrix products), which rounds differently, as any cohort against the sequential path (3e-8
      here): no chunk here is of one client.
    - CNN: max abs difference 1e-6 (weights of order 0.1), the bound for SGD against the sequential
      path. Under ``vmap`` the K clients' convolutions are one grouped convolution over K times the
      channels, and torch's CPU kernel sums it in another order for larger K (measured: chunks of 2
      to 7 clients agree bit for bit, chunks of 8 or more differ from them by one float ulp, 1.5e-8,
      per client and round; here 1.5e-8, 3e-8 with the default kernels). SGD carries such rounding
      along without amplifying it over a few steps. (Adam would: a CNN chunk of 10 against chunks
      of 2 differs by 6e-3 after 3 rounds, within the Adam tolerance above.)

    On the CPU (``device: cpu``): the bit-for-bit claim is about torch's CPU kernels; a GPU's
    batched products may pick their kernel by the number of clients.

    A broken chunking moves weights by far more (measured on the final models): a chunk handing its
    clients' trained weights to one another (rotated by one) 5e-3 (MLP) and 6e-3 (CNN), a chunk
    whose clients all draw the first one's batch order 1e-2 and 4e-3; a chunk that drops a client,
    or one that reads its clients' batches from each other's shards, fails the round. FedAvg weights
    by shard size here, so that whose update is whose matters.
    """
    def run(chunk):
        config = build_config({
            "data": {"dataset": "digits", "balancedness": 0.9}, "algorithm": {"name": "fedavg", "weighted": True},
            "federation": {"num_clients": 12, "clients_per_round": 12, "rounds": 2, "architectures": {"mlp": 4, "cnn": 8}},
            "training": {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "batch_size": 16, "epochs": 1},
            "runtime": {"backend": "local", "torch_threads": 1, "device": "cpu", "vectorize": True,
                        "vectorize_chunk": chunk}})
        fed = Federation(assemble(config), tmp_path / str(chunk))
        fed.run_round(), fed.run_round()
        return fed.strategy.models

    pairs, whole = run(2), run(12)
    for name, value in whole["mlp"].items():
        np.testing.assert_array_equal(pairs["mlp"][name], value)
    for name, value in whole["cnn"].items():
        np.testing.assert_allclose(pairs["cnn"][name], value, rtol=0, atol=1e-6)


def test_a_vectorised_run_resumes_bit_for_bit(tmp_path):
    """Cohorts are cut the same way in every run, so STC's clients with their residuals, as cohorts,
    resume exactly."""
    config = digits_config("stc", 4, checkpoint_every=2, runtime={"backend": "local", "torch_threads": 1, "vectorize": True})
    whole, _ = run_rounds(config, tmp_path / "a")
    part, _ = run_rounds(config, tmp_path / "b", rounds=2)
    part.finish()
    resumed = Federation(assemble(config), tmp_path / "b", resume=True)
    resumed.run_round(), resumed.run_round()
    assert resumed.describe_executor()["vectorize"] == "cohorts"
    for name, value in whole.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, resumed.strategy.models["mlp"][name])
    resumed.finish()


def test_spread_gives_each_actor_one_batch_of_equal_load():
    live = SimpleNamespace(slots=[SimpleNamespace(arch=None)] * 3, owner={})  # the split alone: no actors
    dispatch = Dispatcher(live, {cid: size for cid, size in enumerate([90, 10, 50, 40, 30, 30, 20])}, {}, 1)
    tasks = [ClientTask(cid, 1, "mlp", (), 0) for cid in dispatch.sizes]
    batches = dispatch.spread(tasks)
    assert {i: [t.client_id for t in ts] for i, ts in batches.items()} == {0: [0], 1: [2, 5, 1], 2: [3, 4, 6]}
    live.slots = [SimpleNamespace(arch="mlp"), SimpleNamespace(arch="cnn"), SimpleNamespace(arch="mlp")]
    mixed = [ClientTask(cid, 1, "cnn" if cid == 0 else "mlp", (), 0) for cid in dispatch.sizes]
    assert [t.client_id for t in dispatch.spread(mixed)[1]] == [0]
