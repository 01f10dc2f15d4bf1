"""FedDF, FedBE, FD and CFD through the round loop without Ray, on real digits and Fashion-MNIST."""

import numpy as np
import pytest
import torch

import fedray.assembly as assembly_module
from fedray.assembly import assemble, load_data
from fedray.config import ConfigError, build_config
from fedray.data.auxiliary import carve_aux
from fedray.data.datasets import load_dataset
from fedray.distill.soft_labels import decode_soft_labels
from fedray.federation import Federation
from fedray.fold import add_terms
from fedray.messages import ClientFailure, ClientUpdate
from fedray.methods.feddf import WeightsAndLogits
from fedray.resolve import resolve
from tests.distill.folding import a_round, check_folding
from tests.support import aggregate, bare_client, client_half


def config(algorithm, rounds=2, **extra):
    tree = {"data": {"dataset": "digits", "partition": "dirichlet", "alpha": 0.5},
            "aux": {"size": 300},
            "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": rounds,
                           "architectures": {"mlp": 3, "logreg": 3}},
            "training": {"lr": 0.1, "batch_size": 16, "epochs": 1},
            "algorithm": algorithm if isinstance(algorithm, dict) else {"name": algorithm},
            "runtime": {"backend": "local", "torch_threads": 1}}
    for section, values in extra.items():
        tree.setdefault(section, {}).update(values) if isinstance(values, dict) else tree.__setitem__(section, values)
    cfg = build_config(tree)
    resolve(cfg)  # the method's parameters and the data-set names are checked here
    return cfg


def run(cfg, run_dir, rounds=None):
    fed = Federation(assemble(cfg), run_dir)
    return fed, [fed.run_round().metrics for _ in range(rounds or cfg.federation.rounds)]


def assert_same_models(a, b):
    for arch in a:
        for name in a[arch]:
            np.testing.assert_array_equal(a[arch][name], b[arch][name], err_msg=f"{arch}.{name}")


# -- auxiliary data ------------------------------------------------------------------------------
def test_aux_is_carved_out_of_the_training_set_before_the_split():
    cfg = config("feddf")
    full = load_dataset("digits")
    data = load_data(cfg)
    assert data.aux_x.shape == (300, 1, 8, 8)
    assert len(data.train_y) == len(full.train_y) - 300
    # every aux input is a training input that no longer is in the training set
    rows = {r.tobytes() for r in full.train_x}
    left = {r.tobytes() for r in data.train_x}
    assert all(r.tobytes() in rows and r.tobytes() not in left for r in data.aux_x)


def test_labels_of_aux_samples_are_never_used(tmp_path, monkeypatch):
    """The same run with the aux samples' labels scrambled ends with bit-identical models."""
    def scrambled(name, root=None, **options):
        bundle = load_dataset(name, root, **options)
        carved = {r.tobytes() for r in carve_aux(load_dataset(name, root, **options), 300, 0)}  # the same draw
        aux = np.array([r.tobytes() in carved for r in bundle.train_x])
        assert aux.sum() == 300
        bundle.train_y[aux] = (bundle.train_y[aux] + 1 + np.arange(300) % 9) % 10  # every label wrong
        return bundle

    cfg = config({"name": "feddf", "distill": {"lr": 1e-3}})
    clean, _ = run(cfg, tmp_path / "clean")
    monkeypatch.setattr(assembly_module, "load_dataset", scrambled)
    dirty, _ = run(cfg, tmp_path / "dirty")
    assert_same_models(clean.strategy.models, dirty.strategy.models)


def test_another_data_set_as_aux_is_resized_to_the_run_shape():
    cfg = build_config({"data": {"dataset": "fashion_mnist", "train_limit": 500, "test_limit": 100},
                        "aux": {"dataset": "digits", "size": 400},
                        "federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}},
                        "algorithm": {"name": "feddf"}})
    data = load_data(cfg)
    assert data.aux_x.shape == (400, 1, 28, 28) and data.aux_x.dtype == np.float32
    assert len(data.train_y) == 500  # nothing carved out of Fashion-MNIST


def test_distillation_methods_need_aux_data_and_valid_bits():
    with pytest.raises(ConfigError, match="aux.size = 0: method feddf distils"):
        config("feddf", aux={"size": 0})
    with pytest.raises(ConfigError, match="algorithm.b_up = 20: soft-label bits must be 1..16"):
        config({"name": "cfd", "b_up": 20})
    with pytest.raises(ConfigError, match="delta coding \\(eq. 5.11\\) compares quantised labels"):
        config({"name": "fd", "delta": True})
    with pytest.raises(ConfigError, match="aux.dataset = 'stl11'"):
        config("fd", aux={"dataset": "stl11"})
    with pytest.raises(ConfigError, match="unknown config key 'algorithm.distill.epoch'"):
        config({"name": "feddf", "distill": {"epoch": 2}})


# -- FedDF and FedBE -----------------------------------------------------------------------------
def test_feddf_with_one_client_and_zero_distillation_steps_equals_fedavg(tmp_path):
    one = {"federation": {"clients_per_round": 1}}
    fedavg, _ = run(config("fedavg", 3, **one), tmp_path / "avg")
    feddf, metrics = run(config({"name": "feddf", "distill": {"steps": 0}}, 3, **one), tmp_path / "df")
    assert_same_models(fedavg.strategy.models, feddf.strategy.models)
    assert all(m[f"distill/accuracy_after/{a}"] == m[f"distill/accuracy_before/{a}"]
               for m in metrics for a in ("mlp", "logreg"))


def test_feddf_distils_every_architecture_from_all_clients_and_counts_the_logits(tmp_path):
    fed, metrics = run(config({"name": "feddf", "distill": {"lr": 1e-3, "epochs": 3}}, 3), tmp_path)
    # 3 clients upload weights plus float32 logits on 300 aux samples x 10 classes
    assert all(m["comm/soft_label_bytes_up"] == 3 * 300 * 10 * 4 for m in metrics)
    for arch in ("mlp", "logreg"):
        gains = [m[f"distill/accuracy_after/{arch}"] - m[f"distill/accuracy_before/{arch}"] for m in metrics]
        assert np.mean(gains) > 0, (arch, gains)
    assert metrics[-1]["eval/accuracy"] > 0.5
    assert 0.5 < metrics[-1]["distill/ensemble_accuracy"] <= 1


def test_fedbe_samples_a_diagonal_gaussian_around_the_weighted_mean(tmp_path):
    fed = Federation(assemble(config({"name": "fedbe", "samples": 400}, 1)), tmp_path)
    s = fed.strategy
    base = s.models["logreg"]
    a = {k: v + 1.0 for k, v in base.items()}
    b = {k: v - 1.0 for k, v in base.items()}  # with |D| 1 and 3: mean base - 0.5, std sqrt(3)/2
    no_logits = np.zeros((0, 10), np.float32)

    def moments(*updates):  # the sums a host folds: first and second moments of the weights
        sums = {}
        for u in updates:
            add_terms(sums, u.arch, client_half(s).statistics(u, bare_client(u)))
        s.models["logreg"] = sums["logreg"]["model"].mean()
        return sums

    updates = [ClientUpdate(0, "logreg", 1, WeightsAndLogits(a, no_logits), 0),
               ClientUpdate(1, "logreg", 3, WeightsAndLogits(b, no_logits), 0)]
    sums = moments(*updates)
    np.testing.assert_allclose(s.models["logreg"]["classifier.weight"], base["classifier.weight"] - 0.5, atol=1e-6)
    teachers = s.extra_teachers(1, sums, ["logreg"])
    assert len(teachers) == 401 and teachers[0][1] is s.models["logreg"]
    draws = np.stack([t["classifier.weight"] - base["classifier.weight"] for _, t in teachers[1:]])
    assert abs(draws.mean() + 0.5) < 0.01 and abs(draws.std() - np.sqrt(3) / 2) < 0.01
    again = s.extra_teachers(1, moments(*updates), ["logreg"])  # seeded by (seed, round)
    np.testing.assert_array_equal(again[5][1]["classifier.weight"], teachers[5][1]["classifier.weight"])
    # one client: E[theta^2] - mean^2 cancels to rounding, which is no variance: every sample is the mean
    alone = s.extra_teachers(1, moments(updates[1]), ["logreg"])
    for _, sample in alone[1:]:
        for key, value in sample.items():
            np.testing.assert_array_equal(value, b[key], err_msg=key)


def test_fedbe_runs_and_learns(tmp_path):
    _, metrics = run(config({"name": "fedbe", "samples": 4, "distill": {"lr": 1e-3, "epochs": 3}}, 3), tmp_path)
    assert metrics[-1]["eval/accuracy"] > 0.5


# -- FD and CFD ----------------------------------------------------------------------------------
FD_DISTILL = {"lr": 3e-3, "epochs": 10}  # 300 aux samples: 3 steps an epoch


@pytest.mark.parametrize("mode", ["init_previous", "init_random", "dual"])
def test_fd_modes_learn_from_soft_labels_alone(tmp_path, mode):
    _, metrics = run(config({"name": "fd", "mode": mode, "distill": FD_DISTILL}, 4), tmp_path)
    assert metrics[-1]["eval/accuracy"] > 0.5, [m["eval/accuracy"] for m in metrics]
    # uploads: 3 clients x float32 [300, 10] plus a 32-byte header; nothing down in round 1
    assert metrics[0]["comm/bytes_up"] == 3 * (300 * 10 * 4 + 32)
    assert metrics[0]["comm/bytes_down"] == 0
    assert metrics[1]["comm/bytes_down"] == 3 * (300 * 10 * 4 + 32)


def test_cfd_uploads_one_bit_labels_that_decode_to_one_hot(tmp_path):
    fed, metrics = run(config({"name": "cfd", "b_down": 1, "delta": True, "distill": FD_DISTILL}, 3), tmp_path)
    assert metrics[0]["comm/bytes_up"] < 3 * 300 * 10 * 4 / 20  # over 20x smaller than float32
    # 1-bit labels down for 3 clients: under a byte a label beside the header and the 10x10 codebook
    assert 0 < metrics[1]["comm/bytes_down"] < 3 * (32 + 100 + 300)
    labels = next(iter(fed.executor.client_states().values()))["last"]
    assert labels.shape == (300, 10) and set(labels.sum(axis=1)) == {1}  # b = 1: one-hot (L = 1)
    assert metrics[-1]["eval/accuracy"] > 0.4


def test_fd_delta_coding_decodes_to_the_clients_labels(tmp_path):
    fed = Federation(assemble(config({"name": "cfd", "b_up": 2, "delta": True}, 3)), tmp_path)
    for _ in range(3):
        previous = {cid: state.get("last") for cid, state in fed.executor.client_states().items()}
        updates, _ = a_round(fed)
        fed.round += 1
        aggregate(fed.strategy, fed.round, updates, fed.executor.host.clients)
        states = fed.executor.client_states()
        for u in updates:  # each stream, decoded against the last one, is exactly the client's quantised labels
            np.testing.assert_array_equal(decode_soft_labels(u.payload.stream, previous[u.client_id]),
                                          states[u.client_id]["last"])


def test_cfd_resumes_exactly(tmp_path):
    cfg = config({"name": "cfd", "delta": True}, 4, checkpoint_every=2)
    whole, _ = run(cfg, tmp_path / "whole")
    split, _ = run(cfg, tmp_path / "split", rounds=2)
    resumed = Federation(assemble(cfg), tmp_path / "split", resume=True)
    resumed.run_round(), resumed.run_round()
    assert_same_models(whole.strategy.models, resumed.strategy.models)
    assert_same_models(whole.strategy.start, resumed.strategy.start)


def test_cfd_delta_downloads_are_per_client_smaller_and_checked(tmp_path):
    def downloads(delta):
        fed, metrics = run(config({"name": "cfd", "b_down": 1, "delta": delta, "distill": FD_DISTILL}, 6),
                           tmp_path / str(delta))
        return fed, [m["comm/bytes_down"] for m in metrics]

    plain_fed, plain = downloads(False)
    fed, delta = downloads(True)
    assert plain[0] == delta[0] == 0  # round 1: the shared seed
    assert delta[1] == plain[1]  # nobody has downloaded before: full streams
    assert sum(delta[2:]) < 0.9 * sum(plain[2:])  # returning clients get only the changed rows
    states = fed.executor.client_states()  # each client's decoded download is the server's record of it
    for cid, sent in fed.strategy.sent.items():
        np.testing.assert_array_equal(states[cid]["down"], sent)
    # a client whose reference differs from the server's decodes other labels, and the CRC32 says so
    cid = next(c.client_id for c in fed.strategy.sample_clients(fed.round + 1) if c.client_id in fed.strategy.sent)
    fed.strategy.sent[cid] = np.roll(fed.strategy.sent[cid], 1, axis=1)
    plan = fed.strategy.configure_round(fed.round + 1)
    task = next(t for t in plan.tasks if t.client_id == cid)
    with pytest.raises(ClientFailure, match=f"^client {cid} failed in round 7 during download: LabelsOutOfSync: soft labels differ"):
        fed.executor.host.run(task, *(plan.broadcast[k] for k in task.payload_keys))


# -- folding (fedray.fold) -----------------------------------------------------------------------
FOLDING = {"feddf": {"name": "feddf", "distill": {"steps": 3, "lr": 1e-3}},
           "feddf_probs": {"name": "feddf", "ensemble": "mean_probs", "distill": {"steps": 3, "temperature": 2.0}},
           "fedbe": {"name": "fedbe", "samples": 3, "distill": {"steps": 3}},
           "fd": {"name": "fd", "distill": {"steps": 3}},
           "cfd": {"name": "cfd", "delta": True, "b_down": 2, "distill": {"steps": 3}}}


@pytest.mark.parametrize("method", sorted(FOLDING))
def test_hosts_fold_within_the_float64_bound_and_the_server_sums_gathered_statistics_alike(tmp_path, method):
    """FedDF's teacher (logits, or probabilities at T = 2) and FedAvg init, FedBE's moments, FD's
    labels and entropies: see ``tests.distill.folding.check_folding``."""
    cfg = config(FOLDING[method], 2, federation={"clients_per_round": 5})
    fed = Federation(assemble(cfg), tmp_path)
    fed.run_round()  # a round first, then FD's clients have labels to download and to delta-code against
    check_folding(fed, kept=("models", "start") if method in ("fd", "cfd") else ("models",))


@pytest.mark.parametrize("method", ["feddf", "fedbe", "cfd"])
def test_a_folded_run_of_two_clients_a_round_is_the_per_client_run(tmp_path, method):
    """Two clients a round: the hosts' fold tree makes the one addition the server makes folding
    whole uploads (``runtime.fold: false``), so the runs are the same to the last bit (with more
    clients the orders differ, within the float64 bound: see the test above). The folded run's
    server gets the hosts' sums only, never a client's statistics."""
    two = {"federation": {"clients_per_round": 2}}
    apart, whole = run(config(FOLDING[method], 2, runtime={"fold": False}, **two), tmp_path / "apart")
    fed = Federation(assemble(config(FOLDING[method], 2, **two)), tmp_path / "folded")
    real = fed.strategy.aggregate

    def summed_only(round):
        assert round.gathered is None and round.sums, "a folded round brought the server its clients' statistics"
        return real(round)

    fed.strategy.aggregate = summed_only
    folded = [fed.run_round().metrics for _ in range(2)]
    assert_same_models(apart.strategy.models, fed.strategy.models)
    for a, b in zip(whole, folded):
        assert {k: v for k, v in a.items() if not k.startswith("time/")} == \
               {k: v for k, v in b.items() if not k.startswith("time/")}
    assert "distill/ensemble_accuracy" in folded[-1] or method == "cfd"
