"""The distillation loop: train a student on unlabelled inputs towards soft labels (eq. 7.1).

    theta^{j+1} <- theta^j - eta * d KL(y~(x) || softmax(f(x; theta^j) / T)) / d theta     (eq. 7.1)

with the loss multiplied by T^2 (Hinton et al.) so the gradient scale does not depend on T. The
defaults are the FedAUX protocol for every distillation method (fedaux digest section 6): one
epoch over the distillation set, Adam, lr 5e-5, batch 128, temperature 1.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from fedray.training import batch_indices, make_optimizer, num_local_steps, train_mode


class DistillParams(BaseModel):
    """How a student is distilled (``algorithm.distill`` in a config).

    ``steps`` overrides ``epochs``; ``steps: 0`` leaves the student as it is.
    """

    model_config = ConfigDict(extra="forbid")
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = Field(5e-5, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(128, ge=1)
    epochs: int = Field(1, ge=1)
    steps: Optional[int] = Field(None, ge=0)
    temperature: float = Field(1.0, gt=0)
    schedule: Literal["constant", "cosine"] = "constant"  # cosine: the lr annealed to 0 over the steps
    clip_norm: Optional[float] = Field(None, gt=0)  # the gradient's norm clipped to this before each step
    # fresh: a new optimiser for each distillation (the papers); keep: the server's optimiser of each
    # student goes on from its last distillation (FedAUX's code keeps one Adam per model, fl_devices.py:131)
    optimizer_state: Literal["fresh", "keep"] = "fresh"


def distill(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor, params: DistillParams,
            generator: torch.Generator, freeze_features: bool = False,
            optimizer: Optional[torch.optim.Optimizer] = None) -> dict[str, float]:
    """Distil ``model`` in place on inputs ``x`` towards soft labels ``target`` (N, C).

    Returns the mean KL loss over the steps and the step count. The batch order comes from
    ``generator``, so the same seed gives the same student. ``freeze_features`` distils the head only.
    ``optimizer``: the optimiser to step (over ``model``'s parameters); default: a fresh one of ``params``.
    """
    if len(x) != len(target):
        raise ValueError(f"{len(x)} distillation inputs but {len(target)} soft labels")
    train_mode(model, freeze_features)
    # the local-training helpers read the same fields
    optimizer = optimizer or make_optimizer(model, params, freeze_features)
    t = params.temperature
    total, steps, count = 0.0, 0, num_local_steps(len(x), params)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(count, 1)) if params.schedule == "cosine" else None
    for idx in batch_indices(len(x), params.batch_size, count, generator):
        idx = idx.to(x.device)
        optimizer.zero_grad(set_to_none=True)
        log_student = F.log_softmax(model(x[idx]) / t, dim=1)
        loss = F.kl_div(log_student, target[idx], reduction="batchmean") * t * t
        loss.backward()
        if params.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), params.clip_norm)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        total += float(loss.detach())
        steps += 1
    return {"loss": total / max(steps, 1), "steps": float(steps)}
