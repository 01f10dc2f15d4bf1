"""Clustered FL end to end on Ray: the ParameterTreeActor, label-permuted groups, TensorBoard."""

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fedray.runner import run_experiment
from fedray.config import build_config
from fedray.tracking import read_scalars
from fedray.checkpoint import CHECKPOINT, read_checkpoint

pytestmark = pytest.mark.integration


def permuted(algorithm, backend="ray"):
    """Fig. 6.8's setting, scaled: 20 clients in 4 groups, each group with its own label permutation."""
    return build_config({
        "name": f"cfl-it-{algorithm['name']}",
        "data": {"dataset": "fashion_mnist", "train_limit": 6000, "test_limit": 2000,
                 "groups": 4, "group_shift": "label_permutation"},
        "federation": {"num_clients": 20, "clients_per_round": 20, "rounds": 22, "eval_every": 11,
                       "architectures": {"mlp": 20}},
        "training": {"lr": 0.05, "batch_size": 32, "epochs": 3},
        "algorithm": algorithm,
        "runtime": {"backend": backend, "torch_threads": 1},
    })


def test_cfl_separates_four_permuted_groups_and_beats_fedavg(local_ray, tmp_path):
    cfl = run_experiment(permuted({"name": "cfl", "eps1_fraction": 0.25, "eps2_factor": 3}), tmp_path / "cfl",
                         progress=False)
    fedavg = run_experiment(permuted({"name": "fedavg"}, backend="local"), tmp_path / "fedavg", progress=False)
    assert cfl["tree_host"] == "ParameterTreeActor"
    # groups are contiguous blocks of 5 clients: every group is exactly one cluster
    assert sorted(cfl["clusters"].values()) == [list(range(g * 5, g * 5 + 5)) for g in range(4)]
    # FedAvg cannot fit four labelings with one model; each cluster fits its own
    assert fedavg["final"]["eval/accuracy"] < 0.45
    assert cfl["final"]["eval/accuracy"] > fedavg["final"]["eval/accuracy"] + 0.3
    scalars = read_scalars(tmp_path / "cfl")
    counts = [v for _, v in scalars["cfl/clusters"]]
    assert counts[0] == 1 and counts[-1] == 4 and counts == sorted(counts)
    assert "cfl/cluster0/alpha_cross" in scalars and "eval/accuracy/cluster1" in scalars
    # the tree is checkpointed with the run: the same clusters come back from the checkpoint
    tree = read_checkpoint(tmp_path / "cfl" / CHECKPOINT)["strategy"]["tree"]["nodes"]
    leaves = sorted(n.clients for n in tree.values() if not n.children)
    assert leaves == sorted(cfl["clusters"].values())
    assert json.loads((tmp_path / "cfl" / "result.json").read_text())["clusters"] == cfl["clusters"]
    # the tree is drawn (image and text) when the run starts and after each of the 3 splits
    acc = EventAccumulator(str(tmp_path / "cfl"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Images("cfl/tree_figure")] == [s for s, v in scalars["cfl/clusters"]
                                                               if s == 1 or v != dict(scalars["cfl/clusters"]).get(s - 1)]
    text = acc.Tensors("cfl/tree/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert text.count("clients active") == 4
