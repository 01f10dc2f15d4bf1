"""The round loop, written once: plan, execute, aggregate, evaluate, log, checkpoint.

:class:`Federation` is a plain class. The local backend runs it in the driver; ``actors.server``
wraps it in the ``ServerActor``. The clients are reached through an *executor* (in-process or Ray
client actors) that only moves :mod:`fedray.messages` types.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import numpy as np
import torch

from fedray.algorithms import ServerContext, Strategy
from fedray.algorithms.helpers import initial_model
from fedray.clients import model_builder
from fedray.checkpoint import CHECKPOINT, read_checkpoint, write_checkpoint
from fedray.config import Config, ConfigError, save_config
from fedray.data import DatasetBundle, label_counts, load_dataset, partition, partition_figure
from fedray.data.auxiliary import aux_source, carve_aux, foreign_aux, split_negatives
from fedray.data.shifts import adversary_ids, apply_group, client_groups
from fedray.experiment import Method, resolve
from fedray.messages import ClientSpec, ClientUpdate, RoundPlan, RoundResult, one_line
from fedray.pretrain import pretrained_weights
from fedray.tracking import RunWriter, render
from fedray.training import cap_gpu_memory, evaluate, resolve_device, set_torch_threads
from fedray.weights import Weights, all_finite, nbytes, set_weights


class Diverged(RuntimeError):
    """Every client update of a round, or the global model, holds NaN or Inf."""



class Executor(Protocol):
    def execute(self, plan: RoundPlan) -> list[ClientUpdate]: ...
    def client_states(self) -> dict[int, dict[str, Any]]: ...
    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None: ...
    def describe(self) -> dict[str, Any]: ...
    def shutdown(self) -> None: ...


ExecutorFactory = Callable[[Config, Method, list[ClientSpec], DatasetBundle, dict[str, Weights]], Executor]


def load_data(config: Config) -> DatasetBundle:
    """The configured data set, cut to ``train_limit``/``test_limit`` samples (seeded subsets).

    Auxiliary data (``aux:``) is set apart first: carved out of the training set, so that clients
    never hold it, or taken from another data set; only its inputs are kept (``bundle.aux_x``), and
    with ``aux.negatives`` a fraction of them goes to FedAUX's negative set (``bundle.negatives_x``).
    """
    d, a = config.data, config.aux
    bundle = load_dataset(d.dataset, d.root, **d.options)
    if a.size and a.dataset is None:
        bundle.aux_x = carve_aux(bundle, a.size, a.seed)
    elif a.size:
        source = aux_source(load_dataset, a.dataset, a.root, **a.options)
        bundle.aux_x = foreign_aux(source, a.size, a.seed, bundle.input_shape)
    if a.size and a.negatives:
        bundle.aux_x, bundle.negatives_x = split_negatives(bundle.aux_x, a.negatives, a.seed)
    rng = np.random.default_rng([d.seed, 0xDA7A])
    if d.train_limit is not None and d.train_limit < len(bundle.train_y):
        if bundle.client_split is not None:
            raise ValueError("data.train_limit cannot cut a data set with a natural client split")
        keep = np.sort(rng.permutation(len(bundle.train_y))[: d.train_limit])
        bundle.train_x, bundle.train_y = bundle.train_x[keep], bundle.train_y[keep]
    if d.test_limit is not None and d.test_limit < len(bundle.test_y):
        keep = np.sort(rng.permutation(len(bundle.test_y))[: d.test_limit])
        bundle.test_x, bundle.test_y = bundle.test_x[keep], bundle.test_y[keep]
    return bundle


def initial_models(config: Config, architectures: list[str], build: Callable[[str], torch.nn.Module],
                   data: DatasetBundle, device: torch.device) -> tuple[dict[str, Weights], dict[str, dict[str, Any]]]:
    """theta^0 of every architecture, and what pre-training did for each.

    The seeded initialisation; with ``pretrain.epochs`` its feature extractor is pre-trained with
    SimCLR on all the auxiliary data (D_distill and D^-; FedAUX Alg. 1's P1), here in the server
    (actor) before round one, or read from the cache a previous run with the same settings wrote.
    """
    if not config.pretrain.epochs:
        return {arch: initial_model(build, arch, config.seed) for arch in architectures}, {}
    aux = data.aux_x if data.negatives_x is None else np.concatenate([data.aux_x, data.negatives_x])
    models, info = {}, {}
    for arch in architectures:
        key = {"input_shape": list(data.input_shape), "num_classes": data.num_classes,
               "options": config.federation.model_options.get(arch, {})}
        models[arch], info[arch] = pretrained_weights(build, arch, aux, config.pretrain, config.seed, device, key)
    return models, info


def check_models(config: Config, build: Callable[[str], torch.nn.Module], archs: list[str],
                 input_shape: tuple[int, ...]) -> None:
    """Build each architecture once: an option value a model cannot take (``hidden: -5``, a width
    that does not fit the input) is a ConfigError naming it, before the run folder is made."""
    for arch in archs:
        try:
            build(arch)
        except Exception as err:  # noqa: BLE001 - whatever the model's constructor raises: one line
            options = config.federation.model_options.get(arch, {})
            raise ConfigError(f"bad config value federation.model_options.{arch} = {options}: model {arch!r} cannot "
                              f"be built for inputs of shape {tuple(input_shape)}: {one_line(err)}") from None


def make_clients(config: Config, bundle: DatasetBundle, pools_data: bool) -> list[ClientSpec]:
    """Split the training data and give clients their architectures (in config order, in blocks)."""
    fed, d = config.federation, config.data
    if d.partition == "natural":
        if bundle.client_split is None:
            raise ValueError(f"data.partition 'natural' needs a federated data set; {d.dataset} has no client split")
        if len(bundle.client_split) != fed.num_clients:
            raise ValueError(f"{d.dataset} has {len(bundle.client_split)} natural clients, "
                             f"but federation.num_clients = {fed.num_clients}")
        splits = [np.asarray(s, dtype=np.int64) for s in bundle.client_split]
    else:
        splits = partition(bundle.train_y, fed.num_clients, d.partition, d.seed, alpha=d.alpha,
                           classes_per_client=d.classes_per_client, balancedness=d.balancedness)
    archs = fed.client_archs()
    if pools_data:
        if d.groups > 1 or d.adversaries != "none":
            raise ValueError("a pooled-data baseline cannot have client groups or adversaries")
        pooled = np.sort(np.concatenate(splits))
        return [ClientSpec(i, arch, pooled) for i, arch in enumerate(fed.architectures)]
    groups = client_groups(fed.num_clients, d.groups)
    bad = set(adversary_ids(fed.num_clients, d.adversary_fraction, d.seed)) if d.adversaries != "none" else set()
    return [ClientSpec(i, arch, split, int(groups[i]), d.adversaries if i in bad else "benign")
            for i, (arch, split) in enumerate(zip(archs, splits))]


class Federation:
    """Runs an experiment one round at a time.

    Args:
        config: the validated config.
        run_dir: folder for event files, ``config.yaml``, ``checkpoint.pkl`` and ``result.json``.
        executor_factory: builds the executor that reaches the clients.
        resume: continue from ``run_dir/checkpoint.pkl`` instead of starting at round 1.
        tree_factory: builds clustered FL's parameter tree (the ``ParameterTreeActor`` under Ray).
        checkpoints: False writes no checkpoint (reproduction grids, benchmarks); the run cannot be resumed.
        method: the resolved method (default: ``resolve(config)``); the Ray driver resolves once and
            hands it over, so the server and client actors never look the method up by name.
    """

    def __init__(self, config: Config, run_dir: str | Path, executor_factory: ExecutorFactory,
                 resume: bool = False, tree_factory: Callable[..., Any] | None = None, checkpoints: bool = True,
                 method: Method | None = None):
        self.config = config
        self.method = method or resolve(config)
        self.checkpoints = checkpoints
        self.run_dir = Path(run_dir)  # made once the config has proved runnable: data, models, strategy
        set_torch_threads(config.runtime.torch_threads or os.cpu_count() or 1)
        self.device = resolve_device(config.runtime.device, config.runtime.server_gpus)
        cap_gpu_memory(self.device, config.runtime.server_gpus)
        self.data = load_data(config)
        self.clients = make_clients(config, self.data, self.method.strategy.pools_data)
        build = model_builder(config, self.data.input_shape, self.data.num_classes)
        self.counts = label_counts(self.data.train_y, [c.indices for c in self.clients], self.data.num_classes)
        if not resume:  # drawn in a thread while the start-up below waits on the object store and the hosts
            drawer = ThreadPoolExecutor(1, thread_name_prefix="partition-figure")
            self._partition = drawer.submit(lambda: render(partition_figure(self.counts, self.data.classes)))
            drawer.shutdown(wait=False)
        archs = list(dict.fromkeys(c.arch for c in self.clients))
        check_models(config, build, archs, self.data.input_shape)
        self.initial, self.pretrained = initial_models(config, archs, build, self.data, self.device)
        context = ServerContext(config, self.clients, build, tree_factory, aux_x=self.data.aux_x,
                                test_x=self.data.test_x, test_y=self.data.test_y, device=self.device,
                                initial_models=self.initial, negatives_x=self.data.negatives_x,
                                label_counts=self.counts, class_names=self.data.classes)
        self.strategy: Strategy = self.method.make_strategy(context)
        self._build = build
        self._eval_models: dict[str, torch.nn.Module] = {}
        self._test_sets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.round = 0
        self.totals = {"comm/bytes_up_total": 0.0, "comm/bytes_down_total": 0.0}
        self.history: list[dict[str, float]] = []
        checkpoint = self._read_checkpoint() if resume else None
        self.executor = executor_factory(config, self.method, self.clients, self.data, self.initial)
        # the clients' hosts (or Ray's object store) hold the training set now; the server keeps only
        # what it evaluates and distils on
        self.data.train_x = self.data.train_y = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, self.run_dir / "config.yaml")  # on resume, records an extended round count
        if checkpoint is not None:
            self._restore(checkpoint)
            self.writer = RunWriter(self.run_dir, purge_step=self.round + 1)
        else:  # a run that stopped before its first checkpoint starts again: its events are purged
            stale = any(self.run_dir.glob("events.out.tfevents.*"))
            self.writer = RunWriter(self.run_dir, purge_step=0 if stale else None)
            self._log_setup()
        # where the clients run (actors per node, devices), as the run (re)started
        self.writer.log_text("runtime/executor", json.dumps(self.describe_executor()), self.round)
        if checkpoint is None:
            self._prepare()

    # -- one round -------------------------------------------------------------------------------
    def run_round(self) -> RoundResult:
        """Plan, execute, aggregate, evaluate, log and (every k rounds) checkpoint one round."""
        self.round += 1
        start = time.perf_counter()
        plan = self.strategy.configure_round(self.round)
        updates = self.executor.execute(plan)
        clients_done = time.perf_counter()
        updates, rejected = self._reject_non_finite(updates)
        metrics = dict(self.strategy.aggregate(self.round, updates))
        self._check_models()
        metrics["clients/rejected"] = float(len(rejected))
        metrics.update(self._faults())
        self._log_artifacts(self.round)
        metrics.update(self._communication(plan, updates))
        metrics["time/clients_s"] = clients_done - start
        metrics["time/aggregate_s"] = time.perf_counter() - clients_done
        metrics["time/client_mean_s"] = float(np.mean([u.metrics.get("time_s", 0.0) for u in updates]))
        metrics["time/client_max_s"] = float(np.max([u.metrics.get("time_s", 0.0) for u in updates]))
        metrics["clients/participants"] = float(len(updates))
        if self.round % self.config.federation.eval_every == 0 or self.round == self.config.federation.rounds:
            metrics.update(self.evaluate())
        metrics["time/round_s"] = time.perf_counter() - start
        self.writer.log_scalars(self.round, metrics)
        self.history.append({"round": self.round, **metrics})
        if self.checkpoints and (self.round % self.config.checkpoint_every == 0 or self.done):
            self.save_checkpoint()
        return RoundResult(self.round, metrics)

    def _reject_non_finite(self, updates: list[ClientUpdate]) -> tuple[list[ClientUpdate], list[int]]:
        """The updates without NaN or Inf (in the payload, or in the loss of a client that trained),
        and the ids of the clients whose update is left out; every update non-finite: ``Diverged``."""
        def finite(u: ClientUpdate) -> bool:
            trained = u.metrics.get("steps", 0.0) > 0
            return all_finite(u.payload) and (not trained or np.isfinite(u.metrics.get("loss", 0.0)))

        kept = [u for u in updates if finite(u)]
        rejected = [u.client_id for u in updates if not finite(u)]
        if rejected:
            self.writer.log_text("clients/rejected", f"round {self.round}: the updates of clients {rejected} held "
                                 f"NaN or Inf and were left out of the aggregate", self.round)
        if updates and not kept:
            raise Diverged(f"round {self.round}: all {len(updates)} client updates held NaN or Inf: local training "
                           f"diverged; the likely cause is the learning rate (training.lr = {self.config.training.lr:g}): "
                           f"lower it")
        return kept, rejected

    def _check_models(self) -> None:
        """``Diverged`` when a model the strategy holds after aggregation is not finite."""
        models = self.strategy.models_to_evaluate()
        bad = sorted(name for name, weights in models.items() if not all_finite(weights))
        if bad:
            raise Diverged(f"round {self.round}: the global model ({', '.join(bad)}) holds NaN or Inf after "
                           f"aggregation; the likely cause is the learning rate (training.lr = "
                           f"{self.config.training.lr:g}, algorithm settings): lower it")

    def _faults(self) -> dict[str, float]:
        """What the executor survived this round (client actors restarted, tasks run again), logged."""
        faults, retried = getattr(self.executor, "take_faults", lambda: ([], 0))()
        if faults:
            self.writer.log_text("runtime/faults", "\n".join(f"round {self.round}: {t}" for t in faults), self.round)
        return {"runtime/actor_restarts": float(len(faults)), "runtime/tasks_retried": float(retried)} if faults else {}

    def evaluate(self) -> dict[str, float]:
        """The strategy's test metrics (by default each architecture's model on each group's test set)."""
        start = time.perf_counter()
        out = self.strategy.evaluate(self.evaluate_model)
        out["time/eval_s"] = time.perf_counter() - start
        return out

    def evaluate_model(self, arch: str, weights: Weights, group: int = 0, per_class: bool = False) -> dict[str, Any]:
        """Accuracy and loss of ``weights`` on group ``group``'s test set (its label/rotation shift);
        ``per_class``: also each class's ``class_correct`` and ``class_total``."""
        if arch not in self._eval_models:
            self._eval_models[arch] = self._build(arch).to(self.device)
        model = self._eval_models[arch]
        set_weights(model, weights)
        if group not in self._test_sets:
            d = self.config.data
            x, y = apply_group(self.data.test_x, self.data.test_y, d.group_shift, group, d.groups,
                               self.data.num_classes, d.seed)
            self._test_sets[group] = (torch.from_numpy(np.ascontiguousarray(x)).to(self.device),
                                      torch.from_numpy(np.ascontiguousarray(y)).to(self.device))
        x, y = self._test_sets[group]
        return evaluate(model, x, y, self.config.federation.eval_batch_size,
                        self.data.num_classes if per_class else 0)

    def _communication(self, plan: RoundPlan, updates: list[ClientUpdate]) -> dict[str, float]:
        sizes = {key: plan.sizes[key] if key in plan.sizes else nbytes(payload)
                 for key, payload in plan.broadcast.items()}
        down = float(sum(sizes[k] for task in plan.tasks for k in task.payload_keys))
        up = float(sum(u.bytes_up for u in updates))
        self.totals["comm/bytes_up_total"] += up
        self.totals["comm/bytes_down_total"] += down
        return {"comm/bytes_up": up, "comm/bytes_down": down, **self.totals}

    # -- run, finish -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.round >= self.config.federation.rounds

    def finish(self) -> dict[str, Any]:
        """Write ``result.json`` and close the writer and the executor; returns the summary."""
        evaluated = [h for h in self.history if "eval/accuracy" in h]
        summary = {
            "name": self.config.name,
            "algorithm": self.config.algorithm.name,
            "rounds": self.round,
            "final": {k: v for k, v in (evaluated[-1] if evaluated else {}).items() if k.startswith("eval/")},
            "best_accuracy": max((h["eval/accuracy"] for h in evaluated), default=None),
            "comm": dict(self.totals),
            "executor": self.describe_executor(),
            "server_device": str(self.device),
            "server_threads": torch.get_num_threads(),  # the round thread's: evaluation, aggregation, distillation
        }
        if self.pretrained:
            summary["pretrain"] = {arch: {k: info[k] for k in ("cached", "seconds", "path")} | {"loss": info["loss"][-1:]}
                                   for arch, info in self.pretrained.items()}
        summary.update(self.strategy.summary())
        (self.run_dir / "result.json").write_text(json.dumps(summary, indent=2))
        self.writer.close()
        self.executor.shutdown()
        return summary

    # -- checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Atomically write the round, server state and every client's persistent state."""
        state = {
            "round": self.round,
            "strategy": self.strategy.state_dict(),
            "clients": self.executor.client_states(),
            "totals": dict(self.totals),
            "history": list(self.history),
        }
        path = self.run_dir / CHECKPOINT
        write_checkpoint(path, state, self.config.to_dict())
        return path

    def _read_checkpoint(self) -> dict[str, Any]:
        path = self.run_dir / CHECKPOINT
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
        return read_checkpoint(path, self.config.to_dict())

    def _restore(self, state: dict[str, Any]) -> None:
        self.round = state["round"]
        self.strategy.load_state_dict(state["strategy"])
        self.executor.load_client_states(state["clients"])
        self.totals = dict(state["totals"])
        self.history = list(state["history"])

    def _log_setup(self) -> None:
        self.writer.log_config(self.config.to_dict(), ["eval/accuracy", "eval/loss"])
        self.writer.log_image("data/partition", self._partition.result())
        for arch, info in self.pretrained.items():
            for epoch, loss in enumerate(info["loss"], start=1):
                self.writer.log_scalars(epoch, {f"pretrain/loss/{arch}": loss})
            self.writer.log_text(f"pretrain/{arch}", f"{'from the cache' if info['cached'] else 'pre-trained'} in "
                                 f"{info['seconds']:.1f} s: {info['path']}")

    def describe_executor(self) -> dict[str, Any]:
        """Where the clients run, and with ``runtime.vectorize`` whether they train as cohorts."""
        described = self.executor.describe()
        if self.config.runtime.vectorize:
            refusal = self.method.client.cohort_refusal()
            which = self.config.runtime.vectorize
            cohorts = "cohorts" if which is True else f"cohorts of {', '.join(which)}"
            described["vectorize"] = cohorts if refusal is None else f"one after another: {refusal}"
        return described

    def _prepare(self) -> None:
        """The method's one-time preparation (``Strategy.prepare``), logged and counted as round 0."""
        plan = self.strategy.prepare()
        if plan is None:
            return
        updates = self.executor.execute(plan)
        metrics = dict(self.strategy.prepared(updates))
        metrics.update(self._communication(plan, updates))
        self._log_artifacts(0)
        self.writer.log_scalars(0, metrics)

    def _log_artifacts(self, round: int) -> None:
        for tag, item in self.strategy.artifacts(round).items():
            if isinstance(item, str):
                self.writer.log_text(tag, item, round)
            elif isinstance(item, np.ndarray):
                self.writer.log_histogram(tag, item, round)
            else:
                self.writer.log_figure(tag, item, round)
