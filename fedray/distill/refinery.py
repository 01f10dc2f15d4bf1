"""MrTF's three target modules (Li, Yang, Zhan: "MrTF: Model Refinery for Transductive Federated
Learning", section 4), as functions of logits, probabilities and features on the to-be-inferred set.

- Stabilised teachers, eq. 6-7: q_k = softmax(tau f_k / std(f_k)), one std per model over all its
  logits on the set, averaged as probabilities (AvgProb), not as logits (FedDF's AvgLogit, eq. 3).
- Rectified distillation, eq. 10: per-sample weights softmax_k(-e_k(x)) from each local model's
  entropy, and the previous and the new global model in the ensemble, weighted by u_t.
- Clustered label refinery, eq. 11-12: class prototypes in the new global model's feature space,
  and targets softmax_c(-tau (1 - cos(h(x), v_c))).

The authors' code (lxcnju/MrTF) differs in places (mrtf_fedgen digest A.3-A.5); the paper is the
default, and the code's rules are here as named alternatives: :func:`batch_stabilised_probs`
(eq. 6 per batch, without tau), :func:`code_global_share` and :func:`code_rectified_target` (its
eq. 10), :func:`ema_targets` (its targets averaged across rounds). Its CLR is eq. 12 with tau 8.
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


def batch_stabilised_probs(logits: torch.Tensor, batch_size: int, tau: float = 1.0) -> torch.Tensor:
    """Eq. 6 as the authors' code computes it: the std taken per batch of ``batch_size`` rows of
    the set (its test loader's batches, 10x the local batch size), unbiased, plus 1e-8; the code
    has no tau (tau = 1). Logits (..., N, C)."""
    out = torch.empty_like(logits)
    for start in range(0, logits.shape[-2], batch_size):
        chunk = logits[..., start:start + batch_size, :]
        std = chunk.flatten(start_dim=-2).std(dim=-1, correction=1)[..., None, None] + 1e-8
        out[..., start:start + batch_size, :] = torch.softmax(tau * chunk / std, dim=-1)
    return out


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


def code_global_share(recent_losses: list[float], num_classes: int) -> float:
    """The authors' code's weight of the two global models: 0.75 (1 - L / log C), L the mean local
    loss of the last five *earlier* rounds clipped to [0, log C] (log C before any), so 0 in round
    one. Eq. 10's 1 - u_t is 0.75 (1 - L_t / log C) with this round's L_t."""
    log_c = math.log(num_classes)
    loss = sum(recent_losses[-5:]) / len(recent_losses[-5:]) if recent_losses else log_c
    return 0.75 * (1.0 - min(max(loss, 0.0), log_c) / log_c)


def code_rectified_target(local_probs: torch.Tensor, previous: torch.Tensor, new: torch.Tensor,
                          global_share: float) -> torch.Tensor:
    """Eq. 10 as the authors' code computes it: every model, the two global ones included, gets a
    per-sample weight softmax_m(-e_m(x) / C) over all K + 2 models, times a fixed share,
    (1 - g) / K for a local model and g / 2 for a global one; the sum is renormalised per sample.
    ``local_probs`` (K, N, C), ``previous`` and ``new`` (N, C), ``global_share`` g."""
    k, num_classes = local_probs.shape[0], local_probs.shape[-1]
    probs = torch.cat([local_probs, previous[None], new[None]])
    weights = torch.softmax(-entropy(probs) / num_classes, dim=0)  # (K + 2, N)
    share = torch.tensor([(1.0 - global_share) / k] * k + [global_share / 2] * 2, dtype=probs.dtype)
    target = ((share[:, None] * weights)[..., None] * probs).sum(dim=0)
    return target / target.sum(dim=1, keepdim=True)


def ema_targets(target: torch.Tensor, previous: torch.Tensor | None, w: float) -> torch.Tensor:
    """The authors' code's targets averaged across rounds: (1 - w) q + w P_prev (the first round's
    q as is), renormalised per sample; w is :func:`code_global_share`."""
    if previous is None:
        return target
    mixed = (1.0 - w) * target + w * previous
    return mixed / mixed.sum(dim=1, keepdim=True)


def cluster_refine(features: torch.Tensor, target: torch.Tensor, tau: float = 4.0) -> torch.Tensor:
    """Eq. 11-12, one step: prototypes v_c = sum_x q_c(x) h(x) / sum_x q_c(x), then
    softmax_c(-tau (1 - cos(h(x), v_c))). ``features`` (N, D), ``target`` (N, C) -> (N, C).
    A class no sample has mass on has no prototype and gets probability 0."""
    mass = target.sum(dim=0)  # (C,)
    prototypes = (target.T @ features) / mass.clamp_min(1e-12)[:, None]  # (C, D)
    cosine = F.normalize(features, dim=1) @ F.normalize(prototypes, dim=1).T  # (N, C)
    scores = -tau * (1.0 - cosine)
    return torch.softmax(scores.masked_fill(mass[None, :] <= 1e-12, float("-inf")), dim=1)
