"""Runs an experiment from the driver: connect to Ray, start the ServerActor, step its rounds.

The driver only steps rounds and draws the progress bar; the ServerActor does the work. With
``runtime.backend: local`` the same loop runs the Federation in this process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import ray
import torch
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tqdm import tqdm

from actors.server import ServerActor
from fedray.clients import LocalExecutor
from fedray.config import Config, RuntimeConfig
from fedray.federation import CHECKPOINT, Federation
from fedray.messages import RoundResult


class RunFailed(RuntimeError):
    """A run stopped; the message says why, and how to resume from the last checkpoint."""


def connect(runtime: RuntimeConfig) -> None:
    """Start a local Ray capped at the configured resources, or join ``address``/``RAY_ADDRESS``."""
    if ray.is_initialized():
        return
    address = runtime.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level="ERROR")
    else:
        ray.init(num_cpus=runtime.num_cpus, num_gpus=runtime.num_gpus, include_dashboard=False,
                 logging_level="ERROR")


@dataclass
class _Stepper:
    """The same three calls on a local Federation or on the ServerActor."""

    current_round: Callable[[], int]
    run_round: Callable[[], RoundResult]
    finish: Callable[[], dict[str, Any]]


def _local_stepper(config: Config, run_dir: Path, resume: bool) -> _Stepper:
    fed = Federation(config, run_dir, LocalExecutor, resume=resume)
    return _Stepper(lambda: fed.round, fed.run_round, fed.finish)


def start_server(config: Config, run_dir: Path, resume: bool):
    """The started ServerActor, pinned to this node, with its own CPU/GPU request from the config."""
    rt = config.runtime
    here = ray.get_runtime_context().get_node_id()
    server = ray.remote(ServerActor).options(
        num_cpus=rt.server_cpus, num_gpus=rt.server_gpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    ).remote(config, str(run_dir), resume)
    ray.get(server.start.remote())
    return server


def _ray_stepper(config: Config, run_dir: Path, resume: bool) -> _Stepper:
    connect(config.runtime)
    server = start_server(config, run_dir, resume)
    return _Stepper(lambda: ray.get(server.current_round.remote()),
                    lambda: ray.get(server.run_round.remote()),
                    lambda: ray.get(server.finish.remote()))


def checkpoint_round(run_dir: Path) -> Optional[int]:
    path = run_dir / CHECKPOINT
    return int(torch.load(path, weights_only=False)["round"]) if path.is_file() else None


def run_experiment(config: Config, run_dir: str | Path, resume: bool = False,
                   progress: bool = True) -> dict[str, Any]:
    """Run (or resume) an experiment to ``federation.rounds``; return the summary of result.json.

    Raises:
        RunFailed: with one line naming the failure, the last checkpoint and the resume command.
    """
    run_dir = Path(run_dir)
    make = _local_stepper if config.runtime.backend == "local" else _ray_stepper
    try:
        stepper = make(config, run_dir, resume)
        start = stepper.current_round()
        total = config.federation.rounds
        with tqdm(total=total, initial=start, desc=config.name, unit="round", disable=not progress,
                  dynamic_ncols=True) as bar:
            for _ in range(start, total):
                result = stepper.run_round()
                shown = {k.split("/")[-1]: f"{v:.4f}" for k, v in result.metrics.items()
                         if k in ("eval/accuracy", "train/loss")}
                bar.set_postfix(shown)
                bar.update(1)
        return stepper.finish()
    except KeyboardInterrupt:
        raise RunFailed(_resume_hint("interrupted", run_dir)) from None
    except RayTaskError as err:
        raise RunFailed(_resume_hint(_one_line(root_cause(err)), run_dir)) from None
    except RayActorError as err:
        raise RunFailed(_resume_hint(f"the server actor died: {_one_line(err)}", run_dir)) from None
    except (RuntimeError, ValueError, OSError) as err:
        raise RunFailed(_resume_hint(_one_line(err), run_dir)) from None


def root_cause(err: BaseException) -> BaseException:
    """The original exception under Ray's task-error wrappers (a client's error passes two actors)."""
    while isinstance(err, RayTaskError) and getattr(err, "cause", None) is not None and err.cause is not err:
        err = err.cause
    return err


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _resume_hint(reason: str, run_dir: Path) -> str:
    saved = checkpoint_round(run_dir) if run_dir.is_dir() else None
    if saved is None:
        return f"{reason} (no checkpoint was written in {run_dir})"
    return f"{reason}; the checkpoint of round {saved} is intact: fedray resume {run_dir}"
