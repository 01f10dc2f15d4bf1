"""DGC: momentum correction and factor masking on top of top-k with accumulation."""

import numpy as np

from fedray.assembly import assemble
from fedray.config import build_config
from fedray.federation import Federation


def digits(algorithm, rounds=8):
    return build_config({
        "data": {"dataset": "digits"},
        "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": rounds, "architectures": {"mlp": 4},
                       "eval_every": rounds},
        "training": {"lr": 0.1, "batch_size": 16, "steps": 1},
        "algorithm": algorithm, "runtime": {"backend": "local", "torch_threads": 1}})


def run(config, path):
    fed = Federation(assemble(config), path)
    last = [fed.run_round() for _ in range(config.federation.rounds)][-1]
    return fed, last


def test_without_momentum_dgc_is_top_k_with_residuals(tmp_path):
    dgc, _ = run(digits({"name": "dgc", "p_up": 0.01, "dgc_momentum": 0.0}), tmp_path / "a")
    topk, _ = run(digits({"name": "stc", "up": "topk", "p_up": 0.01, "down": "none"}), tmp_path / "b")
    for name, value in dgc.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, topk.strategy.models["mlp"][name])


def test_factor_masking_clears_what_was_sent(tmp_path):
    fed, _ = run(digits({"name": "dgc", "p_up": 0.05}, rounds=3), tmp_path)
    for cid, state in fed.executor.client_states().items():
        for name, v in state["v"].items():
            u = state["u"][name]
            k = max(int(np.floor(v.size * 0.05)), 1)
            assert np.count_nonzero(v == 0) >= k and np.all(u[v == 0] == 0)  # masked where sent
            assert np.count_nonzero(v) > 0


def test_momentum_correction_learns_faster_here(tmp_path):
    _, with_m = run(digits({"name": "dgc", "p_up": 0.01}, rounds=40), tmp_path / "m")
    _, without = run(digits({"name": "dgc", "p_up": 0.01, "dgc_momentum": 0.0}, rounds=40), tmp_path / "n")
    assert with_m.metrics["eval/accuracy"] > without.metrics["eval/accuracy"] + 0.03


def test_warmup_schedule_and_clipping_by_hand():
    from fedray.methods.dgc import clip, warmup_density

    # 8 warm-up rounds: two rounds per quarter at 25%, 6.25%, 1.5625%, 0.390625%, then p
    assert [warmup_density(0.001, r, 8) for r in range(1, 10)] == \
        [0.25, 0.25, 0.0625, 0.0625, 0.015625, 0.015625, 0.00390625, 0.00390625, 0.001]
    assert warmup_density(0.1, 7, 8) == 0.1  # never sparser than the target
    update = {"a": np.array([3.0, 0.0], np.float32), "b": np.array([4.0], np.float32)}  # norm 5
    clipped = clip(update, 2.5)
    np.testing.assert_allclose(clipped["a"], [1.5, 0.0]) and np.testing.assert_allclose(clipped["b"], [2.0])
    assert clip(update, 6.0) is update


def test_warmup_sends_denser_updates_first(tmp_path):
    config = digits({"name": "dgc", "p_up": 0.001, "warmup_rounds": 4, "clip_norm": 1.0}, rounds=6)
    fed = Federation(assemble(config), tmp_path)
    up = [fed.run_round().metrics["comm/bytes_up"] for _ in range(6)]
    assert up[0] > 4 * up[2] > 0 and up[4] < up[2]  # 25% of the entries, then 1.56%, then 0.1%
