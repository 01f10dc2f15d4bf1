"""MrTF's authors' code (github.com/lxcnju/MrTF) on fedray's inputs: the adapter that
``scripts/authors/compare.py mrtf`` uses.

Two halves:

- in fedray's process, :func:`export` writes one seed's inputs from the config of a fedray run:
  each client's samples of fedray's split (fedray's normalised Fashion-MNIST arrays), fedray's
  test set (the set the code scores on, and the unlabelled inputs its MrTF and FedDF refine on),
  the clients of each round as fedray's server samples them, fedray's initial model, and
  ``setup.json`` with the hyperparameters each of the authors' algorithms runs with;
- in a process of its own (``python scripts/authors/compare.py inside scripts.authors.mrtf ...``), :func:`inside` imports
  the authors' ``mrtf.py`` / ``feddf.py`` / ``fedavg.py`` from their checkout and runs one of them
  on these inputs, with fedray's ``mlp`` in a wrapper that gives the code the interface it calls.
  The code has no command line and no data of ours (``train_*.py`` run hard-coded grids on its own
  pickles), so the adapter builds its datasets and ``args`` itself. What it changes at run time,
  none of it the arithmetic of training, is ``ADAPTATIONS`` (docs/authors.md lists it).

The authors' own measure (their ``test``: the mean of per-batch accuracies) is kept beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import namedtuple
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# fedray's method (scripts/repro/mrtf.py) -> the authors' algorithm (their class). mrtf is the
# paper's rules, mrtf_code the code's: both against the one MrTF of the code. The code has no
# faithful ST or ST+RD (see NOT_COMPARED).
METHODS = {"fedavg": "FedAvg", "al": "FedDF", "al_code": "FedDF", "mrtf": "MrTF", "mrtf_code": "MrTF"}
# a method of this adapter's own and its fedray overrides: AL (FedDF) with the code's rules
VARIANTS = {"al_code": [
    "algorithm={name: mrtf, teachers: avg_logit, rectify: false, cluster: false, feed_back: false, target_power: 0.75, "
    "distill: {optimizer: adam, lr: 0.001, weight_decay: 0.000001, schedule: cosine, clip_norm: 100, steps: 500, "
    "batch_size: 64}}"]}
# the fedray method whose training settings each of the authors' algorithms runs with: MrTF with
# mrtf_code's (batch 32, weight decay 1e-5, as the code's config.py:18-22), so that its one run
# serves both of fedray's MrTF rules
SETTINGS = {"FedAvg": "fedavg", "FedDF": "al", "MrTF": "mrtf_code"}
MAX_GRAD_NORM = 100.0  # the code's clipping of local and refinement steps (config.py:23; mrtf.py:153-156, 264-266)

# what the adapter changes when it runs the authors' code (docs/authors.md lists it)
ADAPTATIONS = [
    "the data are fedray's: `MrTF(csets, gset, model, args)` (likewise `FedDF`, `FedAvg`) gets each fedray "
    "client's samples of the split (fedray's normalised Fashion-MNIST arrays), all of them training (the code's "
    "loader holds out 20% of a client, `datasets/feddata.py:130-143`), a one-sample local test set that only "
    "FedAvg reads (it must not be empty, `tools.py:51-55`), and fedray's test set as `gset`, which MrTF and FedDF "
    "also refine on (`mrtf.py:90-96`, `feddf.py:79-84`); `datasets/`, `paths.py` and `train_*.py` are not imported",
    "the model is fedray's `mlp` with fedray's initial weights, in a wrapper that returns `(features, logits)` as "
    "the code's nets do (`mrtf.py:147`; the features feed its label refinery); the code's MLPNet and its "
    "N(0, 0.01) initialisation (`basic_nets.py:64-89`, `utils.py:114-129`) are not used",
    "the clients of each round are fedray's: the code's `np.random.choice` over the clients (`mrtf.py:47-51`, "
    "`feddf.py:44-48`, `fedavg.py:43-46`) answers them; every other draw is the code's, from numpy's and torch's "
    "global generators seeded with the run's seed (the code seeds neither itself, only numpy with 0 when "
    "`datasets/feddata.py` is imported)",
    "`loader_iter.next()` (`mrtf.py:139-142`, `feddf.py:127-130`, `fedavg.py:129-132`) runs as `__next__`: torch 2 "
    "dropped the alias", "`cuda` is false: every `.cuda()` of the code sits behind it",
    "the hyperparameters, which the code takes from hard-coded grids (`config.py`, `train_*.py`), are fedray's "
    "(lr 0.05, momentum 0.9, 3 local epochs, 10 of 100 clients a round, 500 refinement steps), batch 64 without "
    "weight decay for FedAvg and FedDF (fedray's fedavg and al) and batch 32 with weight decay 1e-5 for MrTF "
    "(fedray's mrtf_code, the code's config.py); the code's own constants stay (clipping at 100, its refinement "
    "optimisers); refinement and scoring every round (`test_round` 1, as fedray; the code's default refines every "
    "`max_round / 100` rounds, `train_mrtf.py:155`); MrTF's way `ALL` with both global models (`train_mrtf.py:124-126`)",
    "fedray's measure is added: each round, the accuracy per sample on the test set of the model the code scores "
    "(MrTF and FedDF: the refined copy; FedAvg: the aggregate); the code's `test` averages per-batch accuracies "
    "(`mrtf.py:406-420`), which is kept as its own measure"]
# where fedray's runs take the code's rule by a named option, beside the reproduction's (the paper's)
FEDRAY_RULES = [
    "MrTF with the code's rules (`mrtf_code`, the reproduction's, `configs/mrtf_code.yaml`): eq. 6's std per test "
    "batch of 320 without tau, the code's eq. 10 and targets averaged across rounds, CLR at scale 8 from round one, "
    "its refinement optimiser, and the plain aggregate broadcast",
    "AL with the code's FedDF rules (`al_code`): the targets softened, `target_power: 0.75` (`feddf.py:188`), the "
    "refinement optimiser of the code (Adam lr 1e-3, weight decay 1e-6, cosine schedule, gradient norm clipped at 100; "
    "`feddf.py:190-230`) and the plain aggregate broadcast, `feed_back: false` (`feddf.py:66-90`); the reproduction's "
    "`al` is the paper's AL (Adam lr 3e-4, the refined model broadcast)"]
# where the two sides still differ, left as they are
UNALIGNED = [
    "local steps: the code runs max(int(E x batches), 5) + 1 steps (`mrtf.py:120-133`), one more than fedray's E "
    "passes over the client's data, drawing batches from an iterator that reshuffles when it runs out"]
# what is not compared, and why
# what the comparison says of the reproduction's disagreement with the paper (see fedaux.py's SETTLES)
SETTLES = (
    "In the reproduction ([repro_mrtf.md](repro_mrtf.md)) MrTF under the paper's rules (`mrtf`) is below "
    "SCAFFOLD on the mean in every scene, and below FedAvg at alpha 1. Under the code's rules (mrtf_code) fedray computes what the code computes in "
    "every scene, so the gap between the two rules is the rules', not a fault of fedray's MrTF; SCAFFOLD is not "
    "in the authors' code, and this page cannot check it")
NOT_COMPARED = [
    "FedProx, FedMMD, SCAFFOLD, FedAvgM and FedAdam: the authors' repository has none of them (its README points to "
    "lxcnju/FedRepo, another code base)",
    "the ablations ST and ST+RD: the code's nearest ways (`AvgProb`, `WeiProb`, `mrtf.py:356-391`) still take eq. 6's "
    "std per batch without tau and average the targets across rounds, so they are not the paper's ablations that "
    "fedray's st and st_rd run",
    "mrtf_nofb and mrtf_code_fb: the code broadcasts only the plain aggregate (`mrtf.py:90-101`)",
    "MNIST and the other data sets of the paper: both sides run the reproduction's Fashion-MNIST",
    "the authors' split (unbalanced Dirichlet, label windows, 20% held out): both sides run fedray's split of each seed",
    "the authors' MLPNet (784-1024-1024-128-10): both sides run fedray's mlp (784-200-200-10)"]


def settings(method: str) -> dict:
    """The training settings of fedray's ``method`` as the reproduction configures it."""
    from scripts.repro import mrtf as repro_mrtf

    from fedray.config import load_config

    config = load_config(ROOT / "configs" / "mrtf.yaml", repro_mrtf.METHODS[method][1])
    t = config.training
    if t.optimizer != "sgd" or t.steps is not None:
        raise ValueError(f"{method}: the code trains with SGD for whole epochs, not {t.optimizer} / {t.steps} steps")
    distill = getattr(config.algorithm, "distill", None)
    return {"method": method, "lr": t.lr, "momentum": t.momentum, "weight_decay": t.weight_decay,
            "batch_size": t.batch_size, "epochs": t.epochs, "ref_steps": distill["steps"] if distill else None}


def export(config, out: Path) -> dict:
    """Write one seed's inputs (the split, the test set, the schedule, the initial model) from a
    fedray run's config into ``out``; returns what ``setup.json`` holds (sizes, and the sha256 of the
    split's indices)."""
    import hashlib

    import torch

    from fedray.methods.base import round_rng
    from fedray.methods.helpers import initial_model
    from fedray.assembly import load_data, make_clients
    from fedray.models import model_builder

    data = load_data(config)
    clients = make_clients(config, data, False)
    fed = config.federation
    if len(fed.architectures) != 1:
        raise ValueError(f"the code runs one model; the config has {list(fed.architectures)}")
    arch = next(iter(fed.architectures))
    digest = hashlib.sha256()
    xs, ys = [], []
    for client in clients:
        idx = np.asarray(client.indices)
        digest.update(idx.astype(np.int64).tobytes())
        xs.append(torch.from_numpy(np.ascontiguousarray(data.train_x[idx])))
        ys.append(torch.from_numpy(data.train_y[idx]))
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"x": xs, "y": ys}, out / "clients.pt")
    torch.save({"x": torch.from_numpy(data.test_x), "y": torch.from_numpy(data.test_y)}, out / "test.pt")
    build = model_builder(fed.model_options, data.input_shape, data.num_classes)
    torch.save({k: torch.from_numpy(v) for k, v in initial_model(build, arch, config.model_seed).items()},
               out / "initial.pt")
    # fedray's server: round r's clients are round_rng(seed, r)'s draw, sorted (base.sample_clients)
    k = min(fed.clients_per_round, len(clients))
    schedule = [sorted(int(i) for i in round_rng(config.seed, r).choice(len(clients), size=k, replace=False))
                for r in range(1, fed.rounds + 1)]
    meta = {"seed": config.seed, "model_seed": config.model_seed, "rounds": fed.rounds, "num_clients": len(clients),
            "clients_per_round": k, "schedule": schedule, "arch": arch, "model_options": fed.model_options.get(arch, {}),
            "input_shape": list(data.input_shape), "num_classes": data.num_classes,
            "train_sizes": [len(c.indices) for c in clients], "test_size": len(data.test_y),
            "split_sha256": digest.hexdigest(), "settings": {a: settings(m) for a, m in SETTINGS.items()}}
    (out / "setup.json").write_text(json.dumps(meta))
    return meta


def fedray_net(meta: dict, initial: dict):
    """fedray's model with the initial weights, called as the code calls its nets."""
    import torch

    from fedray.models import create_model

    class Net(torch.nn.Module):
        """fedray's model; forward -> (features, logits), the code's interface (mrtf.py:147, 297)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            h = self.model.features(x)
            return h, self.model.head(h)

    model = create_model(meta["arch"], tuple(meta["input_shape"]), meta["num_classes"], **meta["model_options"])
    model.load_state_dict(initial, strict=True)
    return Net(model)


def inside(checkout: Path, setup: Path, method: str, out: Path) -> None:
    """Run the authors' algorithm for fedray's ``method`` on the inputs in ``setup`` and write the
    per-round measures to ``out``."""
    import torch
    from torch.utils.data import Dataset
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    import fedray.models  # noqa: F401 - fedray first: the checkout's top-level utils, tools, config come next

    sys.path.insert(0, str(checkout))
    torch.set_num_threads(1)
    meta = json.loads((setup / "setup.json").read_text())
    algorithm = METHODS[method]
    s = meta["settings"][algorithm]
    seed, rounds = meta["seed"], meta["rounds"]
    _BaseDataLoaderIter.next = _BaseDataLoaderIter.__next__  # torch 2 has no .next() (mrtf.py:139)

    import fedavg as their_fedavg
    import feddf as their_feddf
    import mrtf as their_mrtf

    class Arrays(Dataset):
        """Samples as the code's datasets give them: (x, label)."""

        def __init__(self, x, y):
            self.x, self.y = x, y.long()

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return self.x[i], self.y[i]

    clients, test = torch.load(setup / "clients.pt"), torch.load(setup / "test.pt")
    csets = {k: (Arrays(x, y), Arrays(x[:1], y[:1])) for k, (x, y) in enumerate(zip(clients["x"], clients["y"]))}
    gset = Arrays(test["x"], test["y"])

    class Random:
        """numpy.random whose choice over the clients gives fedray's clients of the next round."""

        def __init__(self):
            self.rounds = iter(meta["schedule"])

        def choice(self, a, size=None, replace=True, p=None):
            assert list(a) == list(range(meta["num_clients"])) and size == meta["clients_per_round"] and not replace
            return np.array(next(self.rounds))

        def __getattr__(self, name):
            return getattr(np.random, name)

    class Numpy:
        """numpy, but for its random.choice (the code's client draw)."""

        random = Random()

        def __getattr__(self, name):
            return getattr(np, name)

    classes = {"FedAvg": (their_fedavg, their_fedavg.FedAvg), "FedDF": (their_feddf, their_feddf.FedDF),
               "MrTF": (their_mrtf, their_mrtf.MrTF)}
    module, cls = classes[algorithm]
    module.np = Numpy()
    scored = []  # the per-sample accuracy of every model the code scores on the test set, in order

    def test_and_score(self, model, loader):
        acc = their_test(self, model, loader)
        if loader is self.glo_test_loader:
            with torch.no_grad():
                model.eval()
                scored.append(int((model(test["x"])[1].argmax(1) == test["y"]).sum()) / len(test["y"]))
        return acc

    their_test, cls.test = cls.test, test_and_score
    # c_ratio: int(c_ratio * K) clients a round (mrtf.py:47), fedray's clients_per_round
    fields = dict(dataset="fashion_mnist", n_classes=meta["num_classes"],
                  c_ratio=meta["clients_per_round"] / meta["num_clients"],
                  max_round=rounds, test_round=1, local_epochs=s["epochs"], local_steps=None,
                  batch_size=s["batch_size"], optimizer="SGD", lr=s["lr"], momentum=s["momentum"],
                  weight_decay=s["weight_decay"], max_grad_norm=MAX_GRAD_NORM, cuda=False, dp_sigma=0.0,
                  ref_steps=s["ref_steps"], ref_way="ALL", add_glo=True, glo_w=True, ref_alpha=0.1)
    args = namedtuple("Args", fields)(**fields)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = fedray_net(meta, torch.load(setup / "initial.pt"))
    start = time.perf_counter()
    algo = cls(csets=csets, gset=gset, model=model, args=args)
    algo.train()
    wall = time.perf_counter() - start
    logs = algo.logs
    if algorithm == "FedAvg":  # scores the aggregate (fedavg.py:73-83)
        result = {"accuracy": scored, "authors_accuracy": logs["GLO_TACCS"]}
    else:  # the aggregate, then the refined copy (mrtf.py:82-108; feddf.py:72-94)
        theirs = logs["REF_TACCS"] if algorithm == "MrTF" else logs["GLO_TACCS"]
        result = {"accuracy": scored[1::2], "aggregate": scored[0::2], "targets": logs["ENS_TACCS"],
                  "authors_accuracy": theirs}
    if len(result["accuracy"]) != rounds:
        raise RuntimeError(f"{algorithm}: scored {len(result['accuracy'])} rounds of {rounds}")
    out.write_text(json.dumps({"method": method, "algorithm": algorithm, "seed": seed, "settings": s,
                               **{k: [float(v) for v in vs] for k, vs in result.items()},
                               "losses": [float(v) for v in logs["LOSSES"]], "wall_s": wall}))


class Paper:
    """MrTF Fig. 7 at the reproduction's scale (Fashion-MNIST, the four splits, 20 rounds): FedAvg,
    FedDF (the ablation AL) and MrTF in both of fedray's rules, against the authors' code; measure:
    the final round's test accuracy (the reproduction's primary)."""

    name = "MrTF"
    repo = "lxcnju/MrTF"
    measure = "final test accuracy, %"

    def __init__(self, args: argparse.Namespace):
        from scripts.repro import mrtf as repro_mrtf

        self.adapter, self.repro, self.args = sys.modules[__name__], repro_mrtf, args
        self.methods = args.methods or list(METHODS)
        self.scenes = list(args.scenes) if args.scenes else list(repro_mrtf.SPLITS)
        unknown = [m for m in self.methods if m not in METHODS] + [s for s in self.scenes if s not in repro_mrtf.SPLITS]
        if unknown:
            raise SystemExit(f"not a method or scene of the MrTF comparison: {unknown} (methods {list(METHODS)}, "
                             f"scenes {list(repro_mrtf.SPLITS)})")
        self.rounds = args.rounds or 20

    def fedray_runs(self) -> dict[tuple[str, str, int], tuple[float, float, object]]:
        """fedray's runs as repro_mrtf's run_compare makes them: (method, split, seed) -> (the
        measure, wall seconds, the run's config, its provenance)."""
        from fedray.repro import run_sweep

        grid = {"split": {s: self.repro.SPLITS[s] for s in self.scenes},
                "method": {m: VARIANTS.get(m) or self.repro.METHODS[m][1] for m in self.methods}}
        done, failed = run_sweep(ROOT / "configs" / "mrtf.yaml", grid, self.args.seeds, self.args.work / "fedray",
                                 self.repro.record, overrides=[f"federation.rounds={self.rounds}"], jobs=self.args.jobs)
        if failed:
            raise SystemExit(f"{len(failed)} fedray runs did not finish: {failed[0].get('error', failed[0])}")
        return {(r.point["method"], r.point["split"], r.seed): (final([h["accuracy"] for h in r.records]), r.wall_s,
                                                                r.config, r.summary.get("provenance")) for r in done}

    def authors_measure(self, method: str, result: dict) -> float:
        return final(result["accuracy"])

    def own_measure(self, result: dict) -> float:
        return final(result["authors_accuracy"])

    def scene_text(self, scene: str) -> str:
        return scene


def final(accuracies: list) -> float:
    """The last scored round's accuracy, in % (scripts/repro/claims.py's ``final``)."""
    return 100 * [a for a in accuracies if a is not None][-1]
