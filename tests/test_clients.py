"""ClientHost: home clients keep data and state; visitors are served only for stateless methods."""

import threading

import numpy as np
import pytest
import torch

from fedray.clients import ClientHost, client_major
from fedray.config import build_config
from fedray.messages import ClientFailure, ClientSpec, ClientTask
from fedray.methods.base import Client, task_seed
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import cap_gpu_memory, combine_parts, evaluate, gpu_memory_note, set_torch_threads
from fedray.weights import get_weights, set_weights


@pytest.fixture
def host_and_task():
    config = build_config({"federation": {"num_clients": 2, "clients_per_round": 1, "architectures": {"logreg": 2}},
                           "data": {"dataset": "iris"}, "runtime": {"torch_threads": 1}})
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    specs = [ClientSpec(0, "logreg", np.arange(10)), ClientSpec(1, "logreg", np.arange(10, 20))]
    torch.manual_seed(0)
    weights = get_weights(create_model("logreg", (4,), 3))
    host = ClientHost(config, resolve(config), specs, x, y, num_classes=3, home=[0])
    task = ClientTask(1, 1, "logreg", ("model/logreg",), task_seed(0, 1, 1))
    return host, task, weights, (x, y)


def test_home_clients_hold_their_shard(host_and_task):
    host, _, _, (x, _) = host_and_task
    assert host.hosted() == [0]
    assert torch.equal(host.clients[0].x, torch.from_numpy(x[:10]))


def test_visitor_of_a_stateless_method_trains_on_its_own_shard(host_and_task):
    host, task, weights, _ = host_and_task
    update = host.run(task, weights)
    assert update.client_id == 1 and update.num_samples == 10
    assert 1 not in host.client_states()  # nothing of the visitor stays behind
    config = host.client_half.config
    home = ClientHost(config, resolve(config), list(host.specs.values()), host.train_x, host.train_y, 3, home=[1])
    again = home.run(task, weights)  # the same task on the client's home host: the same result
    for name in update.payload:
        np.testing.assert_array_equal(update.payload[name], again.payload[name])


def test_visitor_of_a_stateful_method_is_refused(host_and_task, monkeypatch):
    host, task, weights, _ = host_and_task
    monkeypatch.setattr(host.client_half, "at_home", True)  # this run's answer (Method.keeps_state)
    with pytest.raises(ClientFailure, match="client 1 failed in round 1 during dispatch: client is not hosted here"):
        host.run(task, weights)


def test_a_failing_client_names_itself_its_round_and_stage(host_and_task):
    host, task, _, _ = host_and_task
    wrong = get_weights(create_model("logreg", (4,), 5))  # a model for 5 classes, not 3
    with pytest.raises(ClientFailure, match=r"client 1 failed in round 1 during local training: RuntimeError"):
        host.run(task, wrong)


def test_client_major_layout_makes_each_shard_a_zero_copy_slice(host_and_task):
    host, task, weights, (x, y) = host_and_task
    specs = [ClientSpec(0, "logreg", np.array([3, 7, 11])), ClientSpec(1, "logreg", np.array([0, 19]))]
    cx, cy, spans = client_major(x, y, specs)
    assert spans == {0: (0, 3), 1: (3, 5)}
    np.testing.assert_array_equal(cx, x[[3, 7, 11, 0, 19]])
    np.testing.assert_array_equal(cy, y[[3, 7, 11, 0, 19]])
    cx.flags.writeable = False  # as Ray's object store hands it out
    config = host.client_half.config
    laid_out = ClientHost(config, resolve(config), specs, cx, cy, 3, spans=spans)
    shard = laid_out.clients[1].x
    assert shard.data_ptr() == cx[3:5].__array_interface__["data"][0]  # a view, not a copy
    assert torch.equal(shard, torch.from_numpy(x[[0, 19]]))
    # overlapping shards (a pooled baseline) keep the data as it is, and the indices
    pooled = [ClientSpec(0, "logreg", np.arange(20)), ClientSpec(1, "logreg", np.arange(20))]
    same_x, _, none = client_major(x, y, pooled)
    assert none is None and same_x is x


def test_a_batch_of_tasks_equals_the_tasks_one_by_one(host_and_task):
    host, task, weights, _ = host_and_task
    home = ClientTask(0, 1, "logreg", ("model/logreg",), task_seed(0, 1, 0))
    batch = host.run_batch([home, task], ["model/logreg"], weights)
    single = [host.run(t, weights) for t in (home, task)]
    assert [u.client_id for u in batch] == [0, 1]
    for a, b in zip(batch, single):
        for name in a.payload:
            np.testing.assert_array_equal(a.payload[name], b.payload[name])


def test_gpu_caps_are_no_ops_on_the_cpu():
    cap_gpu_memory(torch.device("cpu"), 0.25)  # must not touch CUDA
    assert gpu_memory_note(RuntimeError("x"), torch.device("cpu"), 0.25, "runtime.actor_gpus") == ""


@pytest.mark.parametrize("setter", [set_torch_threads, pytest.param(torch.set_num_threads, marks=pytest.mark.xfail(
    strict=True, reason="torch's own setter: the count is lost to the other thread's"))])
def test_a_thread_keeps_the_torch_threads_it_set_when_another_thread_sets_its_own(setter):
    """The ServerActor's round thread (2 threads) beside its host thread (1): each keeps its own."""
    before, seen = torch.get_num_threads(), {}
    first_set, second_set = threading.Event(), threading.Event()

    def server():
        setter(2)
        first_set.set()
        second_set.wait()
        seen["server"] = torch.get_num_threads()

    def host():
        first_set.wait()
        setter(1)
        second_set.set()
        seen["host"] = torch.get_num_threads()

    threads = [threading.Thread(target=server), threading.Thread(target=host)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.set_num_threads(before)  # the process-wide default, for threads started later
    assert seen == {"server": 2, "host": 1}


def test_an_evaluation_in_runs_of_batches_adds_up_to_one_pass(host_and_task):
    """Runs of consecutive batches (one of them empty), added in batch order, give the single pass
    to the last bit; the host evaluates its run on its own model, fetching the test set once."""
    host, _, weights, _ = host_and_task
    rng = np.random.default_rng(1)
    tx, ty = rng.normal(size=(23, 4)).astype(np.float32), rng.integers(0, 3, 23)  # 6 batches of 4, the last of 3
    model = create_model("logreg", (4,), 3)
    set_weights(model, weights)
    single = evaluate(model, torch.from_numpy(tx), torch.from_numpy(ty), 4, 3)
    fetched = []

    def test_set():
        fetched.append(1)
        return tx, ty

    parts = [host.evaluate_part("logreg", weights, 0, test_set, first, stop, 4, 3) for first, stop in ((0, 2), (2, 2), (2, 6))]
    assert [len(p.losses) for p in parts] == [2, 0, 4] and len(fetched) == 1
    spread = combine_parts(parts, torch.from_numpy(ty), 3)
    assert spread["accuracy"] == single["accuracy"] and spread["loss"] == single["loss"]
    np.testing.assert_array_equal(spread["class_correct"], single["class_correct"])
    np.testing.assert_array_equal(spread["class_total"], np.bincount(ty, minlength=3))
