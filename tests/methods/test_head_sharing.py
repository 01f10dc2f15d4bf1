"""``share: head`` (fedray.methods.head_sharing) on its own: which methods take it, what a client
keeps and sends, what the server broadcasts; and the resolved method's cohort decision."""

import numpy as np
import pytest
import torch

from fedray.config import build_config
from fedray.messages import ClientSpec, ClientTask, ClientUpdate, RoundPlan
from fedray.methods import METHODS
from fedray.methods.base import Trained, VirtualClient
from fedray.methods.head_sharing import HeadSharingParams, HeadUpload, heads_only, shared, split_head
from fedray.models import create_model
from fedray.resolve import resolve
from fedray.weights import get_weights
from tests.support import gathered, make_strategy
from tests.test_federation import digits


def build(arch):
    return create_model(arch, (1, 8, 8), 10)


def config_of(**algorithm):
    """A small digits run of ``algorithm`` (its whole ``algorithm:`` section)."""
    return build_config({**digits(algorithm["name"], 1, aux={"size": 200}).to_dict(), "algorithm": algorithm})


def test_a_method_takes_share_by_its_params():
    sharing = {name for name, s in METHODS.items() if issubclass(s.Params, HeadSharingParams)}
    assert sharing == {"fedavg", "feddf", "feddistill", "fedgen", "fedmmd", "fedprox"}


@pytest.mark.parametrize("algorithm, stateful", [({"name": "fedavg"}, False), ({"name": "fedavg", "share": "head"}, True),
                                                 ({"name": "feddf", "share": "head"}, True), ({"name": "fedbe"}, False),
                                                 ({"name": "feddistill"}, True)])
def test_clients_keep_state_when_they_keep_their_feature_extractor(algorithm, stateful):
    config = config_of(**algorithm)
    method = resolve(config)
    assert method.stateful is stateful
    assert method.make_client(config, build, torch.device("cpu")).at_home is stateful


def test_a_client_trains_the_broadcast_head_on_its_own_body_and_sends_only_the_head():
    config = config_of(name="fedavg", share="head")
    client_half = resolve(config).make_client(config, build, torch.device("cpu"))
    client = VirtualClient(ClientSpec(3, "mlp", np.arange(4)), torch.zeros(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))
    task = ClientTask(3, 1, "mlp", ("model/mlp",), 7)
    initial = client_half.initial("mlp")
    head = {k: v + 1 for k, v in split_head(initial)[0].items()}
    theta = client_half.receive(task, (head,), client)  # before its first round: the initial body
    assert set(theta) == set(initial) and all(np.array_equal(theta[k], head.get(k, initial[k])) for k in theta)
    trained = {k: v * 2 for k, v in theta.items()}
    upload = client_half.upload(task, theta, Trained(trained, {}), client)
    assert isinstance(upload, HeadUpload) and set(upload.head) == set(head) and shared(upload) is upload.head
    assert set(client.state["body"]) == set(initial) - set(head)
    again = client_half.receive(task, (head,), client)  # the next round: its own body under the new head
    assert all(np.array_equal(again[k], trained[k]) for k in client.state["body"])


def test_with_whole_models_nothing_is_kept_and_all_travels():
    for algorithm in ({"name": "fedavg"}, {"name": "fedbe"}):
        config = config_of(**algorithm)
        client_half = resolve(config).make_client(config, build, torch.device("cpu"))
        client = VirtualClient(ClientSpec(0, "mlp", np.arange(1)), torch.zeros(1, 1, 8, 8), torch.zeros(1, dtype=torch.long))
        theta = get_weights(build("mlp"))
        assert client_half.receive(ClientTask(0, 1, "mlp", ("model/mlp",), 0), (theta,), client) is theta
        if algorithm["name"] == "fedavg":
            assert client_half.upload(ClientTask(0, 1, "mlp", ("model/mlp",), 0), theta, Trained(theta, {}), client) is theta
        client_half.keep_body(theta, client)
        assert client.state == {}


def test_the_server_cuts_broadcast_models_to_heads_and_keeps_the_bodies():
    theta = get_weights(build("mlp"))
    plan = heads_only(RoundPlan(tasks=[], broadcast={"model/mlp": theta, "generator": {"prior": 1}}))
    assert plan.broadcast["model/mlp"] == split_head(theta)[0] and plan.broadcast["generator"] == {"prior": 1}
    config = config_of(name="fedavg", share="head")
    strategy = make_strategy(config, [ClientSpec(i, "mlp", np.arange(4)) for i in range(2)], build)
    head, body = split_head(theta)
    ups = [ClientUpdate(1, "mlp", 4, theta, 0, {"loss": 1.0}), ClientUpdate(0, "mlp", 4, HeadUpload(head, body), 0, {"loss": 1.0})]
    strategy.keep_bodies(gathered(strategy, 1, ups))  # an upload's body, or a whole model's, in client-id order
    assert [(cid, set(b)) for cid, _, b in strategy.bodies] == [(0, set(body)), (1, set(body))]


@pytest.mark.parametrize("name, vectorize, cohorts", [("fedavg", True, True), ("fedavg", ["mlp"], True),
                                                      ("fedavg", False, False), ("scaffold", True, False)])
def test_the_resolved_method_says_whether_its_clients_train_as_cohorts(name, vectorize, cohorts):
    config = digits(name, 1, runtime={"vectorize": vectorize}, training={"optimizer": "sgd"})
    method = resolve(config)
    assert method.vectorizes(config.runtime) is cohorts
    assert (method.cohort_refusal is None) is (name == "fedavg")
    if name == "scaffold":
        assert "ScaffoldClient.extra_loss" in method.cohort_refusal
