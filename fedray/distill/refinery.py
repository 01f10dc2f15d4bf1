"""MrTF's three target modules (Li, Yang, Zhan: "MrTF: Model Refinery for Transductive Federated
Learning", section 4), as functions of logits, probabilities and features on the to-be-inferred set.

- Stabilised teachers, eq. 6-7: q_k = softmax(tau f_k / std(f_k)), one std per model over all its
  logits on the set, averaged as probabilities (AvgProb), not as logits (FedDF's AvgLogit, eq. 3).
- Rectified distillation, eq. 10: per-sample weights softmax_k(-e_k(x)) from each local model's
  entropy, and the previous and the new global model in the ensemble, weighted by u_t.
- Clustered label refinery, eq. 11-12: class prototypes in the new global model's feature space,
  and targets softmax_c(-tau (1 - cos(h(x), v_c))).

The authors' code differs in places (mrtf_fedgen digest A.3-A.5); the paper is what is here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def stabilised_probs(logits: torch.Tensor, tau: float = 4.0) -> torch.Tensor:
    """Eq. 6: softmax(tau f / std(f)) for logits of shape (..., N, C); the std is one scalar per
    model, over all N x C logits of that model (the leading dimensions index the models): the
    population std of that set of values."""
    flat = logits.flatten(start_dim=-2)
    std = flat.std(dim=-1, correction=0).clamp_min(1e-12)[..., None, None]
    return torch.softmax(tau * logits / std, dim=-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """e(x) = -sum_c q_c log q_c over the last dimension (0 log 0 = 0)."""
    return -(probs * torch.log(probs.clamp_min(1e-30))).sum(dim=-1)


def entropy_weights(probs: torch.Tensor) -> torch.Tensor:
    """Eq. 10's per-sample teacher weights: softmax over the K local models of -e_k(x); (K, N, C) ->
    (K, N), each column summing to 1 (so eq. 10's renormalisation is already done)."""
    return torch.softmax(-entropy(probs), dim=0)


def local_share(mean_local_loss: float, num_classes: int) -> float:
    """u_t = 0.25 + 0.75 L / log C (section 4.2), L the round's mean local cross-entropy. Kept in
    [0.25, 1]: above 1 (a loss above log C, worse than chance) the global models would get negative
    weights."""
    return min(1.0, max(0.25, 0.25 + 0.75 * mean_local_loss / math.log(num_classes)))


def rectified_target(local_probs: torch.Tensor, previous: torch.Tensor, new: torch.Tensor, u: float,
                     weights: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 10: u sum_k w_k(x) q_k(x) + (1 - u) / 2 (q_g(x; theta_t) + q_g(x; theta_{t+1})).

    Args:
        local_probs: (K, N, C) the local models' q_k.
        previous, new: (N, C) the previous global model's and the new aggregate's q_g.
        u: the local models' share u_t (:func:`local_share`).
        weights: (K, N) per-sample weights summing to 1 over K (default :func:`entropy_weights`).
    """
    w = entropy_weights(local_probs) if weights is None else weights
    return u * (w.unsqueeze(-1) * local_probs).sum(dim=0) + (1 - u) / 2 * (previous + new)


def cluster_refine(features: torch.Tensor, target: torch.Tensor, tau: float = 4.0) -> torch.Tensor:
    """Eq. 11-12, one step: prototypes v_c = sum_x q_c(x) h(x) / sum_x q_c(x), then
    softmax_c(-tau (1 - cos(h(x), v_c))). ``features`` (N, D), ``target`` (N, C) -> (N, C).
    A class no sample has mass on has no prototype and gets probability 0."""
    mass = target.sum(dim=0)  # (C,)
    prototypes = (target.T @ features) / mass.clamp_min(1e-12)[:, None]  # (C, D)
    cosine = F.normalize(features, dim=1) @ F.normalize(prototypes, dim=1).T  # (N, C)
    scores = -tau * (1.0 - cosine)
    return torch.softmax(scores.masked_fill(mass[None, :] <= 1e-12, float("-inf")), dim=1)
