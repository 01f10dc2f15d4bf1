"""Benchmark: a round's local training, one client after another against vectorised cohorts.

The workload is FedAvg's client half on Fashion-MNIST: 100 iid clients of 600 samples, 1 local
epoch of SGD (lr 0.05, batch 32 or ``--batch``), K clients a round. Both sides are fedray's own ``ClientHost``
(``runtime.vectorize`` off and on): each client's receive, local training and upload, with the same
clients, batches and initial model. Only the local training differs. Each cell times rounds 2 to
``--rounds`` (round 1 warms up), alternating the two sides round by round. It reports the median
time per round, the ratio, and how far the two sides' updates lie apart: the largest weight
difference of any update, and that of the median update (a ReLU that one side's rounding puts just
on the other side of zero sends a client elsewhere, so the largest is not the typical).

    python scripts/bench/cohorts.py                          # mlp and cnn, 10 and 50 clients, CPU
    python scripts/bench/cohorts.py --device cuda --archs cnn --clients 50
    python scripts/bench/cohorts.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fedray.assembly import assemble  # noqa: E402
from fedray.config import build_config  # noqa: E402


def config(arch: str, per_round: int, device: str, vectorize: bool, threads: int, batch: int = 32):
    return build_config({
        "data": {"dataset": "fashion_mnist"},
        "federation": {"num_clients": 100, "clients_per_round": per_round, "architectures": {arch: 100}},
        "training": {"lr": 0.05, "batch_size": batch, "epochs": 1},
        "algorithm": {"name": "fedavg"},
        "runtime": {"backend": "local", "device": device, "torch_threads": threads, "vectorize": vectorize}})


def cell(arch: str, per_round: int, device: str, rounds: int, threads: int, batch: int) -> dict:
    """Median seconds per round of both sides, and the largest weight difference between their
    updates: over all updates, and that of the median update."""
    configs = {v: config(arch, per_round, device, v, threads, batch) for v in (False, True)}
    experiments = {v: assemble(configs[v]) for v in (False, True)}  # the same data, split and seeds
    strategy = experiments[False].strategy
    sides = {v: experiment.executor for v, experiment in experiments.items()}
    times: dict[bool, list[float]] = {False: [], True: []}
    diffs: list[float] = []  # each client update's largest weight difference between the sides
    for r in range(1, rounds + 1):
        plan = strategy.configure_round(r)
        updates = {}
        for v, executor in sides.items():
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            keys = sorted(plan.broadcast)  # whole uploads, to compare the two sides' weights
            updates[v] = executor.host.run_batch(plan.tasks, keys, *(plan.broadcast[k] for k in keys))
            if device == "cuda":
                torch.cuda.synchronize()
            if r > 1:
                times[v].append(time.perf_counter() - start)
        diffs += [max(float(np.abs(a.payload[k] - b.payload[k]).max()) for k in a.payload)
                  for a, b in zip(updates[False], updates[True])]
    seq, vec = statistics.median(times[False]), statistics.median(times[True])
    return {"arch": arch, "clients_per_round": per_round, "batch": batch, "device": device, "sequential_s": seq,
            "vectorised_s": vec, "speedup": seq / vec, "max_weight_diff": max(diffs),
            "median_weight_diff": statistics.median(diffs), "rounds_timed": rounds - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="mlp,cnn")
    parser.add_argument("--clients", default="10,50", help="clients per round, comma-separated")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=4, help="rounds per cell; the first is not timed")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (both sides)")
    parser.add_argument("--batch", type=int, default=32, help="local batch size")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None, "threads": args.threads}
    print(json.dumps(machine))
    print(f"batch {args.batch}")
    print(f"{'model':6} {'K':>4} {'device':6} {'sequential s':>13} {'vectorised s':>13} {'speedup':>8} {'max diff':>9} {'median':>8}")
    rows = []
    for arch in args.archs.split(","):
        for k in map(int, args.clients.split(",")):
            row = cell(arch, k, args.device, args.rounds, args.threads, args.batch)
            rows.append(row)
            print(f"{arch:6} {k:4d} {args.device:6} {row['sequential_s']:13.3f} {row['vectorised_s']:13.3f} "
                  f"{row['speedup']:7.2f}x {row['max_weight_diff']:9.1e} {row['median_weight_diff']:8.1e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
