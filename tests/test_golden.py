"""Every method's results stay bit-identical through refactors of the runtime.

The CRC32s below were recorded with the code before issue 12's restructuring (commit 4519a7e: methods
timing and encoding themselves, config importing the registries) on the development machine (x86-64,
torch 2.13.0+cpu, numpy 2.4.6): the final model of every architecture (every tree node for CFL) after
a few rounds of a fixed tiny config, and the bytes counted up and down. Other CPUs or library
versions may round differently, so the test runs only on the pinned torch build.
"""

import zlib

import numpy as np
import pytest
import torch

from fedray.clients import LocalExecutor
from fedray.config import build_config
from fedray.federation import Federation

pytestmark = pytest.mark.skipif(torch.__version__ != "2.13.0+cpu", reason="CRCs recorded with torch 2.13.0+cpu")


def tiny(algorithm, **extra):
    tree = {"seed": 3, "data": {"dataset": "digits", "partition": "dirichlet", "alpha": 1.0, "seed": 1},
            "federation": {"num_clients": 6, "clients_per_round": 3, "rounds": 3, "architectures": {"mlp": 3, "logreg": 3}},
            "training": {"lr": 0.05, "momentum": 0.5, "batch_size": 16, "steps": 4},
            "algorithm": algorithm, "runtime": {"backend": "local", "torch_threads": 1}}
    for key, value in extra.items():
        tree.setdefault(key, {}).update(value)
    return build_config(tree)


CONFIGS = {
    "fedavg": tiny({"name": "fedavg", "weighted": True}),
    "stc": tiny({"name": "stc", "p_up": 0.05, "p_down": 0.05}),
    "cfl": tiny({"name": "cfl", "eps1": 10.0, "eps2": 0.01, "alpha_thresh": 0.5},
                federation={"clients_per_round": 6, "rounds": 4, "architectures": {"mlp": 6}},
                data={"groups": 2, "group_shift": "label_swap"}),
    "fedavg_byzantine": tiny({"name": "fedavg"}, data={"adversaries": "byzantine", "adversary_fraction": 0.34}),
    "fedprox": tiny({"name": "fedprox", "mu": 0.1}),
    "dsgd": tiny({"name": "dsgd"}),
    "signsgd": tiny({"name": "signsgd", "step": 0.01}),
    "dgc": tiny({"name": "dgc", "p_up": 0.05, "warmup_rounds": 2, "clip_norm": 1.0}),
    "fedbe": tiny({"name": "fedbe", "samples": 2, "distill": {"steps": 3, "lr": 1e-3}}, aux={"size": 200}),
    "cfd": tiny({"name": "cfd", "delta": True, "b_down": 2, "distill": {"steps": 3}}, aux={"size": 200}),
    "fd": tiny({"name": "fd", "mode": "init_random", "distill": {"steps": 3}}, aux={"size": 200}),
    "feddf": tiny({"name": "feddf", "distill": {"steps": 5, "lr": 1e-3}}, aux={"size": 200}),
}

# name: (CRC32 of each final model, total bytes up, total bytes down), recorded before the change
RECORDED = {
    "fedavg": ({'logreg': 3250845288, 'mlp': 4188241207}, 678120, 678120),
    "stc": ({'logreg': 3215358481, 'mlp': 1928429313}, 8516, 8300),
    "cfl": ({'cluster0': 1913650297, 'cluster1': 2667295633, 'cluster2': 918199430, 'cluster3': 1705351579, 'cluster4': 1028280433, 'cluster5': 1984171616, 'cluster6': 4174799355, 'cluster7': 1984171616, 'cluster8': 1984171616}, 5300160, 5300160),
    "fedavg_byzantine": ({'logreg': 2177510040, 'mlp': 3178562997}, 678120, 678120),
    "fedprox": ({'logreg': 300292638, 'mlp': 2166587194}, 678120, 678120),
    "dsgd": ({'logreg': 2718312808, 'mlp': 3566783077}, 678120, 678120),
    "signsgd": ({'logreg': 2259811421, 'mlp': 2676874900}, 22398, 28734),
    "dgc": ({'logreg': 360005901, 'mlp': 3754267340}, 90330, 138812),
    "fedbe": ({'logreg': 2451003928, 'mlp': 958553038}, 750120, 678120),
    "cfd": ({'logreg': 1129473636, 'mlp': 3612240125}, 1466, 2205),
    "fd": ({'logreg': 4011550642, 'mlp': 1798554140}, 72288, 48192),
    "feddf": ({'logreg': 1728996706, 'mlp': 32516917}, 750120, 678120),
}


def crc(weights):
    value = 0
    for name in sorted(weights):
        value = zlib.crc32(np.ascontiguousarray(weights[name]).tobytes(), value)
    return value


@pytest.mark.parametrize("name", list(CONFIGS))
def test_final_models_and_bytes_are_as_recorded(name, tmp_path):
    config = CONFIGS[name]
    fed = Federation(config, tmp_path, LocalExecutor, checkpoints=False)
    for _ in range(config.federation.rounds):
        metrics = fed.run_round().metrics
    models = fed.strategy.models
    if name == "cfl":
        models = {f"cluster{v}": fed.strategy.tree.model(v) for v in fed.strategy.tree.nodes}
    crcs, up, down = RECORDED[name]
    assert {key: crc(models[key]) for key in sorted(models)} == crcs
    assert (metrics["comm/bytes_up_total"], metrics["comm/bytes_down_total"]) == (up, down)
