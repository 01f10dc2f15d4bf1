"""The harness beside the authors' MrTF code (scripts/authors/compare.py mrtf): what it hands their code is
fedray's own input (the split, the test set, the clients of each round, the initial model) and
fedray's model. The authors' code itself is not here; docs/authors.md has its runs."""

from pathlib import Path

import numpy as np
import torch

from fedray.assembly import assemble, load_data
from fedray.config import load_config

from tests.support import script

ROOT = Path(__file__).resolve().parents[1]


def test_the_mrtf_export_is_fedrays_split_test_set_schedule_and_initial_model(tmp_path):
    adapter, repro = script("authors.mrtf"), script("repro.mrtf")
    config = load_config(ROOT / "configs" / "mrtf.yaml",
                         [*repro.SPLITS["alpha 1"], *repro.METHODS["mrtf_code"][1], "federation.rounds=3", "seed=3",
                          "data.seed=3", "data.train_limit=6000", "data.test_limit=2000",
                          "runtime.backend=local"])  # cut, to keep it fast
    meta = adapter.export(config, tmp_path)
    experiment = assemble(config)
    reference = load_data(config)
    # client k of the code is fedray's client k, holding exactly fedray's samples
    clients = torch.load(tmp_path / "clients.pt")
    assert len(clients["x"]) == len(experiment.clients) == 100
    for x, y, client in zip(clients["x"], clients["y"], experiment.clients):
        assert torch.equal(x, torch.from_numpy(reference.train_x[client.indices]))
        assert torch.equal(y, torch.from_numpy(reference.train_y[client.indices]))
    every = np.concatenate([c.indices for c in experiment.clients])
    assert meta["train_sizes"] == [len(c.indices) for c in experiment.clients] and len(np.unique(every)) == len(every)
    # fedray's test set (also the inputs MrTF and FedDF refine on), and the clients of each round
    test = torch.load(tmp_path / "test.pt")
    assert torch.equal(test["x"], torch.from_numpy(experiment.data.test_x)) and len(test["y"]) == 2000
    assert torch.equal(test["y"], torch.from_numpy(experiment.data.test_y))
    assert meta["schedule"] == [[c.client_id for c in experiment.strategy.sample_clients(r)] for r in range(1, 4)]
    # fedray's initial model, and the wrapper around fedray's mlp computes fedray's logits
    initial = torch.load(tmp_path / "initial.pt")
    assert initial.keys() == experiment.initial["mlp"].keys()
    assert all(np.array_equal(initial[k].numpy(), v) for k, v in experiment.initial["mlp"].items())
    net = adapter.fedray_net(meta, initial)
    model = experiment.build("mlp")
    model.load_state_dict(initial)
    features, logits = net(test["x"][:64])
    assert torch.equal(logits, model(test["x"][:64])) and features.shape == (64, 200)
    assert meta["seed"] == 3 and meta["rounds"] == 3
    # MrTF runs with mrtf_code's settings (the code's), FedDF with al's
    assert meta["settings"]["MrTF"]["batch_size"] == 32 and meta["settings"]["MrTF"]["weight_decay"] == 1e-5
    assert meta["settings"]["FedDF"]["batch_size"] == 64 and meta["settings"]["FedDF"]["ref_steps"] == 500


def test_the_primary_measure_is_the_final_round():
    assert script("authors.mrtf").final([0.1, 0.5, 0.4]) == 40.0
