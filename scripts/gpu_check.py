"""GPU checks, on a machine with one CUDA GPU: fractional GPU shares that hold.

1. ``actor_gpus: 0.25`` puts four client actors on the GPU, each on ``cuda`` with a quarter of it
   assigned by Ray; a fifth actor (``clients_per_actor: 1`` with five clients) is refused before
   anything starts.
2. The share caps memory: an MLP with two hidden layers of 20,000 units (401 M parameters, 1.6 GB
   of weights) fails its actor at a share of 0.02 (1.6 GB of an 80 GB GPU), with the cap named in
   the message; at 0.25 the same run trains.
3. Per-architecture shares (``{mlp: 0.1, logreg: 0.05}``) give each architecture its own actors
   with its own share.
4. FedDF with its distillation in a server actor on the GPU (``server_gpus: 0.25``) learns.

Data: scikit-learn's digits (real 8x8 scans), so nothing has to be copied to the GPU machine.

    python scripts/gpu_check.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import ray
import torch

from fedray.config import ConfigError, build_config
from fedray.runner import RunFailed, run_experiment

BASE = {
    "data": {"dataset": "digits"},
    "federation": {"num_clients": 8, "clients_per_round": 4, "rounds": 5, "architectures": {"mlp": 8}},
    "training": {"lr": 0.1, "batch_size": 32, "epochs": 2},
    "runtime": {"actor_cpus": 1, "actor_gpus": 0.25},
}


def config(**sections):
    tree = json.loads(json.dumps(BASE))
    for section, values in sections.items():
        tree.setdefault(section, {}).update(values)
    return build_config(tree)


def run(cfg) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = run_experiment(cfg, Path(tmp) / "run", progress=False)
        summary["seconds"] = time.perf_counter() - start
        return summary


def failure(cfg) -> str:
    try:
        run(cfg)
    except (RunFailed, ConfigError) as err:  # a run that fails, or a config refused before it starts
        return f"{type(err).__name__}: {err}"
    return "no failure"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_check needs a CUDA GPU")
    ray.init(num_cpus=16, num_gpus=1, include_dashboard=False, logging_level="ERROR")
    out = {"gpu": torch.cuda.get_device_name(0),
           "gpu_gib": torch.cuda.get_device_properties(0).total_memory / 2**30, "torch": torch.__version__,
           "ray": ray.__version__}

    def check(name, fn):
        try:
            out[name] = fn()
        except Exception as err:  # record and go on: every check gets its turn on the borrowed GPU
            out[name] = f"FAILED: {type(err).__name__}: {err}"
        print(name, json.dumps(out[name]), flush=True)

    def four_quarters():
        summary = run(config())
        return {"executor": summary["executor"], "accuracy": summary["final"]["eval/accuracy"],
                "seconds": summary["seconds"]}

    big = {"federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1, "architectures": {"mlp": 4},
                          "model_options": {"mlp": {"hidden": [20000, 20000]}}},
           "training": {"lr": 0.01, "batch_size": 32, "epochs": 1}}

    def oversized_fits():
        summary = run(config(**big))
        return {"accuracy": summary["final"]["eval/accuracy"], "seconds": summary["seconds"],
                "devices": summary["executor"]["devices"]}

    def per_architecture():
        summary = run(config(federation={"architectures": {"mlp": 4, "logreg": 4}},
                             runtime={"actor_gpus": {"mlp": 0.1, "logreg": 0.05}}))
        return {"executor": summary["executor"], "accuracy": summary["final"]["eval/accuracy"]}

    def feddf():
        summary = run(config(federation={"architectures": {"mlp": 4, "logreg": 4}, "rounds": 5},
                             aux={"size": 300}, algorithm={"name": "feddf"},
                             runtime={"actor_gpus": 0.25, "server_gpus": 0.25}))
        return {"server_device": summary["server_device"], "executor": summary["executor"],
                "accuracy": summary["final"]["eval/accuracy"], "seconds": summary["seconds"]}

    check("four_quarters", four_quarters)
    check("fifth_refused", lambda: failure(config(federation={"num_clients": 5, "architectures": {"mlp": 5}},
                                                  runtime={"clients_per_actor": 1})))
    check("oversized_at_0.02", lambda: failure(config(**big, runtime={"actor_gpus": 0.02})))
    check("oversized_at_0.25", oversized_fits)
    check("per_architecture", per_architecture)
    check("feddf_server_on_gpu", feddf)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
