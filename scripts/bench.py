"""Benchmark W1: fedray versus a plain single-process PyTorch loop doing the identical computation.

W1: Fashion-MNIST, 100 iid clients, 10 per round, 1 local epoch, batch 32, SGD lr 0.05, the FedAvg
2-conv CNN, 20 rounds, test accuracy once at the end (configs/bench_w1.yaml).

Both sides use the same split, the same clients each round, the same per-client batch order and
the same initial model, so they perform the same SGD steps. Each side runs in its own subprocess;
fedray's time includes ``ray.init`` and the start of every actor. Peak memory is the peak of the
summed proportional set size (PSS) of every process involved (driver and Ray processes for
fedray), sampled every 0.25 s.

    python scripts/bench_w1.py            # prints a table and the ratio fedray / plain loop
    python scripts/bench_w1.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from fedray.repro import cpu_model

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "bench_w1.yaml"


class PeakMemory:
    """Samples the summed PSS of this process, its children and Ray's processes."""

    def __init__(self, include_ray: bool):
        self.include_ray, self.peak, self._stop = include_ray, 0, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _processes(self):
        me = psutil.Process()
        procs = {me.pid: me, **{p.pid: p for p in me.children(recursive=True)}}
        if self.include_ray:
            for p in psutil.process_iter(["cmdline"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if "ray" in cmd and ("ray::" in cmd or "/ray/" in cmd or "raylet" in cmd or "gcs_server" in cmd):
                    procs[p.pid] = p
        return procs.values()

    def _loop(self):
        while not self._stop.is_set():
            total = 0
            for p in self._processes():
                try:
                    total += p.memory_full_info().pss
                except (psutil.Error, OSError):
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_plain(config) -> dict:
    """The same FedAvg computation written as a plain PyTorch loop in one process."""
    import torch
    import torch.nn.functional as F

    from fedray.algorithms.base import round_rng, task_seed
    from fedray.data import load_dataset, partition
    from fedray.models import create_model

    fed, tr = config.federation, config.training
    data = load_dataset(config.data.dataset, config.data.root)
    splits = partition(data.train_y, fed.num_clients, "iid", config.data.seed)
    x_all, y_all = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
    shards = [(x_all[torch.from_numpy(s)], y_all[torch.from_numpy(s)]) for s in splits]
    torch.manual_seed(config.seed)
    model = create_model("cnn", data.input_shape, data.num_classes)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    for rnd in range(1, fed.rounds + 1):
        chosen = sorted(round_rng(config.seed, rnd).choice(fed.num_clients, fed.clients_per_round, replace=False))
        states = []
        for cid in chosen:
            x, y = shards[cid]
            model.load_state_dict(global_state)
            opt = torch.optim.SGD(model.parameters(), lr=tr.lr)
            gen = torch.Generator().manual_seed(task_seed(config.seed, rnd, int(cid)))
            torch.manual_seed(task_seed(config.seed, rnd, int(cid)))
            model.train()
            for _ in range(tr.epochs):
                order = torch.randperm(len(x), generator=gen)
                for start in range(0, len(x), tr.batch_size):
                    idx = order[start:start + tr.batch_size]
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(model(x[idx]), y[idx]).backward()
                    opt.step()
            states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        global_state = {k: torch.stack([s[k].double() for s in states]).mean(0).to(v.dtype)
                        for k, v in global_state.items()}
    model.load_state_dict(global_state)
    model.eval()
    correct = 0
    with torch.inference_mode():
        tx, ty = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
        bs = fed.eval_batch_size
        for start in range(0, len(tx), bs):
            correct += int((model(tx[start:start + bs]).argmax(1) == ty[start:start + bs]).sum())
    return {"accuracy": correct / len(data.test_y)}


def run_fedray(config) -> dict:
    import tempfile

    from fedray.runner import run_experiment

    with tempfile.TemporaryDirectory() as run_dir:
        summary = run_experiment(config, run_dir, progress=False)
    return {"accuracy": summary["final"]["eval/accuracy"], "actors": summary["executor"]["actors"]}


def part(which: str) -> dict:
    from fedray.config import load_config

    config = load_config(CONFIG)
    start = time.perf_counter()
    with PeakMemory(include_ray=which == "fedray") as mem:
        result = (run_plain if which == "plain" else run_fedray)(config)
    wall = time.perf_counter() - start
    updates = config.federation.rounds * config.federation.clients_per_round
    return {"side": which, "wall_s": wall, "updates_per_s": updates / wall, "peak_mem_mb": mem.peak / 2**20, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["plain", "fedray"], help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.part:
        print("RESULT " + json.dumps(part(args.part)), flush=True)
        return
    results = {}
    for side in ("plain", "fedray"):
        out = subprocess.run([sys.executable, __file__, "--part", side], capture_output=True, text=True, cwd=ROOT)
        line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            sys.exit(f"{side} run failed:\n{out.stderr[-3000:]}")
        results[side] = json.loads(line[len("RESULT "):])
    ratio = results["fedray"]["wall_s"] / results["plain"]["wall_s"]
    machine = f"{cpu_model()}, {os.cpu_count()} cores, " \
              f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"
    print(f"W1 on {machine}")
    print(f"{'':8} {'wall s':>8} {'updates/s':>10} {'peak MB':>9} {'accuracy':>9}")
    for side, r in results.items():
        print(f"{side:8} {r['wall_s']:8.1f} {r['updates_per_s']:10.2f} {r['peak_mem_mb']:9.0f} {r['accuracy']:9.4f}")
    print(f"ratio fedray / plain loop (wall time): {ratio:.3f}  (fedray actors: {results['fedray']['actors']})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "ratio": ratio, **results}, indent=2))


if __name__ == "__main__":
    main()
