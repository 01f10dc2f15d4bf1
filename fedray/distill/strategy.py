"""The server half that every distillation method shares (FedDF, FedBE, FedAUX, FD/CFD, MrTF).

It demands unlabelled auxiliary data (MrTF only when it distils on them: by default it distils on
the test inputs), keeps the auxiliary inputs and the test set on the server's device, and gives its
subclasses working models there, a seeded random initialisation, seeded distillation of a student
towards soft labels (eq. 7.1), test accuracy, and the round's folded teacher outputs pooled over
the architectures (:meth:`DistillationStrategy.pooled_mean`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch

from fedray.config import Config
from fedray.distill.ensemble import predict_logits
from fedray.distill.loop import DistillParams, distill
from fedray.fold import Sums
from fedray.methods.base import Params, ServerContext, Strategy, task_seed
from fedray.training import evaluate, make_optimizer, optimizer_state
from fedray.weights import Weights, get_weights, set_weights


class DistillationStrategy(Strategy):
    """Base of the distillation methods' server halves."""

    @classmethod
    def config_problem(cls, config: Config, params: Params) -> Optional[str]:
        if config.aux.size == 0:
            return (f"bad config value aux.size = 0: method {cls.name} distils on unlabelled auxiliary data; "
                    f"set aux.size (e.g. aux.size=5000)")
        return None

    def __init__(self, params: Params, ctx: ServerContext):
        super().__init__(params, ctx)
        device = self.ctx.device
        # None for a method that distils elsewhere (MrTF: on the test inputs)
        self.aux = None if self.ctx.aux_x is None else torch.from_numpy(np.ascontiguousarray(self.ctx.aux_x)).to(device)
        self.test_x = torch.from_numpy(np.ascontiguousarray(self.ctx.test_x)).to(device)
        self.test_y = torch.from_numpy(np.ascontiguousarray(self.ctx.test_y)).to(device)
        self._work: dict[str, torch.nn.Module] = {}
        # each student's optimiser state, by slot, under ``distill.optimizer_state: keep`` (checkpointed)
        self.distill_optimizers: dict[str, dict[int, dict[str, Any]]] = {}

    def work_model(self, arch: str, weights: Weights | None = None) -> torch.nn.Module:
        """The server's working model of ``arch`` (built once), loaded with ``weights`` if given."""
        if arch not in self._work:
            self._work[arch] = self.ctx.build_model(arch).to(self.ctx.device)
        if weights is not None:
            set_weights(self._work[arch], weights)
        return self._work[arch]

    def random_init(self, arch: str, round: int) -> Weights:
        """A fresh initialisation of ``arch``, the same for everyone who knows (seed, round)."""
        torch.manual_seed(task_seed(self.config.seed, round, 2**42 + self.ctx.architectures.index(arch)))
        return get_weights(self.ctx.build_model(arch))

    def distill_weights(self, arch: str, weights: Weights, target: torch.Tensor, params: DistillParams,
                        round: int, slot: str = "") -> tuple[Weights, dict[str, float]]:
        """``weights`` distilled on the auxiliary inputs towards ``target``; seeded by (seed, round, arch).
        Under ``params.optimizer_state: keep`` the optimiser goes on from the last distillation of the
        same student: ``arch`` with ``slot`` (a method that distils two students of one architecture
        names the second)."""
        model = self.work_model(arch, weights)
        seed = task_seed(self.config.seed, round, 2**40 + self.ctx.architectures.index(arch))
        torch.manual_seed(seed)  # dropout
        freeze, key = self.config.pretrain.freeze_features, arch + slot
        kept = params.optimizer_state == "keep"
        optimizer = make_optimizer(model, params, freeze, self.distill_optimizers.get(key)) if kept else None
        stats = distill(model, self.aux, target.to(self.aux.device), params, torch.Generator().manual_seed(seed),
                        freeze, optimizer)
        if kept:
            self.distill_optimizers[key] = optimizer_state(optimizer)
        return get_weights(model), stats

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "distill_optimizers": self.distill_optimizers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.distill_optimizers = state.get("distill_optimizers", {})

    def test_accuracy(self, arch: str, weights: Weights) -> float:
        model = self.work_model(arch, weights)
        return evaluate(model, self.test_x, self.test_y, self.config.federation.eval_batch_size)["accuracy"]

    def logits(self, arch: str, weights: Weights, x: torch.Tensor) -> torch.Tensor:
        return predict_logits(self.work_model(arch, weights), x)

    def pooled_mean(self, sums: Sums, name: str, own: Sequence[np.ndarray] = ()) -> Optional[np.ndarray]:
        """(sum_i c_i x_i + sum_e x_e) / (sum_i c_i + |own|) in float64: the round's folded term
        ``name`` (``fedray.fold``) pooled over the architectures, in the run's order (so that the
        additions do not depend on which host answered first), with the server's own outputs ``own``
        (FedBE's sampled models), weight 1 each. None when nothing contributed."""
        total, weight = None, 0.0
        for arch in self.ctx.architectures:
            if name in sums.get(arch, {}):
                part = sums[arch][name]
                total = part.value() if total is None else total + part.value()
                weight = weight + part.weight
        for x in own:
            total = x.astype(np.float64) if total is None else total + x
            weight = weight + 1.0
        return None if total is None else total / weight
