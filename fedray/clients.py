"""ClientHost: hosts one or more virtual clients and runs their tasks.

A plain class: the local backend runs one in-process, and ``actors.client`` makes it a Ray actor
with the configured CPUs and GPU share. Each hosted client keeps its data shard on the host's
device and its persistent state (``VirtualClient.state``) between rounds, so nothing but the
round's payloads and updates crosses the actor boundary.

The host is where a client's round is wrapped: it runs the method's ``receive``, ``train`` and
``upload``, times them, counts the uploaded bytes, assembles the ``ClientUpdate``, names the step
that failed (with the whole traceback), and stands in for ``train`` when the client is Byzantine.
"""

from __future__ import annotations

import time
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Hashable, Iterator

import numpy as np
import torch

from fedray.attacks import make_attack
from fedray.cohort import chunk_size, chunks, memory_budget
from fedray.config import Config
from fedray.data.shifts import apply_group
from fedray.fold import Block, Sums, TreeStack, add_terms, finite, fold_groups
from fedray.messages import ClientFailure, ClientSpec, ClientTask, ClientUpdate, one_line
from fedray.methods.base import Client, LocalUpdate, VirtualClient, task_seed
from fedray.models import model_builder
from fedray.plugins import load_attack
from fedray.resolve import Method
from fedray.round import Gathered, kind_problem
from fedray.training import EvalPart, cap_gpu_memory, evaluate_part, gpu_memory_note, resolve_device, set_torch_threads
from fedray.weights import Weights, all_finite, nbytes, set_weights


def client_major(x: np.ndarray, y: np.ndarray, specs: list[ClientSpec]
                 ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]] | None]:
    """The training set laid out client after client, and each client's span in it, so that a
    client's shard is a slice: a host reads it without copying (under Ray, straight from the object
    store). When shards overlap (a pooled baseline), the data as it is and no spans."""
    sizes = [len(spec.indices) for spec in specs]
    if sum(sizes) > len(x):
        return x, y, None
    order = np.concatenate([spec.indices for spec in specs]) if specs else np.zeros(0, np.int64)
    ends = np.cumsum(sizes)
    spans = {spec.client_id: (int(end - size), int(end)) for spec, size, end in zip(specs, sizes, ends)}
    return x[order], y[order], spans


@contextmanager
def failing_as(task: ClientTask, stage: str) -> Iterator[None]:
    """Turns a failure of the block into a ``ClientFailure`` naming the client, the round, ``stage``
    and the whole traceback."""
    try:
        yield
    except ClientFailure:
        raise
    except Exception as err:  # name the client and the step; keep the whole traceback as text
        raise ClientFailure(task.client_id, task.round, stage, one_line(err), traceback.format_exc()) from err


def prepare_task(client_half: Client, task: ClientTask, downloads: tuple[Any, ...],
                 client: VirtualClient) -> ClientUpdate:
    """One client's part of the method's one-time preparation (``Client.prepare``, e.g.
    FedAUX's certainty scores), timed, with the upload's bytes counted."""
    start = time.perf_counter()
    with failing_as(task, "preparation"):
        payload = client_half.prepare(task, downloads, client)
    return ClientUpdate(task.client_id, task.arch, client.num_samples, payload, nbytes(payload),
                        {"time_s": time.perf_counter() - start})


def run_task(client_half: Client, task: ClientTask, downloads: tuple[Any, ...],
             client: VirtualClient) -> ClientUpdate:
    """One client's round: the method's ``receive``, ``train`` (an adversary's attack may send an
    update of its own in its place: ``fedray.attacks``) and ``upload``, timed, with the upload's bytes counted. A failure becomes a
    ``ClientFailure`` naming the client, the round, the step and the whole traceback."""
    start = time.perf_counter()
    client.scratch.clear()
    with failing_as(task, "download"):
        theta = client_half.receive(task, downloads, client)
    with failing_as(task, "local training"):
        local = client.attack.update(client_half, task, theta) if client.attack is not None else None
        if local is None:
            local = client_half.train(task, theta, client)
    return finish_task(client_half, task, theta, local, client, time.perf_counter() - start)


def finish_task(client_half: Client, task: ClientTask, theta: Weights, local: LocalUpdate,
                client: VirtualClient, elapsed: float) -> ClientUpdate:
    """The method's ``upload`` of ``local`` and the update it makes; ``elapsed``: the client's time so far."""
    start = time.perf_counter()
    with failing_as(task, "upload"):
        payload = client_half.upload(task, theta, local, client)
    metrics = {**local.metrics, "time_s": elapsed + time.perf_counter() - start}
    return ClientUpdate(task.client_id, task.arch, client.num_samples, payload, nbytes(payload), metrics)


class ClientHost:
    """Hosts virtual clients and runs ``Client.run`` for them.

    Args:
        config: the run's config.
        method: the resolved method (``fedray.resolve.resolve``), whose client half runs here.
        specs: every client this host may serve (id, architecture, sample indices).
        train_x, train_y: the whole training set (shared and read-only: with Ray, zero-copy views
            of the object store).
        spans: where each client's shard lies in ``train_x`` (``client_major``); None: at its
            ``spec.indices``, copied out.
        num_classes: classes of the data set.
        gpus: the GPU share this host was given (0 for CPU).
        home: ids of the clients whose data and persistent state live here (default: all of
            ``specs``). Other clients of ``specs`` are served on demand, only for stateless methods.
        threads: torch threads (default ``runtime.torch_threads``, else the actor's whole CPUs).
        aux_x: unlabelled auxiliary inputs (distillation methods), copied once to this host's device.
        initial_models: theta^0 of each architecture, as the server has it (pre-trained features);
            None: the seeded initialisation, built here when a method needs it.
    """

    def __init__(self, config: Config, method: Method, specs: list[ClientSpec], train_x: np.ndarray,
                 train_y: np.ndarray, num_classes: int, gpus: float = 0.0, home: list[int] | None = None,
                 threads: int | None = None, aux_x: np.ndarray | None = None,
                 initial_models: dict[str, Weights] | None = None, spans: dict[int, tuple[int, int]] | None = None):
        set_torch_threads(threads or config.runtime.torch_threads or max(1, int(config.runtime.actor_cpus)))
        self.device, self.gpus = resolve_device(config.runtime.device, gpus), gpus
        cap_gpu_memory(self.device, gpus)
        build = model_builder(config.federation.model_options, train_x.shape[1:], num_classes)
        aux = None if aux_x is None else torch.from_numpy(np.array(aux_x)).to(self.device)  # own, writable copy
        self.client_half = method.make_client(config, build, self.device, aux, initial_models)
        self.kinds = method.client.collected(method.params)  # the statistics each client hands back
        self.config, self.num_classes, self.build = config, num_classes, build
        self.attack = make_attack(config.data, load_attack)  # what the adversaries among the clients do
        self._eval_models: dict[str, torch.nn.Module] = {}  # a model per architecture, to evaluate on
        self._test_sets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # by group
        self.train_x, self.train_y, self.spans = train_x, train_y, spans
        self.specs = {spec.client_id: spec for spec in specs}
        self.fold_group = fold_groups(list(self.specs), config.runtime.fold_groups)  # as the executor cuts them
        home_ids = set(self.specs) if home is None else set(home)
        self.vectorize = method.vectorizes(config.runtime)
        self._chunks: dict[tuple[str, int], int] = {}  # clients per cohort chunk, by architecture and shard bytes
        self.clients: dict[int, VirtualClient] = {}
        for cid in sorted(home_ids):
            client = self._materialise(self.specs[cid])
            client.state = self.client_half.init_state(client)
            self.clients[cid] = client

    def _materialise(self, spec: ClientSpec) -> VirtualClient:
        """The client's shard on this host's device, with its group's shift and, for an adversary,
        its attack applied (``fedray.data.shifts``). On the CPU an unshifted shard with a span is a
        view of the shared arrays, not a copy (nothing writes to a client's data)."""
        d = self.config.data
        if self.spans is not None:
            start, stop = self.spans[spec.client_id]
            x, y = self.train_x[start:stop], self.train_y[start:stop]
        else:
            x, y = self.train_x[spec.indices], self.train_y[spec.indices]
        x, y = apply_group(x, y, d.group_shift, spec.group, d.groups, self.num_classes, d.seed)
        attack = self.attack if spec.role != "benign" else None
        if attack is not None:
            x, y = attack.data(x, y, task_seed(d.seed, 0, spec.client_id))
        with warnings.catch_warnings():  # a view of Ray's read-only object store: torch warns, reads fine
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            x = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
            y = torch.from_numpy(np.ascontiguousarray(y)).to(self.device)
        return VirtualClient(spec, x, y, attack=attack)

    def _client(self, task: ClientTask) -> VirtualClient:
        if task.client_id in self.clients:
            return self.clients[task.client_id]
        if self.client_half.at_home or task.client_id not in self.specs:
            raise ClientFailure(task.client_id, task.round, "dispatch", "client is not hosted here")
        visitor = self._materialise(self.specs[task.client_id])
        visitor.state = self.client_half.init_state(visitor)
        return visitor

    def run(self, task: ClientTask, *downloads: Any) -> ClientUpdate:
        """Run one task; ``downloads`` are the broadcast entries named by ``task.payload_keys``."""
        with self._noting_gpu_memory():
            return run_task(self.client_half, task, downloads, self._client(task))

    def run_batch(self, tasks: list[ClientTask], keys: list[str], *payloads: Any) -> list[ClientUpdate]:
        """Run several tasks in one call, their whole uploads kept; ``payloads`` are the broadcast
        entries named by ``keys``. With ``runtime.vectorize`` the clients that train plainly train as
        cohorts (:meth:`_run_cohorts`)."""
        args = self._downloads(tasks, keys, payloads)
        if not self.vectorize:
            return [self.run(task, *args[task.client_id]) for task in tasks]
        with self._noting_gpu_memory():
            return [update for update, _ in self._run_cohorts(tasks, args)]

    def collect_batch(self, tasks: list[ClientTask], units: list[Hashable] | Block | None, keys: list[str],
                      *payloads: Any) -> tuple[list[ClientUpdate], Any]:
        """A round's tasks: each finite upload becomes its client's statistics
        (``Client.statistics``, ``fedray.round``) in client-id order, and is dropped.
        ``units``: None to gather (each client's statistics come back, in client-id order), each
        task's fold unit (the sums of each unit come back), or a block of the fold tree (the tasks
        are that block's; its fold groups' sums are added in the tree, one sum comes back). Returns
        the updates without payloads (one whose upload or statistics hold NaN or Inf, which is left
        out, says so: ``nonfinite``) and the statistics."""
        order = sorted(range(len(tasks)), key=lambda i: tasks[i].client_id)
        tasks = [tasks[i] for i in order]
        gather = units is None
        tree = TreeStack(units) if isinstance(units, Block) else None
        units = ([None] * len(tasks) if gather else [self.fold_group[t.client_id] for t in tasks] if tree
                 else [units[i] for i in order])
        sums: dict[Hashable, Sums] = {}
        gathered: Gathered = []
        kept: list[ClientUpdate] = []

        def collect(task: ClientTask, unit: Hashable, update: ClientUpdate, client: VirtualClient) -> None:
            if tree is not None and sums and unit not in sums:  # a fold group is complete: into the tree
                tree.push(*sums.popitem())
            into = None if gather else sums.setdefault(unit, {})
            ok = finite(update)
            if ok:
                with failing_as(task, "statistics"):
                    statistics = self.client_half.statistics(update, client)
                    problem = kind_problem(self.kinds, statistics)
                    if problem:
                        raise ValueError(f"{type(self.client_half).__name__}: {problem}")
                ok = all_finite(statistics)  # a coded upload (STC's bitstream) shows its NaN only decoded
                if ok and gather:
                    gathered.append((task.client_id, update.arch, statistics))
                elif ok:
                    add_terms(into, update.arch, statistics)
            kept.append(replace(update, payload=None, metrics={**update.metrics, **({} if ok else {"nonfinite": 1.0})}))

        args = self._downloads(tasks, keys, payloads)
        if self.vectorize:
            with self._noting_gpu_memory():
                done = self._run_cohorts(tasks, args)
            for task, unit, (update, client) in zip(tasks, units, done):
                collect(task, unit, update, client)
        else:
            for task, unit in zip(tasks, units):  # one upload alive at a time
                client = self._client(task)
                with self._noting_gpu_memory():
                    update = run_task(self.client_half, task, args[task.client_id], client)
                collect(task, unit, update, client)
        if gather:
            return kept, gathered
        if tree is None:
            return kept, sums
        if sums:
            tree.push(*sums.popitem())
        return kept, {tree.node: tree.result()}

    def prepare_batch(self, tasks: list[ClientTask], keys: list[str], *payloads: Any) -> list[ClientUpdate]:
        """The method's one-time preparation for several clients (``prepare_task``), as ``run_batch``."""
        args = self._downloads(tasks, keys, payloads)
        with self._noting_gpu_memory():
            return [prepare_task(self.client_half, task, args[task.client_id], self._client(task)) for task in tasks]

    @staticmethod
    def _downloads(tasks: list[ClientTask], keys: list[str], payloads: tuple[Any, ...]) -> dict[int, tuple[Any, ...]]:
        """Each task's downloads, in its ``payload_keys`` order, out of the broadcast entries ``keys``."""
        downloads = dict(zip(keys, payloads))
        return {t.client_id: tuple(downloads[k] for k in t.payload_keys) for t in tasks}

    def _run_cohorts(self, tasks: list[ClientTask], args: dict[int, tuple[Any, ...]]
                     ) -> list[tuple[ClientUpdate, VirtualClient]]:
        """Each client's ``receive``; then the clients of each architecture train together, in chunks
        (``fedray.cohort``), largest shards first, so that a chunk's clients take similar step counts;
        then each client's ``upload``. An adversary or a client of an architecture
        ``runtime.vectorize`` does not name runs alone. A client's
        ``time_s`` counts its own receive and upload and an equal share of its chunk's training."""
        updates, ready, clients = {}, [], {}
        for task in tasks:
            client = clients[task.client_id] = self._client(task)
            if client.spec.role != "benign" or not self.config.runtime.vectorizes(task.arch):
                updates[task.client_id] = run_task(self.client_half, task, args[task.client_id], client)
                continue
            start = time.perf_counter()
            client.scratch.clear()
            with failing_as(task, "download"):
                theta = self.client_half.receive(task, args[task.client_id], client)
            ready.append((task, client, theta, time.perf_counter() - start))
        ready.sort(key=lambda r: (r[0].arch, -r[1].num_samples, r[0].client_id))
        for arch in dict.fromkeys(r[0].arch for r in ready):
            cohort = [r for r in ready if r[0].arch == arch]
            for chunk in chunks(cohort, self._chunk_size(arch, cohort[0][1])):
                start = time.perf_counter()
                ids = [task.client_id for task, *_ in chunk]
                with failing_as(chunk[0][0], f"local training (as one cohort with clients {ids})"):
                    tasks_, clients_, thetas_ = ([r[k] for r in chunk] for k in range(3))
                    trained = (self.client_half.train_cohort(tasks_, thetas_, clients_) if len(chunk) > 1
                               else [self.client_half.train(tasks_[0], thetas_[0], clients_[0])])
                share = (time.perf_counter() - start) / len(chunk)
                for (task, client, theta, elapsed), local in zip(chunk, trained):
                    updates[task.client_id] = finish_task(self.client_half, task, theta, local, client, elapsed + share)
        return [(updates[task.client_id], clients[task.client_id]) for task in tasks]

    def _chunk_size(self, arch: str, client: VirtualClient) -> int:
        """Clients per chunk: ``runtime.vectorize_chunk``, or as many as a fixed budget holds
        (``fedray.cohort.memory_budget``: 1 GiB on a CPU, half the actor's share of a GPU's total
        memory; ``fedray.cohort.chunk_size``), counting each client's shard as large as ``client``'s,
        the largest of the cohort. It depends on the config and the model alone, not on the memory
        free at the moment nor on earlier rounds, so every run (a resumed one too) cuts the cohorts
        alike: the chunks change the arithmetic, and results must not depend on the machine's state."""
        if self.config.runtime.vectorize_chunk != "auto":
            return self.config.runtime.vectorize_chunk
        data = client.x.element_size() * client.x[0].numel() * client.num_samples
        if (arch, data) not in self._chunks:
            budget = memory_budget(self.device, self.gpus)
            self._chunks[arch, data] = chunk_size(self.client_half.model(arch), client.x[0], self.config.training,
                                                  budget, data)
        return self._chunks[arch, data]

    @contextmanager
    def _noting_gpu_memory(self) -> Iterator[None]:
        """A CUDA out-of-memory failure under a GPU share says which share was the limit."""
        try:
            yield
        except ClientFailure as failure:
            note = gpu_memory_note(failure.__cause__, self.device, self.gpus, "runtime.actor_gpus")
            if not note:
                raise
            raise ClientFailure(failure.client_id, failure.round, failure.stage, failure.reason + note,
                                failure.trace) from failure.__cause__

    def client_states(self) -> dict[int, dict[str, Any]]:
        return {cid: c.state for cid, c in self.clients.items()}

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        for cid, state in states.items():
            if cid in self.clients:
                self.clients[cid].state = state

    def adopt(self, client_ids: list[int], states: dict[int, dict[str, Any]]) -> None:
        """Make ``client_ids`` (clients of ``specs``) home clients here, as ``__init__`` makes its
        own, then give them ``states`` (a client missing there keeps its initial state): the clients
        of a host that was lost for good (its node left) go on here."""
        for cid in sorted(client_ids):
            client = self._materialise(self.specs[cid])
            client.state = self.client_half.init_state(client)
            self.clients[cid] = client
        self.load_client_states({cid: states[cid] for cid in client_ids if cid in states})

    def hosted(self) -> list[int]:
        return sorted(self.clients)

    def evaluate_part(self, arch: str, weights: Weights, group: int, test: Callable[[], tuple[np.ndarray, np.ndarray]],
                      first: int, stop: int, batch_size: int, num_classes: int = 0) -> EvalPart:
        """Batches ``first`` to ``stop`` of the evaluation of ``weights`` (a model of ``arch``) on
        group ``group``'s test set, on this host's device with its threads: its share of an
        evaluation the executor spreads over the hosts (``RayExecutor.evaluate``). ``test`` gives the
        whole test set the first time a group is asked for; its tensors are kept."""
        if arch not in self._eval_models:
            self._eval_models[arch] = self.build(arch).to(self.device)
        model = self._eval_models[arch]
        set_weights(model, weights)
        if group not in self._test_sets:
            self._test_sets[group] = group_test_set(self.config, *test(), group, self.num_classes, self.device)
        x, y = self._test_sets[group]
        return evaluate_part(model, x, y, batch_size, num_classes, first, stop)


def group_test_set(config: Config, x: np.ndarray, y: np.ndarray, group: int, num_classes: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Group ``group``'s test set (its label or rotation shift, ``data.group_shift``) as tensors
    on ``device``; on the CPU an unshifted set is the arrays themselves, not a copy."""
    d = config.data
    x, y = apply_group(x, y, d.group_shift, group, d.groups, num_classes, d.seed)
    with warnings.catch_warnings():  # a view of Ray's read-only object store: torch warns, reads fine
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return (torch.from_numpy(np.ascontiguousarray(x)).to(device),
                torch.from_numpy(np.ascontiguousarray(y)).to(device))
