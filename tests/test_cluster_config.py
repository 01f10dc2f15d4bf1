"""scripts/cluster/fedray-cluster.yaml: valid for Ray's cluster launcher, and set up for fedray.

Validation is Ray's own: its ``ray-schema.json`` on the file as written, then, as ``ray up`` does
before it touches a cloud, ``prepare_config`` (merges the AWS defaults) and ``validate_config``.
"""

import copy
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from fedray.data.datasets import DEFAULT_DATA_ROOT

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "scripts" / "cluster" / "fedray-cluster.yaml"
RAY_SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"


def load():
    return yaml.safe_load(CLUSTER_YAML.read_text())


def check(config):
    """Raise as Ray's launcher would; return the config ``ray up`` would work with."""
    jsonschema.validate(config, json.loads(RAY_SCHEMA.read_text()))
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def test_ray_accepts_the_example_cluster():
    prepared = check(load())
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]


def _misspelt_key(c):
    c["setup_comands"] = c.pop("setup_commands")


def _wrong_type(c):
    c["max_workers"] = "4"


def _fractional_gpu(c):
    c["available_node_types"]["gpu_worker"]["resources"]["GPU"] = 0.5


def _unknown_head_type(c):
    c["head_node_type"] = "ray.head.default"


@pytest.mark.parametrize("breakage, error", [
    (_misspelt_key, jsonschema.ValidationError),
    (_wrong_type, jsonschema.ValidationError),
    (_fractional_gpu, jsonschema.ValidationError),  # node resources are whole numbers
    (_unknown_head_type, ValueError),  # head_node_type must name an entry of available_node_types
])
def test_ray_rejects_a_broken_copy(breakage, error):
    config = load()
    breakage(config)
    with pytest.raises(error):
        check(config)


def test_every_node_installs_fedray_from_the_copied_repository():
    config = load()
    prepared = check(config)
    mounts = config["file_mounts"]
    repo = [remote for remote, local in mounts.items() if (ROOT / local).resolve() == ROOT]
    assert len(repo) == 1, mounts  # the repository root (`ray up` runs from it) goes to one place
    # Commands run in ~: a folder named fedray there would shadow the installed package.
    assert Path(repo[0]).name != "fedray"
    for kind in ("head_setup_commands", "worker_setup_commands"):  # setup_commands merged in
        installs = [c for c in prepared[kind] if re.search(rf"pip install .*-e {re.escape(repo[0])}\b", c)]
        assert installs, (kind, prepared[kind])
        ray_pins = re.findall(r"ray\[default\]==([\w.]+)", " ".join(prepared[kind]))
        assert ray_pins == [ray.__version__], (kind, ray_pins)  # the cluster runs the client's Ray


def test_the_nodes_have_fashion_mnist_where_fedray_looks():
    prepared = check(load())
    for kind in ("head_setup_commands", "worker_setup_commands"):
        setup = " ".join(prepared[kind])
        # the Debian/Ubuntu package installs into /usr/share/datasets/fashion-mnist
        assert "dataset-fashion-mnist" in setup, kind
    assert DEFAULT_DATA_ROOT == "/usr/share/datasets"


def test_head_and_workers_start_with_token_authentication():
    config = load()
    prepared = check(config)
    assert "~/.ray/auth_token" in config["file_mounts"]  # the token `ray job submit` uses, on every node
    for kind in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in prepared[kind] if "ray start" in c]
        assert starts, kind
        for command in starts:
            words = shlex.split(command.replace(";", " ; "))
            assert "RAY_AUTH_MODE=token" in words[:words.index("start")], command
    head = " ".join(prepared["head_start_ray_commands"])
    assert "--head" in head and "--dashboard-host=127.0.0.1" in head  # reached through SSH only


def test_a_cpu_head_and_gpu_workers():
    config = load()
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    workers = {name: t for name, t in types.items() if name != config["head_node_type"]}
    assert head["resources"].get("GPU", 0) == 0
    assert workers and all(t["resources"].get("GPU", 0) >= 1 for t in workers.values())
    # fedray plans its actors on the nodes alive at the start of a run: `ray up` must start them all
    assert all(t["min_workers"] == t["max_workers"] >= 1 for t in workers.values())
    assert sum(t["min_workers"] for t in workers.values()) == config["max_workers"]


def rehearsal_config():
    import sys
    sys.path.insert(0, str(CLUSTER_YAML.parent))
    from rehearse import cluster_config
    return cluster_config(Path("/rehearsal/key"), Path("/project/.venv"))


def test_the_rehearsal_runs_this_file_with_only_what_the_local_provider_changes():
    """scripts/cluster/rehearse.py derives its cluster from this file: Ray accepts the result, and
    every command it does not list as changed is the file's own, in the file's order."""
    original = load()
    config, changes = rehearsal_config()
    prepared = check(config)
    assert prepared["provider"] == {"type": "local", "head_ip": "10.213.7.11",
                                    "worker_ips": ["10.213.7.12", "10.213.7.13"]}
    assert config["file_mounts"] == original["file_mounts"] and config["rsync_filter"] == original["rsync_filter"]
    changed = " ".join(where for where, _, _ in changes)
    kept = [c for c in original["setup_commands"] if c[:40] not in changed]
    assert kept and [c for c in config["setup_commands"] if c in original["setup_commands"]] == kept
    assert not any(c.startswith(("sudo apt-get", "pip install")) for c in config["setup_commands"])
    for kind in ("head_start_ray_commands", "worker_start_ray_commands"):  # the same commands, flags added
        assert len(config[kind]) == len(original[kind])
        for new, old in zip(config[kind], original[kind]):
            assert new.startswith(old)
            assert new == old or "--node-ip-address=$RAY_NODE_IP" in new[len(old):]
    assert "RAY_AUTH_MODE=token" in config["head_start_ray_commands"][1]
    assert "--dashboard-host=127.0.0.1" in config["head_start_ray_commands"][1]
    assert all(why for _, _, why in changes)  # each change says why (docs/cluster.md lists them)


def test_a_setup_command_the_rehearsal_does_not_know_fails_it_loudly(monkeypatch):
    import rehearse
    original = load()
    original["setup_commands"] = [c for c in original["setup_commands"] if not c.startswith("pip install")]
    monkeypatch.setattr(rehearse.yaml, "safe_load", lambda text: original)
    with pytest.raises(SystemExit, match="no setup command starts with .'pip install'"):
        rehearsal_config()
