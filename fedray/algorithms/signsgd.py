"""signSGD with majority vote (Bernstein et al. 2018/2019), as compared in thesis chapter 4.

    client i in I_t: dtheta_i <- SGD_n(theta, D_i) - theta; upload sign(dtheta_i)     (1 bit/element)
    server:          v <- sign(sum_i sign(dtheta_i))     (majority vote; a tie counts as +1)
                     theta <- theta + delta * v; broadcast v                              (1 bit/element)

``step`` is the coordinate step delta (the thesis uses 0.0002 for VGG11*; default: ``training.lr``, as
in the thesis author's code). The model is kept as theta = theta^0 + delta * S, with S the integer
sum of all votes. A client that missed s rounds downloads the partial sum of the s votes it missed,
with values in [-s, s] and log2(2s + 1) bits each (eq. 4.10; 1 bit when s = 1), or the whole S when
that is smaller.
Because S is an integer, client and server end with bit-identical models however a client catches
up; a CRC32 of the server model travels with each task and is checked.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np
import torch
from pydantic import Field

from fedray.algorithms.base import ClientAlgorithm, Params, ServerContext, Strategy, VirtualClient, task_seed
from fedray.algorithms.fedavg import group_by_arch, mean_client_loss
from fedray.algorithms.stc import decode, forget_old, model_crc
from fedray.compression import encode_tensor, majority_vote, sign
from fedray.messages import ClientFailure, ClientTask, ClientUpdate, RoundPlan
from fedray.weights import Weights, get_weights, is_update, nbytes

Votes = dict[str, np.ndarray]


class SignSGDParams(Params):
    step: Optional[float] = Field(None, gt=0)
    cache_rounds: int = Field(50, ge=0)


def model_from_votes(initial: Weights, votes: Votes, step: float) -> Weights:
    """theta = theta^0 + delta * S for the floating tensors; other tensors stay as in theta^0."""
    delta = np.float32(step)
    return {k: (v + delta * votes[k].astype(np.float32)).astype(v.dtype) if k in votes else v
            for k, v in initial.items()}


def encode_ints(values: Votes) -> dict[str, bytes]:
    return {name: encode_tensor("int", v) for name, v in values.items()}


class SignSGDClient(ClientAlgorithm):
    stateful = True  # the vote sum S_i and the round it is current for stay on the host

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initial: dict[str, Weights] = {}

    def initial(self, arch: str) -> Weights:
        """theta^0: the same seeded initial model the server built."""
        if arch not in self._initial:
            torch.manual_seed(self.config.seed)
            self._initial[arch] = get_weights(self._build_model(arch))
        return self._initial[arch]

    def run(self, task: ClientTask, payloads: dict[str, Any], client: VirtualClient) -> ClientUpdate:
        start = time.perf_counter()
        initial = self.initial(task.arch)
        shapes = {k: v.shape for k, v in initial.items() if is_update(v)}
        votes = client.state.get("votes", {k: np.zeros(s, np.int64) for k, s in shapes.items()})
        for key in task.payload_keys:
            received = {k: v.astype(np.int64) for k, v in decode(payloads[key], shapes).items()}
            votes = received if key.startswith("state/") else {k: votes[k] + received[k] for k in votes}
        theta = model_from_votes(initial, votes, task.options["step"])
        if model_crc(theta) != task.options["model_crc"]:
            raise ClientFailure(task.client_id, task.round, "download", "model copy is out of sync with the server")
        trained, stats = self.train_local(task, theta, client)
        payload = {k: encode_tensor("sign", sign(trained[k] - theta[k])) for k in shapes}
        client.state.update(votes=votes, synced=task.round - 1)
        stats["time_s"] = time.perf_counter() - start
        return ClientUpdate(client.client_id, task.arch, client.num_samples, payload, nbytes(payload), stats)


class SignSGD(Strategy):
    name = "signsgd"
    Params = SignSGDParams
    Client = SignSGDClient

    def __init__(self, params: SignSGDParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.step = params.step or self.config.training.lr
        self.initial = dict(self.models)
        self.votes = {arch: {k: np.zeros(v.shape, np.int64) for k, v in m.items() if is_update(v)}
                      for arch, m in self.models.items()}
        self.cache: dict[str, dict[int, Votes]] = {arch: {} for arch in self.models}
        self.synced: dict[int, int] = {}

    def configure_round(self, round: int) -> RoundPlan:
        candidates: dict[str, Any] = {}  # encoded once per round; only what a task uses is broadcast
        tasks = []
        for c in self.sample_clients(round):
            keys = self._download(c.client_id, c.arch, round, candidates)
            options = {"model_crc": model_crc(self.models[c.arch]), "step": self.step}
            tasks.append(ClientTask(c.client_id, round, c.arch, keys, task_seed(self.config.seed, round, c.client_id),
                                    options))
        used = {key for task in tasks for key in task.payload_keys}
        return RoundPlan(tasks=tasks, broadcast={key: candidates[key] for key in used})

    def _download(self, client_id: int, arch: str, round: int, candidates: dict[str, Any]) -> tuple[str, ...]:
        """The partial vote sum since the client's last round (eq. 4.10), or all of S if smaller."""
        last = self.synced.get(client_id, 0)
        if last == round - 1:
            return ()
        full_key = f"state/{arch}"
        if full_key not in candidates:
            candidates[full_key] = encode_ints(self.votes[arch])
        missed = range(last + 1, round)
        if all(r in self.cache[arch] for r in missed):
            key = f"votes/{arch}/{last}"
            if key not in candidates:
                total = {k: sum(self.cache[arch][r][k] for r in missed) for k in self.votes[arch]}
                # one missed vote is +-1: the plain 1-bit broadcast; more are integers in [-s, s]
                candidates[key] = ({k: encode_tensor("sign", v.astype(np.float32)) for k, v in total.items()}
                                   if len(missed) == 1 else encode_ints(total))
            if nbytes(candidates[key]) < nbytes(candidates[full_key]):
                return (key,)
        return (full_key,)

    def aggregate(self, round: int, updates: list[ClientUpdate]) -> dict[str, float]:
        for arch, group in group_by_arch(updates).items():
            shapes = {k: v.shape for k, v in self.votes[arch].items()}
            signs = [decode(u.payload, shapes) for u in group]
            vote = {k: majority_vote([s[k] for s in signs]).astype(np.int64) for k in shapes}
            self.votes[arch] = {k: self.votes[arch][k] + vote[k] for k in shapes}
            self.models[arch] = model_from_votes(self.initial[arch], self.votes[arch], self.step)
            self.cache[arch][round] = vote
            forget_old(self.cache[arch], round, self.params.cache_rounds)
        for u in updates:
            self.synced[u.client_id] = round - 1
        return mean_client_loss(updates)

    def state_dict(self) -> dict[str, Any]:
        return {"models": self.models, "votes": self.votes, "cache": self.cache, "synced": self.synced}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models, self.votes = state["models"], state["votes"]
        self.cache, self.synced = state["cache"], state["synced"]
