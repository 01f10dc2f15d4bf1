"""FedDF, MrTF and FedGen on real Ray actors: distillation (and FedGen's generator) in the server actor."""

import numpy as np
import pytest
import ray

from actors.driver import start_server
from fedray.distill.generator import Generator
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.tracking import read_scalars
from fedray.weights import get_weights, nbytes
from tests.integration.conftest import small_config

pytestmark = pytest.mark.integration


def run_on_ray(config, run_dir, check=None):
    """All rounds in a server actor; the summary and the scalars read back from the event files.
    ``check(server)`` runs before the first round."""
    server = start_server(config, resolve(config), run_dir, resume=False)
    if check is not None:
        check(server)
    for _ in range(config.federation.rounds):
        ray.get(server.run_round.remote())
    return ray.get(server.finish.remote()), read_scalars(run_dir)


def test_feddf_two_architectures_both_improve_through_distillation_in_the_server_actor(local_ray, tmp_path):
    config = small_config(
        data={"partition": "dirichlet", "alpha": 0.3},
        aux={"size": 2000},
        algorithm={"name": "feddf", "distill": {"lr": 1e-3, "epochs": 2}},
        runtime={"actor_cpus": 0.5, "clients_per_actor": 5, "server_cpus": 0.5},
    )
    def own_request(server):  # the server actor's own CPUs, apart from the clients'
        assert ray.get(server.assigned_resources.remote()) == {"CPU": 0.5}

    summary, scalars = run_on_ray(config, tmp_path, own_request)  # scalars read back from the event files
    assert summary["executor"]["actors"] == 2
    for arch in ("mlp", "lenet5"):
        before = np.array([v for _, v in scalars[f"distill/accuracy_before/{arch}"]])
        after = np.array([v for _, v in scalars[f"distill/accuracy_after/{arch}"]])
        assert len(after) == 3 and np.mean(after - before) > 0.02, (arch, before, after)  # measured +0.11 each
        assert after[-1] > 0.55  # measured 0.63 (mlp) and 0.64 (lenet5); chance is 0.1
        assert [v for _, v in scalars[f"eval/accuracy/{arch}"]] == pytest.approx(list(after))
    ensemble = [v for _, v in scalars["distill/ensemble_accuracy"]]
    assert ensemble[-1] > 0.55  # measured 0.64
    # 6 clients a round, each uploading float32 logits on the 2000 auxiliary inputs
    assert all(v == 6 * 2000 * 10 * 4 for _, v in scalars["comm/soft_label_bytes_up"])
    assert all(len(scalars[f"distill/loss/{a}"]) == 3 for a in ("mlp", "lenet5"))


def test_mrtf_refines_in_the_server_actor_on_the_test_inputs(local_ray, tmp_path):
    config = small_config(
        data={"partition": "dirichlet", "alpha": 0.3},
        federation={"architectures": {"mlp": 10}, "rounds": 4},
        algorithm={"name": "mrtf", "cluster_after": 2, "distill": {"steps": 150, "lr": 1e-3, "batch_size": 64}},
        runtime={"actor_cpus": 0.5, "clients_per_actor": 5, "server_cpus": 0.5},
    )
    summary, scalars = run_on_ray(config, tmp_path)
    aggregate = np.array([v for _, v in scalars["mrtf/accuracy_aggregate"]])
    refined = np.array([v for _, v in scalars["mrtf/accuracy_refined"]])
    assert len(refined) == 4 and [v for _, v in scalars["eval/accuracy"]] == pytest.approx(list(refined))
    assert np.mean(refined - aggregate) > 0.03, (aggregate, refined)  # measured +0.08 (0.36 -> 0.45 in round 1)
    assert summary["final"]["eval/accuracy"] > 0.55, refined  # measured 0.67; chance is 0.1
    assert 0.25 <= min(v for _, v in scalars["mrtf/u"]) and max(v for _, v in scalars["mrtf/u"]) <= 1.0


def test_fedgen_trains_one_generator_for_two_feature_extractors_in_the_server_actor(local_ray, tmp_path):
    """An MLP and FedGen's CNN share a 32-d latent space: one generator, trained in the server actor
    on both architectures' heads, travels to every client with its model."""
    config = small_config(
        data={"partition": "dirichlet", "alpha": 0.3},
        federation={"architectures": {"mlp": 5, "fedgen_cnn": 5}, "rounds": 4,
                    "model_options": {"mlp": {"hidden": [200, 32]}}},
        training={"lr": 0.1, "momentum": 0.0, "batch_size": 32, "steps": 20},
        algorithm={"name": "fedgen", "gen_steps": 100},
        runtime={"actor_cpus": 0.5, "clients_per_actor": 5, "server_cpus": 0.5},
    )
    summary, scalars = run_on_ray(config, tmp_path)
    made = [v for _, v in scalars["fedgen/accuracy"]]
    # measured 0.34, 0.59, 0.94, 0.97: the heads of both architectures come to call G(eps, y) y
    assert len(made) == 4 and made[-1] > 0.8, made
    for arch in ("mlp", "fedgen_cnn"):
        assert scalars[f"eval/accuracy/{arch}"][-1][1] > 0.45, arch  # measured 0.58 and 0.69; chance is 0.1
    # every client downloads its architecture's model and the generator with the prior, once a round
    gen_bytes = nbytes(get_weights(Generator(10, 32, 32, 256))) + 10 * 8
    mlp, cnn = (nbytes(get_weights(create_model(a, (1, 28, 28), 10, **o))) for a, o in (("mlp", {"hidden": (200, 32)}),
                                                                                        ("fedgen_cnn", {})))
    for _, down in scalars["comm/bytes_down"]:
        assert any(down == k * mlp + (6 - k) * cnn + 6 * gen_bytes for k in range(7)), down
    assert summary["final"]["eval/accuracy"] > 0.5  # measured 0.63
