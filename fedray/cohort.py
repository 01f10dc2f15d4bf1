"""Vectorised local training: the clients of a cohort train together, as one batched computation.

:func:`fedray.training.local_train` is SGD_E(theta_i, D_i) for one client. For the small models of
federated learning a step is tiny, and training K clients one after another costs K times the
per-step overhead (Python, autograd, kernel launches). :func:`train_cohort` runs the K clients'
SGD_E in lockstep instead, and ends with what K calls of ``local_train`` would have given:

- **Weights.** Each parameter and buffer is stacked over the clients along a new first dimension
  (what ``torch.func.stack_module_state`` builds from K modules, built here straight from the
  clients' weight dicts). The forward pass is ``vmap(functional_call(model))``: each client's
  batch through its own weights.
- **Gradients.** The loss is the sum over clients of each client's mean batch loss. Clients share
  no parameter, so the gradient of the sum with respect to client i's slice is client i's own.
- **Batches.** Client i's batches are the ones ``local_train`` draws: ``batch_indices`` with a
  generator seeded by its task seed.
- **Optimiser.** torch's functional ``sgd``/``adam`` run on the stacked tensors. Both are
  elementwise, so this is K optimisers with their own momentum and moment buffers. Adam's step
  count is shared: every client still training has made the same number of steps.
- **Different step counts.** Clients are ordered by step count, longest first. At step t the
  clients still training are a prefix, and the stacked tensors are sliced (views) to it. A client
  that has finished stops changing.
- **Short batches** (an epoch's last, when a shard is not a multiple of the batch size).
  - A model whose layers treat samples independently gets them padded with weight-0 rows, so all
    clients still take one step together.
  - A model with BatchNorm (batch statistics mix the samples) steps its clients in groups of
    equal batch size instead. Each client keeps its own running statistics.

Results match the sequential path up to float rounding: batched matrix products sum in another
order. ``tests/test_cohort.py`` states the tolerances. Dropout masks come from one generator for
the cohort, not from each client's own, so a model with dropout draws other masks than the
sequential path.
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap
from torch.optim.adam import adam
from torch.optim.sgd import sgd

from fedray.config import TrainingConfig
from fedray.training import batch_indices, num_local_steps, train_mode
from fedray.weights import Weights

# A term added to each client's loss, over stacked tensors: f(params, start) -> the sum over the
# cohort's clients of their terms. ``params`` holds every parameter of the clients being stepped,
# stacked ([k, ...]); ``start`` the same entries of theta_i, where their training began (FedProx).
StackedLoss = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor]], torch.Tensor]

# What one chunk of clients may take on a CPU (``runtime.vectorize_chunk: auto``): a constant, so
# that the chunks, and with them the results, are the same on every machine (``memory_budget``).
CHUNK_BUDGET_BYTES = 1 << 30


@dataclass
class CohortClient:
    """One client of a cohort: where its training starts, its data and its task seed."""

    start: Weights
    x: torch.Tensor
    y: torch.Tensor
    seed: int


def mixes_samples(model: torch.nn.Module) -> bool:
    """Whether a layer's output for one sample depends on the others of its batch (BatchNorm in
    training), so that a padded batch would train differently."""
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


@contextmanager
def cohort_mode(model: torch.nn.Module) -> Iterator[None]:
    """Tells a model that its forward pass runs under ``vmap`` (``FedModel.vmapped``): a layer
    whose kernel has no batching rule (``nn.LSTM``) takes its unrolled form."""
    modules = [m for m in model.modules() if hasattr(m, "vmapped")]
    for m in modules:
        m.vmapped = True
    try:
        yield
    finally:
        for m in modules:
            m.vmapped = False


def train_cohort(model: torch.nn.Module, clients: Sequence[CohortClient], cfg: TrainingConfig,
                 stacked_loss: Optional[StackedLoss] = None, freeze_features: bool = False
                 ) -> list[tuple[Weights, dict[str, float]]]:
    """``local_train`` for every client of ``clients`` at once; (theta_i, metrics) per client, in order.

    Args:
        model: a working model of the clients' architecture on the data's device (its weights are
            not used: each client starts from its own ``start``).
        clients: the cohort, all of ``model``'s architecture, data on ``model``'s device.
        cfg: optimiser, learning rate, batch size, epochs or steps (as ``local_train``).
        stacked_loss: a term added to each client's loss (FedProx's proximal term), over stacked tensors.
        freeze_features: train the head only (``pretrain.freeze_features``).
    """
    device = next(model.parameters()).device
    steps = [num_local_steps(len(c.x), cfg) for c in clients]
    order = sorted(range(len(clients)), key=lambda i: -steps[i])  # those still training: a prefix
    cohort = [clients[i] for i in order]
    batches = [list(batch_indices(len(c.x), cfg.batch_size, steps[i], torch.Generator().manual_seed(c.seed)))
               for i, c in zip(order, cohort)]
    train_mode(model, freeze_features)
    names = list(model.state_dict())
    params = [n for n, _ in model.named_parameters()]
    trained = [n for n in params if n.startswith("classifier.")] if freeze_features else params
    stacked = {n: torch.stack([torch.from_numpy(np.asarray(c.start[n])) for c in cohort]).to(device) for n in names}
    start = {n: stacked[n].clone() for n in params} if stacked_loss else {}
    opt_state = _OptimizerState(cfg, {n: stacked[n] for n in trained})
    data_x, x_at = shared_rows([c.x for c in cohort])
    data_y, y_at = shared_rows([c.y for c in cohort])
    if x_at != y_at:
        raise ValueError("a client's inputs and labels lie at different rows of their arrays")
    offsets = torch.tensor(x_at, device=device)
    losses = torch.zeros(len(cohort), device=device)
    forward = vmap(lambda p, x: functional_call(model, p, (x,)), randomness="different")
    padded = not mixes_samples(model)
    reuse_freed_memory()
    torch.manual_seed(cohort[0].seed)  # dropout and other in-model randomness of the cohort
    with cohort_mode(model):
        for t in range(max(steps)):
            active = sum(len(b) > t for b in batches)
            for rows in _step_groups([len(b[t]) for b in batches[:active]], padded):
                idx, weight = _batch(batches, rows, t, cfg.batch_size if padded else None, device)
                sel = slice(0, active) if len(rows) == active else torch.tensor(rows, device=device)
                part = {n: v[sel] for n, v in stacked.items()}
                leaves = {n: part[n].detach().requires_grad_(n in trained) for n in names}
                logits = forward(leaves, data_x[idx + offsets[sel, None]])
                ce = F.cross_entropy(logits.flatten(0, 1), data_y[idx + offsets[sel, None]].flatten(),
                                     reduction="none").view(idx.shape)
                loss = (ce * weight).sum(1) / weight.sum(1)
                objective = loss.sum()
                if stacked_loss is not None:
                    objective = objective + stacked_loss({n: leaves[n] for n in params}, {n: v[sel] for n, v in start.items()})
                grads = torch.autograd.grad(objective, [leaves[n] for n in trained])
                with torch.no_grad():
                    if not isinstance(sel, slice):  # BatchNorm's running statistics moved in ``leaves``
                        for n in names:
                            if n not in trained:
                                part[n].copy_(leaves[n])
                    opt_state.step(part, dict(zip(trained, grads)), sel, t)
                    if not isinstance(sel, slice):  # a gathered group: write it back
                        for n in names:
                            stacked[n].index_copy_(0, sel, part[n])
                    losses[sel] += loss.detach()
    losses = losses.cpu()
    results: list = [None] * len(clients)
    for j, i in enumerate(order):
        weights = {n: stacked[n][j].cpu().numpy().copy() for n in names}
        results[i] = (weights, {"loss": float(losses[j]) / max(steps[i], 1), "steps": float(steps[i])})
    return results


def reuse_freed_memory() -> None:
    """Let glibc keep blocks of up to 32 MB, once freed, for the next allocation instead of handing
    them back to the system (``mallopt``). A cohort's step allocates its stacked gradients anew,
    tens of MB each; mapped fresh from the system every step, their pages fault and are zeroed again
    (docs/performance.md). Actors give free memory back after each round
    (``actors.client.release_free_memory``, once a round). Elsewhere than glibc, nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: the most glibc allows on 64 bits
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: free memory at the heap's top stays up to 1 GB
    except (OSError, AttributeError):
        pass


def shared_rows(parts: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """One tensor holding every part as rows, and the row where each part starts: the array the
    parts are slices of when they all are (a host's client-major training set: no copy), else
    their concatenation."""
    first = parts[0]
    storage = first.untyped_storage()
    row = first[0].numel() if len(first) else 1
    if storage.nbytes() % (row * first.element_size()) == 0 and all(
            p.is_contiguous() and p.untyped_storage().data_ptr() == storage.data_ptr() and p.storage_offset() % row == 0
            for p in parts):
        whole = first.new_empty(0).set_(storage).view(-1, *first.shape[1:])
        return whole, [p.storage_offset() // row for p in parts]
    return torch.cat(parts), np.cumsum([0] + [len(p) for p in parts[:-1]]).tolist()


def _step_groups(sizes: list[int], padded: bool) -> list[list[int]]:
    """The groups of clients that take step t together: all of them when short batches are padded,
    else those of equal batch size (the full batches first)."""
    if padded or len(set(sizes)) == 1:
        return [list(range(len(sizes)))]
    groups: dict[int, list[int]] = {}
    for j, size in enumerate(sizes):
        groups.setdefault(size, []).append(j)
    return [groups[s] for s in sorted(groups, reverse=True)]


def _batch(batches: list[list[torch.Tensor]], rows: list[int], t: int, width: Optional[int],
           device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Step t's sample indices of the clients ``rows``, [k, width], and each entry's weight (0 for
    the rows that pad a short batch to ``width``; None: the group's batches all have one size)."""
    parts = [batches[j][t] for j in rows]
    width = width or len(parts[0])
    weight = torch.ones(len(parts), width)
    if any(len(p) < width for p in parts):
        for k, p in enumerate(parts):
            weight[k, len(p):] = 0
        parts = [torch.cat([p, p[:1].expand(width - len(p))]) for p in parts]
    return torch.stack(parts).to(device), weight.to(device)


class _OptimizerState:
    """The optimiser of ``cfg`` over stacked parameters: momentum (SGD) or the moments (Adam) of
    every client, stepped by torch's own functional ``sgd`` and ``adam``."""

    def __init__(self, cfg: TrainingConfig, params: dict[str, torch.Tensor]):
        self.cfg = cfg
        buffers = ("momentum",) if cfg.optimizer == "sgd" and cfg.momentum else ("exp_avg", "exp_avg_sq") if cfg.optimizer == "adam" else ()
        self.buffers = {b: {n: torch.zeros_like(p) for n, p in params.items()} for b in buffers}

    def step(self, part: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], sel, t: int) -> None:
        """Update ``part`` (the stepped clients' slices of the parameters) in place; ``t`` steps so far."""
        cfg, names = self.cfg, list(grads)
        state = {b: {n: v[n][sel] for n in names} for b, v in self.buffers.items()}
        p, g = [part[n] for n in names], [grads[n] for n in names]
        if cfg.optimizer == "sgd":
            # a zero buffer is the first step's clone of the gradient: 0 * momentum + g = g exactly
            sgd(p, g, [state["momentum"][n] for n in names] if "momentum" in state else [None] * len(p),
                weight_decay=cfg.weight_decay, momentum=cfg.momentum, lr=cfg.lr, dampening=0.0,
                nesterov=False, maximize=False)
        else:
            steps = [torch.tensor(float(t)) for _ in names]
            adam(p, g, [state["exp_avg"][n] for n in names], [state["exp_avg_sq"][n] for n in names], [], steps,
                 amsgrad=False, beta1=0.9, beta2=0.999, lr=cfg.lr, weight_decay=cfg.weight_decay, eps=1e-8,
                 maximize=False)
        if not isinstance(sel, slice):
            for b, v in self.buffers.items():
                for n in names:
                    v[n].index_copy_(0, sel, state[b][n])


def chunk_size(model: torch.nn.Module, sample: torch.Tensor, cfg: TrainingConfig, budget_bytes: int,
               data_bytes: int = 0) -> int:
    """How many clients of ``model``'s architecture fit ``budget_bytes`` when trained as one chunk:
    a function of the model, the training config and the budget alone (``memory_budget``), so that
    every run of a config cuts its cohorts alike.

    Per client: its weights four times (stacked, start, gradient, a temporary) and its optimiser
    buffers, a batch's activations (counted on one forward pass of a ``cfg.batch_size`` batch of
    ``sample``) three times (saved for the backward pass, their gradients, vmap's temporaries), and
    ``data_bytes``, its shard in the chunk's copy of the data."""
    weights = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    copies = 4 + {"sgd": 1 if cfg.momentum else 0, "adam": 2}[cfg.optimizer]
    outputs: list[int] = []
    hooks = [m.register_forward_hook(lambda m, i, o: outputs.append(o.numel() if torch.is_tensor(o) else 0))
             for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model.eval()
            model(sample.expand(cfg.batch_size, *sample.shape))
    finally:
        for h in hooks:
            h.remove()
    per_client = 4 * (copies * weights + 3 * sum(outputs)) + data_bytes
    return max(1, budget_bytes // per_client)


def memory_budget(device: torch.device, gpu_share: float) -> int:
    """Bytes a chunk of clients may take: ``CHUNK_BUDGET_BYTES`` on a CPU; on a GPU half of this
    actor's share (``runtime.actor_gpus``; all of it for 0 or 1) of the device's total memory.

    Both are fixed: the config's and the device's, never the memory free at the moment. How a
    cohort is cut into chunks changes the arithmetic (the CNN's convolutions add in another order
    for chunks of 8 clients or more, a chunk of one trains sequentially: ``tests/test_cohort.py``),
    so a budget read from the free memory would let what else runs on the machine change a run's
    results."""
    if device.type == "cuda":
        share = gpu_share if 0 < gpu_share < 1 else 1.0
        return int(share * torch.cuda.get_device_properties(device).total_memory) // 2
    return CHUNK_BUDGET_BYTES


def chunks(items: list, size: int) -> list[list]:
    """``items`` cut into consecutive runs of at most ``size`` (the last may be shorter)."""
    return [items[i:i + size] for i in range(0, len(items), size)]
