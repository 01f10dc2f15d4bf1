"""Where a run's rounds run: the backend interface, the local backend, and the one table that
names the backends.

A backend does two things for ``fedray.runner`` and the CLI: :meth:`Backend.check` what can be
checked before anything starts (for Ray: the cluster answers, the actors fit), and
:meth:`Backend.start` a run, which gives a :class:`Stepper`, the same calls whichever backend steps
the rounds. The local backend runs the round loop in this process. The Ray backend lives beside
the core, in ``actors/`` (``actors.driver``): the core never imports it (nor Ray); it names it by
import path in :data:`BACKENDS` and loads it here, only when a run asks for ``runtime.backend: ray``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence

from fedray.config import Config
from fedray.messages import RoundResult

if TYPE_CHECKING:
    from fedray.resolve import Method
    from fedray.observers import Observer


@dataclass
class Stepper:
    """A started run, stepped one round at a time (a local Federation, or the ServerActor)."""

    current_round: Callable[[], int]
    run_round: Callable[[], RoundResult]
    finish: Callable[[], dict[str, Any]]
    checkpoint: Callable[[], Any]  # write the checkpoint of the round now
    cohort_refusal: Optional[str] = None  # why the clients do not train as cohorts, when asked to
    # after a failure or a stop: end what the run started (its actors, a Ray of its own), so that the
    # next run in this process finds the CPUs free; its checkpoint and folder stay as they are
    close: Callable[[], None] = lambda: None


class Backend(Protocol):
    def check(self, config: Config) -> None:
        """Raise ConfigError (one line) for what the backend cannot run, before anything starts."""

    def start(self, config: Config, method: Optional[Method], run_dir: Path, resume: bool,
              observers: Sequence[Observer] = ()) -> Stepper:
        """Start (or resume) the run in ``run_dir``; ``method`` None: resolved where the loop runs;
        ``observers``: the user's, added to the loop's (``fedray.observers``)."""


class LocalBackend:
    """The round loop and every client in this process."""

    def check(self, config: Config) -> None:
        pass

    def start(self, config: Config, method: Optional[Method], run_dir: Path, resume: bool,
              observers: Sequence[Observer] = ()) -> Stepper:
        from fedray.assembly import assemble
        from fedray.federation import Federation

        fed = Federation(assemble(config, method=method), run_dir, resume=resume, observers=observers)
        return Stepper(lambda: fed.round, fed.run_round, fed.finish, fed.save_checkpoint,
                       fed.experiment.method.cohort_refusal)


LOCAL = LocalBackend()
BACKENDS = {"local": "fedray.backends:LOCAL", "ray": "actors.driver:RAY"}  # runtime.backend -> module:object
SWEEPER = "actors.sweep"  # fedray sweep's trials: Ray Tune, a placement group per trial (fedray.sweeps)


def sweeper():
    """The module that runs a sweep's trials (``trial_bundles``, ``run_trials``): Ray's, whichever
    backend the trials use, since Ray Tune runs them."""
    return importlib.import_module(SWEEPER)


def backend(name: str) -> Backend:
    """The backend ``runtime.backend`` names."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
