"""MrTF's target modules (section 4) on hand-computed tensors."""

import math

import pytest
import torch

from fedray.distill.refinery import (batch_stabilised_probs, cluster_refine, code_global_share, code_rectified_target,
                                     ema_targets, entropy_weights, local_share, rectified_target, stabilised_probs)


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


# -- the authors' code's rules (digest A.3-A.5) ---------------------------------------------------
def test_batch_stabilised_probs_take_an_unbiased_std_per_batch_and_no_tau():
    f = torch.tensor([[1.0, -1.0], [3.0, -3.0], [2.0, 0.0], [0.0, 2.0]])
    q = batch_stabilised_probs(f, batch_size=2)
    # batch 1: values 1, -1, 3, -3: unbiased std sqrt(20 / 3); batch 2: 2, 0, 0, 2: sqrt(4 / 3)
    s1, s2 = math.sqrt(20 / 3) + 1e-8, math.sqrt(4 / 3) + 1e-8
    expected = torch.softmax(torch.cat([f[:2] / s1, f[2:] / s2]), dim=1)
    torch.testing.assert_close(q, expected)
    assert not torch.allclose(q, stabilised_probs(f, tau=1.0))  # one std over the set differs
    # the whole set in one batch is eq. 6 with tau 1 up to the std's correction
    torch.testing.assert_close(batch_stabilised_probs(f[:2], 8, tau=4.0),
                               torch.softmax(4.0 * f[:2] / s1, dim=1))


@pytest.mark.parametrize("losses,share", [([], 0.0), ([math.log(4)], 0.0), ([0.0], 0.75),
                                          ([9.0, 9.0, 0.5, 0.5, 0.5, 0.5, 0.5], 0.75 * (1 - 0.5 / math.log(4))),
                                          ([-1.0], 0.75), ([7.0], 0.0)])
def test_code_global_share_from_the_last_five_rounds(losses, share):
    assert code_global_share(losses, 4) == pytest.approx(share)


def test_code_rectified_target_by_hand():
    local = torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]])  # two local models, one sample
    previous, new = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, 1.0]])
    # entropies / C: 0, log2 / 2, log2 / 2, 0 -> weights proportional to 1, r, r, 1, r = 2^-1/2
    r = 2 ** -0.5
    w = torch.tensor([1.0, r, r, 1.0]) / (2 + 2 * r)
    share = torch.tensor([0.4 / 2, 0.4 / 2, 0.6 / 2, 0.6 / 2])  # g = 0.6
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5], [0.0, 1.0]])
    raw = ((share * w)[:, None] * probs).sum(dim=0)
    torch.testing.assert_close(code_rectified_target(local, previous, new, 0.6), (raw / raw.sum())[None])


def test_ema_targets():
    q, prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    assert ema_targets(q, None, 0.5) is q
    torch.testing.assert_close(ema_targets(q, prev, 0.25), torch.tensor([[0.75, 0.25]]))
