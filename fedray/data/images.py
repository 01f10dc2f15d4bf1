"""uint8 images to normalised float32 NCHW arrays, with standard per-channel statistics."""

from __future__ import annotations

import numpy as np

# Per-channel (mean, std) of the training images scaled to [0, 1]: the usual published values.
CHANNEL_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "emnist": ((0.1751,), (0.3332,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
}

_CHUNK = 4096  # images converted at a time, so that large sets (STL-10 unlabelled) fit in memory


def check_image_options(name: str, channels: int, size: int | None, stats: str | None) -> None:
    """Checks the common image options ``size`` and ``stats``.

    Args:
        name: Data set name, for messages.
        channels: Channel count of the data set.
        size: Target side length, or ``None`` to keep the stored size.
        stats: Name of the data set whose channel statistics normalise this one, or ``None`` for its own.

    Raises:
        ValueError: A bad value; the one-line message names the valid ones.
    """
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"{name}: size must be a positive integer or None, got {size!r}")
    if stats is None:
        return
    valid = sorted(k for k, (mean, _) in CHANNEL_STATS.items() if len(mean) == channels)
    if stats not in valid:
        raise ValueError(f"{name}: stats must be None or one of {', '.join(valid)}, got {stats!r}")


def to_float_nchw(
    images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...], size: int | None = None
) -> np.ndarray:
    """Scales uint8 NCHW images to [0, 1], optionally resizes them, and normalises each channel.

    Args:
        images: uint8 array of shape ``(N, C, H, W)``.
        mean: Per-channel means of the [0, 1] images.
        std: Per-channel standard deviations.
        size: Resize to ``size x size`` (bilinear, antialiased) when given.

    Returns:
        float32 array of shape ``(N, C, H', W')``: ``(x / 255 - mean) / std``.
    """
    n, c, h, w = images.shape
    side = (h, w) if size is None else (size, size)
    out = np.empty((n, c, *side), dtype=np.float32)
    mean_a = np.asarray(mean, np.float32).reshape(1, c, 1, 1)
    std_a = np.asarray(std, np.float32).reshape(1, c, 1, 1)
    for start in range(0, n, _CHUNK):
        chunk = images[start : start + _CHUNK].astype(np.float32) / 255.0
        if size is not None and side != (h, w):
            chunk = _resize(chunk, side)
        out[start : start + _CHUNK] = (chunk - mean_a) / std_a
    return out


def _resize(chunk: np.ndarray, side: tuple[int, int]) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    resized = F.interpolate(torch.from_numpy(chunk), size=side, mode="bilinear", antialias=True, align_corners=False)
    return resized.numpy()
