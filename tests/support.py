"""Helpers shared by tests: build a method's halves from a config the way a run does; a user's observer;
two states compared to the bit; a script of scripts/ imported as a module."""

import importlib.util
import math
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from fedray.algorithms import ServerContext
from fedray.method import resolve
from fedray.observers import Observer


def make_strategy(config, specs, build_model, **context):
    """The config's method's server half over ``specs`` (``resolve`` validates its parameters)."""
    return resolve(config).make_strategy(ServerContext(config, specs, build_model, **context))


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
        self.rounds.append(step.round)

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
    """``scripts/<name>.py`` as a module (the scripts import each other from that folder)."""
    folder = Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
