"""Folding (fedray.fold): the sums the hosts make, their order, and how far they are from summing
every client's update in the server."""

import itertools

import numpy as np
import pytest

from fedray.assembly import assemble
from fedray.checkpoint import CHECKPOINT, read_checkpoint
from fedray.federation import Federation
from fedray.fold import Folder, Block, Sum, TreeFolder, TreeStack, add_sums, add_terms, blocks, combine, fold_groups
from fedray.tracking import read_scalars
from fedray.weights import weighted_mean
from tests.test_runner import local_config


def test_a_sum_by_hand_keeps_dtypes_zero_d_counters_and_the_sign_of_zero():
    s = Sum.of(2.0, {"w": np.array([1.5, -0.0], np.float32), "n": np.array(3, np.int64)})
    assert s.term is not None and s.total is None  # one client: its upload as it came, no float64 copy
    assert s.nbytes() == 2 * 4 + 8
    s.add(Sum.of(1.0, {"w": np.array([3.0, -0.0], np.float32), "n": np.array(4, np.int64)}))
    np.testing.assert_array_equal(s.value()["w"], [6.0, -0.0])  # 2 * 1.5 + 3; -0.0 + -0.0 stays -0.0
    assert np.signbit(s.value()["w"][1])
    assert s.weight == 3.0 and s.count == 2 and s.value()["w"].dtype == np.float64
    mean = s.mean()
    np.testing.assert_array_equal(mean["w"], np.array([2.0, -0.0], np.float32))
    assert mean["w"].dtype == np.float32
    assert isinstance(mean["n"], np.ndarray) and mean["n"].shape == () and mean["n"] == 3  # rint(10 / 3)
    assert mean["n"].dtype == np.int64


def test_array_coefficients_weigh_each_row():
    """FedAUX's certainty-weighted ensemble: a coefficient per sample, broadcast over the classes."""
    s = Sum.of(np.array([[1.0], [0.0]]), np.array([[2.0, 4.0], [8.0, 8.0]], np.float32))
    s.add(Sum.of(np.array([[3.0], [1.0]]), np.array([[2.0, 0.0], [4.0, 2.0]], np.float32)))
    np.testing.assert_array_equal(s.value(), [[8.0, 4.0], [4.0, 2.0]])
    np.testing.assert_array_equal(s.mean(), np.array([[2.0, 1.0], [4.0, 2.0]], np.float32))


def _clients(k, seed=0):
    rng = np.random.default_rng(seed)
    # magnitudes over six orders, so that float64 additions do round and their order shows
    return [(float(rng.integers(1, 600)), {"w": (rng.standard_normal(257) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)})
            for _ in range(k)]


def _fold(clients, units):
    """The clients folded per unit (client-id order inside), the units' sums added in ``order``."""
    parts = {}
    for cid, (c, x) in enumerate(clients):
        add_terms(parts.setdefault(units[cid], {}), "mlp", {"model": (c, x)})
    return parts


def test_the_server_adds_units_in_unit_order_whatever_order_they_arrive_in():
    clients = _clients(40)
    units = [cid * 7 // 40 for cid in range(40)]
    parts = _fold(clients, units)
    results = []
    for arrival in itertools.islice(itertools.permutations(sorted(parts)), 0, 5040, 719):
        folder = Folder(sorted(parts))
        fresh = _fold(clients, units)  # sums are added in place: every order gets its own
        held = 0
        for unit in arrival:
            folder.add(unit, fresh[unit])
            held = max(held, len(folder.waiting))
        results.append(folder.result()["mlp"]["model"].value()["w"])
    assert len(results) >= 7
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])
    with pytest.raises(RuntimeError, match=r"fold units \[0\] never came"):
        folder = Folder([0, 1])
        folder.add(1, {})
        folder.result()


def test_a_fold_is_within_the_float64_bound_of_summing_every_update_in_the_server():
    """The bound of fedray.fold's docstring: one float32 ulp of the mean plus K * 2**-52 of the
    largest term over the weights, against weighted_mean (coefficients normalised first). The unit
    split moves the float64 sum by rounding only; the same split gives the same bits."""
    k = 200
    clients = _clients(k, seed=1)
    xs, cs = [x for _, x in clients], [c for c, _ in clients]
    server = weighted_mean(xs, cs)["w"]
    largest = max(np.abs(c * x["w"].astype(np.float64)).max() for c, x in clients) / sum(cs)
    bound = np.spacing(np.abs(server)) + k * 2.0**-52 * largest
    means, sums = [], []
    for groups in (1, 7, 64, 200):
        units = fold_groups(range(k), groups)
        parts = _fold(clients, [units[cid] for cid in range(k)])
        total = {}
        for unit in sorted(parts):
            add_sums(total, parts[unit])
        mean = total["mlp"]["model"].mean()["w"]
        assert np.all(np.abs(mean.astype(np.float64) - server) <= bound)
        means.append(mean)
        sums.append(total["mlp"]["model"].value()["w"])
    assert any(not np.array_equal(sums[0], s) for s in sums[1:])  # the split does move the float64 sum's last bits
    again = _fold(clients, [fold_groups(range(k), 7)[cid] for cid in range(k)])
    total = {}
    for unit in sorted(again):
        add_sums(total, again[unit])
    np.testing.assert_array_equal(total["mlp"]["model"].mean()["w"], means[1])


def test_fold_groups_are_contiguous_blocks_of_the_sorted_ids():
    groups = fold_groups([9, 3, 5, 1, 7], 2)
    assert groups == {1: 0, 3: 0, 5: 0, 7: 1, 9: 1}
    assert len(set(fold_groups(range(10), 64).values())) == 10  # more groups than clients: one each


def test_a_folded_local_run_repeats_and_resumes_bit_for_bit_and_matches_per_client_uploads(tmp_path):
    def run(path, rounds, resume=False, fold=True):
        config = local_config(federation={"num_clients": 12, "clients_per_round": 8, "rounds": 3,
                                          "architectures": {"mlp": 6, "logreg": 6}},
                              runtime={"backend": "local", "torch_threads": 1, "fold_groups": 4, "fold": fold})
        fed = Federation(assemble(config), path, resume=resume)
        while fed.round < rounds:
            fed.run_round()
        fed.save_checkpoint()
        fed.finish()
        return read_checkpoint(path / CHECKPOINT)["strategy"]["models"]

    folded = run(tmp_path / "a", 3)
    again = run(tmp_path / "b", 3)
    run(tmp_path / "c", 1)
    resumed = run(tmp_path / "c", 3, resume=True)
    apart = run(tmp_path / "d", 3, fold=False)
    for arch in folded:
        for name, value in folded[arch].items():
            np.testing.assert_array_equal(value, again[arch][name])
            np.testing.assert_array_equal(value, resumed[arch][name])
            # per-client uploads averaged in the server: the same training, rounded otherwise (three
            # rounds carry a first-round difference of an ulp through training: a loose bound)
            np.testing.assert_allclose(value, apart[arch][name], rtol=0, atol=1e-5)
    scalars = read_scalars(tmp_path / "a")
    assert "runtime/bytes_to_server" not in scalars  # nothing travels in-process


def _tree(leaves, lo, hi):
    """The fold tree's sum of groups [lo, hi) by its definition: left half plus right half."""
    if hi - lo == 1:
        return leaves.get(lo)
    mid = (lo + hi) // 2
    return combine(_tree(leaves, lo, mid), _tree(leaves, mid, hi))


def _leaves(groups, filled, seed=0):
    out = {}
    for g, (c, x) in zip(sorted(filled), _clients(len(filled), seed)):
        add_terms(out.setdefault(g, {}), "mlp", {"model": (c, x)})
    return out


def test_the_fold_tree_gives_the_same_bits_however_it_is_cut_into_blocks_and_whenever_they_arrive():
    """A host sums an aligned block of fold groups (TreeStack), the server adds blocks to their
    siblings (TreeFolder): for any cut into blocks (fedray.fold.blocks, for 1 to 16 hosts) and any
    order of arrival, the sum is the tree's by definition, to the last bit."""
    groups, filled = 64, {g for g in range(64) if g % 5 != 3}  # some groups without clients
    expected = _tree(_leaves(groups, filled), 0, groups)["mlp"]["model"].value()["w"]
    rng = np.random.default_rng(0)
    cuts = set()
    for parts in (1, 2, 4, 8, 32):
        cut = blocks({g: 1.0 + g % 3 for g in filled}, groups, parts)
        cuts.add(tuple(cut))
        leaves = _leaves(groups, filled)
        sums = {}
        for level, index in cut:  # each block on its own host
            node = Block("", level, index)
            stack = TreeStack(node)
            for g in range(*node.span):
                if g in leaves:
                    stack.push(g, leaves[g])
            sums[node] = stack.result()
        folder = TreeFolder(groups, {"": filled})
        nodes = list(sums)
        for k in rng.permutation(len(nodes)):
            folder.add(nodes[k], sums[nodes[k]])
        np.testing.assert_array_equal(folder.result()["mlp"]["model"].value()["w"], expected)
        assert not folder.waiting
    assert len(cuts) == 5 and min(len(c) for c in cuts) == 1  # the cuts differ; one host: the root alone
    first = blocks(dict.fromkeys(range(64), 1.0), 64, 4)
    assert first[0] == (4, 0) and first[-1] == (0, 63)  # large blocks first, single groups last
    # by work, not by groups: ten clients in a tree of 64 groups go out in blocks of one or two
    # clients, not in a first block of 16 groups holding whichever clients fell there
    few = {3: 1.0, 5: 1.0, 6: 1.0, 20: 1.0, 22: 1.0, 40: 1.0, 41: 1.0, 50: 1.0, 60: 1.0, 63: 1.0}
    cut = blocks(few, 64, 4)
    held = [sum(few.get(g, 0) for g in range(index << level, (index + 1) << level)) for level, index in cut]
    assert max(held) <= 2 and sum(held) == 10 and held[-3:] == [1, 1, 1]
    # largest first, not in group order: the last group holds two clients (100 clients fill 64
    # groups) and goes out second, not last, where it would end the round on one host alone
    late = {**dict.fromkeys((3, 9, 20, 33, 40, 47, 55), 1.0), 62: 2.0}
    cut = blocks(late, 64, 4)
    held = [sum(late.get(g, 0) for g in range(index << level, (index + 1) << level)) for level, index in cut]
    assert cut == [(4, 0), (0, 62), (4, 1), (3, 4), (2, 10), (2, 11), (0, 55)]  # group order among equals
    assert held == [2, 2, 1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="not after"):
        stack = TreeStack(Block("", 2, 1))
        stack.push(5, {})
        stack.push(4, {})
