"""Local training and evaluation loops shared by every method.

``SGD_E(theta, D_i)`` of the thesis (section 2.1) is :func:`local_train`: E local steps (or epochs)
of mini-batch SGD from the broadcast weights, with batch order drawn from a seeded generator so a
run is reproducible and a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedray.config import TrainingConfig



@dataclass
class Batch:
    """What one local step computed on its batch, for a term added to the loss: the inputs, the
    logits, the features the logits were computed from (only where the term sets
    ``needs_features``: the forward pass is then ``head(features(x))``, still one pass), and
    the labels."""

    x: torch.Tensor
    logits: torch.Tensor
    features: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None


# a term added to the data loss each step: f(model, batch) -> scalar (FedProx, SCAFFOLD, FedMMD)
ExtraLoss = Callable[[torch.nn.Module, Batch], torch.Tensor]


def make_optimizer(model: torch.nn.Module, cfg: TrainingConfig, freeze_features: bool = False,
                   state: Optional[dict[int, dict[str, Any]]] = None) -> torch.optim.Optimizer:
    """The optimiser named in ``cfg`` (local training, or ``DistillParams`` with the same fields), over
    every parameter, or over the head's alone with ``freeze_features`` (FedAUX's "+L" setting).
    ``state``: the per-parameter state an earlier optimiser of the same parameters left
    (:func:`optimizer_state`), taken over as it is; the learning rate and the rest come from ``cfg``."""
    params = model.classifier.parameters() if freeze_features else model.parameters()
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    else:
        optimizer = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if state:
        optimizer.load_state_dict({"state": copy.deepcopy(state), "param_groups": optimizer.state_dict()["param_groups"]})
    return optimizer


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[int, dict[str, Any]]:
    """A copy of ``optimizer``'s per-parameter state (Adam's moments and step counts, SGD's momentum
    buffers), by parameter index: what ``make_optimizer`` takes back to go on where it stopped."""
    return copy.deepcopy(optimizer.state_dict()["state"])


def train_mode(model: torch.nn.Module, freeze_features: bool = False) -> None:
    """``model.train()``; with ``freeze_features`` the feature extractor stays in eval mode, so that
    frozen features do not even move their BatchNorm statistics."""
    model.train()
    if freeze_features:
        for name, child in model.named_children():
            if name != "classifier":
                child.eval()


def num_local_steps(num_samples: int, cfg: TrainingConfig) -> int:
    """``cfg.steps`` if set, else ``cfg.epochs`` passes over the data (last batch may be short).
    Also used for distillation (``DistillParams`` has the same three fields)."""
    if cfg.steps is not None:
        return cfg.steps
    return cfg.epochs * math.ceil(num_samples / cfg.batch_size)


def batch_indices(
    num_samples: int, batch_size: int, steps: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """``steps`` mini-batches of indices: shuffled passes over the data, reshuffled each pass."""
    done = 0
    while done < steps:
        order = torch.randperm(num_samples, generator=generator)
        for start in range(0, num_samples, batch_size):
            if done == steps:
                return
            yield order[start:start + batch_size]
            done += 1


def local_train(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: TrainingConfig,
    generator: torch.Generator,
    extra_loss: Optional[ExtraLoss] = None,
    freeze_features: bool = False,
    optimizer: Optional[torch.optim.Optimizer] = None,
) -> dict[str, float]:
    """Train ``model`` in place on (x, y); return the mean training loss and the step count.

    Args:
        model: the model, already holding the broadcast weights, on the data's device.
        x, y: the client's data.
        cfg: optimiser, learning rate, batch size, epochs or steps.
        generator: seeded CPU generator for the batch order.
        extra_loss: a term added to the data loss each step (FedProx's proximal term); one with
            ``needs_features`` set gets the batch's features too (the model must then have
            ``features`` and ``head``, as every ``FedModel`` does).
        freeze_features: train the head only (``pretrain.freeze_features``).
        optimizer: the optimiser to step (over ``model``'s parameters); default: a fresh one of ``cfg``.
    """
    train_mode(model, freeze_features)
    optimizer = optimizer or make_optimizer(model, cfg, freeze_features)
    total, steps = 0.0, 0
    with_features = getattr(extra_loss, "needs_features", False)
    for idx in batch_indices(len(x), cfg.batch_size, num_local_steps(len(x), cfg), generator):
        idx = idx.to(x.device)
        optimizer.zero_grad(set_to_none=True)
        xb = x[idx]
        features = model.features(xb) if with_features else None
        logits = model.head(features) if with_features else model(xb)
        yb = y[idx]
        loss = F.cross_entropy(logits, yb)
        objective = loss if extra_loss is None else loss + extra_loss(model, Batch(xb, logits, features, yb))
        objective.backward()
        optimizer.step()
        total += float(loss.detach())
        steps += 1
    return {"loss": total / max(steps, 1), "steps": float(steps)}


@dataclass
class EvalPart:
    """Batches ``[first, stop)`` of an evaluation (batches of ``batch_size`` from the start of the
    test set): the correct predictions, each batch's summed cross-entropy in batch order, and with
    ``num_classes`` the correct predictions per class. Parts of consecutive batches, added by
    :func:`combine_parts`, give what one pass over the whole set gives, to the last bit."""

    correct: int
    losses: list[float]
    class_correct: Optional[np.ndarray] = None


@torch.inference_mode()
def evaluate_part(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256,
                  num_classes: int = 0, first: int = 0, stop: Optional[int] = None) -> EvalPart:
    """Batches ``first`` to ``stop`` (default: the last) of ``model``'s pass over (x, y)."""
    model.eval()
    correct, losses = 0, []
    hits = torch.zeros(num_classes, dtype=torch.long, device=y.device)
    end = len(x) if stop is None else min(len(x), stop * batch_size)
    for start in range(first * batch_size, end, batch_size):
        logits = model(x[start:start + batch_size])
        target = y[start:start + batch_size]
        losses.append(float(F.cross_entropy(logits, target, reduction="sum")))
        right = logits.argmax(dim=1) == target
        correct += int(right.sum())
        if num_classes:
            hits += torch.bincount(target[right], minlength=num_classes)
    return EvalPart(correct, losses, hits.cpu().numpy() if num_classes else None)


def combine_parts(parts: Sequence[EvalPart], y: torch.Tensor, num_classes: int = 0) -> dict[str, Any]:
    """Accuracy and mean cross-entropy over (x, y) from the parts of its batches, in batch order;
    with ``num_classes``, also ``class_correct`` and ``class_total`` (integer arrays). The batch
    losses are added one after another from the first, as a single pass adds them."""
    loss = 0.0
    for part in parts:
        for value in part.losses:
            loss += value
    n = max(len(y), 1)
    out: dict[str, Any] = {"accuracy": sum(p.correct for p in parts) / n, "loss": loss / n}
    if num_classes:
        out["class_correct"] = sum(p.class_correct for p in parts)
        out["class_total"] = torch.bincount(y, minlength=num_classes).cpu().numpy()
    return out


def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256, num_classes: int = 0
) -> dict[str, Any]:
    """Accuracy and mean cross-entropy of ``model`` on (x, y); with ``num_classes``, also each
    class's ``class_correct`` and ``class_total`` (integer arrays)."""
    return combine_parts([evaluate_part(model, x, y, batch_size, num_classes)], y, num_classes)


def set_torch_threads(count: int) -> int:
    """Give the calling thread ``count`` torch (OpenMP) threads, for good.

    ``torch.set_num_threads`` sets the calling thread's count and a process-wide default; a thread
    reads that default once, at its first parallel op or ``get_num_threads``, and from then on keeps
    its own count. So a thread that sets its count but has not yet read it takes whatever another
    thread set last: in a ServerActor that hosts clients, the round thread's 2 threads became the
    host thread's 1 and evaluation ran at half speed. Reading the count at once fixes it here."""
    torch.set_num_threads(count)
    return torch.get_num_threads()


def resolve_device(preference: str, gpus: float) -> torch.device:
    """``cuda`` when asked for or when GPUs are assigned and visible, else ``cpu``."""
    if preference == "cuda" or (preference == "auto" and gpus > 0 and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("runtime.device is 'cuda' but torch sees no CUDA device here")
        return torch.device("cuda")
    return torch.device("cpu")


def cap_gpu_memory(device: torch.device, share: float) -> None:
    """Hold this process to ``share`` of the GPU's memory, as Ray's fractional ``num_gpus`` only
    places actors: beyond its share, torch's allocator raises OutOfMemoryError in this process
    instead of taking memory its neighbours on the GPU were promised."""
    if device.type == "cuda" and 0 < share < 1:
        torch.cuda.set_per_process_memory_fraction(share, _index(device))


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def gpu_memory_note(err: BaseException, device: torch.device, share: float, setting: str) -> str:
    """For a CUDA out-of-memory error under a cap: which share of which device was the limit."""
    if not isinstance(err, torch.cuda.OutOfMemoryError) or device.type != "cuda" or not 0 < share < 1:
        return ""
    total = torch.cuda.get_device_properties(_index(device)).total_memory / 2**30
    return (f"; {setting} = {share:g} caps this actor at {share * total:.1f} of the GPU's {total:.1f} GiB: "
            f"raise the share or shrink the model or batch")
