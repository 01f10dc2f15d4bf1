"""Benchmark: the bytes that reach the server actor per round on a three-node Ray cluster, with the
hosts folding their clients' updates (``runtime.fold: true``, the default) and without (every
client's update travels to the server, as before issue 32).

The cluster is ``ray.cluster_utils.Cluster`` on this machine: a head node of 1 CPU (the server,
which hosts clients too) and two nodes of 1 CPU (one client actor each), so three hosts. The
workload is FedAvg with the 2-conv CNN (1.66 M parameters, 6.65 MB a model) on Fashion-MNIST, 200
clients, 20 and 100 of them a round, 2 rounds. The count is the server's own: each round logs
``runtime/bytes_to_server``, the array bytes of the answers its ``ray.get`` received (updates'
payloads and, folding, the blocks' sums).

    python scripts/bench/server_bytes.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PER_ROUND = (20, 100)
ROUNDS = 2


def config(address: str, clients_per_round: int, fold: bool):
    from fedray.config import build_config

    return build_config({
        "name": "bench-cluster", "seed": 0, "checkpoint_every": ROUNDS,
        "data": {"dataset": "fashion_mnist", "partition": "iid", "train_limit": 20000, "test_limit": 1000},
        "federation": {"num_clients": 200, "clients_per_round": clients_per_round, "rounds": ROUNDS,
                       "architectures": {"cnn": 200}, "eval_every": ROUNDS},
        "training": {"lr": 0.05, "batch_size": 32, "epochs": 1},
        "algorithm": {"name": "fedavg"},
        "runtime": {"address": address, "actor_cpus": 1, "clients_per_actor": "auto", "fold": fold,
                    "torch_threads": 1},
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from actors.driver import start_server
    from fedray.resolve import resolve
    from fedray.tracking import read_scalars
    from fedray.weights import nbytes

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    rows = []
    try:
        ray.init(address=cluster.address, logging_level="ERROR")
        cluster.wait_for_nodes()
        for k in PER_ROUND:
            row = {"clients_per_round": k}
            for fold in (False, True):
                cfg = config(cluster.address, k, fold)
                with tempfile.TemporaryDirectory() as tmp:
                    server = start_server(cfg, resolve(cfg), Path(tmp), resume=False)
                    for _ in range(ROUNDS):
                        ray.get(server.run_round.remote())
                    summary = ray.get(server.finish.remote())
                    scalars = read_scalars(tmp)
                ray.kill(server)
                received = [v for _, v in scalars["runtime/bytes_to_server"]]
                side = "folded" if fold else "per_client"
                row[f"{side}_mb_per_round"] = [r / 1e6 for r in received]
                row["hosts"] = summary["executor"]["actors"]
                row["nodes"] = len(summary["executor"]["actors_per_node"])
                row["accuracy_" + side] = summary["final"]["eval/accuracy"]
            rows.append(row)
            model_mb = nbytes(_cnn_weights()) / 1e6
            print(f"{k:4} clients a round, {row['hosts']} hosts on {row['nodes']} nodes: MB into the server per round "
                  f"per client {', '.join(f'{v:.0f}' for v in row['per_client_mb_per_round'])} "
                  f"({k} models of {model_mb:.2f} MB); folded "
                  f"{', '.join(f'{v:.0f}' for v in row['folded_mb_per_round'])}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": "cluster", "rows": rows}, indent=2))


def _cnn_weights():
    from fedray.models import create_model
    from fedray.weights import get_weights

    return get_weights(create_model("cnn", (1, 28, 28), 10))


if __name__ == "__main__":
    main()
