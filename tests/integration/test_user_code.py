"""A user's own method, model and data set reach the actors of a cluster through Ray's runtime
environment (``runtime.runtime_env``).

The cluster (``ray.cluster_utils.Cluster``, two nodes) is started by this test process, so its
workers know nothing of the user's package: the driver finds it on ``PYTHONPATH`` and runs from
another folder, and only ``runtime_env.py_modules`` can carry the package to the server and client
actors. Without it the same run stops with one line naming the module and how to send it (exit 2,
nothing run).
"""

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

pytestmark = pytest.mark.integration

USER_CODE = """
import numpy as np
from torch import nn

from fedray.algorithms.fedavg import FedAvg


class Avg(FedAvg):
    name = "user-avg"


def net(num_classes, hidden=32):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def digits(seed=0):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(x))
    return {"train_x": x[order[:1400]], "train_y": d.target[order[:1400]],
            "test_x": x[order[1400:]], "test_y": d.target[order[1400:]]}
"""


def test_runtime_env_carries_the_users_package_to_a_clusters_actors(tmp_path):
    name = f"usercode_{uuid.uuid4().hex[:8]}"
    package = tmp_path / "src" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(USER_CODE))
    elsewhere = tmp_path / "elsewhere"  # the driver's folder: not the package's
    elsewhere.mkdir()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")])}
        env.pop("RAY_ADDRESS", None)

        def run(label, runtime_env):
            tree = {"name": label, "seed": 1, "output_dir": str(tmp_path / "runs"),
                    "data": {"dataset": f"{name}:digits"},
                    "federation": {"num_clients": 6, "clients_per_round": 4, "rounds": 2,
                                   "architectures": {f"{name}:net": 6}},
                    "training": {"lr": 0.5, "batch_size": 16, "epochs": 2},
                    "algorithm": {"name": f"{name}:Avg"},
                    "runtime": {"address": cluster.address, "actor_cpus": 1, "clients_per_actor": "auto",
                                **({"runtime_env": runtime_env} if runtime_env else {})}}
            path = tmp_path / f"{label}.yaml"
            path.write_text(yaml.safe_dump(tree))
            return subprocess.run([sys.executable, "-m", "fedray.cli", "run", str(path), "--no-progress",
                                   "--run-dir", str(tmp_path / "runs" / label)],
                                  cwd=elsewhere, env=env, capture_output=True, text=True, timeout=240)

        shipped = run("shipped", {"py_modules": [str(package)]})
        assert shipped.returncode == 0, shipped.stderr[-3000:]
        result = json.loads((tmp_path / "runs" / "shipped" / "result.json").read_text())
        assert result["executor"]["backend"] == "ray" and len(result["executor"]["actors_per_node"]) == 2, result
        assert result["final"]["eval/accuracy"] > 0.5, result  # ten digits: chance is 0.1

        missing = run("missing", None)  # no runtime_env: the actors cannot import the package
        ours = [line for line in missing.stderr.splitlines() if line.startswith("fedray:")]
        assert missing.returncode == 2 and len(ours) == 1, missing.stderr[-3000:]
        assert ours[0] == (f"fedray: error: the run's actors cannot import module {name!r}, which the config names: "
                           f"send it to the cluster's nodes with runtime.runtime_env (e.g. {{py_modules: [{name}]}}) or "
                           f"ray job submit --working-dir (docs/extending.md, where your code runs)")
        assert not (tmp_path / "runs" / "missing" / "config.yaml").exists()
    finally:
        ray.shutdown()
        cluster.shutdown()
