"""FedAUX through the round loop without Ray, on real digits: the preparation phase, the weighted
ensemble, equal scores = FedDF+P bit for bit, frozen features, resume, the pre-training cache."""

import json
import math

import numpy as np
import pytest
import yaml

from fedray.assembly import assemble
from fedray.config import ConfigError, build_config
from fedray.federation import Federation
from fedray.privacy import gaussian_epsilon, gaussian_mu
from fedray.resolve import resolve
from fedray.tracking import read_scalars
from fedray.weights import nbytes
from tests.distill.folding import check_folding


def config(tmp_path, algorithm, rounds=2, **extra):
    tree = {"data": {"dataset": "digits", "partition": "dirichlet", "alpha": 0.1},
            "aux": {"size": 400, "negatives": 0.25},
            "pretrain": {"epochs": 2, "batch_size": 64, "cache_dir": str(tmp_path / "cache")},
            "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": rounds,
                           "architectures": {"mlp": 3, "lenet5": 3}},
            "training": {"optimizer": "adam", "lr": 1e-3, "batch_size": 16, "epochs": 1},
            "algorithm": algorithm if isinstance(algorithm, dict) else {"name": algorithm},
            "runtime": {"backend": "local", "torch_threads": 1}}
    for section, values in extra.items():
        tree.setdefault(section, {}).update(values) if isinstance(values, dict) else tree.__setitem__(section, values)
    cfg = build_config(tree)
    resolve(cfg)
    return cfg


def run(cfg, run_dir, rounds=None, **kwargs):
    fed = Federation(assemble(cfg), run_dir, **kwargs)
    return fed, [fed.run_round().metrics for _ in range(rounds or cfg.federation.rounds)]


def test_fedaux_needs_negatives_and_pretraining(tmp_path):
    with pytest.raises(ConfigError, match="^bad config value aux.negatives = 0: fedaux scores"):
        config(tmp_path, "fedaux", aux={"negatives": 0.0})
    with pytest.raises(ConfigError, match="^bad config value pretrain.epochs = 0: fedaux"):
        config(tmp_path, "fedaux", pretrain={"epochs": 0})


def test_preparation_scores_every_client_once_and_counts_its_bytes(tmp_path):
    # eps 10: with ~350 samples a client (digits) the paper's eps 0.1 noise (sigma 2.8 a coordinate) drowns w
    cfg = config(tmp_path, {"name": "fedaux", "eps": 10.0, "distill": {"lr": 1e-3}})
    fed, metrics = run(cfg, tmp_path / "run")
    s = fed.strategy
    assert sorted(s.scores) == list(range(6))  # all clients, not only a round's sample (Alg. 14)
    assert all(v.shape == (300,) and v.min() > 0 and v.max() <= 1 + 1e-8 for v in s.scores.values())
    assert all(v.shape == (len(fed.experiment.data.test_y),) for v in s.test_scores.values())
    scalars = read_scalars(tmp_path / "run")
    # round 0: each client downloads its architecture's h_0 and h_0(D^-) (100 negatives), uploads w_i and gamma_i
    down = sum(nbytes(s.ctx.initial(c.arch)) + 100 * s.work_model(c.arch).feature_dim * 4 for c in fed.experiment.clients)
    up = sum(s.work_model(c.arch).feature_dim * 8 + 8 for c in fed.experiment.clients)  # float64 w and gamma
    assert dict(scalars["comm/bytes_down"])[0] == down and dict(scalars["comm/bytes_up"])[0] == up
    assert dict(scalars["privacy/epsilon"])[0] == pytest.approx(10) and dict(scalars["privacy/delta"])[0] == pytest.approx(1e-5)
    assert dict(scalars["fedaux/score_auc"])[0] > 0.6  # clients score their own classes' test inputs higher
    assert "distill/weighted_ensemble_accuracy" in metrics[-1]
    summary = fed.finish()
    # N: the largest |D_i| plus the 100 negatives; mu: Delta / sigma of the noise (analytic at eps 10)
    n_max = max(len(c.indices) for c in fed.experiment.clients) + 100
    assert summary["privacy"] == {"scorer": "logistic", "epsilon": 10.0, "delta": 1e-5, "lambda": 0.1,
                                  "regularization": "paper", "normaliser": "public", "intercept": False, "n_max": n_max,
                                  "mu": pytest.approx(2.0004456204306324, rel=1e-12)}
    assert json.loads((tmp_path / "run" / "result.json").read_text())["privacy"]["epsilon"] == 10.0


def test_the_codes_regularisation_spreads_the_scores_and_reports_its_true_epsilon(tmp_path):
    paper, _ = run(config(tmp_path, {"name": "fedaux", "eps": 10.0}), tmp_path / "paper", rounds=0)
    code, _ = run(config(tmp_path, {"name": "fedaux", "eps": 10.0, "regularization": "code"}), tmp_path / "code", rounds=0)
    # J with lambda / N: a far larger w, so the scores spread (measured: per-client std 0.011 against 0.20)
    spread = {name: np.mean([s.std() for s in fed.strategy.scores.values()]) for name, fed in
              (("paper", paper), ("code", code))}
    assert spread["code"] > 4 * spread["paper"], spread
    # its sensitivity is 2/lambda, N times what the noise is scaled to (N the largest |D_i| + |D^-|): the
    # exact eps at delta 1e-5 of N times the noise's mu, far above eps N (tests/test_privacy_accounting.py)
    n_max = max(len(c.indices) for c in code.experiment.clients) + len(code.experiment.data.negatives_x)
    exact = gaussian_epsilon(1e-5, n_max * gaussian_mu(10.0, 1e-5))
    assert code.strategy.epsilon == pytest.approx(exact, rel=1e-9) and code.strategy.epsilon > 10.0 * n_max
    assert code.strategy.delta == 1e-5 and paper.strategy.epsilon == 10.0


def test_eps_null_releases_w_without_noise_and_reports_no_guarantee(tmp_path):
    from fedray.privacy.certainty import dp_certainty, dp_sigma

    assert dp_sigma(0.1, math.inf, 1e-5, 100) == 0.0  # what eps: null passes to the mechanism
    clear, _ = run(config(tmp_path, {"name": "fedaux", "eps": None}), tmp_path / "clear", rounds=0)
    noisy, _ = run(config(tmp_path, {"name": "fedaux", "eps": 0.01}), tmp_path / "noisy", rounds=0)
    assert clear.strategy.epsilon == np.inf and noisy.strategy.epsilon == 0.01
    # without noise the release is the argmin of J itself: the same whatever the client's noise seed
    own, negatives = np.random.default_rng(0).normal(size=(2, 50, 8))
    release = [dp_certainty(own, negatives, 0.1, clear.strategy.params.noise_eps, 1e-5, np.random.default_rng(s))[0]
               for s in (1, 2)]
    np.testing.assert_array_equal(release[0], release[1])
    noisy_release = [dp_certainty(own, negatives, 0.1, 0.01, 1e-5, np.random.default_rng(s))[0] for s in (1, 2)]
    assert not np.array_equal(noisy_release[0], noisy_release[1])
    assert yaml.safe_load((tmp_path / "clear" / "config.yaml").read_text())["algorithm"]["eps"] is None


def test_the_papers_normaliser_uploads_gamma_i_and_reports_no_guarantee(tmp_path):
    public, _ = run(config(tmp_path, {"name": "fedaux", "eps": 10.0}), tmp_path / "public", rounds=0)
    paper, _ = run(config(tmp_path, {"name": "fedaux", "eps": 10.0, "normaliser": "paper"}), tmp_path / "paper", rounds=0)
    assert paper.strategy.epsilon == np.inf and paper.strategy.delta == 1.0 and public.strategy.epsilon == 10.0
    assert dict(read_scalars(tmp_path / "paper")["privacy/epsilon"])[0] == np.inf
    assert paper.finish()["privacy"]["normaliser"] == "paper"
    # the maps differ for a client with features larger than the negatives' (gamma_i is then its own
    # largest norm; 5 of the 6 clients here): different scores
    same = [np.array_equal(paper.strategy.scores[c], public.strategy.scores[c]) for c in public.strategy.scores]
    assert not all(same), same


def test_equal_scores_are_feddf_with_pretraining_bit_for_bit(tmp_path):
    feddf, _ = run(config(tmp_path, {"name": "feddf", "distill": {"lr": 1e-3}}), tmp_path / "df")
    equal, _ = run(config(tmp_path, {"name": "fedaux", "scorer": "equal", "distill": {"lr": 1e-3}}), tmp_path / "eq")
    for arch in feddf.strategy.models:
        for name, value in feddf.strategy.models[arch].items():
            np.testing.assert_array_equal(value, equal.strategy.models[arch][name], err_msg=f"{arch}.{name}")
    weighted, _ = run(config(tmp_path, {"name": "fedaux", "distill": {"lr": 1e-3}}), tmp_path / "w")
    assert any(not np.array_equal(v, weighted.strategy.models["mlp"][k]) for k, v in feddf.strategy.models["mlp"].items())


def test_scores_survive_resume_and_the_run_repeats_exactly(tmp_path):
    cfg = config(tmp_path, {"name": "fedaux", "distill": {"lr": 1e-3}}, rounds=3, checkpoint_every=1)
    whole, _ = run(cfg, tmp_path / "whole")
    part, _ = run(cfg, tmp_path / "part", rounds=2)
    part.finish()
    resumed = Federation(assemble(cfg), tmp_path / "part", resume=True)
    assert resumed.strategy.scores.keys() == whole.strategy.scores.keys()
    resumed.run_round()
    for arch in whole.strategy.models:
        for name, value in whole.strategy.models[arch].items():
            np.testing.assert_array_equal(value, resumed.strategy.models[arch][name])


def test_frozen_features_stay_h0_and_only_heads_learn(tmp_path):
    cfg = config(tmp_path, {"name": "fedaux", "distill": {"lr": 1e-3}}, rounds=3, pretrain={"freeze_features": True},
                 data={"alpha": 100.0}, training={"epochs": 3, "lr": 3e-3})
    fed, metrics = run(cfg, tmp_path / "run")
    for arch, model in fed.strategy.models.items():
        initial = fed.strategy.ctx.initial(arch)
        for name, value in model.items():
            if name.startswith("classifier."):
                assert not np.array_equal(value, initial[name]), name  # the head trained
            else:
                np.testing.assert_array_equal(value, initial[name], err_msg=name)  # h_0 untouched, BN statistics too
    assert metrics[-1]["eval/accuracy"] > 0.7  # a linear head on pre-trained features (measured 0.85); chance 0.1


def test_the_pretraining_cache_is_hit_on_the_second_run(tmp_path):
    cfg = config(tmp_path, "feddf", rounds=1)
    first, _ = run(cfg, tmp_path / "a")
    second, _ = run(cfg, tmp_path / "b")
    assert all(not info["cached"] for info in first.experiment.pretrained.values())
    assert all(info["cached"] for info in second.experiment.pretrained.values())
    assert second.experiment.pretrained["mlp"]["seconds"] < first.experiment.pretrained["mlp"]["seconds"]
    for arch in first.experiment.initial:
        for name, value in first.experiment.initial[arch].items():
            np.testing.assert_array_equal(value, second.experiment.initial[arch][name])
    other, _ = run(config(tmp_path, "feddf", rounds=1, seed=1), tmp_path / "c")  # another seed: a miss
    assert not other.experiment.pretrained["mlp"]["cached"]


def test_clients_keep_the_servers_scores_and_their_hosts_fold_the_weighted_ensemble(tmp_path):
    """Each client scores D_distill and the test inputs itself, with the scorer it releases: the
    server's numbers from the upload. With a coefficient per sample, the teacher's folds in two
    splits stay within the float64 bound, and the server's sum of the gathered statistics is the
    hosts' one-group fold, bit for bit (``tests.distill.folding.check_folding``)."""
    cfg = config(tmp_path, {"name": "fedaux", "eps": 10.0, "distill": {"steps": 3, "lr": 1e-3}},
                 federation={"clients_per_round": 5})
    fed = Federation(assemble(cfg), tmp_path / "run")
    assert fed.experiment.method.stateful  # the scores stay on the clients' home hosts, in their state
    states = fed.executor.client_states()
    for cid in range(6):
        np.testing.assert_array_equal(states[cid]["scores"], fed.strategy.scores[cid])
        np.testing.assert_array_equal(states[cid]["test_scores"], fed.strategy.test_scores[cid])
    check_folding(fed)
    metrics = fed.run_round().metrics  # folded, as every round
    assert {"distill/ensemble_accuracy", "distill/weighted_ensemble_accuracy"} <= metrics.keys()


def test_a_folded_fedaux_run_of_two_clients_a_round_is_the_per_client_run(tmp_path):
    """Two clients a round: the hosts' sums are the server's to the bit (see
    tests/methods/test_distillation.py), here with the clients' certainty weights."""
    algorithm = {"name": "fedaux", "eps": 10.0, "distill": {"steps": 3, "lr": 1e-3}}
    two = {"federation": {"clients_per_round": 2}}
    folded, a = run(config(tmp_path, algorithm, **two), tmp_path / "folded")
    apart, b = run(config(tmp_path, algorithm, runtime={"fold": False}, **two), tmp_path / "apart")
    for arch in folded.strategy.models:
        for name, value in folded.strategy.models[arch].items():
            np.testing.assert_array_equal(value, apart.strategy.models[arch][name], err_msg=f"{arch}.{name}")
    assert [{k: v for k, v in m.items() if not k.startswith("time/")} for m in a] == \
           [{k: v for k, v in m.items() if not k.startswith("time/")} for m in b]
