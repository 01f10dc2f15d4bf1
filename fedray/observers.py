"""Observers of the round loop: what a run does beside the method's own steps.

The loop (``fedray.federation.Federation``) plans, executes, aggregates and evaluates; everything
else it does through observers, called in order at fixed points of each round:

============  ==========================================================================
``started``   the loop is ready: a new run (``resumed`` False) or one resumed from its checkpoint
``prepared``  the method's one-time preparation ran (the step is round 0)
``planned``   a round's plan is made, before its tasks run: an observer may change its tasks
``screen``    a round's updates came back, before aggregation: an observer may drop some
``aggregated`` the strategy aggregated; the global models are in ``fed.strategy``
``ended``     the round is complete, its metrics evaluated and in ``fed.history``
``finished``  the run ends; an observer may add to the summary that becomes ``result.json``
============  ==========================================================================

Each hook but ``planned`` (which gets the round and its ``RoundPlan``) gets the loop and the
:class:`fedray.round.Round` (the round's plan, updates, statistics, metrics and text notes) and may add metrics or notes to
it. An observer with a ``key`` keeps state across a resume: its ``state_dict`` is saved in the
checkpoint under that key. fedray's own observers: the :class:`DivergenceGuard`, the
:class:`ByteCounter`, the :class:`TensorBoardLog`, the :class:`Checkpointer` and, with
``training.lr_decay``, :class:`LocalLrDecay`; a user's observers (``Federation(...,
observers=[...])``) run after them.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np

from fedray.figures import partition_figure, render
from fedray.fold import finite
from fedray.messages import RoundPlan
from fedray.round import Round
from fedray.tracking import RunWriter
from fedray.weights import all_finite, nbytes

if TYPE_CHECKING:
    from fedray.federation import Federation


class Observer:
    """A hook of the round loop; every method does nothing unless overridden."""

    key: ClassVar[Optional[str]] = None  # the checkpoint entry holding ``state_dict()``; None: no state

    def started(self, fed: Federation, resumed: bool) -> None: ...

    def prepared(self, fed: Federation, step: Round) -> None: ...

    def planned(self, fed: Federation, round: int, plan: RoundPlan) -> None: ...

    def screen(self, fed: Federation, step: Round) -> None: ...

    def aggregated(self, fed: Federation, step: Round) -> None: ...

    def ended(self, fed: Federation, step: Round) -> None: ...

    def finished(self, fed: Federation, summary: dict[str, Any]) -> None: ...

    def state_dict(self) -> Any:
        """The observer's state for the checkpoint (under ``key``), as data: numbers, strings,
        lists, tuples, dicts, sets, numpy arrays and torch tensors (``fedray.datafile``). A checkpoint
        never holds code, so anything else (an object of a class of your own, a function) fails the
        checkpoint write in one line naming the key (docs/extending.md#state-and-checkpoints)."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Take back what ``state_dict`` returned, as the checkpoint gives it on a resume."""


class Diverged(RuntimeError):
    """Every client update of a round, or the global model, holds NaN or Inf."""


class DivergenceGuard(Observer):
    """Leaves updates holding NaN or Inf (in the payload, or in the loss of a client that trained)
    out of the aggregate, logging the clients' ids (``clients/rejected``); ``Diverged`` when every
    update of a round is, or when a global model is after aggregation."""

    def screen(self, fed: Federation, step: Round) -> None:
        kept = [u for u in step.updates if finite(u)]
        rejected = [u.client_id for u in step.updates if not finite(u)]
        if rejected:
            step.notes["clients/rejected"] = (f"round {step.number}: the updates of clients {rejected} held NaN or "
                                              f"Inf and were left out of the aggregate")
        if step.updates and not kept:
            raise Diverged(f"round {step.number}: all {len(step.updates)} client updates held NaN or Inf: local "
                           f"training diverged; the likely cause is the learning rate (training.lr = "
                           f"{fed.config.training.lr:g}): lower it")
        step.updates, self.rejected = kept, len(rejected)

    def aggregated(self, fed: Federation, step: Round) -> None:
        models = fed.strategy.models_to_evaluate()
        bad = sorted(name for name, weights in models.items() if not all_finite(weights))
        if bad:
            raise Diverged(f"round {step.number}: the global model ({', '.join(bad)}) holds NaN or Inf after "
                           f"aggregation; the likely cause is the learning rate (training.lr = "
                           f"{fed.config.training.lr:g}, algorithm settings): lower it")
        step.metrics["clients/rejected"] = float(self.rejected)


class LocalLrDecay(Observer):
    """``training.lr_decay`` (gamma): each task of a round gets ``lr_scale`` gamma^(r' - 1), r' the
    round of its client's previous local training (1 the first time), which is then this round. A
    client's rounds are kept in the checkpoint, so a resumed run goes on with the same rates."""

    key = "lr_decay"

    def __init__(self, gamma: float, num_clients: int):
        self.gamma = gamma
        self.last = np.zeros(num_clients, dtype=np.int64)  # r' of each client; 0: never trained

    def planned(self, fed: Federation, round: int, plan: RoundPlan) -> None:
        tasks = []
        for task in plan.tasks:
            previous = int(self.last[task.client_id])
            tasks.append(replace(task, lr_scale=self.gamma ** max(previous - 1, 0)))
            self.last[task.client_id] = round
        plan.tasks[:] = tasks  # the plan is frozen, its list of tasks is the round's to change

    def state_dict(self) -> Any:
        return self.last.copy()

    def load_state_dict(self, state: Any) -> None:
        self.last = np.asarray(state, dtype=np.int64).copy()


class ByteCounter(Observer):
    """Bytes down (each task's downloads: ``plan.sizes``, else the payload's size) and up (the
    hosts count each upload) per round, and their totals since round 0."""

    key = "totals"

    def __init__(self):
        self.totals = {"comm/bytes_up_total": 0.0, "comm/bytes_down_total": 0.0}

    def prepared(self, fed: Federation, step: Round) -> None:
        self.aggregated(fed, step)

    def aggregated(self, fed: Federation, step: Round) -> None:
        plan = step.plan
        sizes = {key: plan.sizes[key] if key in plan.sizes else nbytes(payload)
                 for key, payload in plan.broadcast.items()}
        down = float(sum(sizes[k] for task in plan.tasks for k in task.payload_keys))
        up = float(sum(u.bytes_up for u in step.updates))
        self.totals["comm/bytes_up_total"] += up
        self.totals["comm/bytes_down_total"] += down
        step.metrics.update({"comm/bytes_up": up, "comm/bytes_down": down, **self.totals})

    def finished(self, fed: Federation, summary: dict[str, Any]) -> None:
        summary["comm"] = dict(self.totals)

    def state_dict(self) -> dict[str, float]:
        return dict(self.totals)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.totals = dict(state)


class TensorBoardLog(Observer):
    """The run's event files: the config (HPARAMS), the split's heatmap, pre-training, where the
    clients run, each round's scalars, notes and the strategy's artifacts (text, histograms,
    figures). A resumed run purges the events after its checkpoint; a run started again in a
    folder whose first start wrote no checkpoint purges all of them.

    The heatmap (matplotlib's import and drawing: 0.7 s on the 2-core machine) is drawn in a
    thread while the clients run the preparation or round one, and logged when they are done."""

    def started(self, fed: Federation, resumed: bool) -> None:
        stale = not resumed and any(fed.run_dir.glob("events.out.tfevents.*"))
        self.writer = RunWriter(fed.run_dir, purge_step=fed.round + 1 if resumed else 0 if stale else None)
        self._partition: Optional[Future] = None
        if not resumed:
            ex = fed.experiment
            self.writer.log_config(fed.config.to_dict(), ["eval/accuracy", "eval/loss"])
            drawer = ThreadPoolExecutor(1, thread_name_prefix="partition-figure")
            self._partition = drawer.submit(lambda: render(partition_figure(ex.counts, ex.data.classes)))
            drawer.shutdown(wait=False)
            for arch, info in ex.pretrained.items():
                for epoch, loss in enumerate(info["loss"], start=1):
                    self.writer.log_scalars(epoch, {f"pretrain/loss/{arch}": loss})
                self.writer.log_text(f"pretrain/{arch}", f"{'from the cache' if info['cached'] else 'pre-trained'} "
                                     f"in {info['seconds']:.1f} s: {info['path']}"
                                     + (f" (the entry there was not used: {info['replaced']})" if "replaced" in info
                                        else ""))
        # where the clients run (actors per node, devices), as the run (re)started
        self.writer.log_text("runtime/executor", json.dumps(fed.describe_executor()), fed.round)

    def prepared(self, fed: Federation, step: Round) -> None:
        self._log_partition()
        self._log_artifacts(fed, step)
        self.writer.log_scalars(0, step.metrics)

    def aggregated(self, fed: Federation, step: Round) -> None:
        self._log_partition()
        for tag, text in step.notes.items():
            self.writer.log_text(tag, text, step.number)
        self._log_artifacts(fed, step)

    def ended(self, fed: Federation, step: Round) -> None:
        self.writer.log_scalars(step.number, step.metrics)

    def finished(self, fed: Federation, summary: dict[str, Any]) -> None:
        self._log_partition()
        self.writer.close()

    def _log_partition(self) -> None:
        if self._partition is not None:
            self.writer.log_image("data/partition", self._partition.result())
            self._partition = None

    def _log_artifacts(self, fed: Federation, step: Round) -> None:
        for tag, item in fed.strategy.artifacts(step.number).items():
            if isinstance(item, str):
                self.writer.log_text(tag, item, step.number)
            elif isinstance(item, np.ndarray):
                self.writer.log_histogram(tag, item, step.number)
            else:
                self.writer.log_figure(tag, item, step.number)


class Checkpointer(Observer):
    """Writes the checkpoint every ``checkpoint_every`` rounds and after the last round."""

    def ended(self, fed: Federation, step: Round) -> None:
        if step.number % fed.config.checkpoint_every == 0 or fed.done:
            fed.save_checkpoint()


__all__ = ["ByteCounter", "Checkpointer", "Diverged", "DivergenceGuard", "Observer", "TensorBoardLog"]
