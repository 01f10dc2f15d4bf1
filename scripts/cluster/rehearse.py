#!/usr/bin/env python3
"""A rehearsal of fedray on a real Ray cluster, on one Linux machine: `ray up`, `ray submit`,
`ray job submit`, a host lost mid-run and `ray down`, driven through Ray's own cluster launcher.

    sudo .venv/bin/python scripts/cluster/rehearse.py [--json report.json] [--keep-logs DIR]

The machine is cut into hosts: ``user`` (the machine a person types `ray up` on), ``head`` and
``w1``, ``w2`` (workers). Each is a network namespace with its own address on a private bridge
(which lives in a namespace of its own, so the machine's own network is not touched), its own
``/tmp`` (a bind mount in a mount namespace of its own, as Ray keeps its sessions, the local
provider's cluster state and ssh's control sockets there) and its own home folder; the cluster
hosts run an sshd that takes a key the rehearsal makes. They share the machine's file system
otherwise, so they share its Python and the project's virtual environment, and they share its
process table, which is why a host's ``ray stop`` is confined to its own namespace (``stop-here``).

The cluster config is ``scripts/cluster/fedray-cluster.yaml`` with only what the provider makes
differ replaced (``cluster_config``; docs/cluster.md lists it): the local provider with the hosts'
addresses, the rehearsal's key, no cloud packages, the shared venv instead of a new one, and each
node's resources and address on its ``ray start``. Its setup and start commands are otherwise the
file's own, token authentication and the dashboard on the head's loopback included.

Steps (each timed, its outcome in the JSON report):
  1. ``ray up`` brings the head and both workers up;
  2. ``ray submit CLUSTER fedray/cli.py -- run ...`` (docs/cluster.md's command) runs
     ``rehearsal.yaml`` on the head once the workers are up (``ray exec CLUSTER 'ray status'``): a
     FedAvg run over the cluster;
  3. its client actors are spread over the worker hosts;
  4. ``w2``'s processes are killed after the run's second checkpoint: the run goes on, its clients
     on the hosts left, and ends bit for bit where the same config ends on the local backend;
  5. ``ray dashboard`` forwards the head's dashboard, and ``ray job submit --working-dir examples``
     runs the examples' plug-in project (FedNova, TabularNet, WDBC);
  6. ``ray rsync-down`` brings the run folder to ``user``, whose TensorBoard files are read there;
  7. ``ray down`` stops the head's Ray; as the local provider leaves the workers' running (a cloud
     provider terminates their instances; ``--watch-down`` lists what stays, and for how long),
     ``ray stop`` runs on each over ssh; then no process but sshd is left on any host. Whatever happens, the namespaces, the bridge, the folders and
     every process the rehearsal started are removed at the end, and the report says so.

Each host's interface counters are read through the run of step 2 (``/proc/PID/net/dev`` of a
process in its namespace), and set beside fedray's own accounting of the bytes up and down per
round. Exit status 0 when every step holds, 1 when one fails, 77 when the machine cannot hold the
hosts (not root, no ``ip netns``, no sshd or rsync), with the reason.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLUSTER_YAML = HERE / "fedray-cluster.yaml"
sys.path.insert(0, str(ROOT))
SKIP = 77  # the exit status of a rehearsal this machine cannot hold
SUBNET = "10.213.7"  # only inside the rehearsal's namespaces
HOSTS = {"user": 10, "head": 11, "w1": 12, "w2": 13}
WORKERS = ("w1", "w2")
SSHD = "/usr/sbin/sshd"
# Ray 2.60's autoscaler v2 (its default) never brings both of the local provider's workers up: it
# takes the head for a lost instance and adds one worker at a time, every 5 s, for good. `ray up`
# starts the head's autoscaler as v1 with this in its environment.
LAUNCHER_ENV = ["RAY_UP_enable_autoscaler_v2=0"]


class Failed(Exception):
    """A step that does not hold, in one line."""


# -- the cluster config ------------------------------------------------------------------------------
# what the rehearsal changes in fedray-cluster.yaml, and why: (where, what it becomes, why)
def cluster_config(key: Path, venv: Path) -> tuple[dict, list[tuple[str, str, str]]]:
    """fedray-cluster.yaml for the rehearsal's hosts, and each difference with its reason. A setup
    command of the file that is not one of those expected here fails loudly, so that the rehearsal
    cannot drift from the file it stands for."""
    config = yaml.safe_load(CLUSTER_YAML.read_text())
    changes = []

    def change(where, new, why):
        changes.append((where, new, why))

    config["cluster_name"] = "fedray-rehearsal"
    change("cluster_name", "fedray-rehearsal", "its own name, so that it never meets a cluster of yours")
    ips = {h: f"{SUBNET}.{n}" for h, n in HOSTS.items()}
    config["provider"] = {"type": "local", "head_ip": ips["head"], "worker_ips": [ips[w] for w in WORKERS]}
    change("provider", f"type local, head_ip {ips['head']}, worker_ips {', '.join(ips[w] for w in WORKERS)}",
           "the hosts are the rehearsal's namespaces, not cloud instances")
    config["auth"] = {"ssh_user": "root", "ssh_private_key": str(key)}
    change("auth", "ssh_user root, ssh_private_key: the rehearsal's key", "the hosts' sshd takes the key the "
           "rehearsal makes")
    resources = {t: config["available_node_types"][t]["resources"] for t in config["available_node_types"]}
    del config["available_node_types"], config["head_node_type"]
    change("available_node_types, head_node_type", "removed; each node's resources go on its `ray start`",
           "the local provider has one node type of its own and takes no node_config")

    expected = {  # a setup command's start -> its replacement (None: dropped), why
        "sudo apt-get": (None, "Fashion-MNIST and python3-venv are installed on the machine, which every host shares"),
        "test -d ~/venv": (f"test -e ~/venv || ln -s {venv} ~/venv",
                           "the hosts share the machine's file system: ~/venv is the project's .venv"),
        # (PYTHONPATH instead would not do: Ray's workers then lose `ray job submit --working-dir` from their path)
        "pip install": (None, "the shared venv holds Ray 2.60 and fedray, installed editable from the checkout the "
                              "rehearsal runs from (the one file_mounts copies to ~/fedray-repo); a `pip install` "
                              "there would rewrite the whole machine's venv"),
    }
    setup, seen = [], set()
    for command in config["setup_commands"]:
        start = next((s for s in expected if command.startswith(s)), None)
        if start is None:
            setup.append(command)
            continue
        seen.add(start)
        new, why = expected[start]
        if new is not None:
            setup.append(new)
        change(f"setup_commands: `{command[:40]}...`", f"`{new}`" if new else "dropped", why)
    missing = set(expected) - seen
    if missing:
        raise SystemExit(f"{CLUSTER_YAML}: no setup command starts with {sorted(missing)}; update cluster_config")
    stop_here = "grep -q 'HOME/bin' ~/.bashrc || echo 'export PATH=$HOME/bin:$PATH' >> ~/.bashrc"
    setup.append(stop_here)
    change("setup_commands", f"added `{stop_here}`", "the hosts share one process table, where `ray stop` stops "
           "every Ray: ~/bin/ray confines it to the host's namespace")
    config["setup_commands"] = setup
    config["head_setup_commands"] = []
    change("head_setup_commands", "none", "boto3 is for the AWS provider")

    def node_flags(cpus: float) -> str:
        return (f" --node-ip-address=$RAY_NODE_IP --num-cpus={cpus:g} --num-gpus=0 --memory=2000000000"
                " --object-store-memory=200000000")
    for kind, flags in (("head_start_ray_commands", node_flags(0)), ("worker_start_ray_commands", node_flags(1))):
        commands = config[kind]
        starts = [i for i, c in enumerate(commands) if "ray start" in c]
        assert len(starts) == 1, f"{CLUSTER_YAML}: {kind} should hold one `ray start`"
        commands[starts[0]] = commands[starts[0]] + flags
        change(kind, f"`ray start ...{flags}`",
               f"the file's resources ({resources}) name cloud instances; each host sees the whole machine, so "
               "its share is set, and a namespace has no default route, so the node's address is given")
    return config, changes


# -- the hosts -------------------------------------------------------------------------------------------
class Hosts:
    """The rehearsal's namespaces, bridge, sshds and folders; ``close`` removes every one of them and
    every process that ran in them."""

    def __init__(self, base: Path, prefix: str, venv: Path):
        self.base, self.prefix, self.venv = base, prefix, venv
        self.ip = {h: f"{SUBNET}.{n}" for h, n in HOSTS.items()}
        self.made: list[str] = []
        self.inodes: set[int] = set()

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def home(self, host: str) -> Path:
        return self.base / host / "home"

    def build(self) -> None:
        for leftover in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
            name = leftover.split(" ")[0]
            if name.startswith(self.prefix + "-"):  # an earlier rehearsal killed before its end
                self._remove_ns(name)
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fedray-rehearsal", "-f", str(self.base / "key")])
        shutil.copy(self.base / "key.pub", self.base / "authorized_keys")
        net = self.ns("net")
        self._add_ns(net)
        sh(["ip", "-n", net, "link", "add", "br0", "type", "bridge"])
        sh(["ip", "-n", net, "link", "set", "br0", "up"])
        for host, ip in self.ip.items():
            ns = self.ns(host)
            self._add_ns(ns)
            sh(["ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", host, "netns", net])
            sh(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
            sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            sh(["ip", "-n", net, "link", "set", host, "master", "br0", "up"])
            (self.base / host / "tmp").mkdir(parents=True)
            (self.home(host) / "bin").mkdir(parents=True)
            self._passwd(host)
            self._ray_wrapper(host)
            if host != "user":
                self._sshd(host)

    def _add_ns(self, name: str) -> None:
        sh(["ip", "netns", "add", name])
        self.made.append(name)
        self.inodes.add(os.stat(f"/run/netns/{name}").st_ino)

    def _passwd(self, host: str) -> None:
        """The host's /etc/passwd, where root's home is the host's own: ssh expands ``-i ~/...`` (the
        autoscaler's key) against it, not against $HOME."""
        lines = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) == 7 and fields[2] == "0":
                fields[5] = str(self.home(host))
            lines.append(":".join(fields))
        (self.base / host / "passwd").write_text("\n".join(lines) + "\n")

    def _ray_wrapper(self, host: str) -> None:
        """~/bin/ray: `ray stop` stops this namespace's processes only; anything else is Ray's `ray`."""
        wrapper = self.home(host) / "bin" / "ray"
        wrapper.write_text("#!/bin/sh\n# the hosts share one process table: `ray stop` stops this host's processes only\n"
                           f'if [ "$1" = stop ]; then exec {sys.executable} {Path(__file__).resolve()} stop-here; fi\n'
                           f'exec {self.venv / "bin" / "ray"} "$@"\n')
        wrapper.chmod(0o755)

    def _sshd(self, host: str) -> None:
        folder = self.base / host
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "host_key")])
        (folder / "sshd_config").write_text("\n".join([
            f"ListenAddress {self.ip[host]}", f"HostKey {folder / 'host_key'}",
            f"AuthorizedKeysFile {self.base / 'authorized_keys'}", f"PidFile {folder / 'sshd.pid'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "StrictModes no", "UsePAM no", "PrintMotd no", "MaxSessions 50", "MaxStartups 50",
            # what a machine's own environment would give: its address, no usage reports
            f"SetEnv RAY_NODE_IP={self.ip[host]} RAY_USAGE_STATS_ENABLED=0", ""]))
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
        self.on(host, [SSHD, "-f", str(folder / "sshd_config"), "-E", str(folder / "sshd.log")], env={}, timeout=20)
        deadline = time.time() + 10
        while not (folder / "sshd.pid").exists():
            if time.time() > deadline:
                raise Failed(f"sshd on {host} did not start: {(folder / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.05)

    def on(self, host: str, argv: list[str], env: dict | None = None, cwd: Path | None = None,
           timeout: float | None = 120, background: bool = False, log: Path | None = None):
        """``argv`` as run on ``host``: in its namespace, with its own /tmp and home, and ``env`` (default:
        the user's environment: PATH with the host's ~/bin and the venv, token authentication)."""
        tmp = self.base / host / "tmp"
        if env is None:
            env = {"PATH": f"{self.home(host) / 'bin'}:{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                   "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
        env = {"HOME": str(self.home(host)), "LANG": "C.UTF-8", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}
        inner = (f"mount --bind {shlex.quote(str(tmp))} /tmp && "
                 f"mount --bind {shlex.quote(str(self.base / host / 'passwd'))} /etc/passwd && "
                 f"cd {shlex.quote(str(cwd or ROOT))} && exec \"$@\"")
        command = ["ip", "netns", "exec", self.ns(host), "unshare", "--mount", "--propagation", "private",
                   "env", "-i", *[f"{k}={v}" for k, v in env.items()], "sh", "-c", inner, "sh", *argv]
        out = open(log, "ab") if log else subprocess.PIPE
        if background:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        finally:
            if log:
                out.close()
        return done.returncode, (done.stdout.decode(errors="replace") if done.stdout is not None else
                                 log.read_text(errors="replace"))

    def pids(self, host: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns(host)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def processes(self, host: str) -> list[str]:
        """The command lines of the host's processes other than its sshd."""
        found = []
        for pid in self.pids(host):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if state != "Z" and not (comm == "sshd" or cmd.startswith("sshd")):
                found.append(f"{pid} {cmd.strip()[:120]}")
        return found

    def kill(self, host: str, keep_sshd: bool) -> int:
        """SIGKILL the host's processes (but its sshd when ``keep_sshd``): a host lost, or one cleared."""
        sshd = self._sshd_pids(host) if keep_sshd else set()
        victims = [p for p in self.pids(host) if p not in sshd and p != os.getpid()]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(victims)

    def _sshd_pids(self, host: str) -> set[int]:
        """The host's sshd daemon and its session processes (``sshd: root@...``)."""
        out = set()
        for pid in self.pids(host):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    out.add(pid)
            except OSError:
                pass
        return out

    def counters(self, host: str) -> tuple[int, int] | None:
        """(bytes received, bytes sent) on the host's eth0, as its sshd (a process in its namespace,
        which outlives a lost host's Ray) sees them in /proc."""
        try:
            pid = int((self.base / host / "sshd.pid").read_text())
            for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
                name, _, rest = line.partition(":")
                if name.strip() == "eth0":
                    fields = rest.split()
                    return int(fields[0]), int(fields[8])
        except (OSError, ValueError):
            pass
        return None

    def close(self) -> list[str]:
        """Remove everything; returns what could not be removed (empty when all went)."""
        for _ in range(3):
            for name in self.made:
                for pid in _ns_pids(name):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
        left = []
        for name in reversed(self.made):
            self._remove_ns(name)
        deadline = time.time() + 10
        while (stray := self._strays()) and time.time() < deadline:
            time.sleep(0.2)
        left += [f"process {p} still runs in a rehearsal namespace" for p in stray]
        shutil.rmtree(self.base, ignore_errors=True)
        if self.base.exists():
            left.append(f"{self.base} remains")
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        left += [f"namespace {n} remains" for n in self.made if n in names.split()]
        return left

    def _strays(self) -> list[int]:
        """Live processes in any namespace the rehearsal made (by the namespace's inode)."""
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.stat(entry / "ns" / "net").st_ino in self.inodes:
                        state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                        if state != "Z":
                            out.append(int(entry.name))
                except OSError:
                    pass
        return out

    @staticmethod
    def _remove_ns(name: str) -> None:
        for pid in _ns_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _ns_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def sh(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise Failed(f"`{' '.join(argv)}` failed: {done.stderr.strip()[:300]}")


def stop_here() -> None:
    """``ray stop`` on a rehearsal host: end this namespace's processes, sparing sshd and the shell
    this runs in (its ancestors). Other namespaces' processes, the machine's own Ray among them,
    are not touched."""
    mine = os.stat("/proc/self/ns/net").st_ino
    named = [p.name for p in Path("/run/netns").glob("*-*") if p.name.rsplit("-", 1)[1] in HOSTS
             and os.stat(p).st_ino == mine] if Path("/run/netns").is_dir() else []
    if not named:  # never the machine's own processes
        raise SystemExit("stop-here stops a rehearsal host's processes: this is not in one of its namespaces")
    keep, pid = set(), os.getpid()
    while pid > 1:
        keep.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    victims = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino == mine and (entry / "comm").read_text().strip() != "sshd":
                victims.append(int(entry.name))
        except OSError:
            pass
    for sig, wait in ((signal.SIGTERM, 4), (signal.SIGKILL, 5)):  # Ray's `ray stop` also ends with SIGKILL
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in victims):
            time.sleep(0.1)
    print(f"Stopped {len(victims)} processes of this host.")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# -- the rehearsal -------------------------------------------------------------------------------------
def cannot(reason: str) -> None:
    print(f"rehearsal skipped: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def preflight() -> None:
    if os.geteuid() != 0:
        cannot("network namespaces need root (run it with sudo)")
    for tool in ("ip", "unshare", "ssh", "ssh-keygen", "rsync"):
        if not shutil.which(tool):
            cannot(f"`{tool}` is not installed (Debian: openssh-client, rsync, iproute2, util-linux)")
    if not os.access(SSHD, os.X_OK):
        cannot(f"{SSHD} is not installed (Debian: apt-get install openssh-server)")
    probe = f"fedray-probe-{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        cannot(f"`ip netns add` failed: {done.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


class Clock:
    def __init__(self):
        self.start = time.perf_counter()
        self.steps: list[dict] = []

    @contextmanager
    def step(self, name: str):
        entry = {"step": name, "ok": False}
        self.steps.append(entry)
        began = time.perf_counter()
        print(f"[{began - self.start:6.1f} s] {name} ...", file=sys.stderr, flush=True)
        try:
            yield entry
            entry["ok"] = True
        except Failed as err:
            entry["error"] = str(err)
            raise
        finally:
            entry["seconds"] = round(time.perf_counter() - began, 1)
            print(f"[{time.perf_counter() - self.start:6.1f} s] {name}: {'ok' if entry['ok'] else 'FAILED'} "
                  f"({entry['seconds']} s)", file=sys.stderr, flush=True)


class Sampler(threading.Thread):
    """Each cluster host's interface counters, every ``period`` seconds, with the time."""

    def __init__(self, hosts: Hosts, period: float = 0.1):
        super().__init__(daemon=True)
        self.hosts, self.period, self.samples = hosts, period, []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            now = time.time()
            self.samples.append((now, {h: self.hosts.counters(h) for h in ("head", *WORKERS)}))
            self.halt.wait(self.period)

    def stop(self):
        """Stop sampling, with one last sample taken after the caller's run has ended, so that the
        first and last samples hold everything the run moved."""
        self.halt.set()
        self.join()
        self.samples.append((time.time(), {h: self.hosts.counters(h) for h in ("head", *WORKERS)}))

    def total(self) -> dict:
        """Each host's bytes in and out between the first and the last sample."""
        first, last = self.samples[0][1], self.samples[-1][1]
        return {h: {"in": last[h][0] - first[h][0], "out": last[h][1] - first[h][1]}
                for h in first if first[h] and last.get(h)}

    def at(self, host: str, t: float) -> tuple[int, int] | None:
        """The host's counters at the last sample at or before ``t``."""
        value = None
        for when, counts in self.samples:
            if when > t:
                break
            value = counts.get(host) or value
        return value


def rehearse(args) -> dict:
    venv = Path(os.path.abspath(Path(sys.executable).parent.parent)) if args.venv is None else args.venv
    hosts = Hosts(args.base, args.prefix, venv)
    clock = Clock()
    from fedray.provenance import source
    from fedray.repro import cpu_model

    report: dict = {"steps": clock.steps, "hosts": hosts.ip, "fedray": source(), "cpu": cpu_model(),
                    "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    logs = args.base / "logs"
    cfg_path = args.base / "cluster.yaml"
    ray_ = str(hosts.home("user") / "bin" / "ray")
    try:
        with clock.step("hosts: namespaces, bridge, sshd"):
            hosts.build()
            logs.mkdir()
            config, changes = cluster_config(args.base / "key", venv)
            cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
            report["config_changes"] = [{"where": w, "becomes": n, "why": y} for w, n, y in changes]
            rc, out = hosts.on("user", [ray_, "get-auth-token", "--generate"], timeout=60)
            if rc != 0:
                raise Failed(f"ray get-auth-token --generate failed: {out[-500:]}")

        with clock.step("ray up") as entry:
            rc, out = hosts.on("user", ["env", *LAUNCHER_ENV, ray_, "up", "-y", "--no-config-cache", str(cfg_path)],
                               timeout=240, log=logs / "ray-up.log")
            entry["output"] = out[-4000:]
            if rc != 0:
                raise Failed(f"ray up exited with {rc}: {out[-1500:]}")

        for clients in args.measure:  # the bytes on the wire (docs/performance.md), before w2 is lost
            for fold in (True, False):
                name = f"wire-{clients}-{'fold' if fold else 'nofold'}"
                with clock.step(f"ray submit: {clients} clients a round, fold {fold}") as entry:
                    run = submitted_run(hosts, ray_, cfg_path, logs, name, args.measure_rounds, clients, fold=fold)
                    report.setdefault("wire", {})[name] = run["wire"]
                    report.setdefault("wire_total", {})[name] = run["wire_total"]
                    entry["rounds"] = run["events"]["summary"]["rounds"]
                    entry["actors_per_node"] = run["result"]["executor"]["actors_per_node"]
                    if sorted(k.split("/")[0] for k in entry["actors_per_node"]) != [hosts.ip[w] for w in WORKERS]:
                        raise Failed(f"the run did not have one client actor on each worker: {entry}")

        if "run" in args.only:
            with clock.step("ray submit, w2 lost mid-run") as entry:
                run = submitted_run(hosts, ray_, cfg_path, logs, "rehearsal", args.rounds, args.clients,
                                    lose_after=args.lose_after)
                entry.update({k: v for k, v in run.items() if k not in ("events", "wire", "wire_total", "result")})
                entry["final"], entry["executor"] = run["result"]["final"], run["result"]["executor"]
                if run.get("lost_at_round") is None:
                    raise Failed("the run ended before w2 could be lost")
            events = run["events"]
            with clock.step("TensorBoard files, copied by ray rsync-down, read on user") as entry:
                entry.update(events["summary"])
                if events["summary"]["rounds"] != args.rounds:
                    raise Failed(f"the copied event files hold {events['summary']['rounds']} rounds, not {args.rounds}")

            with clock.step("client actors spread over the workers") as entry:
                placed = events["placement"]
                entry["placement"] = placed
                on = {ip: any(ip in line for line in placed) for ip in (hosts.ip[w] for w in WORKERS)}
                if not all(on.values()):
                    raise Failed(f"no client actor on {[ip for ip, yes in on.items() if not yes]}: {placed}")

            with clock.step("bit for bit the local backend's run") as entry:
                entry["local_sha256"], entry["cluster_sha256"] = local_run(hosts, venv, logs, args.rounds,
                                                                           args.clients), run["sha256"]
                entry["faults"] = events["faults"]
                if entry["local_sha256"] != entry["cluster_sha256"]:
                    raise Failed("the run that lost w2 ends elsewhere than the local backend's run")
                if not any(hosts.ip["w2"] in f for f in events["faults"]):
                    raise Failed(f"runtime/faults does not name w2 ({hosts.ip['w2']}): {events['faults']}")
            report.setdefault("wire", {})["rehearsal"] = run["wire"]
            report.setdefault("wire_total", {})["rehearsal"] = run["wire_total"]

        if "job" in args.only:
            with clock.step("ray dashboard + ray job submit --working-dir examples") as entry:
                entry.update(job_submit(hosts, ray_, cfg_path, logs))

        hold(args)
        with clock.step("ray down") as entry:
            rc, out = hosts.on("user", [ray_, "down", "-y", str(cfg_path)], timeout=120, log=logs / "ray-down.log")
            entry["output"] = out[-2000:]
            if rc != 0:
                raise Failed(f"ray down exited with {rc}: {out[-1000:]}")
            entry["head_left"] = hosts.processes("head")
            if entry["head_left"]:
                raise Failed(f"ray down left processes on the head: {entry['head_left']}")
            # The local provider's `ray down` stops the head's Ray only (a cloud provider terminates the
            # workers' instances; ray-project/ray#17022, #43232): as on any on-premise cluster, each
            # worker's Ray is stopped over ssh, with the same `ray stop` the launcher runs on the head.
            entry["workers_before_ray_stop"] = {w: len(hosts.processes(w)) for w in WORKERS}
            if args.watch_down:  # what the workers' Ray does by itself once the head is gone
                entry["left_after_down"] = left_after(hosts, args.watch_down)
            stops = {w: hosts.on("user", ["ssh", "-i", str(args.base / "key"), "-o", "StrictHostKeyChecking=no",
                                          "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                                          f"root@{hosts.ip[w]}", "bash --login -c 'source ~/.bashrc; ray stop'"],
                                 background=True, log=logs / f"ray-stop-{w}.log") for w in WORKERS}
            for w, stop in stops.items():
                if stop.wait(timeout=60) != 0:
                    raise Failed(f"ray stop on {w} exited with {stop.returncode}: "
                                 f"{(logs / f'ray-stop-{w}.log').read_text()[-500:]}")
            entry.update(wait_for_stop(hosts, timeout=20))
    except Failed as err:
        report["failed"] = str(err)
    finally:
        if logs.exists() and "ray down" not in [s["step"] for s in clock.steps]:
            hold(args)
        if args.keep_logs and logs.exists():
            shutil.rmtree(args.keep_logs, ignore_errors=True)
            shutil.copytree(logs, args.keep_logs)
            for host in HOSTS:  # each host's Ray logs (the autoscaler's are the head's monitor.*)
                latest = args.base / host / "tmp" / "ray" / "session_latest"  # a link that names the host's /tmp
                session = latest.parent / os.path.basename(os.readlink(latest)) if latest.is_symlink() else None
                if session and (session / "logs").is_dir():
                    shutil.copytree(session / "logs", args.keep_logs / host, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("*.sock", "events"), symlinks=True)
        left = hosts.close()
        report["cleanup"] = {"left": left}
        if left and "failed" not in report:
            report["failed"] = f"cleanup left {left}"
    report["seconds"] = round(time.perf_counter() - clock.start, 1)
    return report


def hold(args) -> None:
    """With ``--hold``, keep the hosts up for a look (``ray exec``, ``ray attach`` from user) until
    BASE/hold is removed or ``--hold`` seconds pass."""
    if args.hold:
        marker = args.base / "hold"
        marker.touch()
        print(f"holding for up to {args.hold} s: rm {marker} to go on", file=sys.stderr, flush=True)
        deadline = time.time() + args.hold
        while marker.exists() and time.time() < deadline:
            time.sleep(1)


def overrides(rounds: int, clients: int, fold: bool) -> list[str]:
    """rehearsal.yaml's keys for ``clients`` clients a round (400 images each) and ``rounds`` rounds.
    `ray submit` hands its script's arguments to the head's shell unquoted: none has a space or brace."""
    return [f"federation.rounds={rounds}", f"federation.num_clients={clients}",
            f"federation.clients_per_round={clients}", f"federation.architectures.mlp={clients}",
            f"data.train_limit={min(400 * clients, 60000)}", f"runtime.fold={str(fold).lower()}"]


def wait_for_workers(hosts: Hosts, ray_: str, cfg_path: Path, logs: Path, timeout: float = 120) -> int:
    """Poll ``ray exec CLUSTER 'ray status'`` until the head and both workers are active; their number.
    fedray plans its actors over the nodes up when a run starts (docs/cluster.md), as one does before
    submitting a run."""
    deadline = time.time() + timeout
    while True:
        rc, out = hosts.on("user", [ray_, "exec", str(cfg_path), "ray status"], timeout=60)
        active = re.search(r"Active:\s*\n\s*(\d+) ", out)
        if rc == 0 and active and int(active[1]) >= 1 + len(WORKERS):
            return int(active[1])
        if time.time() > deadline:
            raise Failed(f"the workers did not come up within {timeout:.0f} s: {out[-1500:]}")
        time.sleep(2)


def submitted_run(hosts: Hosts, ray_: str, cfg_path: Path, logs: Path, name: str, rounds: int, clients: int,
                  fold: bool = True, lose_after: int | None = None) -> dict:
    """``ray submit CLUSTER fedray/cli.py -- run`` of rehearsal.yaml (docs/cluster.md's command), w2 lost
    after round ``lose_after``'s checkpoint where given, each host's interface counters read
    meanwhile; then ``ray rsync-down`` of its run folder to user, whose files are read there. Returns
    the run's result.json, final model fingerprint, events and wire rows."""
    out = {"active_nodes": wait_for_workers(hosts, ray_, cfg_path, logs)}
    run_dir, sampler = f"~/runs/{name}", Sampler(hosts)
    sampler.start()
    try:
        job = hosts.on("user", [ray_, "submit", str(cfg_path), str(ROOT / "fedray" / "cli.py"), "--", "run",
                                "~/fedray-repo/scripts/cluster/rehearsal.yaml", "--no-progress", "--run-dir", run_dir,
                                "runtime.address=auto", *overrides(rounds, clients, fold)],
                       background=True, log=logs / f"ray-submit-{name}.log")
        out.update(wait_and_lose(hosts, job, hosts.home("head") / "runs" / name, lose_after, timeout=300))
    finally:
        sampler.stop()
    text = (logs / f"ray-submit-{name}.log").read_text(errors="replace")
    if job.returncode != 0:
        raise Failed(f"ray submit exited with {job.returncode}: {text[-2000:]}")
    out["notes"] = [ln.strip() for ln in text.splitlines() if ln.startswith("fedray: note:")]  # on the terminal
    local_copy = hosts.home("user") / "runs"
    local_copy.mkdir(parents=True, exist_ok=True)
    rc, text = hosts.on("user", [ray_, "rsync-down", str(cfg_path), run_dir, str(local_copy) + "/"], timeout=120,
                        log=logs / f"rsync-down-{name}.log")
    if rc != 0:
        raise Failed(f"ray rsync-down exited with {rc}: {text[-1000:]}")
    out["result"] = json.loads((local_copy / name / "result.json").read_text())
    out["sha256"] = fingerprint(local_copy / name)
    out["events"] = read_events(local_copy / name)
    out["wire"] = wire(sampler, out["events"]["round_times"], out["events"]["comm"])
    out["wire_total"] = sampler.total()
    return out


def fingerprint(run_dir: Path) -> str:
    """SHA-256 over the final checkpoint's global models (every array, in name order)."""
    from fedray.checkpoint import CHECKPOINT, read_checkpoint

    models = read_checkpoint(run_dir / CHECKPOINT)["strategy"]["models"]
    digest = hashlib.sha256()
    for arch in sorted(models):
        for key in sorted(models[arch]):
            digest.update(f"{arch}/{key}".encode())
            digest.update(np.ascontiguousarray(models[arch][key]).tobytes())
    return digest.hexdigest()


def local_run(hosts: Hosts, venv: Path, logs: Path, rounds: int, clients: int) -> str:
    """rehearsal.yaml on the local backend, on user (one process, no Ray): its fingerprint."""
    run_dir = hosts.home("user") / "runs" / "local-reference"
    rc, out = hosts.on("user", [str(venv / "bin" / "python"), "-m", "fedray.cli", "run",
                                str(HERE / "rehearsal.yaml"), "--no-progress", "--run-dir", str(run_dir),
                                "runtime.backend=local", *overrides(rounds, clients, True)], timeout=240,
                       log=logs / "local-reference.log")
    if rc != 0:
        raise Failed(f"the local reference run failed ({rc}): {out[-1500:]}")
    return fingerprint(run_dir)


def wait_and_lose(hosts: Hosts, job, run_dir: Path, after: int | None, timeout: float) -> dict:
    """Wait for the run's ``after``-th checkpoint, then kill every process on w2 (its sshd aside, so
    the host stays a machine one could log into); then wait for the job to end."""
    from fedray.checkpoint import CheckpointError, read_header

    deadline = time.time() + timeout
    out: dict = {"lost_at_round": None}
    while job.poll() is None:
        if time.time() > deadline:
            os.killpg(job.pid, signal.SIGKILL)
            raise Failed(f"ray submit did not end within {timeout:.0f} s")
        if after is not None and out["lost_at_round"] is None and (run_dir / "checkpoint.fedray").exists():
            try:
                r = read_header(run_dir / "checkpoint.fedray")["round"]
            except CheckpointError:  # replaced while read
                r = 0
            if r >= after:
                out["lost_at_round"] = r
                out["w2_processes_killed"] = hosts.kill("w2", keep_sshd=True)
                out["lost_at"] = time.time()
        time.sleep(0.05)
    job.wait()
    return out


def read_events(run_dir: Path) -> dict:
    """What the copied run folder's TensorBoard files hold: rounds, final accuracy, the executor's
    placement text, the fault texts, each round's end time and fedray's bytes per round."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()

    def texts(tag):
        if tag not in tags.get("tensors", []):
            return []
        return [b"".join(e.tensor_proto.string_val).decode() for e in acc.Tensors(tag)]
    accuracy = acc.Scalars("eval/accuracy") if "eval/accuracy" in tags["scalars"] else []
    comm = {t: {e.step: e.value for e in acc.Scalars(t)} for t in ("comm/bytes_up", "comm/bytes_down",
                                                                    "runtime/bytes_to_server") if t in tags["scalars"]}
    return {"summary": {"rounds": len(accuracy), "final_accuracy": accuracy[-1].value if accuracy else None,
                        "files": sorted(p.name for p in run_dir.iterdir())},
            "placement": texts("runtime/executor/text_summary") or texts("runtime/executor"),
            "faults": texts("runtime/faults/text_summary") or texts("runtime/faults"),
            "round_times": {e.step: e.wall_time for e in accuracy}, "comm": comm}


def wire(sampler: Sampler, round_times: dict, comm: dict) -> list[dict]:
    """Per round: each host's bytes in and out over its interface between the ends of the round
    before and this one (round 1: from the ``ray submit``, so it holds the run's start), beside
    fedray's accounting of that round."""
    rows, before = [], sampler.samples[0][0] if sampler.samples else None
    for r in sorted(round_times):
        t = round_times[r]
        row = {"round": r, **{f"fedray_{k.split('/')[1]}": v.get(r) for k, v in comm.items()}}  # fedray's accounting
        for host in ("head", *WORKERS):
            now, then = sampler.at(host, t), sampler.at(host, before) if before else None
            if now and then:
                row[f"{host}_in"], row[f"{host}_out"] = now[0] - then[0], now[1] - then[1]
        rows.append(row)
        before = t
    return rows


def job_submit(hosts: Hosts, ray_: str, cfg_path: Path, logs: Path) -> dict:
    """``ray dashboard`` forwards the head's 127.0.0.1:8265 to user's; ``ray job submit`` runs the
    examples' FedNova project from an uploaded working directory."""
    forward = hosts.on("user", [ray_, "dashboard", str(cfg_path), "--port", "8265"], background=True,
                       log=logs / "ray-dashboard.log")
    try:
        poll = ("import time,urllib.request,urllib.error\nfor _ in range(120):\n    try:\n"
                "        urllib.request.urlopen('http://127.0.0.1:8265/api/version', timeout=2); break\n"
                "    except urllib.error.HTTPError: break\n    except OSError: time.sleep(0.5)\n"
                "else: raise SystemExit('no dashboard')\n")
        rc, out = hosts.on("user", [str(hosts.venv / "bin" / "python"), "-c", poll], timeout=90)
        if rc != 0:
            raise Failed(f"the forwarded dashboard did not answer: {(logs / 'ray-dashboard.log').read_text()[-1000:]}")
        script = "fedray run fednova.yaml federation.rounds=3 output_dir=$HOME/runs name=fednova-job"
        rc, out = hosts.on("user", [ray_, "job", "submit", "--address", "http://127.0.0.1:8265", "--submission-id",
                                    "rehearsal-fednova", "--working-dir", str(ROOT / "examples"), "--", "sh", "-c",
                                    script], timeout=240, log=logs / "job-submit.log")
        if rc != 0 or "succeeded" not in out:
            raise Failed(f"ray job submit exited with {rc}: {out[-2000:]}")
        final = json.loads(out[out.index("{\n"):out.index("\n}") + 2]) if "{\n" in out else {}
        return {"final": final, "output": out[-2500:]}
    finally:
        try:
            os.killpg(forward.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        forward.wait(timeout=10)


def process_name(line: str) -> str:
    """``raylet``, or a Python process's script (``log_monitor.py``), from a ``processes`` line."""
    words = line.split()[1:]
    script = next((w for w in words[1:] if w.endswith(".py")), None) if "python" in Path(words[0]).name else None
    return Path(script or words[0]).name


def left_after(hosts: Hosts, seconds: float) -> list[dict]:
    """The workers' processes, every 10 s for ``seconds`` (or until none is left): each sample's time
    and each worker's process names."""
    start, samples = time.time(), []
    while True:
        now = {w: sorted(process_name(p) for p in hosts.processes(w)) for w in WORKERS}
        samples.append({"s": round(time.time() - start), **now})
        if not any(now.values()) or time.time() - start >= seconds:
            return samples
        time.sleep(10)


def wait_for_stop(hosts: Hosts, timeout: float) -> dict:
    """No process but sshd left on any cluster host, within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while True:
        left = {h: hosts.processes(h) for h in ("head", *WORKERS)}
        if not any(left.values()) or time.time() > deadline:
            break
        time.sleep(0.5)
    if any(left.values()):
        raise Failed(f"processes left after ray down: {left}")
    return {"left": left}


def main() -> None:
    if sys.argv[1:2] == ["stop-here"]:
        return stop_here()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--keep-logs", type=Path, help="copy the launcher's logs here before cleaning up")
    parser.add_argument("--base", type=Path, default=Path("/var/tmp/fedray-rehearsal"),
                        help="the hosts' folders (removed at the end)")
    parser.add_argument("--prefix", default="frr", help="the namespaces' prefix")
    parser.add_argument("--venv", type=Path, help="the venv the hosts use (default: this Python's)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--lose-after", type=int, default=2, help="lose w2 after this round's checkpoint")
    parser.add_argument("--only", nargs="*", default=["run", "job"], choices=["run", "job"],
                        help="the steps between `ray up` and `ray down`: the submitted run, the job")
    parser.add_argument("--hold", type=int, default=0, help="before cleaning up, keep the hosts up this long (or until BASE/hold is removed)")
    parser.add_argument("--watch-down", type=int, default=0, metavar="SECONDS",
                        help="after ray down, list what stays on the workers for this long before stopping it")
    parser.add_argument("--measure", type=int, nargs="*", default=[],
                        help="also run these numbers of clients a round, folded and not, for the bytes on the wire")
    parser.add_argument("--measure-rounds", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="give up (and clean up) after this many seconds")
    args = parser.parse_args()
    preflight()
    if Path("/tmp") in args.base.resolve().parents:
        raise SystemExit(f"--base {args.base}: not under /tmp, which each host replaces with its own")

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, lambda s, f: (_ for _ in ()).throw(Failed(f"no end after {args.timeout} s")))
    signal.alarm(args.timeout)
    report = rehearse(args)
    signal.alarm(0)
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    print(text if not args.json else f"report: {args.json}")
    print(f"rehearsal {'FAILED: ' + report['failed'] if 'failed' in report else 'passed'} in {report['seconds']} s",
          file=sys.stderr)
    sys.exit(1 if "failed" in report else 0)


if __name__ == "__main__":
    main()
