"""Benchmarks: fedray against a plain single-process PyTorch loop and a multi-process floor doing the
identical computation.

Workloads (Fashion-MNIST, FedAvg, batch 32, SGD lr 0.05, 1 local epoch, test set evaluated at the end):

- ``w1`` (configs/bench_w1.yaml): 100 iid clients, 10 per round, the 2-conv CNN, 20 rounds.
- ``w2`` (configs/bench_w2.yaml): many small tasks: 500 clients of 120 samples, 50 per round, 5 rounds.
- ``k1000`` (configs/bench_1000.yaml): 1,000 clients of three architectures (CNN, LeNet-5, MLP),
  100 per round, 5 rounds; also reports the time from the command's start to the end of round one.
- ``scale``: the k1000 federation with 10, 100 and 1,000 clients per round (3 rounds each): the
  cost per client update, rounds 2-3, of each side.
- ``k3000`` (configs/bench_3000.yaml): 3,000 clients of 20 samples, 1,000 per round, the CNN, 2 rounds.
- ``k10000`` (configs/bench_10000.yaml): 10,000 clients of 6 samples, 2,000 per round, the CNN,
  2 rounds; its point is fedray's peak memory (target: under 4 GB).

The default is ``--only w1,w2,k1000,scale``. Each workload is run three ways:

- ``plain``: one process, one model per architecture, running float64 sums for the average; the
  lean baseline (``bench/workloads.py --part WORKLOAD``).
- ``floor``: the multi-process floor, what a careful hand-written simulator without Ray does on this
  machine: the plain loop's computation with each round's clients trained by ``os.cpu_count()``
  (or ``--cores``) worker processes of one torch thread each, started once per run (``bench/workloads.py --part WORKLOAD
  --floor``; see ``run_floor``). CPU only: with ``--device cuda`` there is no floor row.
- ``fedray``: the real CLI, ``python -m fedray.cli run CONFIG``.

All three use the same split, the same clients each round, the same per-client batch order and the
same initial models, so they perform the same SGD steps (the last bits of a step differ between the
plain loop's 2 torch threads and a worker's or an actor's 1, so the final accuracies agree to about
0.001). fedray's ratios are given against the floor first (the cost of the framework over a careful
hand-written use of these cores) and against the plain loop beside them. Each side is one command in
its own process. Wall time runs from starting the command to its exit (interpreter start, imports,
worker starts, ``ray.init`` and every actor's start included), in runs with nothing watching them.
Peak memory is the peak of the summed proportional set size (PSS) of the command's process and all
its descendants (for the floor: the parent, labelled "driver", its workers and multiprocessing's
resource tracker; for fedray: the driver, Ray's daemons and every actor), sampled every 0.2 s, with
the split by process at the peak, in runs of its own (``--memory-runs``, 1 by default): sampling
costs fedray's seven processes more time than the floor's three, so a sampled run's wall time is
not a fair one.

    python scripts/bench/workloads.py                      # the default workloads, a table each
    python scripts/bench/workloads.py --only w1,w2 --json out.json
    python scripts/bench/workloads.py --only w2 --repeat 3   # three runs of each side, alternating; medians
    python scripts/bench/workloads.py --only w1 --repeat 5 --sides floor,fedray   # fedray against the floor only
    python scripts/bench/workloads.py --only w2 --repeat 6 --sides floor,fedray --cores 1   # a core left to spare
    python scripts/bench/workloads.py --part k3000 --floor   # one side alone (its RESULT line), e.g. the floor
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"w1": "bench_w1.yaml", "w2": "bench_w2.yaml", "k1000": "bench_1000.yaml", "scale": "bench_1000.yaml",
           "k3000": "bench_3000.yaml", "k10000": "bench_10000.yaml"}
SCALE_ROUNDS, SCALE_PER_ROUND = 3, (10, 100, 1000)


def process_label(proc: psutil.Process, driver_pid: int) -> str:
    """A short name for one process of the measured tree: the driver, a Ray daemon, an actor or a
    worker of the floor side."""
    if proc.pid == driver_pid:
        return "driver"
    cmd = proc.cmdline()
    if not cmd:
        return "other"
    if "multiprocessing.spawn" in " ".join(cmd[:4]):  # the floor's workers
        return "worker"
    if "multiprocessing.resource_tracker" in " ".join(cmd[:4]):
        return "resource_tracker"
    if cmd[0].startswith("ray::"):
        return cmd[0].split(".")[0].split()[0]  # ray::ClientActor.run -> ray::ClientActor
    for part in cmd[:3]:
        name = Path(part).name
        if name in ("gcs_server", "raylet", "dashboard.py", "monitor.py", "log_monitor.py", "agent.py"):
            return name
    return Path(cmd[0]).name


class PeakMemory:
    """Samples the summed PSS of a process and all its descendants; keeps the split at the peak."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.root, self.interval = psutil.Process(pid), interval
        self.peak, self.split = 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        total, split = 0, Counter()
        for p in procs:
            try:
                pss = p.memory_full_info().pss
                split[process_label(p, self.root.pid)] += pss
                total += pss
            except (psutil.Error, OSError):
                pass
        if total > self.peak:
            self.peak, self.split = total, dict(split)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def load(workload: str, overrides: list[str]):
    from fedray.config import load_config

    return load_config(ROOT / "configs" / CONFIGS[workload], overrides)


def run_plain(config, device: str = "cpu") -> dict:
    """The same FedAvg computation written as a plain PyTorch loop in one process: one global model
    per architecture, averaged (unweighted, in float64) over that architecture's clients of the round."""
    import torch
    import torch.nn.functional as F

    from fedray.methods.base import round_rng, task_seed
    from fedray.data import load_dataset, partition
    from fedray.models import create_model

    fed, tr = config.federation, config.training
    if config.runtime.num_cpus:  # --cores
        torch.set_num_threads(int(config.runtime.num_cpus))
    data = load_dataset(config.data.dataset, config.data.root)
    splits = partition(data.train_y, fed.num_clients, "iid", config.data.seed)
    archs = [arch for arch, count in fed.architectures.items() for _ in range(count)]
    x_all, y_all = torch.from_numpy(data.train_x).to(device), torch.from_numpy(data.train_y).to(device)
    shards = [(x_all[torch.from_numpy(s).to(device)], y_all[torch.from_numpy(s).to(device)]) for s in splits]
    models, global_states = {}, {}
    for arch in fed.architectures:
        torch.manual_seed(config.seed)
        models[arch] = create_model(arch, data.input_shape, data.num_classes).to(device)
        global_states[arch] = {k: v.clone() for k, v in models[arch].state_dict().items()}
    round_s = []
    for rnd in range(1, fed.rounds + 1):
        start = time.perf_counter()
        chosen = sorted(round_rng(config.seed, rnd).choice(fed.num_clients, fed.clients_per_round, replace=False))
        sums: dict[str, dict] = {}  # running float64 sums per architecture: one model in memory at a time
        counts: dict[str, int] = {}
        for cid in chosen:
            x, y = shards[cid]
            model = models[archs[cid]]
            model.load_state_dict(global_states[archs[cid]])
            opt = torch.optim.SGD(model.parameters(), lr=tr.lr)
            gen = torch.Generator().manual_seed(task_seed(config.seed, rnd, int(cid)))
            torch.manual_seed(task_seed(config.seed, rnd, int(cid)))
            model.train()
            for _ in range(tr.epochs):
                order = torch.randperm(len(x), generator=gen)
                for first in range(0, len(x), tr.batch_size):
                    idx = order[first:first + tr.batch_size].to(device)
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(model(x[idx]), y[idx]).backward()
                    opt.step()
            acc = sums.setdefault(archs[cid], {k: torch.zeros_like(v, dtype=torch.float64)
                                               for k, v in model.state_dict().items()})
            for k, v in model.state_dict().items():
                acc[k] += v.detach().double()
            counts[archs[cid]] = counts.get(archs[cid], 0) + 1
        for arch, acc in sums.items():
            global_states[arch] = {k: (acc[k] / counts[arch]).to(v.dtype) for k, v in global_states[arch].items()}
        if device != "cpu":
            torch.cuda.synchronize()
        round_s.append(time.perf_counter() - start)
    tx, ty = torch.from_numpy(data.test_x).to(device), torch.from_numpy(data.test_y).to(device)
    return {"accuracy": accuracy_of(models, global_states, fed, tx, ty), "round_s": round_s}


def accuracy_of(models: dict, states: dict, fed, tx, ty) -> float:
    """The global models' test accuracy, each architecture weighted by its share of the clients."""
    import torch

    accuracy = 0.0
    for arch, model in models.items():
        model.load_state_dict(states[arch])
        model.eval()
        correct = 0
        with torch.inference_mode():
            for first in range(0, len(tx), fed.eval_batch_size):
                batch = slice(first, first + fed.eval_batch_size)
                correct += int((model(tx[batch]).argmax(1) == ty[batch]).sum())
        accuracy += fed.architectures[arch] / fed.num_clients * correct / len(ty)
    return accuracy


def _floor_train(model, x, y, tr, seed: int) -> None:
    """One client's local SGD, as ``run_plain`` does it: batch order and torch's generator from ``seed``."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(model.parameters(), lr=tr.lr)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model.train()
    for _ in range(tr.epochs):
        order = torch.randperm(len(x), generator=gen)
        for first in range(0, len(x), tr.batch_size):
            idx = order[first:first + tr.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()


def _floor_worker(conn, config) -> None:
    """A worker process of the floor side (one torch thread). It receives the training set once (a
    tensor in shared memory: one copy for all workers), the split and the model shapes, and says it
    is ready; then for each round ``(round, global states, its client ids)`` it trains those clients
    one after another and sends back, per architecture, the float64 sum of their trained weights and
    their count. ``None`` ends it."""
    import torch

    from fedray.methods.base import task_seed
    from fedray.models import create_model

    torch.set_num_threads(1)
    fed = config.federation
    x_all, y_all, splits, input_shape, num_classes = conn.recv()
    archs = [arch for arch, count in fed.architectures.items() for _ in range(count)]
    models = {arch: create_model(arch, input_shape, num_classes) for arch in fed.architectures}
    conn.send("ready")
    while (task := conn.recv()) is not None:
        rnd, global_states, cids = task
        sums: dict[str, dict] = {}
        counts: dict[str, int] = {}
        for cid in cids:
            model = models[archs[cid]]
            model.load_state_dict(global_states[archs[cid]])
            # a client's samples are gathered when it trains: no second copy of the data as shards
            idx = torch.from_numpy(splits[cid])
            _floor_train(model, x_all[idx], y_all[idx], config.training, task_seed(config.seed, rnd, cid))
            acc = sums.setdefault(archs[cid], {k: torch.zeros_like(v, dtype=torch.float64)
                                               for k, v in model.state_dict().items()})
            for k, v in model.state_dict().items():
                acc[k].add_(v.detach())  # float32 into float64 in place: the plain loop's sum, no temporary
            counts[archs[cid]] = counts.get(archs[cid], 0) + 1
        conn.send((sums, counts))


def cores(config) -> int:
    """The cores a side may use: ``runtime.num_cpus`` where ``--cores`` set it, else the machine's."""
    return int(config.runtime.num_cpus or os.cpu_count() or 1)


def run_floor(config) -> dict:
    """The multi-process floor: ``run_plain``'s FedAvg computation (same split, clients, batch order,
    initial models and unweighted float64 average) with each round's clients trained by
    ``os.cpu_count()`` worker processes of one torch thread each, what a careful simulator without
    Ray does on this machine. The workers are spawned once per run; while they start, the parent
    loads the data and moves the training set into shared memory, which it hands them once (so the
    tree holds one copy, as Ray's object store gives fedray). Each round the parent sends every
    worker the global models and a round-robin share of the round's sorted sampled clients (worker
    w of W gets clients w, w + W, ...: a static split, which also mixes the architectures); each
    worker folds its clients into one float64 running sum per architecture, and the parent adds the
    workers' partials and divides. Tensors travel through shared memory (torch's pickler), so a round
    moves handles, not weights. CPU only."""
    import multiprocessing as mp

    fed = config.federation
    ctx = mp.get_context("spawn")  # a fresh interpreter each: no fork of a process with torch's threads
    workers = []
    for _ in range(cores(config)):
        conn, child_conn = ctx.Pipe()
        proc = ctx.Process(target=_floor_worker, args=(child_conn, config), daemon=True)
        proc.start()
        workers.append((proc, conn))
    # imported once the workers are on their way, so that their start overlaps this one; importing torch
    # also teaches multiprocessing's pickler to pass shared tensors as handles rather than bytes
    import torch

    torch.set_num_threads(cores(config))  # the final evaluation: on as many threads as fedray's hosts have
    from fedray.methods.base import round_rng
    from fedray.data import load_dataset, partition
    from fedray.models import create_model

    data = load_dataset(config.data.dataset, config.data.root)
    # index arrays stay numpy: as tensors, each would travel as a shared-memory segment of its own
    splits = partition(data.train_y, fed.num_clients, "iid", config.data.seed)
    x_all = torch.from_numpy(data.train_x).share_memory_()  # a copy in shared memory; the array goes with data
    y_all = torch.from_numpy(data.train_y).share_memory_()
    tx, ty = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
    input_shape, num_classes = data.input_shape, data.num_classes
    del data
    for _, conn in workers:
        conn.send((x_all, y_all, splits, input_shape, num_classes))
    models, global_states = {}, {}
    for arch in fed.architectures:
        torch.manual_seed(config.seed)
        models[arch] = create_model(arch, input_shape, num_classes)
        global_states[arch] = {k: v.clone() for k, v in models[arch].state_dict().items()}
    for _, conn in workers:  # the rounds are timed once all are set up, as the plain loop's after its set-up
        assert conn.recv() == "ready"
    round_s = []
    for rnd in range(1, fed.rounds + 1):
        start = time.perf_counter()
        chosen = sorted(int(c) for c in
                        round_rng(config.seed, rnd).choice(fed.num_clients, fed.clients_per_round, replace=False))
        for w, (_, conn) in enumerate(workers):
            conn.send((rnd, global_states, chosen[w::len(workers)]))
        sums: dict[str, dict] = {}
        counts: dict[str, int] = {}
        for _, conn in workers:
            part_sums, part_counts = conn.recv()
            for arch, part in part_sums.items():
                if arch not in sums:
                    sums[arch] = part
                else:
                    for k, v in part.items():
                        sums[arch][k] += v
                counts[arch] = counts.get(arch, 0) + part_counts[arch]
        for arch, acc in sums.items():
            global_states[arch] = {k: (acc[k] / counts[arch]).to(v.dtype) for k, v in global_states[arch].items()}
        round_s.append(time.perf_counter() - start)
    for _, conn in workers:
        conn.send(None)  # the workers exit while this process evaluates
    accuracy = accuracy_of(models, global_states, fed, tx, ty)
    for proc, _ in workers:
        proc.join()
    return {"accuracy": accuracy, "round_s": round_s, "workers": len(workers)}


def measure(command: list[str], sample: bool) -> tuple[dict, subprocess.CompletedProcess]:
    """Run ``command``; its wall time, and with ``sample`` its peak summed PSS (with the split by
    process at the peak). The sampler reads every process's page tables five times a second, which
    costs a command of many processes (fedray's seven) more of the cores than one of few (the
    floor's three): W1 took 129-140 s sampled and 100-103 s not. So times come from runs without it
    (``sample=False``) and peak memory from runs of their own (see ``with_memory``)."""
    start_epoch, start = time.time(), time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if sample:
        with PeakMemory(proc.pid) as mem:
            out, err = proc.communicate()
    else:
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    done = subprocess.CompletedProcess(command, proc.returncode, out, err)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{err[-3000:]}")
    result = {"wall_s": wall, "start_epoch": start_epoch}
    if sample:
        result.update(peak_mem_mb=mem.peak / 2**20,
                      mem_split_mb={k: v / 2**20 for k, v in sorted(mem.split.items(), key=lambda kv: -kv[1])})
    return result, done


def with_memory(timed: dict, sampled: dict) -> dict:
    """A timed run's result with the peak memory of a sampled run of the same side (whose own wall
    time is kept as ``sampled_wall_s``)."""
    return {**timed, "peak_mem_mb": sampled["peak_mem_mb"], "mem_split_mb": sampled["mem_split_mb"],
            "sampled_wall_s": sampled["wall_s"]}


def side_plain(workload: str, overrides: list[str], device: str = "cpu", floor: bool = False,
               sample: bool = False) -> dict:
    """The plain loop (or, with ``floor``, the multi-process floor) as its own measured command."""
    result, done = measure([sys.executable, __file__, "--part", workload, "--device", device,
                            *(["--floor"] if floor else []), *overrides], sample)
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    return {**result, **json.loads(line[len("RESULT "):])}


# on a GPU: four client actors and the server share it, a fifth each
GPU_OVERRIDES = ["runtime.device=cuda", "runtime.actor_gpus=0.2", "runtime.server_gpus=0.2"]


def side_fedray(workload: str, overrides: list[str], device: str = "cpu", sample: bool = False) -> dict:
    if device != "cpu":
        overrides = [*overrides, *GPU_OVERRIDES]
    from fedray.tracking import read_scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        result, done = measure([sys.executable, "-m", "fedray.cli", "run", str(ROOT / "configs" / CONFIGS[workload]), *overrides,
                                "--run-dir", str(run_dir), "--no-progress"], sample)
        summary = json.loads((run_dir / "result.json").read_text())
        scalars = read_scalars(run_dir)
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        acc.Reload()
        first_round_end = min(e.wall_time for e in acc.Scalars("time/round_s") if e.step == 1)
    # a round's clients and aggregation, as the plain loop times its rounds (evaluation apart)
    work = [c + a for (_, c), (_, a) in zip(scalars["time/clients_s"], scalars["time/aggregate_s"])]
    return {**result, "accuracy": summary["final"]["eval/accuracy"], "actors": summary["executor"]["actors"],
            "server_hosts_clients": summary["executor"].get("server_hosts_clients", False),
            "first_round_s": first_round_end - result["start_epoch"], "round_s": work}


def machine(device: str = "cpu") -> str:
    from fedray.repro import cpu_model

    text = (f"{cpu_model()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}")
    if device == "cuda":
        import torch

        text += f", {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return text


def hosts(fedray: dict) -> str:
    """Who trained the clients: N client actors, or the server and N - 1 client actors."""
    if fedray.get("server_hosts_clients"):
        others = fedray["actors"] - 1
        return f"the server and {others} client actor{'s' if others != 1 else ''} host the clients"
    return f"{fedray['actors']} client actors"


RATIOS = ("time_ratio_floor", "memory_ratio_floor", "time_ratio_plain", "memory_ratio_plain")
SIDES = ("plain", "floor", "fedray")


def run_side(side: str, workload: str, overrides: list[str], device: str, sample: bool) -> dict:
    if side == "fedray":
        return side_fedray(workload, overrides, device, sample)
    return side_plain(workload, overrides, device, floor=side == "floor", sample=sample)


def ratios(plain: dict | None, floor: dict | None, fedray: dict) -> dict:
    """fedray's wall time and peak memory over the floor's and over the plain loop's (None where a
    side did not run, or where a run has no memory measured)."""
    out = {}
    for name, base in (("floor", floor), ("plain", plain)):
        out[f"time_ratio_{name}"] = fedray["wall_s"] / base["wall_s"] if base else None
        out[f"memory_ratio_{name}"] = (fedray["peak_mem_mb"] / base["peak_mem_mb"]
                                       if base and "peak_mem_mb" in base and "peak_mem_mb" in fedray else None)
    return {r: out[r] for r in RATIOS}


def paired(workload: str, repeat: int, device: str, sides: tuple[str, ...] = SIDES, memory_runs: int = 1,
           overrides: tuple[str, ...] = ()) -> dict:
    """``repeat`` timed runs of each side, alternating the sides so that all see the same load on the
    machine, each side going first in every other repeat; the first ``memory_runs`` repeats are each followed by one sampled run of every side,
    for peak memory (``measure``). Returns each repeat's ratios, their medians, and the repeat with
    the median time ratio against the floor (against the plain loop where there is no floor: on a
    GPU) with its tables. ``overrides``: config overrides for every side (``--cores``)."""
    overrides = list(overrides)
    if device != "cpu":
        sides = tuple(s for s in sides if s != "floor")  # the floor is CPU only
    runs = []
    for i in range(repeat):
        # the sides take turns going first (floor, fedray; fedray, floor; ...): whichever runs
        # second meets what the first left (page cache, fragmented memory), so a fixed order favours one
        order = sides if i % 2 == 0 else tuple(reversed(sides))
        run = {side: run_side(side, workload, overrides, device, sample=False) for side in order}
        if i < memory_runs:
            run = {side: with_memory(result, run_side(side, workload, overrides, device, sample=True))
                   for side, result in run.items()}
        run = {side: run.get(side) for side in SIDES}
        runs.append({**run, **ratios(run["plain"], run["floor"], run["fedray"])})
        print_table(workload, run["plain"], run["floor"], run["fedray"])
        sys.stdout.flush()
    median = {}
    for r in RATIOS:
        values = [run[r] for run in runs if run[r] is not None]
        median[r] = float(statistics.median(values)) if values else None
    key = "time_ratio_floor" if median["time_ratio_floor"] is not None else "time_ratio_plain"
    middle = min(runs, key=lambda run: abs(run[key] - median[key]))  # its tables go in the JSON
    out = {**middle, **median, "memory_runs": min(memory_runs, repeat)}
    if repeat > 1:
        shown = [r for r in RATIOS if median[r] is not None]
        for r in shown:  # time_ratio_floor -> time_ratios_floor: each repeat's (memory: each measured)
            out[r.replace("ratio", "ratios")] = [run[r] for run in runs if run[r] is not None]
        out["wall_s"] = {side: [run[side]["wall_s"] for run in runs] for side in sides}
        out["first_round_s"] = [run["fedray"]["first_round_s"] for run in runs]
        listed = "; ".join(f"fedray / {r.split('_')[2]} {r.split('_')[0]} "
                           f"{', '.join(f'{x:.3f}' for x in out[r.replace('ratio', 'ratios')])} "
                           f"(median {median[r]:.3f})" for r in shown)
        print(f"{workload}, {repeat} repeats: {listed}; fedray's first round ends at "
              f"{', '.join(f'{t:.1f}' for t in out['first_round_s'])} s", flush=True)
    return out


def print_table(name: str, plain: dict | None, floor: dict | None, fedray: dict) -> None:
    """One repeat's sides: wall time of the timed run, peak memory of the sampled run (if any)."""
    def row(label: str, r: dict, tail: str = "") -> str:
        mem = f"{r['peak_mem_mb']:9.0f}" if "peak_mem_mb" in r else f"{'-':>9}"
        return f"{label:8} {r['wall_s']:8.1f} {mem} {r['accuracy']:9.4f}  {tail}"

    print(f"\n{name}")
    print(f"{'':8} {'wall s':>8} {'peak MB':>9} {'accuracy':>9}  first round ends at")
    if plain:
        print(row("plain", plain))
    if floor:
        print(row("floor", floor, f"({floor['workers']} worker processes)"))
    print(row("fedray", fedray, f"{fedray['first_round_s']:.1f} s  ({hosts(fedray)})"))
    r = ratios(plain, floor, fedray)
    for base in ("floor", "plain"):
        if r[f"time_ratio_{base}"] is not None:
            memory = r[f"memory_ratio_{base}"]
            print(f"ratio fedray / {base}: time {r[f'time_ratio_{base}']:.3f}"
                  + (f", memory {memory:.2f}" if memory is not None else ""))
    for side, r in (("floor", floor), ("fedray", fedray)):
        if r and "mem_split_mb" in r:
            print(f"{side}'s memory at its peak, MB: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in r["mem_split_mb"].items()))


def scale(device: str = "cpu", sides: tuple[str, ...] = SIDES) -> list[dict]:
    """Cost per client update (rounds 2..R, from a timed run) as clients per round grow 10 -> 100 ->
    1,000, and each side's peak memory (from a sampled run)."""
    if device != "cpu":
        sides = tuple(s for s in sides if s != "floor")
    rows = []
    for k in SCALE_PER_ROUND:
        overrides = [f"federation.clients_per_round={k}", f"federation.rounds={SCALE_ROUNDS}",
                     f"federation.eval_every={SCALE_ROUNDS}", f"checkpoint_every={SCALE_ROUNDS}"]
        results = {side: run_side(side, "scale", overrides, device, sample=False) for side in sides}
        results = {side: with_memory(r, run_side(side, "scale", overrides, device, sample=True))
                   for side, r in results.items()}
        row = {"clients_per_round": k}
        for side, r in results.items():
            row[f"{side}_ms_per_update"] = 1000 * sum(r["round_s"][1:]) / (k * (SCALE_ROUNDS - 1))
            row[f"{side}_peak_mem_mb"] = r["peak_mem_mb"]
        rows.append(row)
        ms = {side: row[f"{side}_ms_per_update"] for side in results}
        mb = {side: row[f"{side}_peak_mem_mb"] for side in results}
        against = ", ".join(f"fedray / {side} {ms['fedray'] / ms[side]:.3f}"
                            for side in ("floor", "plain") if side in ms and "fedray" in ms)
        print(f"{k:5} clients/round: ms per client update {', '.join(f'{s} {v:.1f}' for s, v in ms.items())} "
              f"({against}); peak MB {', '.join(f'{s} {v:.0f}' for s, v in mb.items())}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)  # with --part: the floor side
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--only", default="w1,w2,k1000,scale",
                        help="comma-separated: w1, w2, k1000, scale, k3000, k10000")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--repeat", type=int, default=1,
                        help="timed runs of each side per workload (not scale); the medians are reported")
    parser.add_argument("--memory-runs", type=int, default=1,
                        help="of the repeats, how many are followed by a sampled run of each side for peak memory")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="comma-separated sides to run: plain, floor, fedray (fedray always runs)")
    parser.add_argument("--cores", type=int,
                        help="every side uses this many of the machine's cores for its clients (runtime.num_cpus: "
                             "the floor's workers, the plain loop's threads, fedray's Ray), leaving the rest to "
                             "whatever else runs: fedray's daemons, the floor's parent")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: the plain loop on the GPU; fedray with 4 client actors and the server sharing it")
    args = parser.parse_args()
    if args.part:
        config = load(args.part, args.overrides)
        result = run_floor(config) if args.floor else run_plain(config, args.device)
        print("RESULT " + json.dumps(result), flush=True)
        return
    sides = tuple(s for s in SIDES if s in args.sides.split(",") or s == "fedray")
    unknown = set(args.sides.split(",")) - set(SIDES)
    if unknown:
        parser.error(f"--sides: unknown {', '.join(sorted(unknown))}; choose from {', '.join(SIDES)}")
    results = {"machine": machine(args.device), "device": args.device, "sides": list(sides), "cores": args.cores,
               "method": "times from runs without the memory sampler; peak memory from sampled runs of their own"}
    print(f"on {results['machine']}", flush=True)
    for workload in args.only.split(","):
        if workload == "scale":
            results["scale"] = scale(args.device, sides)
            continue
        results[workload] = paired(workload, args.repeat, args.device, sides, args.memory_runs,
                                   (f"runtime.num_cpus={args.cores}",) if args.cores else ())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
