"""Tests for rankrepro.losses.calibration: L_DG (pair) and L_DG* (normalised softmax)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import build
from rankrepro.losses.calibration import CalibrationLoss, NormalizedSoftmaxDG

import lossutil
from lossutil import unit


uneven_labels = functools.partial(lossutil.uneven_labels, sizes=(1, 2, 3, 5, 4, 2))  # this file's class sizes


# ------------------------------------------------------------------------------ L_DG


# s = [[1, .6, -.6, 0], [.6, 1, .28, .8], [-.6, .28, 1, .8], [0, .8, .8, 1]]; labels 0 0 1 1
TINY = torch.tensor([[1.0, 0.0], [0.6, 0.8], [-0.6, 0.8], [0.0, 1.0]])
TINY_Y = torch.tensor([0, 0, 1, 1])


def test_calibration_hand_computed():
    # positive pairs: (0,1) x2 -> [0.9-0.6]=0.3, (2,3) x2 -> 0.1; negatives: (1,3) x2 -> [0.8-0.6]=0.2
    assert CalibrationLoss()(TINY, TINY_Y).item() == pytest.approx(0.2 + 0.2, abs=1e-6)
    # eq. 7 per query, then the mean: q0 .3 + 0; q1 .3 + (0 + .2)/2; q2 .1 + 0; q3 .1 + .1
    assert CalibrationLoss(reduction="mean")(TINY, TINY_Y).item() == pytest.approx(
        (0.3 + 0.4 + 0.1 + 0.2) / 4, abs=1e-6)
    # with every margin met the loss is zero (and still a graph)
    e = TINY.clone().requires_grad_()
    out = CalibrationLoss(alpha=0.5, beta=0.9)(e, TINY_Y)
    assert out.item() == 0.0 and out.requires_grad


@pytest.mark.parametrize("seed", range(3))
def test_calibration_matches_pml_contrastive(seed):
    from pytorch_metric_learning.distances import DotProductSimilarity
    from pytorch_metric_learning.losses import ContrastiveLoss

    pml = ContrastiveLoss(pos_margin=0.9, neg_margin=0.6, distance=DotProductSimilarity())
    y = uneven_labels(seed)
    e = unit(len(y), 4, seed).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    # PML normalises inside: normalise here too so that the gradients compare
    ours = CalibrationLoss()(F.normalize(e, dim=1), y)
    ref = pml(e2, y)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(e.grad, e2.grad, atol=1e-6, rtol=1e-5)
    # with a reference set: every (query, ref) pair
    mem = unit(9, 4, seed + 50)
    mem_y = torch.randint(0, 6, (9,), generator=torch.Generator().manual_seed(seed))
    ours = CalibrationLoss()(F.normalize(e, dim=1), y, mem, mem_y)
    torch.testing.assert_close(ours, pml(e2, y, ref_emb=mem, ref_labels=mem_y), atol=1e-6, rtol=0)


def test_calibration_mean_reduction_matches_loop_and_ref_set_rules():
    y = uneven_labels(4)
    e = unit(len(y), 5, 4)
    s = e.double() @ e.double().T
    per_q = []
    for q in range(len(y)):
        pos = [j for j in range(len(y)) if j != q and y[j] == y[q]]
        neg = [j for j in range(len(y)) if y[j] != y[q]]
        v = 0.0
        if pos:
            v += sum(max(0.9 - s[q, j].item(), 0) for j in pos) / len(pos)
        v += sum(max(s[q, j].item() - 0.6, 0) for j in neg) / len(neg)
        per_q.append(v)
    assert CalibrationLoss(reduction="mean")(e, y).item() == pytest.approx(sum(per_q) / len(per_q), abs=1e-6)
    # a ref set equal to the batch adds the self pairs (s = 1 > alpha): no change with avg_non_zero
    torch.testing.assert_close(CalibrationLoss()(e, y, e.detach(), y), CalibrationLoss()(e, y))
    # hierarchy_level selects the label column; the ref set gets no gradient
    y2 = torch.stack([y, y % 2], 1)
    torch.testing.assert_close(CalibrationLoss(hierarchy_level=1)(e, y2), CalibrationLoss()(e, y % 2))
    ref = e.detach().clone().requires_grad_()
    CalibrationLoss()(e.requires_grad_(), y, ref, y).backward()
    assert ref.grad is None and e.grad is not None


def test_calibration_validation():
    with pytest.raises(ValueError, match="reduction"):
        CalibrationLoss(reduction="sum")
    with pytest.raises(ValueError, match="hierarchy_level"):
        CalibrationLoss(hierarchy_level=2)(TINY, TINY_Y)
    assert build("calibration", alpha=0.8).alpha == 0.8


# ----------------------------------------------------------------------------- L_DG*


def test_normalized_softmax_hand_computed():
    loss = NormalizedSoftmaxDG(num_classes=2, embedding_size=2, temperature=0.05)
    with torch.no_grad():
        loss.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))  # normalised: e1, e2
    e = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    # logits (12, 16) with label 0 and (20, 0) with label 1
    expected = (math.log1p(math.exp(4.0)) + math.log1p(math.exp(20.0))) / 2
    assert loss(e, torch.tensor([0, 1])).item() == pytest.approx(expected, rel=1e-6)
    # hierarchy_level picks the column; [B, L] labels
    y2 = torch.tensor([[5, 0], [7, 1]])
    loss.hierarchy_level = 1
    assert loss(e, y2).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("seed", range(2))
def test_normalized_softmax_matches_pml(seed):
    from pytorch_metric_learning.losses import NormalizedSoftmaxLoss

    C, D = 7, 5
    ours = NormalizedSoftmaxDG(num_classes=C, embedding_size=D)
    pml = NormalizedSoftmaxLoss(num_classes=C, embedding_size=D, temperature=0.05)
    with torch.no_grad():
        pml.W.copy_(ours.weight.T)  # PML stores W as [D, C]
    y = torch.randint(0, C, (12,), generator=torch.Generator().manual_seed(seed))
    e = unit(12, D, seed).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    a, b = ours(e, y), pml(e2, y)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-6)
    a.backward()
    b.backward()
    torch.testing.assert_close(ours.weight.grad, pml.W.grad.T, atol=1e-5, rtol=1e-5)
    # PML also normalises the embeddings: the same with normalize_embeddings=True
    raw = (3.0 * unit(12, D, seed + 7)).requires_grad_()
    raw2 = raw.detach().clone().requires_grad_()
    ours_n = NormalizedSoftmaxDG(num_classes=C, embedding_size=D, normalize_embeddings=True)
    with torch.no_grad():
        ours_n.weight.copy_(ours.weight)
    a, b = ours_n(raw, y), pml(raw2, y)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-6)
    a.backward()
    b.backward()
    torch.testing.assert_close(raw.grad, raw2.grad, atol=1e-6, rtol=1e-5)


def test_normalized_softmax_init_params_and_errors():
    loss = build("normalized_softmax_dg", num_classes=50, embedding_size=64)
    bound = 1 / math.sqrt(64)
    assert loss.weight.shape == (50, 64) and loss.weight.abs().max() <= bound
    assert [n for n, _ in loss.named_parameters()] == ["weight"]
    e = unit(8, 64, 0)
    y = torch.randint(0, 50, (8,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert loss(e, y).dtype == torch.float32
    # a ref set is ignored (per-batch proxy loss)
    torch.testing.assert_close(loss(e, y, unit(5, 64, 1), torch.zeros(5, dtype=torch.long)), loss(e, y))
    with pytest.raises(ValueError, match="num_classes"):
        build("normalized_softmax_dg")
    with pytest.raises(ValueError, match="temperature"):
        NormalizedSoftmaxDG(3, 4, temperature=0)
    with pytest.raises(ValueError, match=r"\[0, 50\)"):
        loss(e, torch.full((8,), 50))
    with pytest.raises(ValueError, match="embeddings"):
        loss(unit(8, 32, 0), y)
    # proxies learn: one Adam step lowers the loss on a fixed batch
    opt = torch.optim.Adam(loss.parameters(), lr=0.1)
    before = loss(e, y)
    before.backward()
    opt.step()
    assert loss(e, y).item() < before.item()
