"""training.lr_decay: a client trains at lr * gamma^(r' - 1), r' the round of its previous local
training (FedGen's code's rule), in a cohort as alone, and the rounds survive a resume."""

import dataclasses

import numpy as np
import pytest

from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.config import ConfigError, build_config
from fedray.observers import Observer
from fedray.resolve import resolve
from fedray.runner import run_experiment
from tests.test_cohort import SGD, assert_same, client_half, digits  # noqa: F401 (a fixture)
from tests.test_runner import local_config


class Tasks(Observer):
    """Every planned task's (round, client, lr_scale), as the clients get them (after fedray's observers)."""

    key = "tasks"

    def __init__(self):
        self.seen: list[tuple[int, int, float]] = []

    def planned(self, fed, round, plan):
        self.seen += [(round, t.client_id, t.lr_scale) for t in plan.tasks]

    def state_dict(self):
        return [list(s) for s in self.seen]

    def load_state_dict(self, state):
        self.seen = [tuple(s) for s in state]


def decayed(rounds: int, **training):
    return local_config(federation={"num_clients": 6, "clients_per_round": 3, "rounds": rounds,
                                    "architectures": {"mlp": 6}},
                        training={"lr": 0.1, "batch_size": 16, "lr_decay": 0.5, **training})


def test_each_task_gets_gamma_to_its_clients_previous_round(tmp_path):
    tasks = Tasks()
    run_experiment(decayed(5), tmp_path, progress=False, observers=[tasks])
    last: dict[int, int] = {}
    for rnd, client, scale in tasks.seen:  # the rule, from the clients each round drew
        assert scale == 0.5 ** (last[client] - 1 if client in last else 0), (rnd, client)
        last[client] = rnd
    assert {s for *_, s in tasks.seen} > {1.0}  # some client came back after round 1: a decayed lr was used
    assert read_checkpoint(tmp_path / CHECKPOINT)["lr_decay"].tolist() == [last.get(c, 0) for c in range(6)]


def test_a_resumed_run_goes_on_with_the_same_rates_to_the_last_bit(tmp_path):
    whole = run_experiment(decayed(5), tmp_path / "whole", progress=False)
    run_experiment(decayed(2), tmp_path / "parts", progress=False)
    resumed = run_experiment(decayed(5), tmp_path / "parts", resume=True, progress=False)
    assert resumed["final"] == whole["final"]
    assert (read_checkpoint(tmp_path / "parts" / CHECKPOINT)["lr_decay"].tolist()
            == read_checkpoint(tmp_path / "whole" / CHECKPOINT)["lr_decay"].tolist())
    plain = run_experiment(decayed(5, lr_decay=1.0), tmp_path / "plain", progress=False)
    assert plain["final"] != whole["final"]  # the decay changed the run


def test_a_task_trains_at_its_scaled_lr_alone_and_in_a_cohort(digits):  # noqa: F811
    algo, tasks, thetas, clients = client_half("fedavg", digits)
    scaled = [dataclasses.replace(t, lr_scale=s) for t, s in zip(tasks, (1.0, 0.5, 0.25, 0.5))]
    alone = [algo.train(t, theta, c) for t, theta, c in zip(scaled, thetas, clients)]
    # the same as a config whose lr is already scaled: bit for bit
    plain = client_half("fedavg", digits)[0]
    for task, theta, client, got in zip(scaled, thetas, clients, alone):
        plain.config = plain.config.model_copy(update={"training": SGD.model_copy(update={"lr": SGD.lr * task.lr_scale})})
        want = plain.train(dataclasses.replace(task, lr_scale=1.0), theta, client)
        assert all(np.array_equal(want.weights[k], got.weights[k]) for k in want.weights)
    full = algo.train(tasks[1], thetas[1], clients[1]).weights  # at the unscaled lr the client goes elsewhere
    assert max(float(np.abs(full[k] - alone[1].weights[k]).max()) for k in full) > 1e-3
    together = algo.train_cohort(scaled, thetas, clients)  # one cohort per rate, results in task order
    assert_same([(a.weights, a.metrics) for a in alone], [(v.weights, v.metrics) for v in together])


def test_dsgd_refuses_a_decay_it_could_not_apply():
    config = build_config({"data": {"dataset": "digits"}, "algorithm": {"name": "dsgd"},
                           "federation": {"num_clients": 4, "clients_per_round": 4, "architectures": {"mlp": 4}},
                           "training": {"lr_decay": 0.99}})
    with pytest.raises(ConfigError, match=r"training.lr_decay = 0.99: dsgd's clients send one gradient"):
        resolve(config)
    with pytest.raises(ConfigError, match="lr_decay"):
        build_config({"training": {"lr_decay": 1.5}})
