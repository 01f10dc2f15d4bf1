"""What the rehearsal (``rehearse.py``) hands to ``ray submit``: on the cluster's head, it waits for
the worker nodes, then runs fedray on the cluster through the Python API and prints one JSON line
(the run folder, where the client actors went, the final model's SHA-256, the final metrics).

    ray submit CLUSTER.yaml scripts/cluster/rehearsal_job.py -- --nodes 3 --run-dir ~/runs/rehearsal

The run's config is ``config()``: the rehearsal runs the same one on the local backend, and a
folding method there ends bit for bit where the cluster run ends, whichever host is lost.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path


def config(rounds: int, clients: int, fold: bool = True) -> dict:
    """A FedAvg run on Fashion-MNIST that spreads over the workers (one one-CPU actor on each) and
    runs long enough (each round ends with a checkpoint) for a host to be lost in its middle."""
    return {"name": "rehearsal", "seed": 0, "checkpoint_every": 1,
            "data": {"dataset": "fashion_mnist", "partition": "dirichlet", "alpha": 1.0,
                     "train_limit": min(400 * clients, 60000),
                     "test_limit": 1000},
            "federation": {"num_clients": clients, "clients_per_round": clients, "rounds": rounds,
                           "architectures": {"mlp": clients}},
            "training": {"lr": 0.05, "batch_size": 16, "epochs": 1},
            "algorithm": {"name": "fedavg"},
            "runtime": {"backend": "ray", "address": "auto", "actor_cpus": 1.0, "clients_per_actor": "auto",
                        "torch_threads": 1, "fold": fold}}


def fingerprint(models: dict) -> str:
    """SHA-256 over every architecture's parameters and buffers, in name order."""
    digest = hashlib.sha256()
    for arch in sorted(models):
        for name, tensor in sorted(models[arch].state_dict().items()):
            digest.update(f"{arch}/{name}".encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def wait_for_nodes(count: int, timeout: float) -> list[str]:
    """The addresses of the cluster's live nodes once ``count`` are up (SystemExit after ``timeout``)."""
    import ray

    ray.init(address="auto", logging_level="ERROR")
    try:
        deadline = time.time() + timeout
        while True:
            alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
            if len(alive) >= count:
                return alive
            if time.time() > deadline:
                raise SystemExit(f"only {len(alive)} of {count} nodes up after {timeout:.0f} s: {alive}")
            time.sleep(0.5)
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3, help="wait until this many nodes are alive")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--no-fold", dest="fold", action="store_false", help="every update travels to the server")
    parser.add_argument("--wait", type=float, default=120, help="seconds to wait for the nodes")
    args = parser.parse_args()
    nodes = wait_for_nodes(args.nodes, args.wait)
    import fedray

    run_dir = args.run_dir.expanduser()
    result = fedray.run(config(args.rounds, args.clients, args.fold), run_dir=run_dir, progress=False)
    summary = json.loads((run_dir / "result.json").read_text())
    print(json.dumps({"nodes": nodes, "run_dir": str(run_dir), "host": os.uname().nodename,
                      "actors_per_node": summary["executor"]["actors_per_node"],
                      "sha256": fingerprint(result.models()), "final": result.final}))


if __name__ == "__main__":
    main()
