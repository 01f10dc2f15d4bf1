"""FedGen's authors' code (github.com/zhuangdizhu/FedGen) on fedray's inputs: the adapter that
``scripts/authors/compare.py fedgen`` uses.

Two halves:

- in fedray's process, :func:`export` writes one seed's inputs from the config of a fedray run:
  the users' training data (fedray's Dirichlet split, normalised as fedray normalises it) in the
  layout the authors' loader reads (``data/Mnist/u20c10-alpha<A>-ratio<tag>/{train,test}/*.pt``),
  the per-user test splits their code needs to start (each user: 1/20 of the test samples of each
  label it holds, the authors' layout), fedray's test set, and fedray's client schedule;
- in a process of its own (``python scripts/authors/compare.py inside scripts.authors.fedgen ...``, run from the setup's
  folder), :func:`inside` imports the authors' modules from their checkout and runs one method
  with the README's flags. What it changes at run time, none of it the arithmetic of training,
  is ``ADAPTATIONS`` (docs/authors.md lists it).

The authors' own measure (``glob_acc``) is kept beside it.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# fedray's method (scripts/repro/fedgen.py) -> the authors' --algorithm
METHODS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddistill": "FedDistill", "feddistill_code": "FedDistill",
           "feddistill_plus": "FedDistill-FL", "feddistill_plus_code": "FedDistill-FL", "fedensemble": "FedEnsemble",
           "fedgen": "FedGen", "fedgen_code": "FedGen"}
# the methods whose fedray runs average as the code does, by n_k (``Server.aggregate_parameters``,
# serverbase.py), where the reproduction averages uniformly (fedgen_code's rules already weight)
WEIGHTED = ("fedavg", "fedprox", "fedensemble", "feddistill_plus", "feddistill_plus_code")
# a method of this adapter's own: repro_fedgen's method it is, and the overrides added to it (the
# code's logit tracker, ``table: code``, beside the reproduction's per-round table)
VARIANTS = {"feddistill_code": ("feddistill", ["algorithm.table=code"]),
            "feddistill_plus_code": ("feddistill_plus", ["algorithm.table=code"])}
TAG = "fedray"  # the dataset name's ratio tag: data/Mnist/u20c10-alpha<A>-ratio<TAG>
LR_DECAY = 0.99  # every user's ExponentialLR (userbase.py), stepped with the round after its training


# what the adapter changes when it runs the authors' code (docs/authors.md lists it)
ADAPTATIONS = [
    "`torchvision` and `h5py` are empty modules: both are imported, and neither is used by these methods",
    "`Server.select_users` returns fedray's clients of the round; the code draws them from numpy's unseeded "
    "global generator. numpy is seeded with the run's seed for the code's other draws",
    "`Server.save_results` and `save_model` write nothing; the adapter writes the scores as JSON",
    "`Server.test_personalized_model` (FedDistill's per-user scores) runs without autograd: under numpy 2 "
    "its sum over tensors that need grad fails; the numbers are the same",
    "fedray's measure is added after each round's aggregation (the code scores before training, on each "
    "user's test split, with each user's own BatchNorm statistics): the averaged model with the selected "
    "users' BatchNorm statistics averaged by the code's weights n_k (the code averages parameters only); "
    "FedEnsemble: the mean logits of every user's latest local model; FedDistill: the mean accuracy of this "
    "round's users' own models, and (its primary measure, as the reproduction's) their pooled accuracy on "
    "the test samples of the labels each holds"]
# where fedray's runs take the code's rule by a named option, beside the reproduction's specs
FEDRAY_RULES = [
    f"every method: `training.lr_decay: {LR_DECAY}`, each user's local lr decayed with the round of its previous "
    "training (the code's `ExponentialLR` in `userbase.py`; the paper states no decay)",
    f"{', '.join(WEIGHTED)}: `algorithm.weighted: true`, the models averaged by the users' sample counts n_k as "
    "the code averages them (`Server.aggregate_parameters`, `serverbase.py`; the reproduction averages uniformly)",
    "FedDistill and FedDistill+ with the code's logit table (`feddistill_code`, `feddistill_plus_code`): "
    "`table: code`, each user's label-wise sums over every round it trained with counts from 1 (the code's "
    "`LogitTracker`, never reset, `userFedDistill.py`), averaged over every user of the round, a label the user "
    "never saw as a zero row (`serverFedDistill.py`, `aggregate_logits`); the reproduction's `table: round` takes "
    "each round's own means over the users that saw the label",
    "FedGen with the code's rules (`fedgen_code`): `teacher: counts_code`, the code's teacher loss as it computes it, "
    "each user's mean cross-entropy times its mean label weight over the batch (a (B,) by (B, 1) product that "
    "broadcasts to B x B, in `serverpFedGen.py`), with label counts from 1; the reproduction's `teacher: counts` "
    "is the per-sample weighting that code means"]
# where the two sides still differ, left as they are
UNALIGNED = [
    "BatchNorm statistics: the code's users keep their own running statistics (only parameters travel, "
    "`serverbase.py`), fedray's clients start from the global ones; training uses batch statistics on both sides, "
    "so this moves only the scored model's statistics, which the adapter's measure averages by n_k",
    "the generator's initial weights: the code draws them from torch's stream after the classifier "
    "(`serverpFedGen.py`), fedray from one seeded with the model seed; both are the same distribution",
    "FedGen's labels on the user side: the code draws uniformly from the labels any user holds, fedray from those "
    "with a count in the previous round; with 10 users a round both are every label here",
    "the batch order: the code's users read a persistent shuffling loader that drops the last short batch "
    "(`userbase.py`), fedray takes the first 20 batches of a fresh permutation each round"]
# what is not compared, and why
# what the comparison says of the reproduction's disagreement with the paper (see fedaux.py's SETTLES)
SETTLES = (
    "In the reproduction ([repro_fedgen.md](repro_fedgen.md)) FedGen gains under a point over FedAvg under the "
    "paper's rules (`fedgen`), about 3 points under the code's. Under what the code computes (fedgen_code) fedray computes "
    "what the code computes, as it does for FedAvg, FedProx and FedEnsemble, so the difference between the two "
    "rules is the rules', not a fault of fedray's FedGen. FedDFusion, which the reproduction has below FedAvg, "
    "is not in the authors' code, and this page cannot check it")
NOT_COMPARED = [
    "FedDFusion: the authors' repository has no implementation of it",
    "MNIST, the paper's data set: not installed here; both sides run the reproduction's Fashion-MNIST",
    "the authors' own split (seed 42, 1,500 samples a label): both sides run fedray's split of each seed"]


def dataset_name(alpha: float) -> str:
    """The ``--dataset`` under which the authors' loader finds the export."""
    return f"Mnist-alpha{alpha:g}-ratio{TAG}"


def export(config, out: Path) -> dict:
    """Write one seed's inputs (the split, the test sets, the schedule) from a fedray run's config
    into ``out``; returns what was written (sizes, and the sha256 of the split's indices)."""
    import hashlib

    import torch

    from fedray.methods.base import round_rng
    from fedray.assembly import load_data, make_clients

    data = load_data(config)
    clients = make_clients(config, data, False)
    k = config.federation.num_clients
    folder = out / "data" / "Mnist" / f"u20c10-alpha{config.data.alpha:g}-ratio{TAG}"
    names = [f"f_{i:05d}" for i in range(k)]  # the loader sorts users by name: fedray's client order
    train = {"users": names, "user_data": {}, "num_samples": []}
    test = {"users": names, "user_data": {}, "num_samples": []}
    test_split = []
    by_label = {c: np.flatnonzero(data.test_y == c) for c in range(data.num_classes)}
    taken = dict.fromkeys(by_label, 0)
    digest = hashlib.sha256()
    for client, name in zip(clients, names):
        idx = np.asarray(client.indices)
        digest.update(idx.astype(np.int64).tobytes())
        x, y = data.train_x[idx], data.train_y[idx]
        train["user_data"][name] = {"x": torch.from_numpy(np.ascontiguousarray(x)), "y": torch.from_numpy(y)}
        train["num_samples"].append(len(idx))
        mine = []  # the authors' layout: for each label held, the next 1/K of that label's test samples
        for label in sorted(set(y.tolist())):
            n = len(by_label[label]) // k
            mine += by_label[label][taken[label]:taken[label] + n].tolist()
            taken[label] += n
        mine = np.asarray(mine, dtype=np.int64)
        test["user_data"][name] = {"x": torch.from_numpy(data.test_x[mine]), "y": torch.from_numpy(data.test_y[mine])}
        test["num_samples"].append(len(mine))
        test_split.append(mine.tolist())
    for part, content in (("train", train), ("test", test)):
        (folder / part).mkdir(parents=True, exist_ok=True)
        torch.save(content, folder / part / f"{part}.pt")
    torch.save({"x": torch.from_numpy(data.test_x), "y": torch.from_numpy(data.test_y)}, out / "fedray_test.pt")
    fed = config.federation
    schedule = [sorted(int(i) for i in round_rng(config.seed, r).choice(k, size=fed.clients_per_round, replace=False))
                for r in range(1, fed.rounds + 1)]
    meta = {"seed": config.seed, "model_seed": config.model_seed, "alpha": config.data.alpha, "rounds": fed.rounds,
            "schedule": schedule, "train_sizes": train["num_samples"], "test_sizes": test["num_samples"], "test_split": test_split,
            "fedray_test": len(data.test_y), "split_sha256": digest.hexdigest()}
    (out / "setup.json").write_text(json.dumps(meta))
    return meta


def _stub_unused_imports() -> None:
    for name in ("torchvision", "torchvision.transforms", "torchvision.utils", "h5py"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
    sys.modules["torchvision.utils"].save_image = None


def inside(checkout: Path, setup: Path, method: str, out: Path) -> None:
    """Run the authors' ``method`` (their --algorithm) on the inputs in ``setup`` (this process's
    working folder) and write the per-round measures to ``out``."""
    import os

    import torch

    os.chdir(setup)
    sys.path.insert(0, str(checkout))
    _stub_unused_imports()
    torch.set_num_threads(1)
    meta = json.loads((setup / "setup.json").read_text())
    seed, rounds = meta["seed"], meta["rounds"]
    np.random.seed(seed)

    from FLAlgorithms.servers.serverbase import Server
    from FLAlgorithms.servers.serverFedDistill import FedDistill
    from FLAlgorithms.servers.serverFedProx import FedProx
    from FLAlgorithms.servers.serveravg import FedAvg
    from FLAlgorithms.servers.serverpFedEnsemble import FedEnsemble
    from FLAlgorithms.servers.serverpFedGen import FedGen
    from utils.model_utils import create_model

    def select_users(self, round, num_users, return_idx=False):  # noqa: A002 - the code's argument names
        idx = np.asarray(meta["schedule"][round])
        users = [self.users[i] for i in idx]
        return (users, idx) if return_idx else users

    Server.select_users = select_users
    # numpy 2 turns the per-user losses into arrays and refuses tensors that need grad; scoring
    # without autograd gives the same numbers
    Server.test_personalized_model = torch.no_grad()(Server.test_personalized_model)
    Server.save_results = lambda self, args: None
    Server.save_model = lambda self: None

    test = torch.load(setup / "fedray_test.pt")
    train = torch.load(setup / "data" / "Mnist" / f"u20c10-alpha{meta['alpha']:g}-ratio{TAG}" / "train" / "train.pt")
    held = {name: torch.unique(d["y"]) for name, d in train["user_data"].items()}  # each user's training labels
    scores: dict[str, list[float]] = {"accuracy": [], "personal": []}
    latest: dict[str, dict] = {}  # FedEnsemble: each user's latest local model

    @torch.no_grad()
    def accuracy(model) -> float:
        model.eval()
        return float((model(test["x"], logit=True)["logit"].argmax(1) == test["y"]).float().mean())

    @torch.no_grad()
    def averaged_model(server):
        model = copy.deepcopy(server.model)
        n = np.array([u.train_samples for u in server.selected_users], dtype=float)
        weights = n / n.sum()
        buffers = dict(model.named_buffers())
        for name, buffer in buffers.items():
            if buffer.dtype.is_floating_point:
                buffer.copy_(sum(w * dict(u.model.named_buffers())[name] for w, u in zip(weights, server.selected_users)))
        return model

    @torch.no_grad()
    def score(server) -> None:
        algorithm = server.algorithm
        if algorithm == "FedEnsemble":
            for u in server.selected_users:
                latest[u.id] = copy.deepcopy(u.model.state_dict())
            model, total = copy.deepcopy(server.model), 0
            for state in latest.values():
                model.load_state_dict(state)
                model.eval()
                total = total + model(test["x"], logit=True)["logit"]
            scores["accuracy"].append(float((total.argmax(1) == test["y"]).float().mean()))
        elif algorithm == "FedDistill":  # no global model: this round's users' own models (fedray's score_own_models)
            correct = total = 0
            accuracies = []
            for u in server.selected_users:
                model = copy.deepcopy(u.model).eval()
                right = model(test["x"], logit=True)["logit"].argmax(1) == test["y"]
                accuracies.append(float(right.float().mean()))
                mine = torch.isin(test["y"], held[u.id])  # the test samples of the labels it holds
                correct, total = correct + int(right[mine].sum()), total + int(mine.sum())
            scores["accuracy"].append(float(np.mean(accuracies)))
            scores["personal"].append(correct / total)
        else:
            scores["accuracy"].append(accuracy(averaged_model(server)))

    aggregate, aggregate_logits = Server.aggregate_parameters, FedDistill.aggregate_logits

    def aggregate_and_score(self, *args, **kwargs):
        aggregate(self, *args, **kwargs)
        if self.algorithm != "FedDistill-FL":  # FedDistill-FL is scored after its logits (below)
            score(self)

    def logits_and_score(self, *args, **kwargs):
        aggregate_logits(self, *args, **kwargs)
        score(self)

    Server.aggregate_parameters = aggregate_and_score
    FedDistill.aggregate_logits = logits_and_score

    algorithm = METHODS[method]
    # the README's flags (batch_run_jobs.sh), rounds as fedray ran them
    args = argparse.Namespace(dataset=dataset_name(meta["alpha"]), model="cnn", train=1, algorithm=algorithm,
                              batch_size=32, gen_batch_size=32, learning_rate=0.01, personal_learning_rate=0.01,
                              ensemble_lr=1e-4, beta=1.0, lamda=1, mix_lambda=0.1, embedding=0,
                              num_glob_iters=rounds, local_epochs=20, num_users=10, K=1, times=1, device="cpu",
                              result_path="results")
    servers = {"FedAvg": FedAvg, "FedProx": FedProx, "FedDistill": FedDistill, "FedDistill-FL": FedDistill,
               "FedEnsemble": FedEnsemble, "FedGen": FedGen}
    start = time.perf_counter()
    torch.manual_seed(seed)  # main.py's run_job(args, i) with i = the seed
    server = servers[algorithm](args, create_model(args.model, args.dataset, algorithm), seed)
    server.train(args)
    if len(scores["accuracy"]) != rounds:
        raise RuntimeError(f"{algorithm}: scored {len(scores['accuracy'])} rounds of {rounds}")
    out.write_text(json.dumps({"method": method, "algorithm": algorithm, "seed": seed, "alpha": meta["alpha"],
                               **{k: v for k, v in scores.items() if v}, "authors_accuracy": [float(a) for a in server.metrics["glob_acc"]],
                               "wall_s": time.perf_counter() - start}))


def top5(values: list[float]) -> float:
    """FedGen Table 1's measure: the mean of a run's 5 best rounds."""
    return float(np.mean(sorted(values)[-5:]))


class Paper:
    """FedGen Table 1 (MNIST rows, here Fashion-MNIST at the reproduction's scale): FedAvg, FedProx,
    FedDistill, FedDistill+, FedEnsemble and FedGen in both of fedray's rules, against the authors'
    code's FedGen; measure: the mean of a run's top-5 rounds (Table 1's)."""

    name = "FedGen"
    repo = "zhuangdizhu/FedGen"
    measure = "mean of the top-5 rounds' test accuracy, %"

    def __init__(self, args: argparse.Namespace):
        from scripts.repro import fedgen as repro_fedgen

        self.adapter, self.repro, self.args = sys.modules[__name__], repro_fedgen, args
        self.methods = args.methods or list(METHODS)
        self.scenes = [float(a) for a in args.scenes] if args.scenes else list(repro_fedgen.ALPHAS)
        self.rounds = args.rounds or 100

    def specs(self) -> list[dict]:
        """The reproduction's Table 1 runs with the code's rules of ``FEDRAY_RULES``."""
        specs = []
        for m in self.methods:
            base, extra = VARIANTS.get(m, (m, []))
            specs += [{**spec, "method": m, "overrides": [*spec["overrides"], *extra]}
                      for a in self.scenes for s in self.args.seeds
                      for spec in [self.repro.spec("table1", base, a, s, self.rounds)]]
        return [{**s, "overrides": [*s["overrides"], f"training.lr_decay={LR_DECAY}",
                                    *(["algorithm.weighted=true"] if s["method"] in WEIGHTED else []),
                                    *(["algorithm.teacher=counts_code"] if s["method"] == "fedgen_code" else [])]}
                for s in specs]

    def fedray_runs(self) -> dict[tuple[str, float, int], tuple[float, float, object]]:
        """fedray's runs: (method, alpha, seed) -> (the measure, wall seconds, the run's config, its provenance)."""
        from fedray.repro import run_specs

        done, failed = run_specs(ROOT / "configs" / "fedgen.yaml", self.specs(), self.repro.variant,
                                 self.args.work / "fedray", self.repro.record, jobs=self.args.jobs)
        if failed:
            raise SystemExit(f"{len(failed)} fedray runs did not finish: {failed[0].get('error', failed[0])}")
        return {(s["method"], s["alpha"], s["seed"]): (100 * self.repro.top5({"history": r.records}, self.field(s["method"])),
                                                       r.wall_s, r.config, r.summary.get("provenance")) for s, r in done}

    @staticmethod
    def field(method: str) -> str:
        """The score a method is measured on (as in scripts/repro/claims.py): FedDistill's users keep their
        own models, scored on the test samples of the labels each holds."""
        return "personal" if method in ("feddistill", "feddistill_code") else "accuracy"

    def authors_measure(self, method: str, result: dict) -> float:
        return 100 * top5(result[self.field(method)])

    def own_measure(self, result: dict) -> float:
        return 100 * top5(result["authors_accuracy"])

    def scene_text(self, alpha: float) -> str:
        return f"alpha {alpha:g}"
