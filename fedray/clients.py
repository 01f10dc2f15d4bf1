"""ClientHost: hosts one or more virtual clients and runs their tasks.

A plain class: the local backend runs one in-process, and ``actors.client`` makes it a Ray actor
with the configured CPUs and GPU share. Each hosted client keeps its data shard on the host's
device and its persistent state (``VirtualClient.state``) between rounds, so nothing but the
round's payloads and updates crosses the actor boundary.
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import numpy as np
import torch

from fedray.algorithms import VirtualClient, get_algorithm
from fedray.algorithms.base import task_seed
from fedray.config import Config
from fedray.data.shifts import apply_adversary, apply_group
from fedray.messages import ClientFailure, ClientSpec, ClientTask, ClientUpdate
from fedray.models import create_model
from fedray.training import resolve_device


def model_builder(config: Config, input_shape: tuple[int, ...], num_classes: int) -> Callable[[str], torch.nn.Module]:
    """``arch -> new model`` for the run's data shape, with the config's per-model options."""
    options = config.federation.model_options

    def build(arch: str) -> torch.nn.Module:
        return create_model(arch, tuple(input_shape), num_classes, **options.get(arch, {}))

    return build


class ClientHost:
    """Hosts virtual clients and runs ``ClientAlgorithm.run`` for them.

    Args:
        config: the run's config.
        specs: every client this host may serve (id, architecture, sample indices).
        train_x, train_y: the whole training set (shared and read-only: with Ray, zero-copy views
            of the object store).
        num_classes: classes of the data set.
        gpus: the GPU share this host was given (0 for CPU).
        home: ids of the clients whose data and persistent state live here (default: all of
            ``specs``). Other clients of ``specs`` are served on demand, only for stateless methods.
        threads: torch threads (default ``runtime.torch_threads``, else the actor's whole CPUs).
        aux_x: unlabelled auxiliary inputs (distillation methods), copied once to this host's device.
    """

    def __init__(self, config: Config, specs: list[ClientSpec], train_x: np.ndarray, train_y: np.ndarray,
                 num_classes: int, gpus: float = 0.0, home: list[int] | None = None,
                 threads: int | None = None, aux_x: np.ndarray | None = None):
        torch.set_num_threads(threads or config.runtime.torch_threads or max(1, int(config.runtime.actor_cpus)))
        self.device = resolve_device(config.runtime.device, gpus)
        algorithm = get_algorithm(config.algorithm.name)
        build = model_builder(config, train_x.shape[1:], num_classes)
        aux = None if aux_x is None else torch.from_numpy(np.array(aux_x)).to(self.device)  # own, writable copy
        self.algorithm = algorithm.Client(config.algorithm_params(), config, build, self.device, aux)
        self.config, self.num_classes = config, num_classes
        self.train_x, self.train_y = train_x, train_y
        self.specs = {spec.client_id: spec for spec in specs}
        home_ids = set(self.specs) if home is None else set(home)
        self.clients: dict[int, VirtualClient] = {}
        for cid in sorted(home_ids):
            client = self._materialise(self.specs[cid])
            client.state = self.algorithm.init_state(client)
            self.clients[cid] = client

    def _materialise(self, spec: ClientSpec) -> VirtualClient:
        """The client's shard copied out of the shared arrays onto this host's device, with its
        group's shift and, for an adversary, its attack applied (``fedray.data.shifts``)."""
        d = self.config.data
        x, y = self.train_x[spec.indices], self.train_y[spec.indices]
        x, y = apply_group(x, y, d.group_shift, spec.group, d.groups, self.num_classes, d.seed)
        if spec.role != "benign":
            x, y = apply_adversary(x, y, spec.role, d.noise, task_seed(d.seed, 0, spec.client_id))
        x = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        y = torch.from_numpy(np.ascontiguousarray(y)).to(self.device)
        return VirtualClient(spec, x, y)

    def _client(self, task: ClientTask) -> VirtualClient:
        if task.client_id in self.clients:
            return self.clients[task.client_id]
        if self.algorithm.stateful or task.client_id not in self.specs:
            raise ClientFailure(task.client_id, task.round, "dispatch", "client is not hosted here")
        visitor = self._materialise(self.specs[task.client_id])
        visitor.state = self.algorithm.init_state(visitor)
        return visitor

    def run(self, task: ClientTask, *payloads: Any) -> ClientUpdate:
        """Run one task; ``payloads`` are the broadcast entries named by ``task.payload_keys``."""
        client = self._client(task)
        try:
            return self.algorithm.run(task, dict(zip(task.payload_keys, payloads)), client)
        except ClientFailure:  # already names the client and the stage
            raise
        except Exception as err:  # report which client and stage, keep the traceback text
            detail = "".join(traceback.format_exception_only(type(err), err)).strip()
            raise ClientFailure(task.client_id, task.round, "local training", detail) from err

    def client_states(self) -> dict[int, dict[str, Any]]:
        return {cid: c.state for cid, c in self.clients.items()}

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        for cid, state in states.items():
            if cid in self.clients:
                self.clients[cid].state = state

    def hosted(self) -> list[int]:
        return sorted(self.clients)


class LocalExecutor:
    """Runs every client in this process, one after another (``runtime.backend: local``)."""

    def __init__(self, config: Config, specs: list[ClientSpec], data):
        threads = config.runtime.torch_threads or os.cpu_count() or 1
        self.host = ClientHost(config, specs, data.train_x, data.train_y, data.num_classes, threads=threads,
                               aux_x=data.aux_x)

    def execute(self, plan) -> list[ClientUpdate]:
        updates = [self.host.run(t, *(plan.broadcast[k] for k in t.payload_keys)) for t in plan.tasks]
        return sorted(updates, key=lambda u: u.client_id)

    def client_states(self) -> dict[int, dict[str, Any]]:
        return self.host.client_states()

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self.host.load_client_states(states)

    def describe(self) -> dict[str, Any]:
        return {"backend": "local", "actors": 0}

    def shutdown(self) -> None:
        pass
