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

The vote needs the clients only through sum_i sign(dtheta_i), so the hosts fold it (``fedray.fold``;
``SignSGDClient.statistics``); a sum of +-1 is an integer, exact in float64 however the clients are
grouped. The rest of the server step reads the updates without payloads: the ids (the catch-up
cache) and the losses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from pydantic import Field

from fedray.compression import CodedUpdate, decode_update, encode_update, sign
from fedray.config import Config
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import Client, Params, ServerContext, Strategy, Trained, VirtualClient, task_seed
from fedray.methods.helpers import CatchUpCache, ModelCheck, model_crc
from fedray.round import Round, Statistics
from fedray.weights import Weights, is_update, nbytes

Votes = dict[str, np.ndarray]


class SignSGDParams(Params):
    step: Optional[float] = Field(None, gt=0)
    cache_rounds: int = Field(50, ge=0)


@dataclass(frozen=True)
class VoteTotal:
    """Download: all of S, integer-coded; it replaces the client's sum (a ``CodedUpdate`` adds to it)."""

    tensors: dict[str, bytes]


def step_size(params: SignSGDParams, config: Config) -> float:
    """delta: ``step``, or the local learning rate when it is not given."""
    return params.step or config.training.lr


def model_from_votes(initial: Weights, votes: Votes, step: float) -> Weights:
    """theta = theta^0 + delta * S for the floating tensors; other tensors stay as in theta^0."""
    delta = np.float32(step)
    return {k: (v + delta * votes[k].astype(np.float32)).astype(v.dtype) if k in votes else v
            for k, v in initial.items()}


class SignSGDClient(Client):
    stateful = True  # the vote sum S_i stays on the host

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        """S_i after the download (replaced by S, or plus the missed votes); theta = theta^0 + delta S_i."""
        initial = self.initial(task.arch)
        shapes = {k: v.shape for k, v in initial.items() if is_update(v)}
        votes = client.state.get("votes", {k: np.zeros(s, np.int64) for k, s in shapes.items()})
        for coded in downloads:
            received = {k: v.astype(np.int64) for k, v in decode_update(coded.tensors, shapes).items()}
            votes = received if isinstance(coded, VoteTotal) else {k: votes[k] + received[k] for k in votes}
        theta = model_from_votes(initial, votes, step_size(self.params, self.config))
        task.options.verify(theta)
        client.state["votes"] = votes
        return theta

    def upload(self, task: ClientTask, theta: Weights, local: Trained, client: VirtualClient) -> CodedUpdate:
        """sign(SGD_n(theta) - theta), one bit per element."""
        return CodedUpdate(encode_update("sign", {k: sign(local.weights[k] - theta[k])
                                                  for k in theta if is_update(theta[k])}))

    @classmethod
    def collected(cls, params: Params) -> dict[str, type]:
        return {"signs": Sum}

    def statistics(self, update: ClientUpdate, client: VirtualClient) -> Statistics:
        """sign(dtheta_i), decoded to one byte per element, with c_i = 1: the vote's sum."""
        shapes = {k: v.shape for k, v in self.initial(update.arch).items() if is_update(v)}
        return {"signs": (1.0, {k: v.astype(np.int8) for k, v in decode_update(update.payload.tensors, shapes).items()})}


class SignSGD(Strategy):
    name = "signsgd"
    description = "signSGD: clients upload the signs of their updates, the server broadcasts the majority vote"
    paper = ('Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems", ICML 2018, and "signSGD '
        'with Majority Vote is Communication Efficient and Fault Tolerant", ICLR 2019; as compared in thesis '
        "chapter 4, downloads as eq. 4.10 (Sattler 2021, TU Berlin)")
    Params = SignSGDParams
    Client = SignSGDClient
    state_attrs = ("models", "votes", "cache")

    def __init__(self, params: SignSGDParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.step = step_size(params, self.config)
        self.initial = dict(self.models)
        self.votes = {arch: {k: np.zeros(v.shape, np.int64) for k, v in m.items() if is_update(v)}
                      for arch, m in self.models.items()}
        self.cache = CatchUpCache(self.models, params.cache_rounds)

    def configure_round(self, round: int) -> RoundPlan:
        candidates: dict[str, Any] = {}  # encoded once per round; only what a task uses is broadcast
        tasks = []
        for c in self.sample_clients(round):
            keys = self._download(c.client_id, c.arch, round, candidates)
            tasks.append(ClientTask(c.client_id, round, c.arch, keys, task_seed(self.config.seed, round, c.client_id),
                                    ModelCheck(model_crc(self.models[c.arch]))))
        used = {key for task in tasks for key in task.payload_keys}
        return RoundPlan(tasks=tasks, broadcast={key: candidates[key] for key in used})

    def _download(self, client_id: int, arch: str, round: int, candidates: dict[str, Any]) -> tuple[str, ...]:
        """The partial vote sum since the client's last round (eq. 4.10), or all of S if smaller."""
        missed = self.cache.missed(client_id, round)
        if not missed:
            return ()
        full_key = f"state/{arch}"
        if full_key not in candidates:
            candidates[full_key] = VoteTotal(encode_update("int", self.votes[arch]))
        votes = self.cache.cached(arch, missed)
        if votes is not None:
            key = f"votes/{arch}/{missed.start - 1}"
            if key not in candidates:
                total = {k: sum(v[k] for v in votes) for k in self.votes[arch]}
                # one missed vote is +-1: the plain 1-bit broadcast; more are integers in [-s, s]
                candidates[key] = CodedUpdate(encode_update("sign", {k: v.astype(np.float32) for k, v in total.items()})
                                              if len(missed) == 1 else encode_update("int", total))
            if nbytes(candidates[key]) < nbytes(candidates[full_key]):
                return (key,)
        return (full_key,)

    def aggregate(self, round: Round) -> dict[str, float]:
        for arch, signs in round.total("signs").items():
            total = signs.value()  # sum_i sign(dtheta_i)
            # v = sign(sum_i sign(dtheta_i)), a tie counting as +1 (compression.majority_vote)
            vote = {k: np.where(total[k] >= 0, 1, -1).astype(np.int64) for k in self.votes[arch]}
            self.votes[arch] = {k: self.votes[arch][k] + vote[k] for k in vote}
            self.models[arch] = model_from_votes(self.initial[arch], self.votes[arch], self.step)
            self.cache.add(arch, round.number, vote)
        self.cache.trained([u.client_id for u in round.updates], round.number)
        return round.mean_loss()
