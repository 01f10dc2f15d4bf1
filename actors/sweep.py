"""The Ray backend's side of ``fedray sweep`` (``fedray.sweeps``): the placement group of a trial,
and the trials run by Ray Tune, each an ordinary run of its config into ``OUT/trials/<name>``.

Tune reserves each trial's group before the trial starts. For the Ray backend the group is the
server actor's bundle, then one bundle per client actor (``trial_bundles``), and the trial's own
process, which only drives the run, asks for nothing (Tune's empty head bundle); inside the trial
``actors.places`` starts every actor in its bundle. A trial of the local backend runs its round
loop in the trial's process, so its one bundle is that process's: ``trial_cpus`` CPUs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Optional

from fedray.config import Config, ConfigError, RuntimeConfig


def trial_bundles(config: Config, cpus: Optional[float] = None, gpus: float = 0.0) -> list[dict[str, float]]:
    """The placement group of a trial of ``config`` with ``cpus`` CPUs and ``gpus`` GPUs: the server
    actor's bundle, then one bundle per client actor, planned as a run on one node of that size is
    (``actors.placement.plan_actors``). ``cpus`` None: one client actor's (``runtime.actor_cpus``),
    which the server takes when it hosts the clients."""
    from actors.placement import Node, plan_actors

    rt = config.runtime
    if rt.backend == "local":  # the round loop runs in the trial's own process
        return [{"CPU": float(cpus if cpus is not None else rt.torch_threads or 1)}]
    cpus = float(rt.actor_cpus if cpus is None else cpus)
    hosts = rt.server_hosts(cpus)
    try:
        slots = plan_actors(config.federation.client_archs(), rt, [Node("trial", cpus, float(gpus))], "trial", hosts)
    except ValueError as err:
        raise ConfigError(f"a trial of {cpus:g} CPUs and {gpus:g} GPUs: {err}") from None

    def bundle(cpu: float, gpu: float) -> dict[str, float]:
        b = {k: v for k, v in (("CPU", cpu), ("GPU", gpu)) if v > 0}
        return b or {"CPU": 0.01}  # a bundle must ask for something; a server of 0 CPUs holds a token

    return [bundle(rt.server_request(hosts), rt.server_gpus)] + [bundle(s.cpus, s.gpus) for s in slots if not s.server]


def _trial(params: dict, *, configs: dict, out: str, cwd: str) -> None:
    """A Tune trial (in a Ray process of its own): run, resume or just read the trial's run, then
    report its final and best accuracy to Tune."""
    from ray import tune

    from fedray.runner import run_to_the_end

    os.chdir(cwd)  # Tune starts a trial in a folder of its own; the config's relative paths are the user's
    name = params["trial"]
    run_dir = Path(out) / "trials" / name
    run_to_the_end(configs[name], run_dir)
    summary = json.loads((run_dir / "result.json").read_text())
    tune.report({"final_accuracy": summary["final"].get("eval/accuracy"), "best_accuracy": summary["best_accuracy"],
                 "rounds": summary["rounds"]})


def run_trials(runtime: RuntimeConfig, configs: dict[str, Config], resources: dict[str, list[dict]], out: Path,
               max_concurrent: Optional[int], progress: bool) -> None:
    """Run the trials ``configs`` (name -> config) with Ray Tune, each in the placement group of its
    ``resources``, on the Ray of ``runtime`` (a local one started here and ended after, or the
    cluster's); a failed trial leaves its ``error.log`` and the others go on."""
    from ray import tune

    from actors.driver import connect, shutdown_ray

    if not progress:
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # with verbose 0 the older console output prints nothing
    started = connect(runtime)
    try:
        head = {name: [] if c.runtime.backend == "local" else [{}] for name, c in configs.items()}
        trainable = tune.with_parameters(_trial, configs=configs, out=str(out), cwd=os.getcwd())
        tuner = tune.Tuner(
            tune.with_resources(trainable, lambda params: tune.PlacementGroupFactory(
                head[params["trial"]] + resources[params["trial"]])),
            param_space={"trial": tune.grid_search(list(configs))},
            tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent),
            run_config=tune.RunConfig(name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=str(out / "tune"),
                                      verbose=1 if progress else 0,
                                      failure_config=tune.FailureConfig(max_failures=0, fail_fast=False)),
        )
        tune_log = logging.getLogger("ray.tune")
        level = tune_log.level
        tune_log.setLevel(logging.CRITICAL)  # a failed trial's traceback is in its error.log; the sweep says one line
        try:
            tuner.fit()
        finally:
            tune_log.setLevel(level)
    finally:
        if started:
            shutdown_ray()
