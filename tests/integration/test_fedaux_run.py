"""FedAUX on real Ray actors, two architectures: SimCLR pre-training in the server actor, certainty
scorers fitted in the client actors, certainty-weighted distillation, all read back from the files."""

import json

import numpy as np
import pytest
import ray
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actors.driver import start_server
from fedray.resolve import resolve
from fedray.tracking import read_scalars
from tests.integration.conftest import small_config

pytestmark = pytest.mark.integration


def test_fedaux_pretrains_in_the_server_scores_in_the_clients_and_distils_with_the_weights(local_ray, tmp_path):
    config = small_config(
        data={"partition": "dirichlet", "alpha": 0.01},  # about one class a client
        aux={"size": 2500, "negatives": 0.2},
        pretrain={"epochs": 2, "batch_size": 128, "cache_dir": str(tmp_path / "cache")},
        training={"optimizer": "adam", "lr": 1e-3},  # the paper's; SGD with momentum diverges at alpha 0.01
        # the authors' regularisation: with the paper's J at lambda 0.1 the scores hardly spread (docs/methods.md)
        algorithm={"name": "fedaux", "regularization": "code", "show_clients": 2,
                   "distill": {"lr": 1e-3, "epochs": 2}},
        runtime={"actor_cpus": 0.5, "clients_per_actor": 5, "server_cpus": 0.5},
    )
    run_dir = tmp_path / "run"
    server = start_server(config, resolve(config), run_dir, resume=False)  # pre-trains and scores here
    for _ in range(config.federation.rounds):
        ray.get(server.run_round.remote())
    summary = ray.get(server.finish.remote())
    assert summary["executor"]["actors"] == 2

    # pre-training ran in the server actor (not the driver, which never built a model): one h_0 per
    # architecture, written to the cache, its SimCLR loss in the event files
    result = json.loads((run_dir / "result.json").read_text())
    assert sorted(result["pretrain"]) == ["lenet5", "mlp"]
    assert not any(p["cached"] for p in result["pretrain"].values())
    assert len(list((tmp_path / "cache" / "pretrain").glob("*.fedray"))) == 2
    assert result["privacy"]["regularization"] == "code" and result["privacy"]["epsilon"] > 0.1 * 600
    scalars = read_scalars(run_dir)
    for arch in ("mlp", "lenet5"):
        assert [s for s, _ in scalars[f"pretrain/loss/{arch}"]] == [1, 2]

    # the scorers were fitted in the client actors, on data the server never holds: round 0 is all ten
    # clients' uploads of w_i and gamma_i (float64), 200 features (mlp) or 500 (lenet5)
    assert dict(scalars["comm/bytes_up"])[0] == 5 * (200 * 8 + 8) + 5 * (500 * 8 + 8)
    assert dict(scalars["privacy/epsilon"])[0] == pytest.approx(result["privacy"]["epsilon"])
    assert dict(scalars["fedaux/score_auc"])[0] > 0.7  # measured 0.80: clients rank their own classes higher

    # the weights change the ensemble the models are distilled from, and distillation helps
    weighted = np.array([v for _, v in scalars["distill/weighted_ensemble_accuracy"]])
    plain = np.array([v for _, v in scalars["distill/ensemble_accuracy"]])
    assert len(weighted) == 3
    assert weighted[0] > plain[0] + 0.05  # measured 0.49 against 0.32 in round 1, where all start from h_0
    for arch in ("mlp", "lenet5"):
        before = np.array([v for _, v in scalars[f"distill/accuracy_before/{arch}"]])
        after = np.array([v for _, v in scalars[f"distill/accuracy_after/{arch}"]])
        assert np.mean(after - before) > 0.02, (arch, before, after)
        assert after[-1] > 0.35, (arch, after)  # measured 0.44 (mlp), 0.44 (lenet5); chance 0.1

    # the score histograms (round 0: all clients; then each round's teachers) and the top-scored image
    acc = EventAccumulator(str(run_dir), size_guidance={"histograms": 0, "images": 0})
    acc.Reload()
    assert [e.step for e in acc.Histograms("fedaux/scores")] == [0]
    assert [e.step for e in acc.Histograms("fedaux/round_scores")] == [1, 2, 3]
    assert [e.step for e in acc.Images("fedaux/top_scored")] == [0]
