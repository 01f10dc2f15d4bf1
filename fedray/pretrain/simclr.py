"""Self-supervised pre-training of a feature extractor: SimCLR (Chen et al., ICML 2020), FedAUX's P1.

    for every mini-batch x of the auxiliary data:
        v1, v2 <- augment(x), augment(x)                   two random views of every image
        z1, z2 <- g(h(v1)), g(h(v2))                       h: the model's features, g: a projection head
        loss   <- NT-Xent(z1, z2, temperature)             SimCLR eq. 1, every view's pair the positive
        update h and g with Adam; g is thrown away afterwards

The model's classifier takes no part and stays as initialised. The augmentations (random resized
crops, horizontal flips, colour jitter on colour images only) are batched tensor ops on the data's
device; ``pretrain.augment: torchvision`` makes the same pipeline of ``torchvision.transforms.v2``
(:func:`augment_torchvision`, the ``fedray[vision]`` extra, docs/vision.md). The FedAUX authors'
checkpoints came from leftthomas/SimCLR (digest section 3): NT-Xent temperature 0.5, projection head
in -> in (BN, ReLU) -> 128, Adam 1e-3 with weight decay 1e-6; the papers give neither epochs nor
temperature.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedray.config import ConfigError, PretrainConfig
from fedray.datafile import DataFileError, read_file, write_file
from fedray.weights import Weights, get_weights


def augment(x: torch.Tensor, generator: torch.Generator, min_crop: float = 0.2, flip: bool = True,
            jitter: float = 0.4) -> torch.Tensor:
    """A random view of every image of ``x`` (B, C, H, W): a resized crop of area fraction in
    [min_crop, 1] and aspect ratio in [3/4, 4/3] (narrowed so the crop fits), mirrored with probability
    1/2 if ``flip``, in one affine resampling; colour jitter of strength ``jitter`` (with probability
    0.8) on 3-channel images."""
    if x.ndim != 4:
        raise ValueError(f"pre-training augments images (B, C, H, W); got inputs of shape {tuple(x.shape)}")
    b = len(x)
    area = torch.empty(b).uniform_(min_crop, 1.0, generator=generator)
    # the aspect ratios at which a crop of this area fits in the image: both sides at most 1
    low, high = area.log().clamp(min=math.log(3 / 4)), (-area.log()).clamp(max=math.log(4 / 3))
    ratio = torch.exp(low + (high - low) * torch.rand(b, generator=generator))
    width, height = (area * ratio).sqrt(), (area / ratio).sqrt()
    shift_x = (2 * torch.rand(b, generator=generator) - 1) * (1 - width)  # the crop stays inside the image
    shift_y = (2 * torch.rand(b, generator=generator) - 1) * (1 - height)
    mirror = torch.where(torch.rand(b, generator=generator) < 0.5, -1.0, 1.0) if flip else torch.ones(b)
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = width * mirror, shift_x
    theta[:, 1, 1], theta[:, 1, 2] = height, shift_y
    grid = F.affine_grid(theta.to(x), list(x.shape), align_corners=False)
    views = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    if x.shape[1] == 3 and jitter > 0:  # grey images: no colour to jitter
        views = colour_jitter(views, generator, jitter)
    return views


def colour_jitter(x: torch.Tensor, generator: torch.Generator, strength: float, p: float = 0.8) -> torch.Tensor:
    """Brightness, contrast and saturation factors in [1 - s, 1 + s] (no hue shift), each image with
    probability ``p``; on normalised inputs, scaling around the image's own mean and grey value."""
    b = len(x)
    apply = (torch.rand(b, generator=generator) < p).float()

    def factor() -> torch.Tensor:
        f = torch.empty(b).uniform_(1 - strength, 1 + strength, generator=generator)
        return (1 + apply * (f - 1)).view(b, 1, 1, 1).to(x)

    x = x * factor()  # brightness
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = (x - mean) * factor() + mean  # contrast
    grey = x.mean(dim=1, keepdim=True)
    return (x - grey) * factor() + grey  # saturation


def augment_torchvision(x: torch.Tensor, generator: torch.Generator, min_crop: float = 0.2, flip: bool = True,
                        jitter: float = 0.4) -> torch.Tensor:
    """:func:`augment` made of ``torchvision.transforms.v2``: ``RandomResizedCrop`` (area fraction in
    [min_crop, 1], aspect ratio in [3/4, 4/3], bilinear with antialiasing, to the image's own size),
    ``RandomHorizontalFlip(0.5)`` if ``flip``, and on 3-channel images ``ColorJitter`` of brightness,
    contrast and saturation ``jitter`` (no hue) with probability 0.8.

    v2 draws one set of random parameters per call, so the pipeline is called once per image (each
    image gets its own view, as in :func:`augment`). Its randomness comes from ``generator`` (one seed
    drawn from it per batch, torch's global generator left as it was). ColorJitter clamps float images
    to [0, 1], so the batch is mapped linearly onto [0, 1] by its minimum and maximum and back
    afterwards. Where this differs from :func:`augment`: crops are whole-pixel boxes resized (after
    10 failed draws torchvision falls back to a central crop) rather than one affine resampling with
    reflected borders; brightness scales around the batch's darkest value rather than the data's mean
    and jittered values are clipped to the batch's range; contrast and saturation blend with the ITU-R
    601 grey (0.299 R + 0.587 G + 0.114 B) rather than the channels' mean; the three jitters come in a
    random order rather than brightness, contrast, saturation. Neither pipeline blurs nor turns images
    grey (SimCLR's RandomGrayscale and GaussianBlur are left out in both).
    """
    if x.ndim != 4:
        raise ValueError(f"pre-training augments images (B, C, H, W); got inputs of shape {tuple(x.shape)}")
    pipeline = torchvision_pipeline(x.shape[1], tuple(x.shape[-2:]), min_crop, flip, jitter)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    low, high = x.amin(), x.amax()
    scale = torch.clamp(high - low, min=1e-12)
    unit = (x - low) / scale
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        views = torch.stack([pipeline(image) for image in unit])
    return views * scale + low


def torchvision_pipeline(channels: int, size: tuple[int, int], min_crop: float, flip: bool, jitter: float):
    """The ``transforms.v2`` pipeline of :func:`augment_torchvision` for one image of ``channels``
    channels and ``size`` (H, W); a ConfigError line when torchvision cannot be imported."""
    try:
        from torchvision.transforms import v2
    except Exception as err:  # noqa: BLE001 - missing, or built for another torch ("operator ... does not exist")
        line = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"pretrain.augment = torchvision, but torchvision cannot be imported ({type(err).__name__}: "
                          f"{line}); install fedray's vision extra (docs/vision.md) or set pretrain.augment: fedray") \
            from None
    steps = [v2.RandomResizedCrop(size, scale=(min_crop, 1.0), ratio=(3 / 4, 4 / 3), antialias=True)]
    if flip:
        steps.append(v2.RandomHorizontalFlip(0.5))
    if channels == 3 and jitter > 0:  # grey images: no colour to jitter
        steps.append(v2.RandomApply([v2.ColorJitter(brightness=jitter, contrast=jitter, saturation=jitter)], p=0.8))
    return v2.Compose(steps)


AUGMENTATIONS = {"fedray": augment, "torchvision": augment_torchvision}


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's NT-Xent loss (eq. 1): for each of the 2N views, cross-entropy of its pair among the
    other 2N - 1 views, over cosine similarities divided by ``temperature``; the mean over 2N."""
    n = len(z1)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    similarity = z @ z.T / temperature
    similarity = similarity.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    pairs = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(similarity, pairs)


class ProjectionHead(nn.Sequential):
    """g: Linear(d, d, no bias), BatchNorm, ReLU, Linear(d, out) (the head of leftthomas/SimCLR)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__(nn.Linear(in_dim, in_dim, bias=False), nn.BatchNorm1d(in_dim), nn.ReLU(),
                         nn.Linear(in_dim, out_dim))


def feature_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter but the classifier's: the feature extractor h."""
    return [p for name, p in model.named_parameters() if not name.startswith("classifier.")]


def pretrain_features(model: nn.Module, x: torch.Tensor, params: PretrainConfig, generator: torch.Generator) -> dict[str, Any]:
    """Pre-train ``model.features`` in place on the images ``x`` (on their device) for ``params.epochs``
    epochs; returns the mean loss of every epoch and the step count. A model whose features have no
    parameters (``logreg``) is left as it is."""
    trained = feature_parameters(model)
    if not trained:
        return {"loss": [], "steps": 0}
    augmentation = AUGMENTATIONS[params.augment]
    head = ProjectionHead(model.feature_dim, params.projection_dim).to(x.device)
    optimizer = torch.optim.Adam(trained + list(head.parameters()), lr=params.lr, weight_decay=params.weight_decay)
    model.train(), head.train()
    losses, steps = [], 0
    for _ in range(params.epochs):
        order, total, batches = torch.randperm(len(x), generator=generator).to(x.device), 0.0, 0
        for start in range(0, len(x) - 1, params.batch_size):
            batch = x[order[start:start + params.batch_size]]
            if len(batch) < 2:  # a lone image has no negatives (and BatchNorm needs two)
                continue
            views = [augmentation(batch, generator, params.min_crop, params.flip, params.jitter) for _ in range(2)]
            loss = nt_xent(*(head(model.features(v)) for v in views), params.temperature)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, batches = total + float(loss.detach()), batches + 1
        losses.append(total / max(batches, 1))
        steps += batches
    return {"loss": losses, "steps": steps}


CACHE_MAGIC = b"FEDRAY-PRETRAINED\n"


def cache_root(params: PretrainConfig) -> Path:
    """``pretrain.cache_dir``, else ``$FEDRAY_CACHE``, else ``~/.cache/fedray``; pre-trained weights under ``pretrain/``."""
    root = params.cache_dir or os.environ.get("FEDRAY_CACHE") or Path.home() / ".cache" / "fedray"
    return Path(root) / "pretrain"


def cache_key(arch: str, aux_x: np.ndarray, params: PretrainConfig, seed: int, key_extra: dict[str, Any]) -> str:
    """A hash of everything pre-training depends on: architecture, model options and shapes, the
    auxiliary data itself, the seed and the SimCLR settings (not where the cache is, nor freezing)."""
    data = np.ascontiguousarray(aux_x)
    digest = hashlib.sha256(data.tobytes())
    digest.update(f"{data.shape}{data.dtype}".encode())
    settings = params.model_dump(exclude={"cache_dir", "freeze_features"})
    if settings.get("augment") == "fedray":  # the default keeps the key it had without the option: caches stay valid
        del settings["augment"]
    described = json.dumps({"arch": arch, "seed": seed, "extra": key_extra, "settings": settings,
                            "aux": digest.hexdigest()}, sort_keys=True, default=str)
    return hashlib.sha256(described.encode()).hexdigest()


def read_cached(path: Path, expected: Weights) -> tuple[Optional[dict[str, Any]], str]:
    """The cache entry at ``path`` when it is intact and holds weights of ``expected``'s names,
    shapes and dtypes, else None and why it is not used ("" when there is none). The entry is read
    as data (``fedray.datafile``): a damaged, edited or foreign file is not used, and nothing in it
    runs; the pre-training then runs again and replaces it."""
    if not path.is_file():
        return None, ""
    try:
        _, saved = read_file(path, CACHE_MAGIC)
        weights, loss = saved["weights"], saved["loss"]
        if not (isinstance(weights, dict) and weights.keys() == expected.keys() and all(
                isinstance(weights[k], np.ndarray) and weights[k].shape == v.shape and weights[k].dtype == v.dtype
                for k, v in expected.items()) and isinstance(loss, list)):
            raise DataFileError("holds weights of another model")
    except (DataFileError, OSError, KeyError, TypeError) as err:
        return None, f"{path} {err}"
    return saved, ""


def pretrained_weights(build_model: Callable[[str], nn.Module], arch: str, aux_x: np.ndarray, params: PretrainConfig,
                       seed: int, device: torch.device, key_extra: dict[str, Any]) -> tuple[Weights, dict[str, Any]]:
    """theta^0 of ``arch`` (``torch.manual_seed(seed)``, then ``build_model``) with its feature extractor
    pre-trained on ``aux_x``, from the cache when a run with the same inputs wrote it.

    Returns:
        The whole model's weights (the classifier as initialised) and what happened: ``cached``,
        ``loss`` per epoch, ``seconds``, the cache file's ``path``.
    """
    path = cache_root(params) / f"{cache_key(arch, aux_x, params, seed, key_extra)}.fedray"
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # the model's names and shapes, leaving torch's generator as it was
        expected = get_weights(build_model(arch))
    saved, replaced = read_cached(path, expected)
    if saved is not None:
        return saved["weights"], {"cached": True, "loss": saved["loss"], "seconds": time.perf_counter() - start,
                                  "path": str(path)}
    torch.manual_seed(seed)
    model = build_model(arch).to(device)
    x = torch.from_numpy(np.ascontiguousarray(aux_x, dtype=np.float32)).to(device)
    stats = pretrain_features(model, x, params, torch.Generator().manual_seed(seed))
    weights = get_weights(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic: parallel runs of a grid may write the same entry
    write_file(path, CACHE_MAGIC, {"format": 1, "arch": arch}, {"weights": weights, "loss": stats["loss"]},
               "pre-training cache entry")
    info = {"cached": False, "loss": stats["loss"], "seconds": time.perf_counter() - start, "path": str(path)}
    if replaced:
        info["replaced"] = replaced
    return weights, info
