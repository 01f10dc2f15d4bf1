"""The harness beside the authors' FedAUX code (scripts/authors/compare.py, scripts/authors/fedaux.py): what
it hands their code is fedray's own input, sample for sample (the split, D_distill and D^-, the test
set, the clients of each round) and fedray's initial models, random and pre-trained. The authors'
code itself is not here; docs/authors.md has its runs."""

import json
from pathlib import Path

import numpy as np
import torch

from fedray.assembly import assemble, load_data
from fedray.config import load_config
from fedray.methods.helpers import initial_model
from tests.support import script


def test_the_fedaux_export_is_fedrays_split_aux_data_test_set_schedule_and_initial_models(tmp_path):
    adapter, repro = script("authors.fedaux"), script("repro.fedaux")
    spec = next(s for s in repro.runs(3) if s["experiment"] == "claim" and s["method"] == "fedaux" and s["rate"] == 0.4)
    # the claim's config at seed 3, made small: a tenth of the data, one epoch of pre-training
    config = load_config(repro.CONFIG, [*spec["overrides"], *repro.seed_overrides("claim", 3), "runtime.backend=local",
                                        "data.train_limit=6000", "data.test_limit=1000", "aux.size=1000",
                                        "pretrain.epochs=1", f"pretrain.cache_dir={tmp_path / 'cache'}"])
    meta = adapter.export(config, tmp_path / "setup")
    experiment = assemble(config)
    reference = load_data(config)
    exported = torch.load(tmp_path / "setup" / "data.pt")
    # the training set the code indexes, and each client's indices into it: fedray's clients
    assert torch.equal(exported["train_x"], torch.from_numpy(reference.train_x))
    assert torch.equal(exported["train_y"], torch.from_numpy(reference.train_y).long())
    assert len(exported["clients"]) == len(experiment.clients) == 20
    for mine, client in zip(exported["clients"], experiment.clients):
        assert np.array_equal(mine.numpy(), client.indices)
    assert meta["train_sizes"] == [len(c.indices) for c in experiment.clients]
    # D_distill and D^- as fedray split them (disjoint), and fedray's test set
    assert torch.equal(exported["distill_x"], torch.from_numpy(experiment.data.aux_x))
    assert torch.equal(exported["negatives_x"], torch.from_numpy(experiment.data.negatives_x))
    assert (meta["distill_size"], meta["negatives_size"]) == (800, 200)
    assert torch.equal(exported["test_x"], torch.from_numpy(experiment.data.test_x))
    assert torch.equal(exported["test_y"], torch.from_numpy(experiment.data.test_y).long())
    # the clients fedray's server samples in each round
    assert meta["schedule"] == [[c.client_id for c in experiment.strategy.sample_clients(r)] for r in range(1, 4)]
    # theta^0: the pre-trained one fedray's +P and FedAUX runs start from, and the random one of the others
    random = initial_model(experiment.build, "mlp", config.model_seed)
    for name, weights in ((adapter.PRETRAINED, experiment.initial["mlp"]), (adapter.RANDOM, random)):
        saved = torch.load(tmp_path / "setup" / name)
        assert set(saved) == set(weights) and all(np.array_equal(saved[k].numpy(), weights[k]) for k in saved)
    assert not np.array_equal(experiment.initial["mlp"]["body.1.weight"], random["body.1.weight"])  # pre-trained
    # fedray's hyperparameters in the code's keys
    hp = meta["hp"]
    assert hp["fedaux"]["aggregation_mode"] == "FedAUX" and hp["fedaux"]["pretrained"] == adapter.PRETRAINED
    assert hp["fedaux"]["eps_delt"] == [0.1, 1e-5] and hp["fedaux"]["lambda_reg_score"] == 0.1
    assert int(20 * hp["fedavg"]["participation_rate"]) == 8 and hp["fedavg"]["communication_rounds"] == 3
    assert hp["fedprox"]["lambda_fedprox"] == 0.005 and hp["fedprox"]["pretrained"] == adapter.RANDOM
    assert hp["fedavg"]["pretrained"] is None and hp["feddf_p"]["pretrained"] == adapter.PRETRAINED
    assert hp["feddf"]["distill_optimizer"][1]["lr"] == 1e-3 and hp["feddf"]["distill_batch_size"] == 128
    assert meta["seed"] == 3 and meta["rounds"] == 3
    assert json.loads((tmp_path / "setup" / "setup.json").read_text()) == meta


def test_the_measure_is_repro_fedauxs_primary_on_both_sides():
    adapter, repro = script("authors.fedaux"), script("repro.fedaux")
    assert repro.PRIMARY == "best"  # Table I's: the maximum accuracy over the rounds
    assert adapter._measure([0.5, 0.7, 0.6], "best") == 100 * 0.7
    assert adapter._measure([0.5, 0.7, 0.6], "final") == 100 * 0.6
