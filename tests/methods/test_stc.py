"""STC for federated learning (thesis Alg. 7): server step by hand, residuals, downloads, bits, and
the decoded updates folded where the clients are."""

import numpy as np
import pytest
import torch

from fedray.assembly import assemble
from fedray.compression import CodedUpdate, compress_update, decode_update, encode_tensor
from fedray.config import build_config
from fedray.federation import Federation
from fedray.messages import ClientFailure, ClientSpec, ClientUpdate
from fedray.weights import weighted_mean
from tests.support import aggregate, collects, make_strategy


class Line(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))


def server(**params):
    config = build_config({"federation": {"num_clients": 2, "clients_per_round": 2, "architectures": {"mlp": 2}},
                           "algorithm": {"name": "stc", **params}})
    specs = [ClientSpec(i, "mlp", np.arange(3)) for i in range(2)]
    return make_strategy(config, specs, lambda arch: Line())


def upload(cid, values):
    payload = CodedUpdate({"w": encode_tensor("stc", np.array(values, np.float32))})
    return ClientUpdate(cid, "mlp", 3, payload, len(payload.tensors["w"]), {"loss": 0.0})


def test_server_step_eqs_4_6_to_4_8_by_hand():
    s = server(p_down=0.5)
    aggregate(s, 1, [upload(0, [1, 0, 0, -1]), upload(1, [0, 0, 3, -3])])
    # mean = [0.5, 0, 1.5, -2]; R = 0; STC, k = 2: top-2 |.| = {2, 1.5}, mu = 1.75 where |x| >= 1.5
    np.testing.assert_array_equal(s.models["mlp"]["w"], [0, 0, 1.75, -1.75])
    np.testing.assert_array_equal(s.residual["mlp"]["w"], [0.5, 0, -0.25, -0.25])
    aggregate(s, 2, [upload(0, [0, 0, 0, 0]), upload(1, [0, 2, 0, 0])])
    # dtheta = R + mean = [0.5, 1, -0.25, -0.25]; top-2 = {1, 0.5}, mu = 0.75 where |x| >= 0.5
    np.testing.assert_array_equal(s.models["mlp"]["w"], [0.75, 0.75, 1.75, -1.75])
    np.testing.assert_array_equal(s.residual["mlp"]["w"], [-0.25, 0.25, -0.25, -0.25])
    assert set(s.cache.updates["mlp"]) == {1, 2}


def test_server_without_residual_drops_the_error():
    s = server(p_down=0.5, server_residual=False)
    aggregate(s, 1, [upload(0, [1, 0, 0, -1]), upload(1, [0, 0, 3, -3])])
    assert s.residual == {}


def digits(rounds, **params):
    return build_config({
        "data": {"dataset": "digits"}, "checkpoint_every": 2,
        "federation": {"num_clients": 6, "clients_per_round": 2, "rounds": rounds, "architectures": {"mlp": 6}},
        "training": {"lr": 0.1, "batch_size": 16, "steps": 2},
        "algorithm": {"name": "stc", "p_up": 0.05, "p_down": 0.05, **params},
        "runtime": {"backend": "local", "torch_threads": 1}})


def test_without_compression_it_is_fedavg(tmp_path):
    def final(name, **params):
        tree = digits(6).to_dict()
        tree["algorithm"] = {"name": name, **params}
        fed = Federation(assemble(build_config(tree)), tmp_path / name)
        for _ in range(6):
            fed.run_round()
        return fed.strategy.models["mlp"]
    a, b = final("fedavg"), final("stc", up="none", down="none")
    for name in a:  # theta + mean(theta_i - theta) == mean(theta_i) up to float rounding
        np.testing.assert_allclose(a[name], b[name], atol=1e-6)


def test_residuals_survive_skipped_rounds_and_resume(tmp_path):
    fed = Federation(assemble(digits(8)), tmp_path / "a")
    seen = {}
    for _ in range(8):
        plan_clients = {c.client_id for c in fed.strategy.sample_clients(fed.round + 1)}
        before = {cid: {k: v.copy() for k, v in st.get("residual", {}).items()}
                  for cid, st in fed.executor.client_states().items()}
        fed.run_round()
        for cid, state in fed.executor.client_states().items():
            if cid not in plan_clients and before[cid]:  # sat out: residual untouched
                for k, v in state["residual"].items():
                    np.testing.assert_array_equal(v, before[cid][k])
                seen[cid] = True
    assert seen, "some client with a residual must have skipped a round"
    whole = fed.strategy.models["mlp"]
    part = Federation(assemble(digits(4)), tmp_path / "b")
    for _ in range(4):
        part.run_round()
    resumed = Federation(assemble(digits(8)), tmp_path / "b", resume=True)
    for _ in range(4):
        resumed.run_round()
    for name in whole:
        np.testing.assert_array_equal(whole[name], resumed.strategy.models["mlp"][name])
    for cid, state in fed.executor.client_states().items():
        other = resumed.executor.client_states()[cid]
        for k, v in state.get("residual", {}).items():
            np.testing.assert_array_equal(v, other["residual"][k])


def test_missed_rounds_are_downloaded_as_cached_updates_or_the_model(tmp_path):
    fed = Federation(assemble(digits(6)), tmp_path)
    for _ in range(5):
        fed.run_round()
    s = fed.strategy
    cid = next(c.client_id for c in fed.experiment.clients if s.cache.last_synced(c.client_id) < 4)
    downloads = s._downloads(cid, "mlp", 6)
    missed = range(s.cache.last_synced(cid) + 1, 6)
    assert list(downloads) == [f"delta/mlp/{r}" for r in missed]  # sparse updates are far cheaper than the model
    assert [d for d in downloads.values()] == [s.cache.updates["mlp"][r] for r in missed]
    s.cache.updates["mlp"].clear()
    assert list(s._downloads(cid, "mlp", 6)) == ["model/mlp"]


def test_a_client_out_of_sync_is_caught(tmp_path):
    fed = Federation(assemble(digits(3)), tmp_path)
    fed.run_round()
    cid = next(iter(fed.strategy.cache.synced))
    theta = fed.executor.host.clients[cid].state["theta"]
    theta[next(iter(theta))] += 1.0
    fed.strategy.sample_clients = lambda r: [c for c in fed.experiment.clients if c.client_id == cid]
    with pytest.raises(ClientFailure, match="during download: OutOfSync: model copy is out of sync"):
        fed.run_round()


def test_fashion_mnist_learns_with_50x_fewer_upstream_bits_than_fedavg(tmp_path):
    def run(algorithm):
        config = build_config({
            "data": {"dataset": "fashion_mnist", "train_limit": 12000, "test_limit": 2000},
            "federation": {"num_clients": 20, "clients_per_round": 5, "rounds": 25,
                           "architectures": {"logreg": 20}, "eval_every": 25},
            "training": {"lr": 0.1, "batch_size": 20, "steps": 10},
            "algorithm": algorithm, "runtime": {"backend": "local", "torch_threads": 1}})
        fed = Federation(assemble(config), tmp_path / algorithm["name"])
        return [fed.run_round().metrics for _ in range(25)][-1]
    fedavg = run({"name": "fedavg"})
    compressed = run({"name": "stc", "p_up": 0.01, "p_down": 0.01})
    assert compressed["eval/accuracy"] > 0.70  # chance 0.10; same 25 x 10 local iterations as FedAvg
    assert fedavg["comm/bytes_up_total"] >= 50 * compressed["comm/bytes_up_total"]


def coded(cid, x, samples):
    """Client ``cid``'s STC upload of the update ``x`` (positions and a mean magnitude, Golomb coded)."""
    _, payload = compress_update({"w": x}, "stc", 0.25)
    return ClientUpdate(cid, "mlp", samples, CodedUpdate(payload), len(payload["w"]), {"loss": 0.0})


def test_the_hosts_fold_the_decoded_updates_and_the_server_step_reads_their_mean():
    """Eq. 4.6's mean_i dtheta~_i is all the server needs of the clients: each host decodes its
    clients' bitstreams and folds them (|D_i|-weighted here). Whole uploads gathered and summed in the server
    are the one-unit fold bit for bit; another split of the clients moves the sums by float64
    rounding only, and the model, theta + mean (``down: none``), by that over sum_i |D_i| and one
    float32 rounding of the mean."""
    from tests.methods.test_aggregation import Wide, fold_alike, spread, strategy, ulp

    k = 24
    updates = [coded(cid, x, 1 + cid % 5) for cid, x in enumerate(spread(k))]
    one, split, bound, moved = fold_alike(lambda: strategy("stc", k, Wide, weighted=True, down="none"), updates,
                                          lambda cid: cid % 4)
    assert moved  # the split does change the float64 sum's last bits here
    weight = sum(u.num_samples for u in updates)
    decoded = [decode_update(u.payload.tensors, {"w": (64,)})["w"] for u in updates]
    mean = weighted_mean([{"w": d} for d in decoded], [u.num_samples for u in updates])["w"]
    for s in (one, split):  # weighted_mean sums the coefficients' shares: another order again
        within = bound["mlp"]["update"]["w"] / weight + ulp(mean)
        assert np.all(np.abs(s.models["mlp"]["w"].astype(np.float64) - mean) <= within)
    assert one.cache.synced == split.cache.synced and len(one.cache.synced) == k
    assert collects(strategy("dgc", k, Wide)) == "fold"  # DGC's server and statistics are STC's


def test_folding_on_the_hosts_or_in_the_server_gives_the_same_bits(tmp_path):
    """``runtime.fold``: with fewer clients than fold groups each client is a unit of its own, so the
    hosts' sums are the server's, added in the same client-id order: the same runs to the last bit."""
    def final(fold):
        tree = digits(3).to_dict()
        tree["runtime"]["fold"] = fold
        fed = Federation(assemble(build_config(tree)), tmp_path / str(fold))
        for _ in range(3):
            fed.run_round()
        return fed.strategy

    folded, sent = final(True), final(False)
    for name, value in folded.models["mlp"].items():
        np.testing.assert_array_equal(value, sent.models["mlp"][name])
    for name, value in folded.residual["mlp"].items():
        np.testing.assert_array_equal(value, sent.residual["mlp"][name])
