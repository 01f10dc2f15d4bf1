"""MrTF's target modules (section 4) on hand-computed tensors."""

import math

import pytest
import torch

from fedray.distill.refinery import (cluster_refine, entropy_weights, local_share, rectified_target,
                                     stabilised_probs)


def test_stabilised_probs_use_one_population_std_per_model_and_ignore_magnitude():
    f = torch.tensor([[1.0, -1.0], [3.0, -3.0]])  # values 1, -1, 3, -3: mean 0, std sqrt(20 / 4)
    q = stabilised_probs(f, tau=4.0)
    first = 1 / (1 + math.exp(-8 / math.sqrt(5)))  # softmax([4, -4] / sqrt 5)
    third = 1 / (1 + math.exp(-24 / math.sqrt(5)))
    torch.testing.assert_close(q, torch.tensor([[first, 1 - first], [third, 1 - third]]))
    # eq. 6 makes the teachers magnitude-invariant: a model with 10x the logits gives the same q
    both = stabilised_probs(torch.stack([f, 10 * f]), tau=4.0)
    torch.testing.assert_close(both[0], both[1])
    torch.testing.assert_close(both[0], q)


def test_entropy_weights_favour_the_confident_model_per_sample():
    probs = torch.tensor([[[1.0, 0.0], [0.5, 0.5]],   # model 1: sure on x1, unsure on x2
                          [[0.5, 0.5], [0.0, 1.0]]])  # model 2: the reverse
    w = entropy_weights(probs)  # softmax_k(-e_k): e = 0 and log 2 -> 1 : 1/2
    torch.testing.assert_close(w, torch.tensor([[2 / 3, 1 / 3], [1 / 3, 2 / 3]]))


@pytest.mark.parametrize("loss, share", [(math.log(10), 1.0), (0.0, 0.25), (0.5 * math.log(10), 0.625),
                                         (2 * math.log(10), 1.0)])
def test_local_share_u_t(loss, share):
    assert local_share(loss, 10) == pytest.approx(share)


def test_rectified_target_eq10_by_hand():
    local = torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]])  # K = 2, N = 1; weights 2/3, 1/3
    previous, new = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]])
    target = rectified_target(local, previous, new, u=0.5)
    # 0.5 * (2/3 [1, 0] + 1/3 [.5, .5]) + 0.25 * ([0, 1] + [.5, .5]) = [13/24, 11/24]
    torch.testing.assert_close(target, torch.tensor([[13 / 24, 11 / 24]]))
    uniform = rectified_target(local, previous, new, u=1.0, weights=torch.full((2, 1), 0.5))
    torch.testing.assert_close(uniform, torch.tensor([[0.75, 0.25]]))  # AvgProb alone


def test_cluster_refine_prototypes_and_cosine_assignment():
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])  # class 3: no mass
    refined = cluster_refine(h, q, tau=4.0)
    # v_1 = ([1, 0] + .5 [1, 1]) / 1.5 = [1, 1/3]; v_2 = [1/3, 1]
    near, far = 3 / math.sqrt(10), 1 / math.sqrt(10)  # cos(h_1, v_1), cos(h_1, v_2)
    p = 1 / (1 + math.exp(-4 * (near - far)))
    torch.testing.assert_close(refined[0], torch.tensor([p, 1 - p, 0.0]))
    torch.testing.assert_close(refined[1], torch.tensor([1 - p, p, 0.0]))
    torch.testing.assert_close(refined[2], torch.tensor([0.5, 0.5, 0.0]))  # equidistant
