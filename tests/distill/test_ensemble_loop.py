"""Teacher aggregation on hand-computed logits; distillation from a fixed ensemble on real digits."""

import numpy as np
import pytest
import torch

from fedray.data.toy import load_digits_bundle
from fedray.distill import DistillParams, aggregate_teachers, distill, ensemble_accuracy, predict_logits
from fedray.distill.ensemble import soft_labels, teacher_output
from fedray.fold import add_terms
from fedray.models import create_model
from fedray.training import evaluate, local_train
from fedray.config import TrainingConfig

LOGITS = torch.tensor([[[0.0, 0.0], [2.0, 0.0]],     # teacher 1 on samples a, b
                       [[2.0, 0.0], [0.0, 4.0]]])    # teacher 2


def test_mean_logits_is_softmax_of_the_mean_logits_eq_7_2():
    out = aggregate_teachers(LOGITS, "mean_logits")
    expected = torch.softmax(torch.tensor([[1.0, 0.0], [1.0, 2.0]]), dim=1)
    torch.testing.assert_close(out, expected)


def test_mean_probs_averages_the_softmaxes():
    out = aggregate_teachers(LOGITS, "mean_probs")
    expected = (torch.softmax(LOGITS[0], 1) + torch.softmax(LOGITS[1], 1)) / 2
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, aggregate_teachers(LOGITS, "mean_logits"))


def test_per_sample_weights_eq_7_4():
    # sample a: only teacher 1 counts; sample b: teacher 2 three times as much as teacher 1
    weights = torch.tensor([[1.0, 1.0], [0.0, 3.0]])
    out = aggregate_teachers(LOGITS, "mean_logits", weights)
    expected = torch.softmax(torch.tensor([[0.0, 0.0], [0.5, 3.0]]), dim=1)
    torch.testing.assert_close(out, expected)
    # equal weights are the plain mean; the temperature divides the aggregated logits
    torch.testing.assert_close(aggregate_teachers(LOGITS, weights=torch.full((2, 2), 7.0)), aggregate_teachers(LOGITS))
    torch.testing.assert_close(aggregate_teachers(LOGITS, temperature=2.0),
                               torch.softmax(torch.tensor([[0.5, 0.0], [0.5, 1.0]]), dim=1))


@pytest.mark.parametrize("mode", ["mean_logits", "mean_probs"])
def test_the_folded_ensemble_is_aggregate_teachers(mode):
    """The hosts' form: sum_i s_i t_i and sum_i s_i folded (t_i = teacher_output, per-sample s_i a
    column coefficient), then soft_labels of their ratio: aggregate_teachers' soft labels."""
    rng = np.random.default_rng(0)
    logits = torch.from_numpy(rng.standard_normal((4, 6, 3)).astype(np.float32) * 3)
    weights = torch.from_numpy(rng.uniform(0.1, 1.0, (4, 6)).astype(np.float32))
    for w in (None, weights):
        sums = {}
        for i in range(4):
            coef = 1.0 if w is None else w[i].numpy()[:, None]
            add_terms(sums, "mlp", {"teacher": (coef, teacher_output(logits[i].numpy(), mode, 2.0))})
        mean = sums["mlp"]["teacher"].value() / sums["mlp"]["teacher"].weight
        torch.testing.assert_close(soft_labels(mean, mode, 2.0), aggregate_teachers(logits, mode, w, 2.0))
    with pytest.raises(ValueError, match="unknown ensemble mode"):
        teacher_output(logits[0].numpy(), "median")


def test_bad_teacher_shapes_are_refused():
    with pytest.raises(ValueError, match="teachers, samples, classes"):
        aggregate_teachers(LOGITS[0])
    with pytest.raises(ValueError, match="shape \\(2, 2\\)"):
        aggregate_teachers(LOGITS, weights=torch.ones(2, 3))


def test_ensemble_accuracy_counts_argmax_hits():
    # ensemble soft labels: a -> class 0 (softmax [1, 0]), b -> class 1 (softmax [1, 2])
    assert ensemble_accuracy(LOGITS, torch.tensor([0, 1])) == 1.0
    assert ensemble_accuracy(LOGITS, torch.tensor([1, 1])) == 0.5


def test_zero_steps_leave_the_student_unchanged():
    torch.manual_seed(0)
    model = create_model("mlp", (1, 8, 8), 10)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(20, 1, 8, 8)
    stats = distill(model, x, torch.full((20, 10), 0.1), DistillParams(steps=0), torch.Generator().manual_seed(0))
    assert stats["steps"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_cosine_schedule_and_clipping_by_hand():
    """Two SGD steps (lr 1) on one fixed batch: cosine gives lr 1 then (1 + cos(pi / 2)) / 2 = 0.5;
    clip_norm caps each step's gradient norm."""
    import torch.nn.functional as F

    x, target = torch.randn(4, 3), torch.softmax(torch.randn(4, 2), dim=1)

    def student():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 2)

    def by_hand(lrs, clip=None):
        model = student()
        for lr in lrs:
            model.zero_grad()
            F.kl_div(F.log_softmax(model(x), dim=1), target, reduction="batchmean").backward()
            grads = [p.grad for p in model.parameters()]
            norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
            scale = min(1.0, clip / (norm + 1e-6)) if clip else 1.0
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p -= lr * scale * g
        return model

    for params, lrs, clip in [(DistillParams(optimizer="sgd", lr=1.0, steps=2, batch_size=4, schedule="cosine"), [1.0, 0.5], None),
                              (DistillParams(optimizer="sgd", lr=1.0, steps=2, batch_size=4, clip_norm=0.01), [1.0, 1.0], 0.01)]:
        model = student()
        distill(model, x, target, params, torch.Generator().manual_seed(0))
        for a, b in zip(model.parameters(), by_hand(lrs, clip).parameters()):
            torch.testing.assert_close(a, b)
        assert any(not torch.allclose(a, b) for a, b in zip(model.parameters(), by_hand([1.0, 1.0]).parameters()))


def test_a_student_distilled_from_a_fixed_ensemble_reaches_the_ensembles_accuracy():
    """Three logistic-regression teachers, each trained on 3-4 digit classes only (non-iid), are a
    good ensemble; a fresh MLP that sees only unlabelled digits and their soft labels must match it."""
    data = load_digits_bundle()
    x, y = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
    test_x, test_y = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
    unlabelled = x[::2]  # half of the training inputs, without labels
    teachers = []
    for classes in ([0, 1, 2, 3], [4, 5, 6], [7, 8, 9]):
        keep = torch.isin(y[1::2], torch.tensor(classes))
        torch.manual_seed(len(teachers))
        teacher = create_model("logreg", (1, 8, 8), 10)
        local_train(teacher, x[1::2][keep], y[1::2][keep], TrainingConfig(lr=0.1, epochs=30),
                    torch.Generator().manual_seed(0))
        teachers.append(teacher)
    test_logits = torch.stack([predict_logits(t, test_x) for t in teachers])
    ens_acc = ensemble_accuracy(test_logits, test_y)
    single = max(evaluate(t, test_x, test_y)["accuracy"] for t in teachers)
    assert single < 0.45 < ens_acc  # each teacher knows at most 4 classes; together they know all
    target = aggregate_teachers(torch.stack([predict_logits(t, unlabelled) for t in teachers]))
    torch.manual_seed(5)
    student = create_model("mlp", (1, 8, 8), 10)
    stats = distill(student, unlabelled, target, DistillParams(lr=1e-3, epochs=60, batch_size=64),
                    torch.Generator().manual_seed(0))
    student_acc = evaluate(student, test_x, test_y)["accuracy"]
    assert stats["loss"] < 0.05  # measured 0.009
    assert student_acc >= ens_acc - 0.03, (student_acc, ens_acc)
