"""The detector's box-head loss ``faster_rcnn`` and RaMBO's detection mAP loss (RaMBOMapDetLoss).

Differential: the cross-entropy path against torchvision's ``fastrcnn_loss``; the rank path against the values
and gradients the official ``MapLoss`` of martius-lab/blackbox-backprop (``blackbox_backprop/mAP.py`` at
0152a6df) computed outside the repository, stored in ``tests/fixtures/official/blackbox_maploss.json`` (its
"source" says how). Hand-computed: a 4 x 3 case with a deterministic zero margin.
"""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torchvision.models.detection.roi_heads import fastrcnn_loss

from rankrepro import catalog, losses
from rankrepro.losses.blackbox import RaMBOMapDetLoss
from rankrepro.losses.detection import FasterRCNNLoss
from rankrepro.losses.registry import HyperParameterError
from rankrepro.torchfile import load_plain

from lossutil import input_digest, official_fixture
from lossutil import one_thread  # noqa: F401  (autouse fixture)


# ------------------------------------------------------------------------------------ helpers


def roi_batch(seed, rois=(48, 40), classes=6, absent=(), scale=1.0):
    """Random box-head outputs of two images: logits [N, C], regression [N, 4C], labels and targets per image;
    the classes in ``absent`` get no RoI."""
    g = torch.Generator().manual_seed(seed)
    n = sum(rois)
    logits = torch.randn(n, classes, generator=g) * scale
    box = torch.randn(n, 4 * classes, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    for c in absent:
        labels[labels == c] = 0
    labels[: n // 3] = 0  # background RoIs, as the sampler's 75 %
    targets = torch.randn(n, 4, generator=g) * 0.3
    return logits, box, list(labels.split(rois)), list(targets.split(rois))


def grad_of(fn, x):
    x = x.clone().requires_grad_()
    value = fn(x)
    value.backward()
    return value.detach(), x.grad


# ---------------------------------------------------------------------------- cross-entropy path


def test_cross_entropy_path_is_torchvisions_fastrcnn_loss_exactly():
    logits, box, labels, targets = roi_batch(0, classes=21)
    ours = FasterRCNNLoss(box_beta=1.0 / 9.0)(logits, box, labels, targets)
    ref_cls, ref_box = fastrcnn_loss(logits, box, labels, targets)
    assert torch.equal(ours["loss_classifier"], ref_cls) and torch.equal(ours["loss_box_reg"], ref_box)
    # gradients too
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    sum(FasterRCNNLoss(box_beta=1.0 / 9.0)(a, box, labels, targets).values()).backward()
    sum(fastrcnn_loss(b, box, labels, targets)).backward()
    assert torch.equal(a.grad, b.grad)


def test_box_beta_one_is_mmdet_v1s_smooth_l1_by_hand():
    logits, box, labels, targets = roi_batch(1, classes=21)
    out = FasterRCNNLoss()(logits, box, labels, targets)  # box_beta = 1.0 (mmdet v1 RCNN)
    ref_cls, ref_box = fastrcnn_loss(logits, box, labels, targets)
    assert torch.equal(out["loss_classifier"], ref_cls)
    lab, tgt = torch.cat(labels), torch.cat(targets)
    pos = (lab > 0).nonzero().flatten()
    d = (box.reshape(len(lab), 21, 4)[pos, lab[pos]] - tgt[pos]).abs()
    by_hand = torch.where(d < 1.0, 0.5 * d**2, d - 0.5).sum() / len(lab)  # divided by all RoIs
    assert torch.allclose(out["loss_box_reg"], by_hand, rtol=1e-6) and not torch.allclose(ref_box, by_hand)


def test_cross_entropy_refuses_the_rank_classifiers_options():
    for bad in ({"score": "softmax"}, {"background": False}, {"rank_weight": 2.0}):
        with pytest.raises(ValueError, match="rank classifier"):
            FasterRCNNLoss(**bad)
    with pytest.raises(ValueError, match="classifier must be"):
        FasterRCNNLoss(classifier="focal")


# ----------------------------------------------------------------------------------- rank path


def test_rank_loss_by_hand_with_a_zero_margin():
    """4 RoIs x 3 classes, class 2 absent: L_mAP = 1 - (5/6 + 1/3)/2 = 5/12, L_APC = 1 - 29/72 (the 12 scores
    in one list, positives at ranks 2, 6, 8), loss = 2/3 L_mAP + 1/3 L_APC = 103/216."""
    s = torch.tensor([[0.9, 0.2, 0.05], [0.8, 0.7, 0.4], [0.3, 0.6, 0.95], [0.1, 0.5, 0.0]])
    t = torch.tensor([[1.0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]])
    det = dict(margin=0.0, random_margin=False, memory_batches=0)
    assert RaMBOMapDetLoss(interclass_coef=0.0, **det)(s, t).item() == pytest.approx(5 / 12, abs=1e-6)
    assert RaMBOMapDetLoss(interclass_coef=1.0, **det)(s, t).item() == pytest.approx(43 / 72, abs=1e-6)
    assert RaMBOMapDetLoss(**det)(s, t).item() == pytest.approx(103 / 216, abs=1e-6)  # beta = 1/3 by default
    # the absent class is left out: the same L_mAP without its column
    assert RaMBOMapDetLoss(interclass_coef=0.0, **det)(s[:, :2], t[:, :2]).item() == pytest.approx(5 / 12, abs=1e-6)


def test_interclass_coef_weighs_the_two_terms():
    logits, _, labels, _ = roi_batch(2)
    t = F.one_hot(torch.cat(labels), 6).float()
    det = dict(margin=0.15, random_margin=False, memory_batches=0)
    cross = RaMBOMapDetLoss(interclass_coef=0.0, **det)(logits, t)
    inter = RaMBOMapDetLoss(interclass_coef=1.0, **det)(logits, t)
    both = RaMBOMapDetLoss(**det)(logits, t)
    assert both.item() == pytest.approx((2 * cross.item() + inter.item()) / 3, abs=1e-6)
    assert cross.item() != pytest.approx(inter.item(), abs=1e-3)


@pytest.mark.parametrize("memory, interclass", [(7, 1.0 / 3.0), (2, 1.0 / 3.0), (2, 0.0), (1, 1.0)])
def test_rank_loss_is_the_official_maploss_values_and_gradients(memory, interclass):
    """The official MapLoss's numbers (fixture blackbox_maploss.json) on five batches in a row (the memory filling
    and rolling over), class 5 absent everywhere and class 4 in the first batch only (present in the memory
    afterwards); the fixture's seed before each call (the random margin)."""
    (case,) = [c for c in official_fixture("blackbox_maploss")["cases"]
               if (c["batch_memory"], c["interclass_coef"]) == (memory, interclass)]
    ours = RaMBOMapDetLoss(lambda_val=case["lambda_val"], margin=case["margin"], interclass_coef=interclass,
                           memory_batches=memory)
    assert len(case["steps"]) == 5
    for step, ref in enumerate(case["steps"]):
        b = ref["roi_batch"]
        logits, _, labels, _ = roi_batch(b["seed"], rois=tuple(b["rois"]), absent=tuple(b["absent"]), scale=b["scale"])
        assert input_digest(logits) == ref["logits_sha256_16"], step
        t = F.one_hot(torch.cat(labels), 6).float()
        assert t.sum(0).tolist() == ref["class_counts"]
        torch.manual_seed(ref["manual_seed"])
        v_ours, g_ours = grad_of(lambda x: ours(x, t), logits)
        # the official +1e-5 in the AP denominator and +1e-8 on lambda: differences below 1e-6; one rank
        # more or less moves a gradient entry by 1 / (lambda * rows) ~ 2e-3
        torch.testing.assert_close(v_ours, torch.tensor(ref["loss"]), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(g_ours, torch.tensor(ref["grad_logits"]), atol=1e-6, rtol=1e-4)
        assert g_ours.abs().sum() > 0
        if interclass == 0.0:  # an absent class's column gets no gradient (L_APC ranks it with the others)
            assert torch.all(g_ours[:, 5] == 0)
        assert len(ours.stored) == min(step + 1, memory)


def test_the_random_margin_is_drawn_and_the_deterministic_one_is_eq_14():
    logits, _, labels, _ = roi_batch(3, scale=0.05)  # small scores: the margin changes the ranking
    t = F.one_hot(torch.cat(labels), 6).float()
    rnd = RaMBOMapDetLoss(memory_batches=0)
    torch.manual_seed(0)
    a = rnd(logits, t)
    torch.manual_seed(1)
    assert rnd(logits, t) != a
    det = RaMBOMapDetLoss(memory_batches=0, random_margin=False)
    shifted = logits - 0.15 * (t - 0.5)  # eq. 14: positives - margin/2, negatives + margin/2
    plain = RaMBOMapDetLoss(memory_batches=0, random_margin=False, margin=0.0)
    assert det(logits, t).item() == pytest.approx(plain(shifted, t).item(), abs=1e-7)


def test_memory_holds_detached_rows_and_gradients_reach_the_current_batch_only():
    loss = RaMBOMapDetLoss(lambda_val=4.0, memory_batches=3)
    inputs, previous = [], []
    for step in range(5):
        logits, _, labels, _ = roi_batch(20 + step, scale=0.3)
        x = logits.clone().requires_grad_()
        inputs.append(x)
        loss(x, F.one_hot(torch.cat(labels), 6).float()).backward()
        assert len(loss.stored) == min(step + 1, 3)
        assert all(not s.requires_grad and s.grad_fn is None for row in loss.stored for s in row)
        assert torch.equal(loss.stored[-1][0], x.detach())  # the newest rows are the current batch's
        assert x.grad.abs().sum() > 0
        # the earlier inputs kept the gradient of their own call: nothing flowed into the stored rows
        assert all(torch.equal(inputs[i].grad, previous[i]) for i in range(step))
        previous = [i.grad.clone() for i in inputs]
    with torch.no_grad():  # evaluation calls store nothing
        loss(x, F.one_hot(torch.cat(labels), 6).float())
    assert len(loss.stored) == 3 and torch.equal(loss.stored[-1][0], x.detach())
    loss.reset()
    assert len(loss.stored) == 0


def test_state_round_trip_reproduces_the_next_loss():
    a = RaMBOMapDetLoss(lambda_val=4.0, memory_batches=2)
    for step in range(3):
        logits, _, labels, _ = roi_batch(30 + step, scale=0.3)
        a(logits, F.one_hot(torch.cat(labels), 6).float())
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)  # a checkpoint is read back with load_plain (weights_only)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    b = RaMBOMapDetLoss(lambda_val=4.0, memory_batches=2)
    b.load_state_dict(state)
    assert len(b.stored) == 2
    logits, _, labels, _ = roi_batch(40, scale=0.3)
    t = F.one_hot(torch.cat(labels), 6).float()
    torch.manual_seed(7)
    va, ga = grad_of(lambda x: a(x, t), logits)
    torch.manual_seed(7)
    vb, gb = grad_of(lambda x: b(x, t), logits)
    assert torch.equal(va, vb) and torch.equal(ga, gb)
    fresh = RaMBOMapDetLoss(lambda_val=4.0, memory_batches=2)
    torch.manual_seed(7)
    assert not torch.equal(fresh(logits, t), va)  # the memory matters


def test_state_survives_a_file_read_with_load_plain(tmp_path):
    loss = FasterRCNNLoss(classifier="rambo_map")
    logits, box, labels, targets = roi_batch(50)
    loss(logits, box, labels, targets)
    torch.save({"criterion": loss.state_dict()}, tmp_path / "checkpoint.pt")
    again = FasterRCNNLoss(classifier="rambo_map")
    again.load_state_dict(load_plain(tmp_path / "checkpoint.pt", remedy="-")["criterion"])
    assert len(again.rank_loss.stored) == 1
    assert torch.equal(again.rank_loss.stored[0][0], loss.rank_loss.stored[0][0])
    assert FasterRCNNLoss().state_dict() == {}  # cross-entropy: no state


def test_memory_of_another_class_count_is_refused():
    loss = RaMBOMapDetLoss()
    loss(torch.randn(4, 3), F.one_hot(torch.tensor([0, 1, 2, 0]), 3).float())
    with pytest.raises(ValueError, match="reset"):
        loss(torch.randn(4, 5), F.one_hot(torch.tensor([0, 1, 2, 0]), 5).float())


# ------------------------------------------------------------------------ the rank classifier's options


@pytest.mark.parametrize("score, background", [("logits", True), ("softmax", True), ("logits", False)])
def test_rank_classifier_ranks_the_chosen_scores(score, background):
    logits, box, labels, targets = roi_batch(60, classes=21)
    loss = FasterRCNNLoss(classifier="rambo_map", score=score, background=background, rank_weight=2.0)
    torch.manual_seed(3)
    out = loss(logits, box, labels, targets)
    s = logits.softmax(1) if score == "softmax" else logits
    t = F.one_hot(torch.cat(labels), 21).float()
    if not background:
        s, t = s[:, 1:], t[:, 1:]
    torch.manual_seed(3)
    expected = 2.0 * RaMBOMapDetLoss()(s, t)
    assert out["loss_classifier"].item() == pytest.approx(expected.item(), abs=1e-7)
    assert torch.equal(out["loss_box_reg"], FasterRCNNLoss()(logits, box, labels, targets)["loss_box_reg"])


def test_rank_classifier_defaults_are_the_papers_detection_values():
    loss = FasterRCNNLoss(classifier="rambo_map")
    r = loss.rank_loss
    assert (r.lambda_val, r.margin, r.interclass_coef, r.memory_batches, r.random_margin) == (0.5, 0.15, 1 / 3, 7, True)
    assert (loss.score, loss.background, loss.box_beta, loss.rank_weight) == ("logits", True, 1.0, 1.0)


def test_rank_classifier_under_autocast_is_float32():
    logits, box, labels, targets = roi_batch(61)
    loss = FasterRCNNLoss(classifier="rambo_map")
    torch.manual_seed(0)
    plain = loss(logits, box, labels, targets)["loss_classifier"]
    loss.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(0)
        cast = loss(logits.bfloat16(), box, labels, targets)["loss_classifier"]
    assert cast.dtype == torch.float32 and torch.isfinite(cast)
    assert plain.dtype == torch.float32


# ------------------------------------------------------------------------------------- registry


def test_faster_rcnn_is_a_detection_loss_left_out_of_the_retrieval_names():
    assert losses.task_of("faster_rcnn") == "detection" and losses.task_of("rambo_map") == "retrieval"
    assert "faster_rcnn" not in losses.names() and losses.names("detection") == ["faster_rcnn"]
    assert set(losses.names(None)) == set(losses.names()) | {"faster_rcnn"}
    built = losses.build("faster_rcnn", classifier="rambo_map", lambda_val=0.5)
    assert isinstance(built, FasterRCNNLoss) and built.rank_loss is not None
    with pytest.raises(HyperParameterError, match="takes no memory"):
        losses.build("faster_rcnn", memory={"size": 64})
    entry = catalog.load()["loss"]["faster_rcnn"]
    assert entry["task"] == "detection" and "task" not in catalog.load()["loss"]["rambo_map"]
    assert set(entry["parameters"]) == {"classifier", "lambda_val", "margin", "interclass_coef", "memory_batches",
                                        "random_margin", "score", "background", "box_beta", "rank_weight"}


@pytest.mark.parametrize("classifier", ["cross_entropy", "rambo_map"])
def test_detection_contract(classifier):
    """What RankRoIHeads relies on, for every classifier: the two named scalar losses, finite, with
    finite gradients into the logits and the box regression; no parameters (the optimiser sees the model's)."""
    logits, box, labels, targets = roi_batch(70, classes=21)
    lg, bx = logits.clone().requires_grad_(), box.clone().requires_grad_()
    out = losses.build("faster_rcnn", classifier=classifier)(lg, bx, labels, targets)
    assert set(out) == {"loss_classifier", "loss_box_reg"}
    assert all(v.ndim == 0 and torch.isfinite(v) for v in out.values())
    sum(out.values()).backward()
    assert torch.isfinite(lg.grad).all() and torch.isfinite(bx.grad).all() and bx.grad.abs().sum() > 0
    assert list(FasterRCNNLoss(classifier=classifier).parameters()) == []
