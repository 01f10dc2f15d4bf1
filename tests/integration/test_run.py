"""Real multi-actor runs on Fashion-MNIST: learning, logging, checkpoints, resume, failures."""

import json
import os
import threading
import time

import numpy as np
import pytest
import ray
import torch

from actors.executor import ClientActorLost, RayExecutor
from actors.driver import task_cause
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.clients import group_test_set
from fedray.config import ConfigError
from fedray.assembly import assemble
from fedray.executor import LocalExecutor
from fedray.federation import Federation
from fedray.messages import ClientFailure, ClientTask, RoundPlan
from fedray.runner import ERROR_LOG, RunFailed, run_experiment
from fedray.tracking import read_scalars
from fedray.training import combine_parts, evaluate, set_torch_threads
from fedray.weights import nbytes, set_weights
import tests.faulty_method as faulty
from tests.integration.conftest import FOUR_ACTORS, small_config
from tests.support import ClientCounter, collects
from tests.test_runner import assert_full_story

pytestmark = pytest.mark.integration


def test_two_architectures_on_four_actors_learn_and_log(local_ray, tmp_path):
    config = small_config(runtime=FOUR_ACTORS)
    summary = run_experiment(config, tmp_path, progress=False, observers=[ClientCounter()])  # runs in the server actor
    assert summary["client_counter"] == {"total": 18, "rounds": [1, 2, 3]}
    node = f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"
    assert summary["executor"] == {"backend": "ray", "actors": 4, "actors_per_node": {node: 4}, "devices": {"cpu": 4},
                                   "clients_per_actor": [3, 3, 2, 2], "server_hosts_clients": True}
    # the server evaluates with every core of the node, not with the 1 thread its host thread set
    assert summary["server_threads"] == os.cpu_count()
    scalars = read_scalars(tmp_path)
    for arch in ("mlp", "lenet5"):
        steps = [s for s, _ in scalars[f"eval/accuracy/{arch}"]]
        assert steps == [1, 2, 3]
        assert scalars[f"eval/accuracy/{arch}"][-1][1] > 0.70  # chance is 0.10
    assert summary["final"]["eval/accuracy"] == pytest.approx(scalars["eval/accuracy"][-1][1])
    # bytes down: every participant downloads its architecture's full float32 model, exactly
    state = read_checkpoint(tmp_path / CHECKPOINT)["strategy"]["models"]
    sizes = {arch: nbytes(w) for arch, w in state.items()}
    down = [v for _, v in scalars["comm/bytes_down"]]
    assert all(min(sizes.values()) * 6 <= d <= max(sizes.values()) * 6 for d in down)
    assert scalars["comm/bytes_down_total"][-1][1] == pytest.approx(sum(down))
    assert scalars["train/loss"][-1][1] < scalars["train/loss"][0][1]
    assert json.loads((tmp_path / "result.json").read_text())["rounds"] == 3
    # the same run on four client actors, the server hosting none, ends with the same weights
    apart = run_experiment(small_config(runtime={**FOUR_ACTORS, "server_hosts_clients": False}), tmp_path / "apart",
                           progress=False)
    assert apart["executor"]["server_hosts_clients"] is False and apart["executor"]["actors"] == 4
    other = read_checkpoint(tmp_path / "apart" / CHECKPOINT)["strategy"]["models"]
    for arch in state:
        for name, value in state[arch].items():
            np.testing.assert_array_equal(value, other[arch][name])


def test_every_dead_client_actor_is_named_at_once(local_ray, tmp_path):
    """Actors killed for good (``ray.kill`` forbids Ray's restart) cannot come back: the run stops,
    all actors are pinged together and both dead actors' clients are named in the one message."""
    config = small_config(runtime=FOUR_ACTORS, federation={"clients_per_round": 10})
    fed = Federation(assemble(config, RayExecutor), tmp_path)
    ray.kill(fed.executor.actors[0]), ray.kill(fed.executor.actors[2])
    with pytest.raises(ClientActorLost, match=r"hosting clients \[0, 4, 8, 2, 6\]\) died during round 1"):
        fed.run_round()
    fed.executor.shutdown()


def test_an_evaluation_is_spread_over_the_hosts_and_adds_up_to_one_pass(local_ray, tmp_path):
    """Four client actors each evaluate a run of the test set's batches; added in batch order the
    parts are the single pass of one process with one torch thread, as a host has, to the last bit
    (per-class counts too, and on a group's shifted test set). With a host dead the server
    evaluates alone, to the same numbers."""
    config = small_config(runtime={**FOUR_ACTORS, "torch_threads": 1}, federation={"eval_batch_size": 64},
                          data={"group_shift": "label_permutation", "groups": 2})
    fed = Federation(assemble(config, RayExecutor), tmp_path)
    ex = fed.experiment
    weights = ex.initial["lenet5"]
    parts = fed.executor.evaluate("lenet5", weights, 1, 64, ex.data.num_classes)
    batches = -(-len(ex.data.test_y) // 64)  # 2,000 test images: 32 batches of 64 (the last of 16)
    assert [len(p.losses) for p in parts] == [batches // 4] * 4

    def one_pass(out):
        set_torch_threads(1)  # in a thread of its own: this one keeps its count
        model = ex.build("lenet5")
        set_weights(model, weights)
        x, y = group_test_set(config, ex.data.test_x, ex.data.test_y, 1, ex.data.num_classes, torch.device("cpu"))
        out.update(evaluate(model, x, y, 64, ex.data.num_classes), y=y)

    single: dict = {}
    worker = threading.Thread(target=one_pass, args=(single,))
    worker.start(), worker.join()
    spread = combine_parts(parts, single.pop("y"), ex.data.num_classes)
    assert spread["accuracy"] == single["accuracy"] and spread["loss"] == single["loss"]
    for key in ("class_correct", "class_total"):
        np.testing.assert_array_equal(spread[key], single[key])
    assert single["class_total"].sum() == 2000 and 0 < single["accuracy"] < 0.5  # theta^0: near chance

    ray.kill(fed.executor.actors[3])
    assert fed.executor.evaluate("lenet5", weights, 1, 64, ex.data.num_classes) is None
    alone = fed.evaluate_model("lenet5", weights, 1, per_class=True)
    assert alone["accuracy"] == single["accuracy"] and alone["loss"] == single["loss"]
    fed.executor.shutdown()


def test_a_client_error_deep_in_a_method_reaches_error_log_through_two_actors(local_ray, tmp_path):
    with pytest.raises(RunFailed) as info:
        # every client fails; with the server hosting none, the failure comes from a client actor
        run_experiment(small_config(runtime={"server_hosts_clients": False}), tmp_path, progress=False,
                       method=faulty.FAULTY)
    line = str(info.value)
    assert "\n" not in line and line.startswith("ClientFailure: client ")
    assert "failed in round 1 during upload: ZeroDivisionError: division by zero" in line
    assert f"(traceback: {tmp_path / ERROR_LOG})" in line
    log = (tmp_path / ERROR_LOG).read_text()
    assert_full_story(log)  # the client actor's traceback: file, line, the method's steps
    assert "ray::ServerActor.run_round" in log  # and the server actor's, through which it passed
    # the failed run ended its server and client actors: the next run in this process finds every CPU
    # free, although the exception (whose context holds the run's actor handles) is still alive here
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU") != 2:
        assert time.monotonic() < deadline, f"the failed run's actors still hold {ray.available_resources()}"
        time.sleep(0.1)
    assert info.value.__context__ is not None


def test_actors_that_do_not_fit_the_cluster_are_refused_before_the_run_writes(local_ray, tmp_path):
    """Found by the server actor as it plans the client actors: a ConfigError (status 2 in the CLI),
    and the run folder holds no run (only its lock)."""
    config = small_config(runtime={"actor_cpus": 1, "clients_per_actor": 1})
    with pytest.raises(ConfigError, match="^10 client actors x 1 CPUs do not fit the cluster"):
        run_experiment(config, tmp_path, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_a_failing_client_reaches_the_driver_as_one_line(local_ray, tmp_path):
    fed = Federation(assemble(small_config(), RayExecutor), tmp_path)
    bad = RoundPlan([ClientTask(3, 1, "mlp", ("model/mlp",), 0)], {"model/mlp": fed.strategy.models["lenet5"]})
    with pytest.raises(ClientFailure) as info:
        fed.executor.execute(bad)
    cause = task_cause(info.value)
    assert type(cause) is ClientFailure and cause.client_id == 3 and cause.stage == "local training"
    assert str(cause).startswith("client 3 failed in round 1 during local training: RuntimeError")
    fed.executor.shutdown()


def test_stateful_stc_on_actors_resumes_exactly(local_ray, tmp_path):
    """Residuals and model copies live on the client actors, go into the checkpoint and come back:
    stopped after round 2 and resumed on actors, the run ends where the uninterrupted run ends, which
    runs in this process (the local backend: the same arithmetic as the actors', to the last bit)."""
    algorithm = {"name": "stc", "p_up": 0.01, "p_down": 0.01}
    tree = {"algorithm": algorithm, "training": {"lr": 0.02, "momentum": 0.9, "batch_size": 32, "steps": 5},
            "runtime": {"actor_cpus": 1, "clients_per_actor": "auto", "torch_threads": 1}}
    config = small_config(**tree, federation={"rounds": 4}, checkpoint_every=2)
    whole = run_experiment(small_config(**{**tree, "runtime": {"backend": "local", "torch_threads": 1}},
                                        federation={"rounds": 4}, checkpoint_every=2),
                           tmp_path / "whole", progress=False)
    run_experiment(small_config(**tree, federation={"rounds": 2}, checkpoint_every=2), tmp_path / "split",
                   progress=False)
    resumed = run_experiment(config, tmp_path / "split", resume=True, progress=False)
    assert resumed["final"] == whole["final"] and resumed["comm"] == whole["comm"]
    assert resumed["executor"]["backend"] == "ray" and whole["executor"]["backend"] == "local"
    a = read_checkpoint(tmp_path / "whole" / CHECKPOINT)
    b = read_checkpoint(tmp_path / "split" / CHECKPOINT)
    assert a["clients"].keys() == b["clients"].keys() and any("residual" in s for s in a["clients"].values())
    for cid, state in a["clients"].items():
        for name, value in state.get("residual", {}).items():
            np.testing.assert_array_equal(value, b["clients"][cid]["residual"][name])
    fedavg_model_bytes = sum(v.nbytes for m in a["strategy"]["models"].values() for v in m.values())
    assert whole["comm"]["comm/bytes_up_total"] * 50 < fedavg_model_bytes * 4 * 6 / 2  # far below dense uploads


def test_kept_optimizers_stay_with_their_clients_on_actors_and_resume_exactly(local_ray, tmp_path):
    """training.optimizer_state: keep makes FedAvg's clients stateful: each trains on its home actor,
    where its Adam lives, and the Adams go into the checkpoint and come back; stopped after round 2
    and resumed on actors, the run ends where the uninterrupted run on the same actors ends (the
    homes fix the order the hosts' sums are added in, ``fedray.fold``)."""
    tree = {"training": {"optimizer": "adam", "lr": 0.005, "batch_size": 32, "steps": 5, "optimizer_state": "keep"},
            "runtime": {"actor_cpus": 1, "clients_per_actor": "auto", "torch_threads": 1}}
    whole = run_experiment(small_config(**tree, federation={"rounds": 4}, checkpoint_every=2), tmp_path / "whole",
                           progress=False)
    run_experiment(small_config(**tree, federation={"rounds": 2}, checkpoint_every=2), tmp_path / "split",
                   progress=False)
    resumed = run_experiment(small_config(**tree, federation={"rounds": 4}, checkpoint_every=2), tmp_path / "split",
                             resume=True, progress=False)
    assert resumed["final"] == whole["final"] and resumed["executor"]["backend"] == "ray"
    a = read_checkpoint(tmp_path / "whole" / CHECKPOINT)["clients"]
    b = read_checkpoint(tmp_path / "split" / CHECKPOINT)["clients"]
    kept = [cid for cid, state in a.items() if "optimizer" in state]
    assert kept and kept == [cid for cid, state in b.items() if "optimizer" in state]
    for cid in kept:  # five Adam steps for each round the client trained, the same moments on both
        steps = {float(s["step"]) for s in a[cid]["optimizer"].values()}
        assert len(steps) == 1 and steps.pop() % 5 == 0
        for index, state in a[cid]["optimizer"].items():
            assert torch.equal(state["exp_avg_sq"], b[cid]["optimizer"][index]["exp_avg_sq"])


def test_vectorised_cohorts_on_actors_match_the_sequential_run(local_ray, tmp_path):
    """runtime.vectorize on Ray: each actor gets its share of the round in one batch and trains it as
    cohorts, one per architecture; the run ends where the sequential one (local backend) does, up to
    what float rounding does to 57 steps of SGD with momentum through ReLUs and max-pools.

    The bound: a cohort sums its batched products in another order, so its gradients differ from the
    sequential path's in the last bits. Where an activation lies within rounding of a ReLU's kink or
    a max-pool's tie, the two paths route a gradient differently, and momentum carries that on. This
    is not the cohort's doing: the sequential run alone, with its learning rate moved by 2 float32
    ulps, ends with LeNet-5's trained change (final - initial weights) 1.1e-2 apart (relative norm;
    1.2e-3 on the worst weight), and the cohorts end 2.8e-2 apart (this Zen 3; the MLP 3e-7, as
    no kink was crossed). So each architecture's trained change must agree within 0.1 of its norm.
    Cohorts that draw their clients' batches from other seeds (each task seed + 1) end 0.24 (MLP)
    and 0.27 (LeNet-5) apart. The unit tests in tests/test_cohort.py hold the cohort's arithmetic to
    1e-6 on short runs."""
    config = small_config(runtime={"vectorize": True, "clients_per_actor": "auto"})
    summary = run_experiment(config, tmp_path / "vec", progress=False)
    assert summary["executor"]["vectorize"] == "cohorts"
    sequential = small_config(runtime={"backend": "local"})
    run_experiment(sequential, tmp_path / "seq", progress=False)
    initial = Federation(assemble(sequential), tmp_path / "init", checkpoints=False).strategy.models
    models = [read_checkpoint(tmp_path / run / CHECKPOINT)["strategy"]["models"] for run in ("vec", "seq")]
    for arch, weights in models[1].items():
        names = sorted(weights)
        trained = [np.concatenate([(m[arch][n].astype(np.float64) - initial[arch][n]).ravel() for n in names])
                   for m in models]
        assert np.linalg.norm(trained[0] - trained[1]) <= 0.1 * np.linalg.norm(trained[1]), arch
    # a 1e-2 relative change of the weights moves a few of the 2,000 test predictions (0.0005 each)
    accuracy = [read_scalars(tmp_path / run)["eval/accuracy"] for run in ("vec", "seq")]
    assert [v for _, v in accuracy[0]] == pytest.approx([v for _, v in accuracy[1]], abs=0.01)
    assert accuracy[0][-1][1] > 0.70


def test_folded_sums_do_not_depend_on_which_actor_ran_which_client(local_ray, tmp_path):
    """FedAvg with clients_per_actor auto: any free actor takes the next fold group, and the hosts'
    answers come in whatever order; the server adds the groups' sums in group order. Four actors
    and the local backend (one host, every group in turn) end with the same models, to the last bit."""
    def models(path, **runtime):
        config = small_config(federation={"rounds": 2}, runtime={"clients_per_actor": "auto", "fold_groups": 4, **runtime})
        local = runtime.get("backend") == "local"
        fed = Federation(assemble(config, LocalExecutor if local else RayExecutor), path, checkpoints=False)
        while not fed.done:
            fed.run_round()
        assert collects(fed.strategy) == "fold"
        out = {arch: dict(w) for arch, w in fed.strategy.models.items()}
        fed.finish()
        return out, fed

    four, fed = models(tmp_path / "four", actor_cpus=0.5)
    assert len(fed.executor.actors) == 4 and fed.history[-1]["runtime/bytes_to_server"] > 0
    local, _ = models(tmp_path / "local", backend="local", torch_threads=1)  # as many threads as an actor
    for arch in four:
        for name, value in four[arch].items():
            np.testing.assert_array_equal(value, local[arch][name])
