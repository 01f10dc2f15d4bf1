"""Helpers shared by tests: build a method's halves from a config the way a run does; a round's
statistics made from whole uploads as a host makes them; a user's observer; two states compared to
the bit; a script of scripts/ imported as a module."""

import importlib
import math
import sys
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from fedray.messages import ClientSpec, RoundPlan
from fedray.methods import ServerContext, VirtualClient
from fedray.observers import Observer
from fedray.resolve import resolve
from fedray.round import Round, collection


def make_strategy(config, specs, build_model, **context):
    """The config's method's server half over ``specs`` (``resolve`` validates its parameters)."""
    return resolve(config).make_strategy(ServerContext(config, specs, build_model, **context))


def client_half(strategy):
    """The method's client half as a host of ``strategy``'s run builds it (one per strategy)."""
    if getattr(strategy, "_test_client_half", None) is None:
        ctx = strategy.ctx
        aux = None if ctx.aux_x is None else torch.from_numpy(np.array(ctx.aux_x)).to(ctx.device)
        strategy._test_client_half = strategy.Client(strategy.params, strategy.config, ctx.build_model, ctx.device, aux,
                                                     ctx.initial_models)
    return strategy._test_client_half


def bare_client(update, state=None):
    """A client of ``update``'s id, size and architecture holding ``state`` (no data)."""
    spec = ClientSpec(update.client_id, update.arch, np.zeros(update.num_samples, dtype=np.int64))
    return VirtualClient(spec, torch.zeros(0), torch.zeros(0), dict(state or {}))


def gathered(strategy, number, updates, clients=None, plan=None):
    """Round ``number`` as a host hands it over when it gathers: each whole upload of ``updates``
    turned into its client's statistics by the method's client half, with ``clients[id]`` (else a
    bare client), in client-id order; the updates without their uploads."""
    half, clients = client_half(strategy), clients or {}
    ordered = sorted(updates, key=lambda u: u.client_id)
    entries = [(u.client_id, u.arch, half.statistics(u, clients.get(u.client_id) or bare_client(u))) for u in ordered]
    return Round(number, plan or RoundPlan([], {}), [replace(u, payload=None) for u in ordered], gathered=entries)


def summed(number, sums, updates):
    """Round ``number`` as hosts hand it over when they fold: ``sums`` and the updates without their uploads."""
    return Round(number, RoundPlan([], {}), [replace(u, payload=None) for u in updates], sums=sums)


def aggregate(strategy, number, updates, clients=None):
    """``strategy.aggregate`` of round ``number`` from whole uploads (:func:`gathered`)."""
    return strategy.aggregate(gathered(strategy, number, updates, clients))


def uploads(fed, plan):
    """The whole uploads of ``plan``'s tasks, in client-id order, from the local executor's host
    (its ``run_batch``: the statistics not made, nothing summed)."""
    host, keys = fed.executor.host, sorted(plan.broadcast)
    return sorted(host.run_batch(plan.tasks, keys, *(plan.broadcast[k] for k in keys)), key=lambda u: u.client_id)


def collects(strategy) -> str:
    """How ``strategy``'s run collects its clients' statistics: ``fold`` or ``gather``."""
    return collection(strategy.Client.collected(strategy.params), strategy.config.runtime.fold)


class ClientCounter(Observer):
    """A user's observer (``fedray.observers``): counts the clients whose updates reached the
    aggregate, logs that as a metric of each round, and keeps its running total across a resume."""

    key = "client_counter"

    def __init__(self):
        self.total, self.rounds = 0, []

    def aggregated(self, fed, step):
        self.total += len(step.updates)
        step.metrics["user/clients_total"] = float(self.total)

    def ended(self, fed, step):
        self.rounds.append(step.number)

    def finished(self, fed, summary):
        summary["client_counter"] = {"total": self.total, "rounds": self.rounds}

    def state_dict(self):
        return self.total

    def load_state_dict(self, state):
        self.total = state


def same(a, b) -> bool:
    """Equal values of the same types, arrays and tensors to the bit, in the same memory order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        layout = (a.flags.f_contiguous, a.flags.c_contiguous)  # a strided view comes back in C order
        return (a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                and (layout == (b.flags.f_contiguous, b.flags.c_contiguous) or layout == (False, False)))
    if isinstance(a, torch.Tensor):
        return (a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
                and a.detach().reshape(-1).view(torch.uint8).tolist() == b.detach().reshape(-1).view(torch.uint8).tolist())
    if isinstance(a, (dict, OrderedDict)):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or a != a and b != b)
    if isinstance(a, (np.generic, int, str, bytes, type(None), bool, set, frozenset, complex)):
        return a.tobytes() == b.tobytes() if isinstance(a, np.generic) else a == b
    return same(vars(a), vars(b))


def script(name: str):
    """The script ``scripts/<folder>/<name>.py``, given as ``"folder.name"``, as the module
    ``scripts.folder.name`` (the scripts import each other so)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"scripts.{name}")
