"""What a local run exposes (docs/security.md, what a local run listens on): the sockets its Ray
listens on, the metrics it serves, the token file it leaves in the user's home, and what a dead
raylet prints."""

import http.client
import ipaddress
import os
import time
from pathlib import Path

import grpc
import psutil
import pytest
import ray

from actors.driver import connect, own_session, shutdown_ray
from fedray.checkpoint import checkpoint_round
from fedray.config import RuntimeConfig, save_config
from tests.integration import test_faults as faults
from tests.integration.conftest import small_config

pytestmark = [pytest.mark.integration, pytest.mark.security]
RAYLET = str(Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet")  # the raylet's argv[0]


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    return address.is_loopback or bool(getattr(address, "ipv4_mapped", None) and address.ipv4_mapped.is_loopback)


def listeners(pids) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every TCP socket the processes ``pids`` listen on."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            found += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:  # a worker Ray ended meanwhile
            pass
    return found


def http_answer(ip: str, port: int, path: str) -> bytes:
    """The body of ``GET path`` when it succeeds without a token; b"" for a refusal or no HTTP at all."""
    host = ip.removeprefix("::ffff:")
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.read() if reply.status == 200 else b""
    except (OSError, http.client.HTTPException):  # a gRPC server: not HTTP/1
        return b""
    finally:
        conn.close()


def grpc_answer(ip: str, port: int, method: str) -> bytes:
    """The reply to a unary gRPC call with an empty request and no token; b"" for any refusal."""
    host = ip.removeprefix("::ffff:")
    with grpc.insecure_channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}") as channel:
        try:
            return channel.unary_unary(method)(b"", timeout=5) or b"\0"  # an empty reply is still an answer
        except grpc.RpcError:
            return b""


def session_processes(deadline_s: float = 60) -> list[int]:
    """This process and its Ray's, once the node's agents are up, so that every listener is there:
    each agent writes the port it took into a file of the session's folder, the dashboard agent
    after its modules have started (its metrics export among them), the runtime-env agent once it
    serves."""
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    deadline = time.monotonic() + deadline_s
    while not all(any(session.glob(f"{name}_*")) for name in ("dashboard_agent_listen_port", "runtime_env_agent_port")):
        assert time.monotonic() < deadline, f"Ray's agents did not start within {deadline_s} s: {os.listdir(session)}"
        time.sleep(0.1)
    me = psutil.Process()
    return [me.pid] + [p.pid for p in me.children(recursive=True)]


def loose_ray_files(home: Path) -> list[str]:
    """What others may read or enter in ``home/.ray``, where Ray keeps its token (``auth_token``)."""
    loose = []
    for root, dirs, files in os.walk(home / ".ray"):
        for path in [Path(root)] + [Path(root, f) for f in files]:
            if os.stat(path).st_mode & 0o077:
                loose.append(f"{oct(os.stat(path).st_mode & 0o777)} {path}")
    return loose


def test_a_local_run_listens_on_loopback_only_serves_no_metrics_and_leaves_no_loose_token(tmp_path, monkeypatch):
    """A local Ray started as a run starts it (``connect`` without runtime.address or RAY_ADDRESS), on a
    fresh home: every socket of its processes (GCS, raylet, object manager, agents, the driver's
    and an actor's core worker) listens on the loopback interface; none serves Prometheus metrics,
    on any port; Ray still refuses a call without the token; and what the run left under HOME is
    readable by its user alone (Ray's token, if one is written, 0600 in a 0700 folder)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)  # also drops the RAY_AUTH_MODE that ray.init sets here
    assert not ray.is_initialized()
    with own_session():
        assert connect(RuntimeConfig(num_cpus=2))
    try:
        @ray.remote(num_cpus=0)
        class Actor:
            def pid(self):
                return os.getpid()

        actor = Actor.remote()
        worker = ray.get(actor.pid.remote())
        pids = session_processes()
        assert worker in pids
        found = listeners(pids)
        assert {"gcs_server", "raylet"} <= {name for name, _, _ in found} and listeners([worker]), found
        exposed = [(name, ip, port) for name, ip, port in found if not loopback(ip)
                   and (http_answer(ip, port, "/") or grpc_answer(ip, port, "/grpc.health.v1.Health/Check"))]
        assert exposed == [], f"listening beyond loopback and answering without the token: {exposed} (all: {found})"
        metrics = [(name, ip, port) for name, ip, port in found if b"# TYPE " in http_answer(ip, port, "/metrics")]
        assert metrics == [], f"Prometheus metrics served: {metrics}"
        gcs = [(ip, port) for name, ip, port in found if name == "gcs_server"]
        assert all(grpc_answer(ip, port, "/ray.rpc.NodeInfoGcsService/GetClusterId") == b"" for ip, port in gcs)
    finally:
        shutdown_ray()
    assert loose_ray_files(home) == []
    assert "RAY_AUTH_TOKEN" not in os.environ  # the run's own token left with its Ray


def test_a_dead_raylet_ends_the_run_with_one_line_and_nothing_of_rays_log(tmp_path):
    """The raylet of a run's local Ray killed once round 1 is checkpointed: every actor goes with it.
    The run ends with status 1 and one line on stderr (after the one naming the run folder) that
    names the raylet and the intact checkpoint; Ray's own report (the tail of the raylet's log, in
    colour, about 40 lines) does not reach stdout, and the traceback is in error.log."""
    config = small_config(federation={"rounds": 10_000, "architectures": {"mlp": 10}}, checkpoint_every=1,
                          runtime={"torch_threads": 1})
    path = tmp_path / "c.yaml"
    save_config(config, path)
    run_dir = tmp_path / "run"
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"}}
    with faults.kill_process_when(RAYLET, run_dir, 1):
        run = faults.fedray("run", str(path), "--run-dir", str(run_dir), "--no-progress",
                            env={**env, "HOME": str(home)})
        out, err = run.communicate(timeout=300)
    saved = checkpoint_round(run_dir)
    lines = err.splitlines()
    assert run.returncode == 1, err
    assert out == "", out  # nothing of Ray's log: no "(raylet) Raylet is terminated", no colour codes
    assert len(lines) == 2 and lines[0].startswith(f"fedray: run folder {run_dir}"), err
    assert lines[1].startswith("fedray: error: RayletDied: the raylet of the run's local Ray (pid "), err
    assert "was killed by SIGKILL" in lines[1] and "raylet.out" in lines[1], err
    assert saved >= 1 and lines[1].endswith(f"; the checkpoint of round {saved} is intact: fedray resume {run_dir}")
    assert "RayletDied" in (run_dir / "error.log").read_text()
    assert loose_ray_files(home) == []
