"""signSGD with majority vote: the server step by hand, eq. 4.10 downloads, learning, resume."""

import numpy as np
import torch

from fedray.assembly import assemble
from fedray.compression import CodedUpdate, decode_tensor, encode_tensor, golomb
from fedray.config import build_config
from fedray.federation import Federation
from fedray.messages import ClientSpec, ClientUpdate
from fedray.methods.signsgd import VoteTotal
from tests.support import aggregate, make_strategy


class Line(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))


def test_majority_vote_step_by_hand():
    config = build_config({"federation": {"num_clients": 3, "clients_per_round": 3, "architectures": {"mlp": 3}},
                           "algorithm": {"name": "signsgd", "step": 0.5}})
    specs = [ClientSpec(i, "mlp", np.arange(2)) for i in range(3)]
    s = make_strategy(config, specs, lambda arch: Line())
    def up(cid, signs):
        payload = CodedUpdate({"w": encode_tensor("sign", np.array(signs, np.float32))})
        return ClientUpdate(cid, "mlp", 2, payload, len(payload.tensors["w"]), {"loss": 0.0})
    aggregate(s, 1, [up(0, [1, 1, -1, -1]), up(1, [1, -1, -1, 1]), up(2, [-1, -1, -1, 1])])
    np.testing.assert_array_equal(s.votes["mlp"]["w"], [1, -1, -1, 1])
    np.testing.assert_array_equal(s.models["mlp"]["w"], [0.5, -0.5, -0.5, 0.5])  # theta^0 = 0, delta = 0.5
    aggregate(s, 2, [up(0, [1, 1, 1, 1]), up(1, [1, 1, 1, -1]), up(2, [1, -1, 1, -1])])
    np.testing.assert_array_equal(s.votes["mlp"]["w"], [2, 0, 0, 0])
    # client 0 holds theta^1 and missed round 2's vote: values in [-1, 1], cheaper than S in [-2, 2]
    keys = s._download(0, "mlp", 3, candidates := {})
    assert keys == ("votes/mlp/1",)
    assert isinstance(candidates[keys[0]], CodedUpdate)  # added to the client's sum
    np.testing.assert_array_equal(decode_tensor(candidates[keys[0]].tensors["w"], (4,)), [1, 1, 1, -1])
    s.cache.synced.pop(0)  # a client holding theta^0: the partial sum is S itself, sent as S
    keys = s._download(0, "mlp", 3, candidates := {})
    assert keys == ("state/mlp",) and isinstance(candidates[keys[0]], VoteTotal)  # replaces the client's sum
    np.testing.assert_array_equal(decode_tensor(candidates[keys[0]].tensors["w"], (4,)), [2, 0, 0, 0])


def digits(rounds):
    return build_config({
        "data": {"dataset": "digits"}, "checkpoint_every": 3,
        "federation": {"num_clients": 10, "clients_per_round": 5, "rounds": rounds, "architectures": {"mlp": 10},
                       "eval_every": rounds},
        "training": {"lr": 0.1, "batch_size": 16, "steps": 1},
        "algorithm": {"name": "signsgd", "step": 0.003}, "runtime": {"backend": "local", "torch_threads": 1}})


def test_learns_and_downloads_cost_log2_2s_plus_1_bits(tmp_path):
    fed = Federation(assemble(digits(60)), tmp_path)
    results = [fed.run_round() for _ in range(60)]
    assert results[-1].metrics["eval/accuracy"] > 0.90  # measured 0.95; chance 0.10
    plan = fed.strategy.configure_round(61)
    numel = sum(v.size for v in fed.strategy.votes["mlp"].values())
    partial_sums = 0
    for task in plan.tasks:
        if task.payload_keys and not isinstance(plan.broadcast[task.payload_keys[0]], VoteTotal):
            partial_sums += 1
            missed = 61 - 1 - fed.strategy.cache.last_synced(task.client_id)
            payload = plan.broadcast[task.payload_keys[0]].tensors
            body_bits = 8 * sum(len(b) - golomb._HEADER.size for b in payload.values())
            width = body_bits / numel
            bound = 1 if missed == 1 else np.ceil(np.log2(2 * missed + 1))  # eq. 4.10; a single vote is 1 bit
            assert width <= bound + 0.01
    assert partial_sums > 0


def test_resume_matches_uninterrupted_run(tmp_path):
    whole = Federation(assemble(digits(6)), tmp_path / "a")
    for _ in range(6):
        whole.run_round()
    part = Federation(assemble(digits(3)), tmp_path / "b")
    for _ in range(3):
        part.run_round()
    resumed = Federation(assemble(digits(6)), tmp_path / "b", resume=True)
    for _ in range(3):
        resumed.run_round()
    for name, value in whole.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, resumed.strategy.models["mlp"][name])


def test_the_vote_folds_on_the_hosts_exactly_in_any_split():
    """The majority vote from sum_i sign(dtheta_i) folded on the hosts: a sum of +-1 is exact in
    float64, so every split of the clients into fold units gives the server's vote bit for bit."""
    from tests.methods.test_aggregation import Wide, assert_same_state, fold_alike, strategy

    k = 40  # even: some entries tie, and a tie votes +1
    rng = np.random.default_rng(0)
    signs = np.where(rng.random((k, 64)) < 0.5, 1.0, -1.0).astype(np.float32)
    signs[:, 0] = [1.0, -1.0] * (k // 2)
    updates = []
    for cid, s in enumerate(signs):
        payload = CodedUpdate({"w": encode_tensor("sign", s)})
        updates.append(ClientUpdate(cid, "mlp", 2, payload, len(payload.tensors["w"]), {"loss": 0.0}))
    for unit in (lambda cid: cid * 7 // k, lambda cid: cid):
        one, split, _, moved = fold_alike(lambda: strategy("signsgd", k, Wide, step=0.5), updates, unit)
        assert not moved
        assert_same_state(split, one)
    total = signs.astype(np.int64).sum(axis=0)
    np.testing.assert_array_equal(one.votes["mlp"]["w"], np.where(total >= 0, 1, -1))
    assert one.votes["mlp"]["w"][0] == 1  # the tie
    np.testing.assert_array_equal(one.models["mlp"]["w"], 0.5 * np.where(total >= 0, 1, -1).astype(np.float32))
    assert sorted(one.cache.synced) == list(range(k))  # the catch-up cache reads the ids off the bare updates
    np.testing.assert_array_equal(one.cache.updates["mlp"][1]["w"], one.votes["mlp"]["w"])
