"""What the distillation methods' folding tests share: one round's uploads turned into terms by their
host (``Client.statistics``), folded in some split into fold units (``fedray.fold``),
and the bound that float64 summation puts between two splits."""

from __future__ import annotations

import copy

import numpy as np

from fedray.fold import Block, Sums, TreeStack, add_terms, fold_groups
from tests.support import aggregate, collects, summed, uploads


def a_round(fed):
    """The next round's whole uploads (the local host's ``run_batch``: nothing summed yet), with each
    client's terms as its host makes them: {client id: (arch, terms)}."""
    updates, host = uploads(fed, fed.strategy.configure_round(fed.round + 1)), fed.executor.host
    terms = {u.client_id: (u.arch, host.client_half.statistics(u, host.clients[u.client_id])) for u in updates}
    return updates, terms


def fold(terms, groups: int) -> Sums:
    """``terms`` folded as a host folds a round: ``groups`` fold groups (a power of two; contiguous
    blocks of the sorted ids), each summed in client-id order, the groups' sums added pairwise in
    the fold tree (``fedray.fold.TreeStack``). One group is one sum in client-id order, as the
    server sums gathered statistics (``fedray.round.Round.totals``)."""
    group = fold_groups(terms, groups)
    tree = TreeStack(Block("", groups.bit_length() - 1, 0))
    parts: dict[int, Sums] = {}
    for cid in sorted(terms):
        arch, named = terms[cid]
        add_terms(parts.setdefault(group[cid], {}), arch, named)
    for g in sorted(parts):
        tree.push(g, parts[g])
    return tree.result()


def _leaves(tree) -> dict[str, np.ndarray]:
    return dict(tree) if isinstance(tree, dict) else {"": tree}


def assert_within_float64_bound(terms, one: Sums, other: Sums) -> None:
    """Two folds of the same terms in other orders: the same names and counts, and every sum (and
    weight) within K 2^-52 sum_i |c_i x_i| of the other's, elementwise. Each of the two is a
    recursive float64 sum of the same K products, within (K - 1) 2^-53 sum_i |c_i x_i| of the exact
    sum (Higham, Accuracy and Stability of Numerical Algorithms, eq. 4.4)."""
    assert one.keys() == other.keys()
    for arch in one:
        assert one[arch].keys() == other[arch].keys()
        for name, a in one[arch].items():
            b = other[arch][name]
            mine = [t[name] for ar, t in terms.values() if ar == arch]
            k = len(mine)
            assert a.count == b.count == k
            weights = sum(np.abs(np.asarray(c, dtype=np.float64)) for c, _ in mine)
            assert np.all(np.abs(np.asarray(a.weight) - np.asarray(b.weight)) <= k * 2.0**-52 * weights)
            va, vb = _leaves(a.value()), _leaves(b.value())
            for key, value in va.items():
                magnitude = sum(np.abs(np.multiply(c, _leaves(x)[key], dtype=np.float64)) for c, x in mine)
                assert np.all(np.abs(value - vb[key]) <= k * 2.0**-52 * magnitude), (arch, name, key)


def assert_same_sums(one: Sums, other: Sums) -> None:
    assert one.keys() == other.keys()
    for arch in one:
        assert one[arch].keys() == other[arch].keys()
        for name, a in one[arch].items():
            b = other[arch][name]
            np.testing.assert_array_equal(a.weight, b.weight)
            for key, value in _leaves(a.value()).items():
                np.testing.assert_array_equal(value, _leaves(b.value())[key], err_msg=f"{arch}.{name}.{key}")


def check_folding(fed, kept=("models",)) -> None:
    """The method folds; a round's terms folded in one group, in four, and in four again: the splits
    within the float64 bound of each other, the same split the same bits; and the server's sum of the
    gathered statistics (``runtime.fold: false``) is the hosts' one-group fold: aggregating either
    gives the same models (``kept``: the strategy attributes compared) and metrics, bit for bit."""
    s = fed.strategy
    assert collects(s) == "fold"
    updates, terms = a_round(fed)
    assert len(set(fold_groups(terms, 4).values())) >= 3  # the tree adds in another order than one by one
    one, four = fold(terms, 1), fold(terms, 4)
    assert_within_float64_bound(terms, one, four)
    assert_same_sums(four, fold(terms, 4))
    fed.round += 1
    before = copy.deepcopy(s.state_dict())
    whole = aggregate(s, fed.round, updates, fed.executor.host.clients)
    server = {name: copy.deepcopy(getattr(s, name)) for name in kept}
    s.load_state_dict(copy.deepcopy(before))
    folded = s.aggregate(summed(fed.round, one, updates))
    assert folded == whole
    for name in kept:
        for arch, weights in server[name].items():
            for key, value in weights.items():
                np.testing.assert_array_equal(value, getattr(s, name)[arch][key], err_msg=f"{name}.{arch}.{key}")
