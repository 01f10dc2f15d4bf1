"""The round loop, written once: plan, execute, guard, aggregate, evaluate (thesis Alg. 2).

:class:`Federation` runs an assembled experiment (``fedray.assembly.assemble``) one round at a
time. The local backend runs it in the driver; ``actors.server`` wraps it in the ``ServerActor``.
The clients are reached through the experiment's executor (``fedray.executor``), which only moves
:mod:`fedray.messages` types. What a run does beside the method's steps (the divergence guard,
byte counting, TensorBoard, checkpoints, a user's own) are observers (``fedray.observers``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from fedray.assembly import Experiment
from fedray.checkpoint import CHECKPOINT, DIVERGED, HISTORY, checkpoint_file, read_checkpoint, write_checkpoint
from fedray.clients import group_test_set
from fedray.config import save_config
from fedray.messages import RoundPlan, RoundResult
from fedray.observers import (ByteCounter, Checkpointer, Diverged, DivergenceGuard, LocalLrDecay, Observer,
                              TensorBoardLog)
from fedray.plugins import load_observers
from fedray.provenance import provenance
from fedray.round import Round
from fedray.training import combine_parts, evaluate_part
from fedray.weights import Weights, set_weights


class Federation:
    """Runs an experiment one round at a time.

    Args:
        experiment: the assembled experiment (its config, method, strategy, executor, data).
        run_dir: folder for event files, ``config.yaml``, ``checkpoint.fedray`` and ``result.json``.
        resume: continue from the run folder's checkpoint instead of starting at round 1.
        checkpoints: False writes no checkpoint (reproduction grids, benchmarks); the run cannot be resumed.
        observers: the user's own observers, called after fedray's (``fedray.observers``), then
            the config's (``observers:``, by import path).
    """

    def __init__(self, experiment: Experiment, run_dir: str | Path, resume: bool = False, checkpoints: bool = True,
                 observers: Sequence[Observer] = ()):
        self.experiment = experiment
        self.config, self.strategy, self.executor = experiment.config, experiment.strategy, experiment.executor
        self.run_dir = Path(run_dir)
        self.round = 0
        self.history: list[dict[str, float]] = []
        decay = self.config.training.lr_decay
        self.observers: list[Observer] = [
            *([LocalLrDecay(decay, self.config.federation.num_clients)] if decay != 1 else []),
            DivergenceGuard(), ByteCounter(), TensorBoardLog(), *([Checkpointer()] if checkpoints else []),
            *observers, *load_observers(self.config)]
        self._eval_models: dict[str, torch.nn.Module] = {}
        self._test_sets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        checkpoint = self._read_checkpoint() if resume else None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(self.config, self.run_dir / "config.yaml")  # on resume, records an extended round count
        if checkpoint is not None:
            self._restore(checkpoint)
        for observer in self.observers:
            observer.started(self, checkpoint is not None)
        if checkpoint is None:
            self._prepare()

    # -- one round -------------------------------------------------------------------------------
    def run_round(self) -> RoundResult:
        """Plan, execute, guard, aggregate and evaluate one round; the observers log it and checkpoint.
        A round that diverges (``Diverged``) writes ``diverged.json`` (:meth:`diverged`) and raises."""
        try:
            return self._round()
        except Diverged as err:
            self.diverged(err)
            raise

    def _round(self) -> RoundResult:
        self.round += 1
        start = time.perf_counter()
        plan = self.strategy.configure_round(self.round)  # plan: the sampled clients' tasks, the broadcast
        for observer in self.observers:  # e.g. each task's local lr (training.lr_decay)
            observer.planned(self, self.round, plan)
        step = self._execute(plan)  # execute: each client's local update and statistics (summed on the hosts)
        clients_done = time.perf_counter()
        self._faults(step)
        self._notify("screen", step)  # guard: updates holding NaN or Inf stay out
        step.metrics = {**self.strategy.aggregate(step), **step.metrics}  # aggregate
        self._notify("aggregated", step)
        step.metrics.update(self._times(step, start, clients_done))
        archs = self.config.federation.architectures
        if len(archs) > 1:  # mixed architectures: the aggregated updates of each
            step.metrics.update({f"clients/participants/{a}": float(sum(u.arch == a for u in step.updates))
                                 for a in archs})
        if self.round % self.config.federation.eval_every == 0 or self.done:
            step.metrics.update(self.evaluate())  # evaluate the global models on the test set
        step.metrics["time/round_s"] = time.perf_counter() - start
        self.history.append({"round": self.round, **step.metrics})
        self._notify("ended", step)  # log, checkpoint
        return RoundResult(self.round, step.metrics, step.notes.get("runtime/faults", ""))

    def _execute(self, plan: RoundPlan) -> Round:
        """The round's tasks on the clients: their payload-less updates and statistics (``fedray.round``)."""
        answers = self.executor.execute(plan)
        return Round(self.round, plan, answers.updates, sums=answers.sums, gathered=answers.gathered)

    @staticmethod
    def _times(step: Round, start: float, clients_done: float) -> dict[str, float]:
        """Where the round's time went: the clients (wall; per client, mean and max), aggregation."""
        per_client = [u.metrics.get("time_s", 0.0) for u in step.updates]
        return {"time/clients_s": clients_done - start, "time/aggregate_s": time.perf_counter() - clients_done,
                "time/client_mean_s": float(np.mean(per_client)), "time/client_max_s": float(np.max(per_client)),
                "clients/participants": float(len(step.updates))}

    def _prepare(self) -> None:
        """The method's one-time preparation (``Strategy.prepare``), run before round one and logged at step 0."""
        plan = self.strategy.prepare()
        if plan is None:
            return
        step = Round(0, plan, self.executor.prepare(plan))
        step.metrics.update(self.strategy.prepared(step.updates))
        self._notify("prepared", step)

    def _faults(self, step: Round) -> None:
        """What the executor survived this round (client actors restarted, tasks run again), and the
        bytes of the answers that reached the server (``runtime/bytes_to_server``)."""
        received = self.executor.take_received()
        if received:
            step.metrics["runtime/bytes_to_server"] = float(received)
        faults, retried = self.executor.take_faults()
        if faults:
            step.notes["runtime/faults"] = "\n".join(f"round {self.round}: {t}" for t in faults)
            step.metrics.update({"runtime/actor_restarts": float(len(faults)), "runtime/tasks_retried": float(retried)})

    def _notify(self, hook: str, *args: Any) -> None:
        for observer in self.observers:
            getattr(observer, hook)(self, *args)

    def evaluate(self) -> dict[str, float]:
        """The strategy's test metrics (by default each architecture's model on each group's test set)."""
        start = time.perf_counter()
        out = self.strategy.evaluate(self.evaluate_model)
        out["time/eval_s"] = time.perf_counter() - start
        return out

    def evaluate_model(self, arch: str, weights: Weights, group: int = 0, per_class: bool = False) -> dict[str, Any]:
        """Accuracy and loss of ``weights`` on group ``group``'s test set (its label/rotation shift);
        ``per_class``: also each class's ``class_correct`` and ``class_total``. The hosts evaluate
        it, each a run of its batches, where the executor spreads it (``Executor.evaluate``); the
        parts add up to this process's single pass, to the last bit."""
        ex = self.experiment
        if group not in self._test_sets:
            self._test_sets[group] = group_test_set(self.config, ex.data.test_x, ex.data.test_y, group,
                                                  ex.data.num_classes, ex.device)
        x, y = self._test_sets[group]
        classes, batch = ex.data.num_classes if per_class else 0, self.config.federation.eval_batch_size
        parts = self.executor.evaluate(arch, weights, group, batch, classes)
        if parts is None:
            if arch not in self._eval_models:
                self._eval_models[arch] = ex.build(arch).to(ex.device)
            model = self._eval_models[arch]
            set_weights(model, weights)
            parts = [evaluate_part(model, x, y, batch, classes)]
        return combine_parts(parts, y, classes)

    def describe_executor(self) -> dict[str, Any]:
        """Where the clients run, and with ``runtime.vectorize`` whether they train as cohorts."""
        described = self.executor.describe()
        if self.config.runtime.vectorize:
            refusal = self.experiment.method.cohort_refusal
            which = self.config.runtime.vectorize
            cohorts = "cohorts" if which is True else f"cohorts of {', '.join(which)}"
            described["vectorize"] = cohorts if refusal is None else f"one after another: {refusal}"
        return described

    # -- run, finish -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.round >= self.config.federation.rounds

    def diverged(self, err: Diverged) -> dict[str, Any]:
        """Write ``diverged.json``, the result of a run that diverged: the round it diverged in, why
        (``err``'s line), the rounds it finished, its last evaluated ``eval/*`` metrics, ``chance``
        (1 / classes: what a model that predicts one class scores on a balanced test set, which is how
        tables score such a run's final accuracy) and its provenance; returns it."""
        evaluated = [h for h in self.history if "eval/accuracy" in h]
        record = {"name": self.config.name, "algorithm": self.config.algorithm.name, "round": self.round,
                  "why": str(err), "rounds": self.round - 1,
                  "last": {k: v for k, v in (evaluated[-1] if evaluated else {}).items()
                           if k.startswith("eval/") or k == "round"},
                  "chance": 1 / self.experiment.data.num_classes, "provenance": provenance(self.config)}
        (self.run_dir / DIVERGED).write_text(json.dumps(record, indent=2))
        return record

    def finish(self) -> dict[str, Any]:
        """Write ``result.json`` and close the observers and the executor; returns the summary."""
        evaluated = [h for h in self.history if "eval/accuracy" in h]
        ex = self.experiment
        summary = {
            "name": self.config.name,
            "algorithm": self.config.algorithm.name,
            "rounds": self.round,
            "final": {k: v for k, v in (evaluated[-1] if evaluated else {}).items() if k.startswith("eval/")},
            "best_accuracy": max((h["eval/accuracy"] for h in evaluated), default=None),
            "executor": self.describe_executor(),
            "server_device": str(ex.device),
            "server_threads": torch.get_num_threads(),  # the round thread's: evaluation, aggregation, distillation
            "provenance": provenance(self.config),
        }
        if ex.pretrained:
            summary["pretrain"] = {arch: {k: info[k] for k in ("cached", "seconds", "path", "replaced") if k in info}
                                   | {"loss": info["loss"][-1:]}
                                   for arch, info in ex.pretrained.items()}
        summary.update(self.strategy.summary())
        self._notify("finished", summary)
        (self.run_dir / "result.json").write_text(json.dumps(summary, indent=2))
        # every round's scalars as computed (float64; TensorBoard's event files keep float32)
        (self.run_dir / HISTORY).write_text(json.dumps(
            [{k: v for k, v in h.items() if isinstance(v, (int, float))} for h in self.history]))
        (self.run_dir / DIVERGED).unlink(missing_ok=True)  # a resume that got past the round it diverged in
        self.executor.shutdown()
        return summary

    # -- checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Atomically write the round, the server's and every client's state, and the observers'."""
        state = {
            "round": self.round,
            "strategy": self.strategy.state_dict(),
            "clients": self.executor.client_states(),
            "history": list(self.history),
            **{o.key: o.state_dict() for o in self.observers if o.key},
        }
        path = self.run_dir / CHECKPOINT
        write_checkpoint(path, state, self.config.to_dict())
        return path

    def _read_checkpoint(self) -> dict[str, Any]:
        path = checkpoint_file(self.run_dir)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
        return read_checkpoint(path, self.config.to_dict())

    def _restore(self, state: dict[str, Any]) -> None:
        self.round = state["round"]
        self.strategy.load_state_dict(state["strategy"])
        self.executor.load_client_states(state["clients"])
        self.history = list(state["history"])
        for observer in self.observers:
            if observer.key and observer.key in state:
                observer.load_state_dict(state[observer.key])

