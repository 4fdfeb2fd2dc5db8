"""Tests for rankrepro.losses.pnp (PNP-O / I_u / I_b / D_s / D_q)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import accepted_hparams, build, names
from rankrepro.losses.pnp import PNPLoss

from lossutil import (assert_order_and_label_invariant, assert_score_gradient_signs, assert_zero_with_graph,
                      input_digest, official_fixture, uneven_labels, unit)

TAU = 0.01
VARIANTS = {"O": "pnp_o", "Iu": "pnp_iu", "Ib": "pnp_ib", "Ds": "pnp_ds", "Dq": "pnp_dq"}
OFFICIAL_VARIANTS = {"O": "PNP-O", "Iu": "PNP-I_u", "Ib": "PNP-I_b", "Ds": "PNP-D_s", "Dq": "PNP-D_q"}  # --variant


def make(variant, **kw):
    return PNPLoss(variant, **kw)


# ------------------------------------------------------- reference: the paper, with loops


def f_paper(variant, R, b, alpha):
    if variant == "O":
        return R
    if variant == "Iu":
        return (1 + R) * torch.log(1 + R)
    if variant == "Ib":
        return (b * R - torch.log(1 + b * R)) / b**2
    if variant == "Ds":
        return torch.log(1 + R)
    return 1 / (1 + R) ** alpha


def loop_pnp(emb, labels, variant, tau=TAU, b=4.0, alpha=4.0, include_query=True,
             ref=None, ref_labels=None, ref_has_batch=False):
    """Eqs. 2-13 with explicit loops (float64).

    Retrieval set: the batch (no ref), or the ref set. ``ref_has_batch``: ref index q is the
    query's own entry. Self entry kept as a positive iff include_query. Queries with no
    positive besides themselves are skipped.
    """
    emb = emb.double()
    if ref is None:
        ref, ref_labels, own = emb, labels, True
    else:
        ref, own = ref.detach().double(), ref_has_batch
    per_query = []
    for q in range(emb.shape[0]):
        s = ref @ emb[q]
        others = [j for j in range(ref.shape[0]) if ref_labels[j] == labels[q] and not (own and j == q)]
        if not others:
            continue
        pos = others + ([q] if (own and include_query) else [])
        neg = [j for j in range(ref.shape[0]) if ref_labels[j] != labels[q]]
        terms = []
        for i in pos:
            R = torch.sigmoid((s[neg] - s[i]) / tau).sum()  # eq. 2 with G of eq. 3
            terms.append(f_paper(variant, R, b, alpha))
        per_query.append(sum(terms) / len(pos))
    if not per_query:
        return emb.sum() * 0
    mean = torch.stack(per_query).mean()
    return 1 - mean if variant == "Dq" else mean


# --------------------------------------------------------------------- (1) differential


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("include_query", [True, False])
def test_matches_loop_reference_value_and_grad(variant, include_query):
    for seed, tau in ((0, TAU), (1, 0.05)):
        y = uneven_labels(seed)
        e = unit(len(y), 6, seed).requires_grad_()
        e2 = e.detach().clone().requires_grad_()
        ours = make(variant, tau=tau, include_query=include_query, b=2.0, alpha=3.0)(e, y)
        ref = loop_pnp(e2, y, variant, tau=tau, b=2.0, alpha=3.0, include_query=include_query)
        torch.testing.assert_close(ours.double(), ref, atol=1e-5, rtol=1e-5)
        ours.backward()
        ref.backward()
        assert e.grad.abs().max() > 0
        torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("b,alpha", [(2.0, 1.0), (4.0, 4.0)])
def test_matches_pml(variant, b, alpha):
    """PML PNPLoss: label-based, in-batch only, query kept as its own positive, queries
    without a positive dropped: its assumptions hold for any label layout without ref."""
    from pytorch_metric_learning.losses import PNPLoss as PMLPNP

    for seed, y in ((0, uneven_labels(0)), (1, torch.arange(4).repeat_interleave(4))):
        e = unit(len(y), 8, seed).requires_grad_()
        e2 = e.detach().clone().requires_grad_()
        kw = {"b": b} if variant == "Ib" else {"alpha": alpha} if variant == "Dq" else {}
        # PML normalises inside (CosineSimilarity): normalise here too for comparable grads
        ours = build(VARIANTS[variant], **kw)(F.normalize(e, dim=1), y)
        pml = PMLPNP(b=b, alpha=alpha, anneal=TAU, variant=variant)(e2, y)
        torch.testing.assert_close(ours, pml, atol=1e-5, rtol=1e-5)
        ours.backward()
        pml.backward()
        torch.testing.assert_close(e.grad, e2.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_index_blocks_reproduces_official_code(variant):
    """The official index-based code's value and gradient (fixture pnp_index_blocks.json: criteria/PNP.py of
    interestingzhuo/PNPloss, run outside the repository): blocks of m rows are the classes, so a class drawn
    twice (blocks 0 and 2) is a negative."""
    fx = official_fixture("pnp_index_blocks")
    (ref,) = [c for c in fx["cases"] if c["variant"] == OFFICIAL_VARIANTS[variant]]
    m = fx["samples_per_class"]
    y = torch.tensor([0] * m + [1] * m + [0] * m + [2] * m)
    e = unit(len(y), fx["embed_dim"], fx["seed"])
    assert len(y) == fx["batch_size"] and input_digest(e) == fx["embeddings_sha256_16"]
    e.requires_grad_()
    ours = make(variant, index_blocks=m, tau=fx["anneal"], b=fx["b"], alpha=fx["alpha"])(e, y)
    torch.testing.assert_close(ours.double(), torch.tensor(ref["loss"], dtype=torch.float64), atol=1e-6, rtol=1e-6)
    ours.backward()
    torch.testing.assert_close(e.grad.double(), torch.tensor(ref["grad_embeddings"], dtype=torch.float64),
                               atol=2e-6, rtol=1e-5)
    label_based = make(variant)(e, y)
    assert abs(label_based.item() - ours.item()) > 1e-4
    # distinct classes per block: index-based == label-based
    y2 = torch.arange(4).repeat_interleave(m)
    torch.testing.assert_close(make(variant, index_blocks=m)(e, y2), make(variant)(e, y2))
    with pytest.raises(ValueError, match="index_blocks"):
        make(variant, index_blocks=3)(e, y)


# ------------------------------------------------------------------------ (2) properties


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("include_query", [True, False])
def test_zero_at_perfect_ranking_with_margin(variant, include_query):
    y = uneven_labels(6)
    centers = torch.eye(16)[: int(y.max()) + 1]
    e = F.normalize(centers[y] + 0.01 * unit(len(y), 16, 6), dim=1)
    assert abs(make(variant, include_query=include_query)(e, y).item()) < 1e-6
    # a negative j moved onto query q (which has positives): loss > 0
    q = next(i for i in range(len(y)) if (y == y[i]).sum() > 1)
    j = int((y != y[q]).nonzero()[0, 0])
    e_bad = e.clone()
    e_bad[j] = e[q]
    assert make(variant, include_query=include_query)(e_bad, y).item() > 1e-3


def test_tau_to_zero_counts_negatives_before_positives():
    """PNP-O with tau -> 0 is the exact mean number of negatives ranked before each positive."""
    y = uneven_labels(5)
    e = unit(len(y), 16, 5).double()
    s = e @ e.T
    per_q = []
    for q in range(len(y)):
        pos = [j for j in range(len(y)) if y[j] == y[q] and j != q]
        if not pos:
            continue
        neg = [j for j in range(len(y)) if y[j] != y[q]]
        per_q.append(sum(float((s[q, neg] > s[q, i]).sum()) for i in pos) / len(pos))
    exact = sum(per_q) / len(per_q)
    assert make("O", tau=1e-7, include_query=False)(e.float(), y).item() == pytest.approx(exact, abs=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradient_direction_on_scores(variant):
    """With ref = identity, s_j = query[j]: dL/ds <= 0 on positives, >= 0 on negatives."""
    assert_score_gradient_signs(make(variant), rows=1, tol=1e-9)


def test_dq_legacy_sign_is_the_pre_2023_release():
    y = uneven_labels(2)
    e = unit(len(y), 8, 2).requires_grad_()
    fixed = make("Dq")(e, y)
    (g_fixed,) = torch.autograd.grad(fixed, e)
    legacy = make("Dq", dq_legacy_sign=True)(e, y)
    (g_legacy,) = torch.autograd.grad(legacy, e)
    assert legacy.item() == pytest.approx(1 - fixed.item(), abs=1e-6)
    torch.testing.assert_close(g_legacy, -g_fixed)
    with pytest.raises(ValueError, match="dq_legacy_sign"):
        make("O", dq_legacy_sign=True)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_label_and_batch_order_invariance(variant):
    y = uneven_labels(7)
    assert_order_and_label_invariant(make(variant), unit(len(y), 8, 7), y, relabel=(10, 3))


def test_no_valid_query_gives_zero_with_graph():
    assert_zero_with_graph(build("pnp_dq"))


# ---------------------------------------------------------------------------- (3) ref set


@pytest.mark.parametrize("variant", ["O", "Dq"])
@pytest.mark.parametrize("include_query", [True, False])
def test_ref_set_starting_with_batch(variant, include_query):
    """memory-style ref = [batch.detach(), memory]: own entry found at index q."""
    y = uneven_labels(3)
    e = unit(len(y), 6, 3).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    mem = unit(30, 6, 4)
    mem_y = torch.randint(0, 9, (30,), generator=torch.Generator().manual_seed(0))
    ref = torch.cat([e.detach(), mem]).requires_grad_()
    ref_y = torch.cat([y, mem_y])
    ours = make(variant, include_query=include_query)(e, y, ref, ref_y, self_index=torch.arange(len(y)))
    expect = loop_pnp(e2, y, variant, include_query=include_query, ref=ref, ref_labels=ref_y, ref_has_batch=True)
    torch.testing.assert_close(ours.double(), expect, atol=1e-5, rtol=1e-5)
    ours.backward()
    expect.backward()
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)
    assert ref.grad is None
    # ref = the detached batch alone gives the in-batch value
    torch.testing.assert_close(make(variant, include_query=include_query)(e, y, e.detach(), y,
                                                                         self_index=torch.arange(len(y))),
                               make(variant, include_query=include_query)(e, y), atol=1e-6, rtol=1e-6)


def test_ref_set_without_batch_and_misuse():
    y = uneven_labels(4)
    e = unit(len(y), 6, 4)
    ref, ref_y = unit(25, 6, 5), torch.randint(0, 9, (25,), generator=torch.Generator().manual_seed(1))
    ours = make("Ds")(e, y, ref, ref_y)  # no self_index: the reference set holds no query
    torch.testing.assert_close(ours.double(), loop_pnp(e, y, "Ds", ref=ref, ref_labels=ref_y), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="self_index"):
        make("Ds")(e, y, ref, ref_y, self_index=torch.arange(len(y)))  # labels there differ from the batch
    with pytest.raises(ValueError, match="together"):
        make("Ds")(e, y, ref, None)


def test_memory_wrapper_runs_and_no_grad_into_memory():
    loss = build("pnp_dq", memory={"size": 32})
    y = torch.arange(4).repeat_interleave(4)
    for seed in range(3):
        e = unit(16, 8, seed).requires_grad_()
        out = loss(e, y)
        out.backward()
        assert torch.isfinite(e.grad).all() and e.grad.abs().max() > 0
    assert not loss.embeddings.requires_grad and loss.embeddings.shape[0] == 32


# ---------------------------------------------------------------------------- (4) memory


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    y = torch.arange(96).repeat_interleave(4)
    e = unit(384, 128, 0)
    for name in VARIANTS.values():
        torch.testing.assert_close(build(name)(e.cuda(), y.cuda()).cpu(), build(name)(e, y), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- registry


def test_registry_names_and_hparams():
    for v, name in VARIANTS.items():
        assert name in names()
        loss = build(name)
        assert isinstance(loss, PNPLoss) and loss.variant == v and loss.tau == 0.01
    assert "alpha" in accepted_hparams("pnp_dq") and "alpha" not in accepted_hparams("pnp_o")
    assert "b" in accepted_hparams("pnp_ib") and "b" not in accepted_hparams("pnp_dq")
    assert build("pnp_dq").alpha == 4.0 and build("pnp_ib").b == 4.0
    assert build("pnp_dq").include_query and not build("pnp_dq").dq_legacy_sign
    with pytest.raises(TypeError, match="alpha"):
        build("pnp_o", alpha=2)
    for name, kw, word in [("pnp_dq", {"tau": 0}, "tau"), ("pnp_dq", {"alpha": -1}, "alpha"),
                           ("pnp_ib", {"b": 0}, "b"), ("pnp_o", {"index_blocks": 1}, "index_blocks"),
                           ("pnp_o", {"chunk_size": 0}, "chunk_size")]:
        with pytest.raises(ValueError, match=word):
            build(name, **kw)
    with pytest.raises(ValueError, match="variant"):
        PNPLoss("Dx")
    assert not math.isnan(build("pnp_iu")(unit(8, 4, 0), torch.arange(4).repeat(2)).item())
