"""Unlabelled auxiliary (public) data for federated distillation.

Two sources (``aux:`` section of the config):

- a disjoint part of the training set (``dataset: null``): ``size`` samples are drawn with a seeded
  generator and removed from the training arrays *before* the client split, so no client holds
  them;
- another data set (``dataset: digits`` and so on): ``size`` samples of its training part, brought
  to the run's input shape (channel count and side length), for out-of-domain distillation.

Only inputs are returned. The labels of auxiliary samples are dropped here, so no method can train
on them.
"""

from __future__ import annotations

import numpy as np

from fedray.data.bundle import DatasetBundle, DatasetNotFoundError


def aux_source(call, name: str, root: str | None, **options):
    """``call(name, root, **options)`` (``check_dataset`` or ``load_dataset``) for the auxiliary data
    set, with a missing one named as ``aux.dataset`` and ``aux.root`` in the one-line error."""
    try:
        return call(name, root, **options)
    except DatasetNotFoundError as err:
        raise DatasetNotFoundError(f"aux.dataset {name}: " + str(err).replace("data.root", "aux.root")) from None


def carve_aux(bundle: DatasetBundle, size: int, seed: int) -> np.ndarray:
    """Remove ``size`` random training samples from ``bundle`` (in place); return their inputs only."""
    n = len(bundle.train_y)
    if bundle.client_split is not None:
        raise ValueError(f"aux.dataset null carves auxiliary data out of the training set, but {bundle.name} "
                         f"comes with a natural client split; name another aux.dataset")
    if size >= n:
        raise ValueError(f"bad config value aux.size = {size}: the training set of {bundle.name} has only {n} samples")
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.default_rng([seed, 0xA0C5]).permutation(n)[:size]] = True
    aux_x = bundle.train_x[chosen]
    bundle.train_x, bundle.train_y = bundle.train_x[~chosen], bundle.train_y[~chosen]
    return aux_x


def foreign_aux(source: DatasetBundle, size: int, seed: int, input_shape: tuple[int, ...]) -> np.ndarray:
    """``size`` random training inputs of another data set, converted to ``input_shape`` (C, H, W)."""
    n = len(source.train_x)
    if size > n:
        raise ValueError(f"bad config value aux.size = {size}: the auxiliary data set {source.name} has only {n} samples")
    keep = np.sort(np.random.default_rng([seed, 0xA0C5]).permutation(n)[:size])
    return to_input_shape(source.train_x[keep], input_shape, source.name)


def split_negatives(aux_x: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(distillation set, negative set D^-): one seeded permutation of the auxiliary inputs, the first
    ``fraction`` of it D^- (FedAUX Alg. 1: D^- and D_distill are disjoint; the authors' code drew two
    independent permutations, so its parts could overlap)."""
    order = np.random.default_rng([seed, 0xD15C]).permutation(len(aux_x))
    cut = int(round(fraction * len(aux_x)))
    if fraction and not 0 < cut < len(aux_x):
        raise ValueError(f"bad config value aux.negatives = {fraction}: it leaves {cut} of {len(aux_x)} auxiliary "
                         f"samples as negatives; both parts need at least one")
    return aux_x[np.sort(order[cut:])], aux_x[np.sort(order[:cut])]


def to_input_shape(x: np.ndarray, input_shape: tuple[int, ...], name: str) -> np.ndarray:
    """Images (N, C, H, W) to ``input_shape``: grey <-> colour by averaging or repeating channels,
    bilinear (antialiased) resizing of the sides."""
    if x.ndim != 4 or len(input_shape) != 3:
        if tuple(x.shape[1:]) == tuple(input_shape):
            return x.astype(np.float32)
        raise ValueError(f"auxiliary data set {name} has inputs of shape {x.shape[1:]}, which cannot be "
                         f"converted to the run's input shape {tuple(input_shape)}")
    import torch  # on use: the Ray driver checks aux_source without torch
    import torch.nn.functional as F

    channels, height, width = input_shape
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if t.shape[1] != channels:
        if channels == 1:
            t = t.mean(dim=1, keepdim=True)
        elif t.shape[1] == 1:
            t = t.repeat(1, channels, 1, 1)
        else:
            raise ValueError(f"auxiliary data set {name} has {t.shape[1]} channels; the run needs {channels}")
    if tuple(t.shape[2:]) != (height, width):
        t = F.interpolate(t, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
    return t.numpy()
