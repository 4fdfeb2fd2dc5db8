"""Tests for rankrepro.losses.smooth_ap and the loss registry."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import SmoothAP, build, names
from rankrepro.losses.rank import APLoss
from rankrepro.losses.steps import SigmoidStep
from rankrepro.losses.registry import HyperParameterError

from lossutil import uneven_labels, unit

TAU = 0.01


# ------------------------------------------------------- reference: the paper, with loops


def loop_smooth_ap(emb, labels, tau, include_query, ref=None, ref_labels=None):
    """Paper eq. with explicit loops over queries and positives (float64).

    Without ref: Omega = batch (minus q unless include_query), P = same label in Omega.
    With ref: Omega = ref set as given. Queries with no positive besides q are skipped.
    """
    emb = emb.double()
    same = ref is None
    if same:
        ref, ref_labels = emb, labels
    else:
        ref = ref.detach().double()
    aps = []
    for q in range(emb.shape[0]):
        s = ref @ emb[q]
        omega = [j for j in range(ref.shape[0]) if not (same and j == q and not include_query)]
        pos = [j for j in omega if ref_labels[j] == labels[q]]
        if len([j for j in pos if not (same and j == q)]) == 0:
            continue
        ap = 0.0
        for i in pos:
            r_pos = 1 + sum(torch.sigmoid((s[j] - s[i]) / tau) for j in pos if j != i)
            r_all = 1 + sum(torch.sigmoid((s[j] - s[i]) / tau) for j in omega if j != i)
            ap = ap + r_pos / r_all
        aps.append(ap / len(pos))
    if not aps:
        return emb.sum() * 0
    return 1 - torch.stack(aps).mean()


def exact_ap_loss(emb, labels, include_query):
    """1 - mean AP with Heaviside ranks (same conventions as SmoothAP)."""
    s_all = emb.double() @ emb.double().T
    aps = []
    for q in range(len(labels)):
        keep = torch.ones(len(labels), dtype=torch.bool)
        if not include_query:
            keep[q] = False
        s, y = s_all[q][keep], labels[keep]
        pos = (y == labels[q]).nonzero().flatten()
        if len(pos) - (1 if include_query else 0) == 0:
            continue
        ap = 0.0
        for i in pos:
            ap += float((s[pos] > s[i]).sum() + 1) / float((s > s[i]).sum() + 1)
        aps.append(ap / len(pos))
    return 1 - sum(aps) / len(aps)


# --------------------------------------------------------------------- (1) differential


@pytest.mark.parametrize("include_query", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_loop_reference_value_and_grad(include_query, seed):
    y = uneven_labels(seed)
    e = unit(len(y), 6, seed).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    tau = 0.05 if seed == 2 else TAU
    ours = SmoothAP(tau=tau, include_query=include_query)(e, y)
    ref = loop_smooth_ap(e2, y, tau, include_query)
    torch.testing.assert_close(ours.double(), ref, atol=1e-5, rtol=0)
    ours.backward()
    ref.backward()
    assert e.grad.abs().max() > 0
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("include_query", [True, False])
def test_matches_loop_reference_with_ref_set(include_query):
    y = uneven_labels(3)
    e = unit(len(y), 6, 3).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    ref = unit(40, 6, 4).requires_grad_()
    ref_y = torch.randint(0, 9, (40,), generator=torch.Generator().manual_seed(0))
    ours = SmoothAP(include_query=include_query)(e, y, ref, ref_y)
    expect = loop_smooth_ap(e2, y, TAU, include_query, ref, ref_y)
    torch.testing.assert_close(ours.double(), expect, atol=1e-5, rtol=0)
    ours.backward()
    expect.backward()
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)
    assert ref.grad is None  # no gradient into the reference set


# ----------------------------------------------------------------------- (2) PML parity


def test_matches_pml_when_classes_equal_samples_per_class():
    from pytorch_metric_learning.losses import SmoothAPLoss

    for seed in range(3):
        y = torch.arange(4).repeat_interleave(4)  # contiguous blocks, C == m == 4
        e = unit(16, 8, seed).requires_grad_()
        e2 = e.detach().clone().requires_grad_()
        # PML normalises inside (CosineSimilarity): normalise here too so that the
        # gradients are comparable (the radial component is projected out).
        ours = SmoothAP(tau=TAU, include_query=True)(F.normalize(e, dim=1), y)
        pml = SmoothAPLoss(temperature=TAU)(e2, y)
        torch.testing.assert_close(ours, pml, atol=1e-5, rtol=0)
        ours.backward()
        pml.backward()
        torch.testing.assert_close(e.grad, e2.grad, atol=1e-5, rtol=1e-4)


def test_pml_differs_when_classes_differ_from_samples_per_class():
    """PML groups by B // n_classes (= samples per class): wrong for 3 classes x 6."""
    from pytorch_metric_learning.losses import SmoothAPLoss

    y = torch.arange(3).repeat_interleave(6)
    e = unit(18, 8, 0)
    ours = SmoothAP(tau=TAU, include_query=True)(e, y)
    pml = SmoothAPLoss(temperature=TAU)(e, y)
    ref = loop_smooth_ap(e, y, TAU, True)
    torch.testing.assert_close(ours.double(), ref, atol=1e-5, rtol=0)
    assert abs(pml.item() - ours.item()) > 1e-3


# ------------------------------------------------------------------------ (3) properties


@pytest.mark.parametrize("include_query", [True, False])
def test_tends_to_exact_ap(include_query):
    y = uneven_labels(5)
    e = unit(len(y), 16, 5)
    exact = exact_ap_loss(e, y, include_query)
    val = SmoothAP(tau=1e-6, include_query=include_query)(e, y).item()
    assert val == pytest.approx(exact, abs=2e-3)
    # and the approximation improves as tau decreases
    errs = [abs(SmoothAP(tau=t, include_query=include_query)(e, y).item() - exact) for t in (0.1, 0.01, 1e-6)]
    assert errs[0] > errs[2]


@pytest.mark.parametrize("include_query", [True, False])
def test_perfect_ranking_with_margin_is_zero(include_query):
    y = uneven_labels(6)
    centers = torch.eye(16)[: int(y.max()) + 1]
    e = F.normalize(centers[y] + 0.01 * unit(len(y), 16, 6), dim=1)
    assert SmoothAP(include_query=include_query)(e, y).item() < 1e-6


def test_gradient_sign_on_scores():
    """With ref = identity, s_j = query[j]: dL/ds_j <= 0 for positives, >= 0 for negatives."""
    n = 12
    ref = torch.eye(n)
    ref_y = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0])
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        scores = (0.5 + 0.02 * torch.randn(1, n, generator=g)).requires_grad_()
        loss = SmoothAP(tau=TAU)(scores, torch.tensor([0]), ref, ref_y)
        (grad,) = torch.autograd.grad(loss, scores)
        pos = ref_y == 0
        assert (grad[0, pos] <= 1e-9).all() and (grad[0, ~pos] >= -1e-9).all()
        assert grad[0, pos].min() < 0 and grad[0, ~pos].max() > 0


@pytest.mark.parametrize("include_query", [True, False])
def test_permutation_invariance_and_range(include_query):
    y = uneven_labels(7)
    e = unit(len(y), 8, 7)
    loss = SmoothAP(include_query=include_query)
    base = loss(e, y)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(loss(e[perm], y[perm]), base, atol=1e-6, rtol=0)
    for tau in (1e-3, 0.01, 0.1, 1.0):
        for seed in range(3):
            v = SmoothAP(tau=tau, include_query=include_query)(unit(len(y), 8, seed), y).item()
            assert 0.0 <= v <= 1.0


def test_labels_2d_use_column_0_and_no_valid_query():
    y = uneven_labels(8)
    e = unit(len(y), 8, 8)
    y2 = torch.stack([y, torch.zeros_like(y)], 1)
    torch.testing.assert_close(SmoothAP()(e, y2), SmoothAP()(e, y))
    # every class a singleton: no query has a positive -> 0, still differentiable
    e = e.requires_grad_()
    out = SmoothAP()(e, torch.arange(len(y)))
    assert out.item() == 0.0 and out.requires_grad
    out.backward()
    assert torch.count_nonzero(e.grad) == 0


# ---------------------------------------------------------------------------- (4) memory


def test_batch_384_forward_backward_cpu():
    y = torch.arange(96).repeat_interleave(4)
    e = unit(384, 512, 0).requires_grad_()
    loss = SmoothAP()(e, y)
    loss.backward()
    assert torch.isfinite(e.grad).all() and 0 < loss.item() < 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_memory_below_cubic():
    B = 384
    y = torch.arange(B // 4).repeat_interleave(4).cuda()
    e = unit(B, 512, 0).cuda().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    SmoothAP()(e, y).backward()
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < B**3 * 4 / 16
    cpu = SmoothAP()(e.detach().cpu(), y.cpu())
    torch.testing.assert_close(SmoothAP()(e.detach(), y).cpu(), cpu, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------- (5) ref set


@pytest.mark.parametrize("include_query", [True, False])
def test_ref_equal_to_detached_batch_matches_include_query_true(include_query):
    """With a ref set nothing is removed: ref = batch.detach() == no-ref include_query=True.

    (Given no singleton class: with a ref set a query is skipped only when the ref holds
    no item of its label, and here its own detached copy is such an item.)"""
    y = uneven_labels(11, sizes=(2, 3, 5, 4, 7, 2))
    e = unit(len(y), 8, 11).requires_grad_()
    with_ref = SmoothAP(include_query=include_query)(e, y, e.detach(), y)
    no_ref = SmoothAP(include_query=True)(e, y)
    torch.testing.assert_close(with_ref, no_ref, atol=1e-6, rtol=0)
    ref = e.detach().clone().requires_grad_()
    SmoothAP()(e, y, ref, y).backward()
    assert ref.grad is None and e.grad is not None


# ---------------------------------------------------------------------------- registry


def test_registry():
    assert "smooth_ap" in names()
    loss = build("smooth_ap", tau=0.05, include_query=False)
    # SmoothAP is a builder: the AP head of the rank core with the sigmoid step
    assert isinstance(loss, APLoss) and isinstance(loss.step, SigmoidStep)
    assert loss.tau == 0.05 and not loss.include_query
    with pytest.raises(ValueError, match="smooth_ap"):
        build("no_such_loss")
    with pytest.raises(TypeError, match="temperature.*tau"):
        build("smooth_ap", temperature=0.01)
    with pytest.raises(ValueError):
        build("smooth_ap", temperature=0.01)
    assert issubclass(HyperParameterError, TypeError)
