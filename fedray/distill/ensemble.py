"""Teacher ensembles for distillation: outputs computed where the models are, then aggregated.

- FedDF / FedAUX eq. 7.2: A_mean = softmax(mean_i f_i(x)), the softmax of the mean *logits*.
- FD (thesis Alg. 3, eq. 2.2) and FedBE: the mean of the teachers' probabilities.
- FedAUX eq. 7.4: A_s = softmax(sum_i s_i(x) f_i(x) / sum_j s_j(x)), per-sample weights s_i(x).

Each is a mean of the teachers' outputs t_i (logits, or probabilities) under weights s_i, then a
map: sum_i s_i t_i / sum_i s_i is made of sums, which the hosts fold (``fedray.fold``) where the
teachers are. :func:`teacher_output` is t_i, :func:`soft_labels` the map from the mean;
:func:`aggregate_teachers` does both from the stacked outputs of teachers at hand.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
import torch

EnsembleMode = Literal["mean_logits", "mean_probs"]


@torch.inference_mode()
def predict_logits(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """The model's logits on ``x`` in eval mode, float32, on ``x``'s device."""
    model.eval()
    return torch.cat([model(x[i:i + batch_size]).float() for i in range(0, len(x), batch_size)])


@torch.inference_mode()
def predict_features(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """The model's features h(x) (``model.features``) in eval mode, float32, on ``x``'s device."""
    model.eval()
    return torch.cat([model.features(x[i:i + batch_size]).float() for i in range(0, len(x), batch_size)])


def aggregate_teachers(logits: torch.Tensor, mode: EnsembleMode = "mean_logits",
                       weights: Optional[torch.Tensor] = None, temperature: float = 1.0) -> torch.Tensor:
    """The ensemble's soft labels, shape (N, C), from K teachers' logits of shape (K, N, C).

    Args:
        logits: teacher outputs f_i(x).
        mode: ``mean_logits`` (eq. 7.2, 7.4) or ``mean_probs`` (FD, FedBE).
        weights: per-sample teacher weights s_i(x), shape (K, N) (eq. 7.4); None: uniform.
        temperature: softmax temperature of the teachers.
    """
    if logits.ndim != 3:
        raise ValueError(f"teacher logits need shape (teachers, samples, classes), got {tuple(logits.shape)}")
    k, n, _ = logits.shape
    w = torch.ones(k, n, dtype=logits.dtype, device=logits.device) if weights is None else weights.to(logits)
    if w.shape != (k, n) or bool((w < 0).any()):
        raise ValueError(f"teacher weights need shape ({k}, {n}) and no negative entry")
    w = (w / w.sum(dim=0, keepdim=True)).unsqueeze(-1)
    if mode == "mean_logits":
        return torch.softmax((w * logits).sum(dim=0) / temperature, dim=-1)
    if mode == "mean_probs":
        return (w * torch.softmax(logits / temperature, dim=-1)).sum(dim=0)
    raise ValueError(f"unknown ensemble mode {mode!r}; valid modes are mean_logits, mean_probs")


def teacher_output(logits: np.ndarray, mode: EnsembleMode = "mean_logits", temperature: float = 1.0) -> np.ndarray:
    """t_i, what one teacher adds to the ensemble's mean, from its logits f_i(x) (N, C): the logits
    themselves (``mean_logits``: eqs. 7.2, 7.4 average logits, the softmax comes after the mean) or
    softmax(f_i(x) / T) (``mean_probs``), float32."""
    if mode == "mean_logits":
        return logits
    if mode == "mean_probs":  # a copy: an upload that came through Ray's object store is read-only
        return torch.softmax(torch.from_numpy(np.array(logits, dtype=np.float32)) / temperature, dim=-1).numpy()
    raise ValueError(f"unknown ensemble mode {mode!r}; valid modes are mean_logits, mean_probs")


def soft_labels(mean: np.ndarray, mode: EnsembleMode = "mean_logits", temperature: float = 1.0) -> torch.Tensor:
    """The ensemble's soft labels (N, C), float32, from the mean teacher output sum_i s_i t_i / sum_i s_i
    (:func:`teacher_output`): softmax(mean / T) for ``mean_logits``, the mean itself for ``mean_probs``;
    what :func:`aggregate_teachers` gives from the stacked outputs, up to the rounding of the mean."""
    mean = torch.from_numpy(np.asarray(mean, dtype=np.float32))
    if mode == "mean_logits":
        return torch.softmax(mean / temperature, dim=-1)
    if mode == "mean_probs":
        return mean
    raise ValueError(f"unknown ensemble mode {mode!r}; valid modes are mean_logits, mean_probs")


def ensemble_accuracy(logits: torch.Tensor, y: torch.Tensor, mode: EnsembleMode = "mean_logits",
                      weights: Optional[torch.Tensor] = None) -> float:
    """Test accuracy of the ensemble whose teachers produced ``logits`` (K, N, C) on labels ``y``,
    with per-sample teacher weights (K, N) if given (eq. 7.4)."""
    return float((aggregate_teachers(logits, mode, weights).argmax(dim=1) == y).float().mean())
