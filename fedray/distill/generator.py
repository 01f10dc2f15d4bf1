"""FedGen's conditional generator and its server-side objective (Zhu, Hong, Zhou: "Data-Free
Knowledge Distillation for Heterogeneous Federated Learning", ICML 2021, section 3.1).

G_w maps a noise vector and a label to a point of the classifiers' latent space (the input of
their last, linear layer): concat(eps, onehot(y)) -> Linear(d_eps + C, d_h) -> BatchNorm -> ReLU
-> Linear(d_h, d), "2 compact MLP layers". The server trains it so that the ensemble of the users'
heads labels G_w(eps, y) as y (eq. 4):

    min_w E_{y ~ p^(y)} E_{eps} [ CE( (1/K) sum_k g(G_w(eps, y); theta_k^p), y ) ] + eta L_div

with L_div the diversity loss of Mao et al. (2019), exp(-mean_ij d_eps(i, j) d_z(i, j)), which
keeps different noise from collapsing to one point. The paper gives no formula for it; this is
its form in the authors' code (mean squared noise distance times mean absolute latent distance).
The authors' code (digest B.2) weighs each user's cross-entropy by its share of the label's
training samples instead of averaging logits (``teacher: counts``), draws labels uniformly from
those some user holds (``labels: available``) and noise from U[0, 1) (``noise: uniform``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


class Generator(nn.Module):
    """G_w(eps, y) -> z in R^d (section 3.1; sizes [d_eps, d_h] of Table 2)."""

    def __init__(self, num_classes: int, latent_dim: int, noise_dim: int = 32, hidden_dim: int = 256):
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.net = nn.Sequential(nn.Linear(noise_dim + num_classes, hidden_dim), nn.BatchNorm1d(hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, latent_dim))

    def forward(self, eps: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([eps, F.one_hot(y, self.num_classes).to(eps.dtype)], dim=1))


def draw_noise(n: int, dim: int, kind: Literal["gaussian", "uniform"], generator: torch.Generator) -> torch.Tensor:
    """eps ~ N(0, I) (the paper's reparameterisation) or U[0, 1) (the authors' code), on the CPU."""
    if kind == "gaussian":
        return torch.randn(n, dim, generator=generator)
    return torch.rand(n, dim, generator=generator)


def draw_labels(n: int, prior: torch.Tensor, kind: Literal["prior", "available"],
                generator: torch.Generator) -> torch.Tensor:
    """y ~ p^(y) (the paper), or uniformly over the labels with p^(y) > 0 (the authors' code)."""
    weights = prior if kind == "prior" else (prior > 0).to(prior.dtype)
    return torch.multinomial(weights, n, replacement=True, generator=generator)


def diversity_loss(eps: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """exp(-mean_{i,j} [mean_d (eps_i - eps_j)^2 * mean_d |z_i - z_j|]) over the batch's pairs."""
    noise = (eps[:, None, :] - eps[None, :, :]).pow(2).mean(dim=-1)
    latent = (z[:, None, :] - z[None, :, :]).abs().mean(dim=-1)
    return torch.exp(-(noise * latent).mean())


def head_logits(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Every user's head on every point: weight (K, C, d), bias (K, C), z (N, d) -> (K, N, C)."""
    return torch.einsum("kcd,nd->knc", weight, z) + bias[:, None, :]


def teacher_loss(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor,
                 kind: Literal["mean_logits", "counts", "counts_code"]) -> torch.Tensor:
    """Eq. 4's first term for the users' logits (K, N, C) on the samples of labels y (N,).

    ``mean_logits``: CE of the mean logits (eq. 4). ``counts``: sum_k mean_i omega_{y_i,k}
    CE(g_k(z_i), y_i), omega_{y,k} = c_k[y] / sum_j c_j[y] from the label counts (K, C): the
    weighting the authors' code means. ``counts_code``: what that code computes
    (``serverpFedGen.py``): its per-sample CE (N,) times omega (N, 1) broadcasts to N x N, so each
    user's term is mean_i CE_i x mean_i omega_{y_i,k}, with the counts starting at 1.
    """
    if kind == "mean_logits":
        return F.cross_entropy(logits.mean(dim=0), y)
    counts = counts + 1 if kind == "counts_code" else counts
    share = counts / counts.sum(dim=0, keepdim=True).clamp_min(1e-12)  # (K, C)
    per_user = torch.stack([F.cross_entropy(l, y, reduction="none") for l in logits])  # (K, N)
    if kind == "counts_code":
        return (per_user.mean(dim=1) * share[:, y].mean(dim=1)).sum()
    return (per_user * share[:, y]).mean(dim=1).sum()


def train_generator(gen: Generator, optimizer: torch.optim.Optimizer, weight: torch.Tensor, bias: torch.Tensor,
                    counts: torch.Tensor, steps: int, batch_size: int, rng: torch.Generator, *,
                    noise: Literal["gaussian", "uniform"] = "gaussian", labels: Literal["prior", "available"] = "prior",
                    teacher: Literal["mean_logits", "counts", "counts_code"] = "mean_logits",
                    diversity: float = 1.0) -> dict[str, float]:
    """``steps`` optimiser steps on eq. 4 against fixed heads (weight (K, C, d), bias (K, C)), labels
    drawn from the prior the label counts (K, C) give; noise and labels come from ``rng`` (CPU).
    Returns the last step's teacher and diversity losses and the share of that step's samples that
    the users' mean logits label as their conditioning label."""
    device = weight.device
    prior = counts.sum(dim=0).double()
    gen.train()
    out = {"teacher_loss": 0.0, "diversity": 0.0, "accuracy": 0.0}
    for _ in range(steps):
        y = draw_labels(batch_size, prior, labels, rng).to(device)
        eps = draw_noise(batch_size, gen.noise_dim, noise, rng).to(device)
        z = gen(eps, y)
        logits = head_logits(z, weight, bias)
        fit, div = teacher_loss(logits, y, counts, teacher), diversity_loss(eps, z)
        optimizer.zero_grad(set_to_none=True)
        (fit + diversity * div).backward()
        optimizer.step()
        out = {"teacher_loss": float(fit.detach()), "diversity": float(div.detach()),
               "accuracy": float((logits.detach().mean(dim=0).argmax(dim=1) == y).float().mean())}
    return out
