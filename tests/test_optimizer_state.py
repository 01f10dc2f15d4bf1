"""training.optimizer_state and distill.optimizer_state: ``keep`` carries an optimiser's state (Adam's
moments and step counts) from one training to the next, through a checkpoint too, as one optimiser
stepping through both would; ``fresh`` (the default) starts anew each time."""

import numpy as np
import pytest
import torch

from fedray.assembly import assemble
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.config import ConfigError, TrainingConfig, build_config
from fedray.datafile import read_file, write_file
from fedray.federation import Federation
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.training import local_train, make_optimizer, optimizer_state
from fedray.weights import get_weights, set_weights
from tests.test_federation import digits as digits_config, run

ADAM = TrainingConfig(optimizer="adam", lr=0.01, batch_size=16, epochs=1)


@pytest.fixture(scope="module")
def data():
    from fedray.data import load_dataset

    d = load_dataset("digits")
    return torch.from_numpy(d.train_x[:80]), torch.from_numpy(d.train_y[:80])


def trained_twice(data, start, tmp_path=None, kept=True, lr2=ADAM.lr):
    """The model after two local trainings from ``start`` (batch orders 1 and 2); with ``tmp_path``,
    the first optimiser's state goes through a data file on its way to the second."""
    x, y = data
    model = create_model("mlp", tuple(x.shape[1:]), 10)
    set_weights(model, start)
    first = make_optimizer(model, ADAM)
    local_train(model, x, y, ADAM, torch.Generator().manual_seed(1), optimizer=first)
    cfg = ADAM.model_copy(update={"lr": lr2})
    if tmp_path is None:  # one optimiser for both
        second = first
    else:
        state = optimizer_state(first) if kept else None
        if state is not None:
            write_file(tmp_path / "state", b"TEST\n", {}, state, "the state")
            state = read_file(tmp_path / "state", b"TEST\n")[1]
        second = make_optimizer(model, cfg, state=state)
    local_train(model, x, y, cfg, torch.Generator().manual_seed(2), optimizer=second)
    return get_weights(model), second


def test_a_kept_state_goes_on_as_one_optimizer_would_to_the_last_bit(data, tmp_path):
    torch.manual_seed(0)
    start = get_weights(create_model("mlp", tuple(data[0].shape[1:]), 10))
    one, opt = trained_twice(data, start)
    kept, _ = trained_twice(data, start, tmp_path)
    assert all(np.array_equal(one[k], kept[k]) for k in one)
    steps = 2 * int(np.ceil(len(data[0]) / ADAM.batch_size))
    assert all(float(s["step"]) == steps for s in opt.state.values())  # Adam's bias correction counts both
    fresh, _ = trained_twice(data, start, tmp_path, kept=False)  # Adam's first steps again: elsewhere
    assert max(float(np.abs(fresh[k] - one[k]).max()) for k in one) > 1e-4


def test_a_kept_state_takes_the_new_learning_rate(data, tmp_path):
    torch.manual_seed(0)
    start = get_weights(create_model("mlp", tuple(data[0].shape[1:]), 10))
    _, second = trained_twice(data, start, tmp_path, lr2=0.002)
    assert [g["lr"] for g in second.param_groups] == [0.002]  # from the config, not the saved state


def keep_config(algorithm, rounds, distill=None):
    config = digits_config(algorithm, rounds, checkpoint_every=2,
                           training={"optimizer": "adam", "lr": 0.01, "optimizer_state": "keep"},
                           **({"aux": {"size": 200}} if distill else {}))
    return build_config({**config.to_dict(), "algorithm": {"name": algorithm, "distill": distill}}) if distill else config


def test_each_client_keeps_its_adam_across_rounds_and_a_resume(tmp_path):
    config = keep_config("fedavg", 4)
    whole, _ = run(config, tmp_path / "a")
    trainings = {}  # client -> local trainings over the 4 rounds
    for rnd in range(1, 5):
        for spec in whole.strategy.sample_clients(rnd):
            trainings[spec.client_id] = trainings.get(spec.client_id, 0) + 1
    states = whole.executor.client_states()
    for spec in whole.strategy.ctx.clients:
        cid = spec.client_id
        steps = int(np.ceil(spec.num_samples / 16))
        if cid in trainings:  # every step of every training this client made, on one Adam
            assert {float(s["step"]) for s in states[cid]["optimizer"].values()} == {trainings[cid] * steps}
        else:
            assert "optimizer" not in states[cid]
    assert max(trainings.values()) > 1  # some client came back: its second training went on from the first
    part, _ = run(config, tmp_path / "b", rounds=2)
    part.finish()
    saved = read_checkpoint(tmp_path / "b" / CHECKPOINT)["clients"]
    assert {cid for cid, state in saved.items() if "optimizer" in state} == {
        s.client_id for rnd in (1, 2) for s in part.strategy.sample_clients(rnd)}
    resumed = Federation(assemble(config), tmp_path / "b", resume=True)
    resumed.run_round(), resumed.run_round()
    for name, value in whole.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, resumed.strategy.models["mlp"][name])
    fresh, _ = run(digits_config("fedavg", 4, training={"optimizer": "adam", "lr": 0.01}), tmp_path / "c")
    assert max(float(np.abs(fresh.strategy.models["mlp"][k] - v).max()) for k, v in whole.strategy.models["mlp"].items()) > 1e-4


def test_the_server_keeps_each_students_adam_across_rounds_and_a_resume(tmp_path):
    config = keep_config("feddf", 4, distill={"steps": 5, "optimizer_state": "keep"})
    whole, _ = run(config, tmp_path / "a")
    assert {float(s["step"]) for s in whole.strategy.distill_optimizers["mlp"].values()} == {4 * 5}
    part, _ = run(config, tmp_path / "b", rounds=2)
    part.finish()
    saved = read_checkpoint(tmp_path / "b" / CHECKPOINT)["strategy"]["distill_optimizers"]["mlp"]
    assert {float(s["step"]) for s in saved.values()} == {2 * 5}
    resumed = Federation(assemble(config), tmp_path / "b", resume=True)
    resumed.run_round(), resumed.run_round()
    for name, value in whole.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, resumed.strategy.models["mlp"][name])


def test_keep_is_refused_where_there_is_no_own_optimizer_to_keep():
    with pytest.raises(ConfigError, match="runtime.vectorize: false"):
        digits_config("fedavg", 2, training={"optimizer_state": "keep"}, runtime={"vectorize": True})
    with pytest.raises(ConfigError, match="dsgd's clients send a gradient"):
        resolve(digits_config("dsgd", 2, training={"optimizer_state": "keep"}))
    assert resolve(digits_config("fedprox", 2, training={"optimizer_state": "keep"})).keeps_state(
        digits_config("fedprox", 2, training={"optimizer_state": "keep"}))
    assert not resolve(digits_config("fedprox", 2)).keeps_state(digits_config("fedprox", 2))
