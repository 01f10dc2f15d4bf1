"""Adversarial clients (thesis section 6.7): the built-in attacks, and the base class of a user's own.

``data.adversaries`` names the attack, a built-in name or ``package.module:Class``;
``data.adversary_fraction`` of the clients, chosen with the split's seed, run it (``ClientSpec.role``
is the attack's name, ``benign`` for the others). An attack may change a client's training data
once, when its host builds the client (:meth:`Attack.data`), and may replace the client's local
update each round (:meth:`Attack.update`); the method's ``upload`` then sends what it returns, so
the attack meets the method's compression and aggregation as an honest update would. The built-in
attacks:

- ``byzantine``: trains nothing and sends theta + xi, xi ~ N(0, I) drawn anew each round, on every
  floating tensor; for a method whose clients send a gradient (DSGD), xi in place of the gradient.
  Its data is untouched.
- ``label_flip``: trains honestly on its shard with every label set to class 0.
- ``noisy``: trains honestly on its inputs plus noise drawn uniformly from [-``data.noise``,
  ``data.noise``], once.

A user's attack is a subclass of :class:`Attack`, made with ``data.adversary_options`` as keyword
arguments on every host (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from fedray.weights import Weights, is_update

if TYPE_CHECKING:
    from fedray.methods.base import Client, LocalUpdate
    from fedray.config import DataConfig
    from fedray.messages import ClientTask


class Attack:
    """What an adversarial client does instead of an honest one; the default changes nothing."""

    def data(self, x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The adversary's training data, from its shard (``x``, ``y``; not to be written in place).
        ``seed``: the client's own, for noise that stays the same on every host and resume."""
        return x, y

    def update(self, client: Client, task: ClientTask, theta: Weights) -> Optional[LocalUpdate]:
        """The round's local update in place of training, given the method's client half, the task
        (``task.seed`` for this round's randomness) and the downloaded model ``theta``: a
        ``Trained`` (or, where ``client.update_kind`` is ``Gradient``, a ``Gradient``). None: the
        client trains honestly on its (attacked) data."""
        return None


class Byzantine(Attack):
    """Sends theta + xi, xi ~ N(0, I), instead of training (thesis section 6.7)."""

    def update(self, client: Client, task: ClientTask, theta: Weights) -> LocalUpdate:
        from fedray.methods.base import Gradient, Trained

        rng = np.random.default_rng(task.seed)
        metrics = {"loss": float("nan"), "steps": 0.0}
        if client.update_kind is Gradient:
            params = {name for name, _ in client.model(task.arch).named_parameters()}
            grad = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in theta.items() if k in params}
            return Gradient(grad, {k: v.copy() for k, v in theta.items() if k not in params}, metrics)
        return Trained({k: (v + rng.standard_normal(v.shape)).astype(v.dtype) if is_update(v) else v.copy()
                        for k, v in theta.items()}, metrics)


class LabelFlip(Attack):
    """Trains on its shard with every label set to class 0."""

    def data(self, x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return x, np.zeros_like(y)


class Noisy(Attack):
    """Trains on its inputs plus uniform noise in [-noise, noise], drawn once from the client's seed."""

    def __init__(self, noise: float):
        self.noise = noise

    def data(self, x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, 0x4015E])
        return (x + rng.uniform(-self.noise, self.noise, size=x.shape)).astype(x.dtype), y


ATTACKS: dict[str, type[Attack]] = {"byzantine": Byzantine, "label_flip": LabelFlip, "noisy": Noisy}


def make_attack(data: DataConfig, load: Callable[[str], type[Attack]]) -> Optional[Attack]:
    """The config's attack (None without adversaries): a built-in one, or the user's class by import
    path (``load``: ``fedray.plugins.load_attack``) made with ``data.adversary_options``."""
    kind = data.adversaries
    if kind == "none":
        return None
    if kind == "noisy":
        return Noisy(data.noise)
    if kind in ATTACKS:
        return ATTACKS[kind]()
    return build_attack(load(kind), data.adversary_options, kind)


def build_attack(cls: type[Attack], options: dict[str, Any], spec: str) -> Attack:
    """``cls(**options)``; ConfigError (one line) when its constructor refuses them."""
    from fedray.config import ConfigError

    try:
        return cls(**options)
    except Exception as err:  # noqa: BLE001 - the user's constructor: its error in one line
        raise ConfigError(f"bad config value data.adversary_options: {spec} refused them "
                          f"({type(err).__name__}: {err})") from None
