"""The cluster rehearsal (scripts/cluster/rehearse.py, docs/cluster.md): Ray's own cluster launcher
drives a head and two workers, each a network namespace of this machine with its own address, /tmp,
home and sshd. Needs root, ``ip netns``, openssh-server and rsync (``scripts/setup/cluster.sh``
installs the last two); skipped, with the reason, where the machine cannot hold the hosts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[2]
REHEARSE = ROOT / "scripts" / "cluster" / "rehearse.py"
MODEL_BYTES = (784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10) * 4  # the MLP's float32 parameters


def test_ray_up_submit_a_lost_host_job_submit_and_ray_down(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(REHEARSE), "--json", str(report_path), "--prefix", "frt",
                           "--base", "/var/tmp/fedray-rehearsal-test", "--keep-logs", str(tmp_path / "logs"),
                           "--timeout", "500"], capture_output=True, text=True, timeout=600)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    report = json.loads(report_path.read_text())
    assert done.returncode == 0 and "failed" not in report, f"{report.get('failed')}\n{done.stderr[-3000:]}"
    steps = {s["step"]: s for s in report["steps"]}
    assert all(s["ok"] for s in steps.values()) and len(steps) == 8
    ips = report["hosts"]

    # `ray submit CLUSTER fedray/cli.py -- run rehearsal.yaml`: over both workers, w2 lost after
    # round 2, still 8 rounds
    lost = steps["ray submit, w2 lost mid-run"]
    assert lost["active_nodes"] == 3 and lost["lost_at_round"] == 2
    assert lost["w2_processes_killed"] >= 3  # a raylet and its agents at least
    assert [k.split("/")[0] for k in lost["executor"]["actors_per_node"]] == [ips["w1"]]  # what the run ended on
    placement = json.loads(steps["client actors spread over the workers"]["placement"][0])
    assert sorted(k.split("/")[0] for k in placement["actors_per_node"]) == [ips["w1"], ips["w2"]]
    assert steps["TensorBoard files, copied by ray rsync-down, read on user"]["rounds"] == 8
    same = steps["bit for bit the local backend's run"]
    assert same["cluster_sha256"] == same["local_sha256"]
    assert len(same["faults"]) == 1 and f"its node {ips['w2']}/" in same["faults"][0]
    assert len(lost["notes"]) == 1 and f"its node {ips['w2']}/" in lost["notes"][0]  # said on the terminal
    assert lost["final"]["eval/accuracy"] > 0.6  # 8 rounds of FedAvg on 3,200 images

    # the wire: fedray counts each client's float32 update up, and the answers that reached the
    # server (at least one model's sums a round); all of those crossed the head's interface between
    # the counters read before `ray submit` and after it returned (the per-round rows split that at
    # the rounds' event times, read a tenth of a second apart, so a round's bytes may fall in the next)
    rows = report["wire"]["rehearsal"]
    assert [r["round"] for r in rows] == list(range(1, 9))
    assert all(r["fedray_bytes_up"] == 8 * MODEL_BYTES and r["fedray_bytes_to_server"] >= MODEL_BYTES for r in rows)
    assert report["wire_total"]["rehearsal"]["head"]["in"] >= sum(r["fedray_bytes_to_server"] for r in rows)

    # `ray job submit --working-dir examples` through `ray dashboard`'s forwarded port
    job = steps["ray dashboard + ray job submit --working-dir examples"]
    assert "Job 'rehearsal-fednova' succeeded" in job["output"]
    assert job["final"]["eval/accuracy/tabular_net:TabularNet"] > 0.8

    # `ray down`, then `ray stop` on the workers: nothing left, and no namespace, folder or process
    down = steps["ray down"]
    assert down["head_left"] == [] and down["left"] == {"head": [], "w1": [], "w2": []}
    assert report["cleanup"]["left"] == []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not [n for n in names if n.startswith("frt-")]
    assert not Path("/var/tmp/fedray-rehearsal-test").exists()
