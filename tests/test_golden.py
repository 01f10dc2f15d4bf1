"""Every method's results stay the same through refactors of the runtime, to float rounding.

Issue 12 pinned the final models of twelve methods by CRC32 (the final model of every architecture,
every tree node for CFL, after a few rounds of a fixed tiny config, and the bytes counted up and
down). CRCs are exact to the last bit, and the last bits depend on the CPU: on a second machine
(AMD EPYC, the same torch 2.13.0+cpu and numpy 2.4.6) 11 of the 12 differed, with the last code
before FedAUX (commit 705ede6) and with the code after it alike, which are bit-identical to each
other there.
So each model is now pinned by its L1 norm, L2 norm and sum, recorded on that machine, within a
relative 1e-6. Changing torch's thread count moves them by at most 2.3e-8; a real change moves
them by far more (FedProx's mu = 0.1 against FedAvg: 1.8e-5 on the MLP's L1 norm, 1e-3 on the
logistic regression's). The bytes stay exact.
"""

import numpy as np
import pytest
import torch

from fedray.clients import LocalExecutor
from fedray.config import build_config
from fedray.federation import Federation

pytestmark = pytest.mark.skipif(not torch.__version__.startswith("2.13."), reason="recorded with torch 2.13.0")


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

# name: ({model: (L1 norm, L2 norm, sum)}, total bytes up, total bytes down)
RECORDED = {
    "fedavg": ({'logreg': (43.52546279, 2.05672449, -1.976079933), 'mlp': (2314.295693, 11.79795306, -10.44151115)}, 678120, 678120),
    "stc": ({'logreg': (42.25179676, 1.952764612, -0.8790407218), 'mlp': (2312.606208, 11.78750356, -10.70365776)}, 8516, 8300),
    "cfl": ({'cluster0': (2311.114205, 11.78032528, -13.03070771), 'cluster1': (2312.18386, 11.78586333, -11.02104414), 'cluster2': (2320.237034, 11.83337954, 2.694010145), 'cluster3': (2314.229885, 11.79682794, -7.56649394), 'cluster4': (2317.794798, 11.81734149, -2.394731799), 'cluster5': (2317.115449, 11.8126141, -3.665172781), 'cluster6': (2317.320971, 11.81401747, -2.224694752), 'cluster7': (2317.115449, 11.8126141, -3.665172781), 'cluster8': (2317.115449, 11.8126141, -3.665172781)}, 5300160, 5300160),
    "fedavg_byzantine": ({'logreg': (43.52575434, 2.056757427, -1.976080031), 'mlp': (64971.42309, 349.4013392, -5005.149578)}, 678120, 678120),
    "fedprox": ({'logreg': (43.48187365, 2.054186825, -1.976080321), 'mlp': (2314.254792, 11.79770713, -10.50313492)}, 678120, 678120),
    "dsgd": ({'logreg': (40.77725245, 1.867913766, -1.976079718), 'mlp': (2311.038108, 11.77970208, -13.70538479)}, 678120, 678120),
    "signsgd": ({'logreg': (41.44675885, 1.940160136, 8.38392037), 'mlp': (2445.285858, 12.6396843, 269.9515165)}, 22398, 28734),
    "dgc": ({'logreg': (44.0638508, 2.076417581, -1.173015465), 'mlp': (2312.891314, 11.79013563, -9.978232569)}, 90330, 138812),
    "fedbe": ({'logreg': (42.84123654, 2.023064451, -1.7317459), 'mlp': (2326.370888, 11.87957805, 1.629255618)}, 750120, 678120),
    "cfd": ({'logreg': (40.72693013, 1.855480501, -1.977147774), 'mlp': (2310.885721, 11.77906064, -14.12019377)}, 1466, 2205),
    "fd": ({'logreg': (40.98996026, 1.859923421, -1.094988685), 'mlp': (2303.929964, 11.73974111, -7.403721729)}, 72288, 48192),
    "feddf": ({'logreg': (42.24698578, 1.992599195, -1.614260593), 'mlp': (2340.079913, 11.96751086, 25.19066074)}, 750120, 678120),
}


def fingerprint(weights):
    flat = np.concatenate([np.asarray(weights[name], dtype=np.float64).ravel() for name in sorted(weights)])
    return np.abs(flat).sum(), np.sqrt((flat ** 2).sum()), flat.sum()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_final_models_and_bytes_are_as_recorded(name, tmp_path):
    config = CONFIGS[name]
    fed = Federation(config, tmp_path, LocalExecutor, checkpoints=False)
    for _ in range(config.federation.rounds):
        metrics = fed.run_round().metrics
    models = fed.strategy.models
    if name == "cfl":
        models = {f"cluster{v}": fed.strategy.tree.model(v) for v in fed.strategy.tree.nodes}
    recorded, up, down = RECORDED[name]
    assert sorted(models) == sorted(recorded)
    for key, (l1, l2, total) in recorded.items():
        got = fingerprint(models[key])
        assert got[:2] == pytest.approx((l1, l2), rel=1e-6), key
        assert got[2] == pytest.approx(total, abs=1e-6 * l1), key
    assert (metrics["comm/bytes_up_total"], metrics["comm/bytes_down_total"]) == (up, down)
