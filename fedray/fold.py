"""Folding: the round's client statistics summed where the clients are.

Most methods' server step needs the round's clients only through sums: FedAvg's sum_i c_i theta_i
and sum_i c_i, SCAFFOLD's summed deltas, the averaged logits of a distillation teacher. For them
(every statistic a ``Sum``, ``fedray.round``) no client update travels to the server: the host that
ran a client turns its upload into *terms* (``Client.statistics``: name -> (coefficient,
array or dict of arrays)) and folds them into running sums, one :class:`Sum` per architecture and
name; the server adds the hosts' sums (:class:`Folder`) and the strategy's ``aggregate`` reads them. What
travels per client is its :class:`fedray.messages.ClientUpdate` without the payload: the bytes it
would have sent, its times and losses, whether it was finite.

Exactness. Float addition is not associative, so a sum is only reproducible when the additions are
made in the same order. Their order depends on the config alone, not on which actor ran which
client nor on the order the hosts answered:

- the clients of one *fold group* (``runtime.fold_groups`` contiguous blocks of the sorted client
  ids, :func:`fold_groups`) are folded on one host in client-id order, each term made ``c * x`` in
  float64 (the first term starts the sum: no ``0 + c * x``, which would turn -0.0 into 0.0);
- the groups' sums are added pairwise in a fixed binary tree (:class:`Block`): a node's sum is its
  left child's plus its right child's, wherever it is made. A host that ran an aligned block of
  groups (:func:`blocks`) adds them up to the block's node (:class:`TreeStack`) and sends that one
  sum; the server adds each block to its sibling once both are in (:class:`TreeFolder`).

That is the rule wherever any actor may run any client. Where the clients stay on their home actors
(stateful methods, ``clients_per_actor`` set, cohorts) each actor's batch is one unit and the
server adds the units in actor order (:class:`Folder`), which makes the rounding depend on that
layout, as the layout already decides the homes and the cohorts.

Against summing the clients one by one on the server (``runtime.fold: false``): both accumulate in float64 and
round once to the tensor's dtype, so they differ by at most one unit in the last place of the
float32 result plus the float64 error of K additions, K * 2**-52 * max_i |c_i x_i| / sum_i c_i
(``tests/test_fold.py`` holds both).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Optional, Union

import numpy as np

Tree = Union[np.ndarray, dict[str, np.ndarray]]
Terms = dict[str, tuple[Any, Tree]]  # name -> (coefficient: a float or an array broadcast over x, x)


def _map(fn, tree: Tree, *others: Tree) -> Tree:
    if isinstance(tree, dict):
        return {k: fn(v, *(o[k] for o in others)) for k, v in tree.items()}
    return fn(tree, *others)


def _dtypes(tree: Tree):
    return {k: v.dtype for k, v in tree.items()} if isinstance(tree, dict) else tree.dtype


def _times(coef: Any, x: np.ndarray) -> np.ndarray:
    """c * x in float64, an array even when 0-d (BatchNorm's counter)."""
    out = np.empty(np.broadcast_shapes(np.shape(coef), np.shape(x)), dtype=np.float64)
    return np.multiply(coef, x, out=out, dtype=np.float64)


_scratch = threading.local()  # a float64 buffer per shape and thread, for c * x on its way into a sum


def _add_times(acc: np.ndarray, coef: Any, x: np.ndarray) -> None:
    """acc += c * x with c * x rounded to float64 first, in a reused buffer (a fresh array per
    client costs its page faults); c = 1 adds x itself, which is the same (1 * x is x)."""
    if np.ndim(coef) == 0 and coef == 1:
        np.add(acc, x, out=acc)
        return
    shape = np.broadcast_shapes(np.shape(coef), np.shape(x))
    buffers = _scratch.__dict__.setdefault("buffers", {})
    if shape not in buffers:
        if len(buffers) > 256:  # a model's tensor shapes are far fewer; this bounds odd uses
            buffers.clear()
        buffers[shape] = np.empty(shape, dtype=np.float64)
    product = np.multiply(coef, x, out=buffers[shape], dtype=np.float64)
    np.add(acc, product, out=acc)


@dataclass
class Sum:
    """sum_i c_i x_i over some clients, in float64, with sum_i c_i and the number of clients.

    A sum of one client keeps its term as it came (``c``, ``x`` in its own dtype) and makes ``c * x``
    only when it is added to or read, so that a unit of one client travels no larger than its upload."""

    weight: Any  # sum_i c_i: a float, or an array when the coefficients are
    count: int
    dtypes: Any  # the terms' dtypes, for ``mean``
    total: Optional[Tree] = None  # sum_i c_i x_i in float64, once two terms are in
    term: Optional[tuple[Any, Tree]] = field(default=None, repr=False)  # the one term, while it is alone

    @classmethod
    def of(cls, coef: Any, x: Tree) -> "Sum":
        weight = np.array(coef, dtype=np.float64) if isinstance(coef, np.ndarray) else float(coef)
        return cls(weight, 1, _dtypes(x), None, (coef, x))

    def value(self) -> Tree:
        """sum_i c_i x_i, float64."""
        if self.total is None:
            coef, x = self.term
            self.total, self.term = _map(lambda v: _times(coef, v), x), None
        return self.total

    def add(self, other: "Sum") -> "Sum":
        """``self`` + ``other``, in place (``self`` must not be shared). A term of one client is
        added as ``c * x`` without keeping ``c * x`` (one rounding for the product, one for the sum,
        as when it is made first)."""
        mine = self.value()
        if not all(v.flags.writeable for v in (mine.values() if isinstance(mine, dict) else [mine])):
            self.total = mine = _map(np.array, mine)  # came through Ray's object store: read-only
        if other.total is None:
            coef, theirs = other.term
            add = lambda acc, x: _add_times(acc, coef, x)  # noqa: E731
        else:
            theirs, add = other.total, np.add
        if isinstance(mine, dict):
            for k, v in mine.items():
                add(v, theirs[k], out=v) if add is np.add else add(v, theirs[k])
        else:
            add(mine, theirs, out=mine) if add is np.add else add(mine, theirs)
        self.weight = self.weight + other.weight
        self.count += other.count
        return self

    def mean(self) -> Tree:
        """sum_i c_i x_i / sum_i c_i in each term's dtype; integer tensors (BatchNorm's counter) rounded."""
        def cast(total: np.ndarray, dtype: np.dtype) -> np.ndarray:
            out = total / self.weight
            return np.asarray(np.rint(out) if dtype.kind in "iub" else out).astype(dtype)

        total = self.value()
        if isinstance(total, dict):
            return {k: cast(v, self.dtypes[k]) for k, v in total.items()}
        return cast(total, self.dtypes)

    def nbytes(self) -> int:
        from fedray.weights import nbytes

        return nbytes(self.value() if self.total is not None else self.term[1])


Sums = dict[str, dict[str, Sum]]  # architecture -> name -> Sum


def add_terms(sums: Sums, arch: str, terms: Terms) -> None:
    """Fold one client's ``terms`` into ``sums`` (in place)."""
    into = sums.setdefault(arch, {})
    for name, (coef, x) in terms.items():
        if name in into:
            into[name].add(Sum.of(coef, x))
        else:
            into[name] = Sum.of(coef, x)


def add_sums(total: Sums, part: Sums) -> Sums:
    """``part`` added into ``total`` (in place), architecture by architecture, name by name."""
    for arch in part:
        into = total.setdefault(arch, {})
        for name, s in part[arch].items():
            if name in into:
                into[name].add(s)
            else:
                into[name] = s
    return total


class Folder:
    """Adds the units' sums in the order of ``units``, whatever order they arrive in: a unit that
    comes early waits (only those are held), the others are added at once."""

    def __init__(self, units: Iterable[Hashable]):
        self.order = list(units)
        self.next = 0
        self.waiting: dict[Hashable, Sums] = {}
        self.total: Sums = {}

    def add(self, unit: Hashable, sums: Sums) -> None:
        self.waiting[unit] = sums
        while self.next < len(self.order) and self.order[self.next] in self.waiting:
            add_sums(self.total, self.waiting.pop(self.order[self.next]))
            self.next += 1

    def result(self) -> Sums:
        missing = [u for u in self.order[self.next:] if u not in self.waiting]
        if missing:
            raise RuntimeError(f"the sums of fold units {missing} never came")
        return self.total


def fold_groups(client_ids: Iterable[int], groups: int) -> dict[int, int]:
    """Each client's fold group: the sorted client ids cut into ``groups`` contiguous blocks of
    (nearly) equal size. Depends on the clients and ``runtime.fold_groups`` alone."""
    ids = sorted(client_ids)
    return {cid: rank * groups // len(ids) for rank, cid in enumerate(ids)}


def finite(update) -> bool:
    """Whether a client's update may enter the aggregate: its upload holds no NaN or Inf, nor does
    its loss when it trained. A host that folds sets ``nonfinite`` in the metrics of one that may not
    (its upload is not folded); the server's guard (``fedray.observers.DivergenceGuard``) reads both."""
    from fedray.weights import all_finite

    if update.metrics.get("nonfinite"):
        return False
    trained = update.metrics.get("steps", 0.0) > 0
    return all_finite(update.payload) and (not trained or bool(np.isfinite(update.metrics.get("loss", 0.0))))


# -- the fold tree: fold groups added pairwise, in a fixed binary tree -------------------------------


@dataclass(frozen=True, order=True)
class Block:
    """A node of the fold tree of one kind of actor: the fold groups [index 2^level, (index + 1) 2^level).
    Its sum is its left child's plus its right child's, wherever it is made, so a host that ran an
    aligned block of groups sends one sum for the block and the server adds blocks as siblings."""

    kind: str
    level: int
    index: int

    @property
    def span(self) -> tuple[int, int]:
        return self.index << self.level, (self.index + 1) << self.level

    def parent(self) -> "Block":
        return Block(self.kind, self.level + 1, self.index // 2)

    def sibling(self) -> "Block":
        return Block(self.kind, self.level, self.index ^ 1)


def combine(left: Optional[Sums], right: Optional[Sums]) -> Optional[Sums]:
    """A node's sum from its children's (None: a child without clients this round)."""
    if left is None:
        return right
    if right is None:
        return left
    return add_sums(left, right)


class TreeStack:
    """The sum of ``node`` from its groups' sums given in increasing group order (groups not given
    have no clients): each group is pushed and merged with its left sibling when that is complete,
    so at most one sum per level is held."""

    def __init__(self, node: Block):
        self.node = node
        self.next, self.stop = node.span
        self.stack: list[tuple[int, int, Optional[Sums]]] = []  # (level, index, sum)

    def push(self, group: int, sums: Sums) -> None:
        if not self.next <= group < self.stop:
            raise ValueError(f"fold group {group} is not after {self.next - 1} within {self.node}")
        while self.next < group:
            self._push(None)
        self._push(sums)

    def _push(self, sums: Optional[Sums]) -> None:
        level, index = 0, self.next
        self.next += 1
        while index % 2 == 1 and self.stack and self.stack[-1][:2] == (level, index - 1):
            sums = combine(self.stack.pop()[2], sums)
            level, index = level + 1, index // 2
        self.stack.append((level, index, sums))

    def result(self) -> Optional[Sums]:
        while self.next < self.stop:
            self._push(None)
        return self.stack[0][2]


class TreeFolder:
    """The server's side of the fold tree: each arriving block's sum is added to its sibling's once
    both are in (a sibling without clients is no wait), up to each kind's root; only blocks whose
    sibling is still out are held."""

    def __init__(self, groups: int, filled: dict[str, set[int]]):
        """``groups``: the tree's leaves (a power of two); ``filled``: per kind, the groups with clients."""
        self.top = groups.bit_length() - 1
        self.filled = filled
        self.waiting: dict[Block, Optional[Sums]] = {}
        self.roots: dict[str, Optional[Sums]] = {}

    def empty(self, node: Block) -> bool:
        lo, hi = node.span
        return not any(lo <= g < hi for g in self.filled.get(node.kind, ()))

    def add(self, node: Block, sums: Optional[Sums]) -> None:
        while node.level < self.top:
            sibling = node.sibling()
            if not self.empty(sibling):
                if sibling not in self.waiting:
                    self.waiting[node] = sums
                    return
                other = self.waiting.pop(sibling)
                sums = combine(other, sums) if sibling.index < node.index else combine(sums, other)
            node = node.parent()
        self.roots[node.kind] = sums

    def result(self) -> Sums:
        missing = sorted(k for k in self.filled if self.filled[k] and k not in self.roots)
        if missing or self.waiting:
            raise RuntimeError(f"the fold tree of {missing or sorted({n.kind for n in self.waiting})} is incomplete")
        total: Sums = {}
        for kind in sorted(self.roots):
            add_sums(total, self.roots[kind] or {})
        return total


def blocks(work: dict[int, float], groups: int, parts: int) -> list[tuple[int, int]]:
    """The fold tree's aligned blocks (level, index) that cover the groups with clients (``work``:
    each such group's work, e.g. its clients' samples), each holding about 1/``parts`` of the work
    left (guided self-scheduling, so that the hosts finish together), largest first and in group
    order among equals (so that few sums wait for a sibling in the server); a block without
    clients is skipped. Largest first, not in group order: a fold group is never split, and one of
    two clients handed out last ends the round on one host while the others wait (docs/performance.md)."""
    prefix = np.concatenate([[0.0], np.cumsum([work.get(g, 0.0) for g in range(groups)])])
    held: list[float] = []
    out, start = [], 0
    while start < groups:
        target = (prefix[-1] - prefix[start]) / parts
        level = 0
        while (start % (2 << level) == 0 and start + (2 << level) <= groups
               and prefix[start + (2 << level)] - prefix[start] <= target):
            level += 1
        stop = start + (1 << level)
        if prefix[stop] > prefix[start]:
            out.append((level, start >> level))
            held.append(prefix[stop] - prefix[start])
        start = stop
    return [out[i] for i in sorted(range(len(out)), key=lambda i: -held[i])]  # stable: group order among equals
