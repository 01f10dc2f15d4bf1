"""Client groups with different data distributions, and adversarial clients (thesis chapter 6).

Clustered FL needs clients whose conditionals phi(y|x) disagree. Clients are cut into ``groups``
contiguous, equally large blocks (client i is in group i * K // M), and group k's data, train and
test alike, is changed by one of:

- ``label_swap`` (section 6.5): group k >= 1 swaps its own pair of labels (distinct pairs, drawn
  from a seeded permutation of the classes); group 0 keeps the labels.
- ``label_permutation`` (section 6.6, eqs. 6.47-6.48): every group relabels with its own seeded
  random permutation P_k.
- ``rotation`` (the authors' demo): group k's images are turned by k * 360 / K degrees (multiples
  of 90, so K is 1, 2 or 4).

Adversaries (section 6.7, after Munoz-Gonzalez et al. 2019) are a seeded random ``fraction`` of the
clients (:func:`adversary_ids`); what they do is their attack (``fedray.attacks``). Test data is
never adversarial.
"""

from __future__ import annotations

import numpy as np

GROUP_SHIFTS = ("none", "label_swap", "label_permutation", "rotation")


def client_groups(num_clients: int, groups: int) -> np.ndarray:
    """The group of each client: K contiguous blocks of (nearly) equal size."""
    if not 1 <= groups <= num_clients:
        raise ValueError(f"groups must lie in [1, num_clients = {num_clients}], got {groups}")
    return np.arange(num_clients) * groups // num_clients


def adversary_ids(num_clients: int, fraction: float, seed: int) -> np.ndarray:
    """round(fraction * M) clients, drawn with the data seed."""
    count = int(round(fraction * num_clients))
    return np.sort(np.random.default_rng([seed, 0xAD]).choice(num_clients, size=count, replace=False))


def label_map(shift: str, group: int, groups: int, num_classes: int, seed: int) -> np.ndarray:
    """new_label = map[old_label] for group ``group``."""
    mapping = np.arange(num_classes)
    rng = np.random.default_rng([seed, 0x5A1F])
    if shift == "label_swap" and group > 0:
        if 2 * (groups - 1) > num_classes:
            raise ValueError(f"label_swap needs 2 * (groups - 1) <= {num_classes} classes, got groups = {groups}")
        order = rng.permutation(num_classes)
        a, b = order[2 * (group - 1)], order[2 * group - 1]
        mapping[a], mapping[b] = b, a
    elif shift == "label_permutation":
        for _ in range(group + 1):  # P_0, P_1, ... from one stream: group k takes the (k+1)-th
            mapping = rng.permutation(num_classes)
    return mapping


def rotation_quarters(shift: str, group: int, groups: int) -> int:
    """How many quarter turns group ``group``'s images make."""
    if shift != "rotation" or group == 0:
        return 0
    if 4 % groups:
        raise ValueError(f"rotation turns group k by k * 360 / K degrees in quarter turns, so K must be "
                         f"1, 2 or 4, got {groups}")
    return group * 4 // groups


def apply_group(x: np.ndarray, y: np.ndarray, shift: str, group: int, groups: int, num_classes: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Group ``group``'s version of the samples (x: (N, C, H, W) images for rotation)."""
    if shift not in GROUP_SHIFTS:
        raise ValueError(f"unknown group shift {shift!r}; valid: {', '.join(GROUP_SHIFTS)}")
    quarters = rotation_quarters(shift, group, groups)
    if quarters:
        if x.ndim != 4:
            raise ValueError(f"rotation needs image inputs (N, C, H, W); got shape {x.shape}")
        x = np.ascontiguousarray(np.rot90(x, quarters, axes=(2, 3)))
    if shift in ("label_swap", "label_permutation"):
        y = label_map(shift, group, groups, num_classes, seed)[y]
    return x, y
