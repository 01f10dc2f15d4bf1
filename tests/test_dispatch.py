"""The round's dispatch to the client actors (``actors.dispatch.Dispatcher.balanced``), without Ray: hosts of unequal
speed run the batches it submits, in order, on a simulated clock. The rule under test: no host runs
out of work while a batch waits, not yet started, behind the running batch of another host."""

from types import SimpleNamespace

import numpy as np

from actors.dispatch import Dispatcher
from fedray.fold import fold_groups
from fedray.messages import ClientTask


def dispatch(speeds: list[float], sizes: dict[int, int], round_clients: list[int], groups: int):
    """One round of folded blocks, as the executor hands them out, on hosts of ``speeds`` (samples
    a second); the clients each host ran, the round's end, and each moment a host ran dry while
    another had a batch queued behind its running one."""
    live = SimpleNamespace(slots=[SimpleNamespace(arch=None) for _ in speeds], owner={})  # no actors, no Ray
    dispatch = Dispatcher(live, sizes, fold_groups(sorted(sizes), groups), groups)
    tasks = [ClientTask(c, 1, "cnn", (), 0) for c in round_clients]
    queues: list[list[float]] = [[] for _ in speeds]  # per host: its batches' durations, running first
    ran: list[list[int]] = [[] for _ in speeds]

    def submit(i, batch, part=(), node=None):
        queues[i].append(sum(sizes[t.client_id] for t in batch) / speeds[i])
        ran[i] += [t.client_id for t in batch]

    filled = {"": {dispatch.fold_group[c] for c in round_clients}}
    refill = dispatch.balanced(tasks, submit, filled, lambda i: len(queues[i]))
    clock, ends, starved = 0.0, [q[0] if q else None for q in queues], []
    while any(end is not None for end in ends):
        i = min((j for j, end in enumerate(ends) if end is not None), key=lambda j: ends[j])
        clock = ends[i]
        queues[i].pop(0)
        refill(i)  # as the executor does when a batch comes back
        ends[i] = clock + queues[i][0] if queues[i] else None
        if not queues[i] and any(len(q) > 1 for q in queues):
            starved.append((i, clock, [len(q) for q in queues]))
    return ran, clock, starved


def test_no_host_runs_dry_while_a_batch_waits_behind_another():
    """400 random rounds (4-19 clients of 100-1,200 samples, 8-64 fold groups, a second host 0.7-1.5
    times as fast as the first). Kept two batches deep to the end (no rule for the last batches), a host ran dry with a
    batch still waiting on the other in 129 of them."""
    rng = np.random.default_rng(1)
    for _ in range(400):
        n = int(rng.integers(4, 20))
        sizes = dict(enumerate(int(s) for s in rng.integers(100, 1200, n)))
        speeds = [1000.0, float(1000 * rng.uniform(0.7, 1.5))]
        ran, _, starved = dispatch(speeds, sizes, list(range(n)), int(rng.choice([8, 16, 64])))
        assert starved == [], (speeds, sizes)
        assert sorted(ran[0] + ran[1]) == list(range(n))  # every client once


def test_w1_rounds_end_within_one_client_of_an_even_split():
    """W1: 10 of 100 clients of 600 samples a round in 64 fold groups; the server host slower."""
    sizes = {c: 600 for c in range(100)}
    rng = np.random.default_rng(0)
    for speeds in ([1200.0, 1200.0], [1000.0, 1200.0], [1000.0, 1400.0]):
        for _ in range(20):
            clients = sorted(int(c) for c in rng.choice(100, 10, replace=False))
            ran, end, starved = dispatch(speeds, sizes, clients, 64)
            assert starved == [] and sorted(ran[0] + ran[1]) == clients
            assert end < 10 * 600 / sum(speeds) + 600 / min(speeds)
