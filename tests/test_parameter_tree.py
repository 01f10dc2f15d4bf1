"""The parameter tree: splits, paths, Byzantine drops, new-client assignment (Alg. 13), checkpoints."""

import numpy as np
import pytest

from fedray.parameter_tree import ParameterTree


def model(value):
    return {"w": np.full(3, value, np.float32)}


def directions(seed=0):
    rng = np.random.default_rng(seed)
    return {g: rng.normal(size=20) for g in range(4)}  # each group's typical update


def grown_tree():
    """Root {0..7} -> {0..3} (groups 0, 1), {4..7} (groups 2, 3) -> four leaves."""
    d, rng = directions(), np.random.default_rng(1)
    group = {i: i // 2 for i in range(8)}
    upd = {i: d[group[i]] + 0.3 * rng.normal(size=20) for i in range(8)}
    tree = ParameterTree(list(range(8)), model(0.0))
    tree.set_models({0: model(1.0)})
    a, b = tree.split(0, [0, 1, 2, 3], [4, 5, 6, 7], upd, round=10)
    tree.set_models({a: model(2.0), b: model(3.0)})
    leaves = tree.split(a, [0, 1], [2, 3], upd, round=20) + tree.split(b, [4, 5], [6, 7], upd, round=30)
    return tree, leaves, d


def test_splits_freeze_the_parent_and_children_start_from_it():
    tree, leaves, _ = grown_tree()
    assert tree.leaves() == leaves == [3, 4, 5, 6]
    assert tree.clusters() == {3: [0, 1], 4: [2, 3], 5: [4, 5], 6: [6, 7]}
    assert tree.model(3)["w"][0] == 2.0 and tree.model(5)["w"][0] == 3.0  # copies of the pre-split model
    assert tree.model(0)["w"][0] == 1.0  # root keeps its stationary solution
    with pytest.raises(ValueError, match="frozen"):
        tree.set_models({0: model(9.0)})
    assert tree.path(5) == [0, 2, 5] and tree.path(7) == [0, 2, 6] and tree.cluster_of(2) == 4
    assert tree.nodes[1].edge_updates.shape == (4, 20)
    with pytest.raises(ValueError, match="do not bipartition"):
        tree.split(3, [0], [2], {}, round=40)


def test_byzantine_mode_keeps_only_the_larger_child():
    tree = ParameterTree(list(range(10)), model(0.0))
    upd = {i: np.ones(2) * (1 if i < 7 else -1) for i in range(10)}
    benign, bad = tree.split(0, list(range(7)), [7, 8, 9], upd, round=5, keep="larger")
    assert tree.leaves() == [benign] and tree.nodes[bad].dropped
    assert tree.cluster_of(8) is None and tree.cluster_of(3) == benign
    assert tree.leaf_of() == {**{i: benign for i in range(7)}, 7: bad, 8: bad, 9: bad}
    assert "dropped" in tree.describe()


@pytest.mark.parametrize("group", range(4))
def test_a_new_client_descends_to_its_groups_leaf(group):
    tree, leaves, d = grown_tree()
    rng = np.random.default_rng(100 + group)
    seen = []

    def update_at(theta):  # the new client's update at each visited node's model
        seen.append(float(theta["w"][0]))
        return d[group] + 0.3 * rng.normal(size=20)

    assert tree.assign(update_at) == leaves[group]
    assert seen == [1.0, 2.0 if group < 2 else 3.0]  # trained at theta_root*, then theta_child*


def test_state_round_trip_and_description():
    tree, _, _ = grown_tree()
    again = ParameterTree([0], model(0.0))
    again.load_state_dict(tree.state_dict())
    assert again.clusters() == tree.clusters() and again.describe() == tree.describe()
    assert tree.describe().splitlines()[0] == "cluster 0 (round 0, 8 clients): 0-7"
    assert tree.describe().splitlines()[2] == "    cluster 3 (round 20, 2 clients active): 0-1"
    fig = tree.figure()
    assert len(fig.axes[0].texts) == 7
