"""Tests for rankrepro.losses.topk (top-k precision loss l_k, Lu et al. ICCV 2019)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import build, names
from rankrepro.losses.topk import TopKPrecisionLoss, topk_precision_per_query

import lossutil
from lossutil import assert_order_and_label_invariant, assert_zero_with_graph, input_digest, official_fixture, unit


uneven_labels = functools.partial(lossutil.uneven_labels, sizes=(1, 2, 3, 8, 4, 7, 2, 6))  # this file's class sizes


def one_query(s_hat_sorted_with_labels, margin=0.0):
    """(query embedding, label, ref, ref labels) such that the query's scores are given.

    Input: list of (s_hat, is_positive). Scores s = s_hat - margin * (1 - y)."""
    s_hat = torch.tensor([v for v, _ in s_hat_sorted_with_labels], dtype=torch.float64)
    pos = torch.tensor([p for _, p in s_hat_sorted_with_labels])
    s = s_hat - margin * (~pos).double()
    n = len(s)
    return s.unsqueeze(0), torch.tensor([0]), torch.eye(n, dtype=torch.float64), (~pos).long()


# ---------------------------------------------------- reference: the paper's sets, loops


def paper_lk(s_hat, rel, k):
    """l_k of one query from eqs. 5-10: build P and N explicitly."""
    n = len(s_hat)
    k = min(k, n)
    order = sorted(range(n), key=lambda i: -float(s_hat[i].detach()))
    K, out = order[:k], order[k:]
    n_pos = int(rel.sum())
    if n_pos < k:  # case 1
        P = [i for i in out if rel[i]]
        negs_in_K = [i for i in K if not rel[i]]  # already in descending order
        N = negs_in_K[k - n_pos:]
    else:  # case 2
        N = [i for i in K if not rel[i]]
        P = [i for i in out if rel[i]][: len(N)]
    assert len(P) == len(N)
    zero = s_hat.sum() * 0
    return sum((s_hat[i] for i in N), zero) - sum((s_hat[i] for i in P), zero)


def loop_loss(emb, labels, k, margin, reduction="class_sum", per_query_fn=paper_lk,
              ref=None, ref_labels=None, ref_has_batch=False):
    emb = emb.double()
    own = ref is None or ref_has_batch
    if ref is None:
        ref, ref_labels = emb, labels
    ref = ref.detach().double() if ref is not emb else ref
    vals, groups = [], []
    for q in range(emb.shape[0]):
        cand = [j for j in range(ref.shape[0]) if not (own and j == q)]
        s = ref[cand] @ emb[q]
        rel = ref_labels[cand] == labels[q]
        if rel.sum() == 0:
            continue
        s_hat = s + margin * (~rel).double()
        vals.append(per_query_fn(s_hat, rel, k))
        groups.append(int(labels[q]))
    if reduction == "sum":
        return torch.stack(vals).sum()
    if reduction == "mean":
        return torch.stack(vals).mean()
    total = 0
    for c in dict.fromkeys(groups):
        members = [v for v, g in zip(vals, groups) if g == c]
        total = total + torch.stack(members).mean()
    return total


# --------------------------------------------------------------- (1) hand-computed cases


def test_paper_figure_2_case_n_pos_below_k():
    """k = 6, n+ = 4: l_k = 0.65 + 0.6 - (0.55 + 0.4) = 0.30."""
    items = [(0.8, False), (0.75, True), (0.7, False), (0.68, True), (0.65, False), (0.6, False),
             (0.55, True), (0.5, False), (0.4, True), (0.3, False)]
    for margin in (0.0, 0.1):
        q, y, ref, ref_y = one_query(items, margin)
        loss = TopKPrecisionLoss(k=6, margin=margin)(q, y, ref, ref_y)
        assert loss.item() == pytest.approx(0.30, abs=1e-6)


def test_paper_figure_3_case_n_pos_at_least_k():
    """k = 5, n+ = 6: l_k = (0.8 + 0.65) - (0.55 + 0.53) = 0.37."""
    items = [(0.9, True), (0.8, False), (0.7, True), (0.65, False), (0.6, True),
             (0.55, True), (0.53, True), (0.5, False), (0.4, True), (0.3, False)]
    for margin in (0.0, 0.2):
        q, y, ref, ref_y = one_query(items, margin)
        loss = TopKPrecisionLoss(k=5, margin=margin)(q, y, ref, ref_y)
        assert loss.item() == pytest.approx(0.37, abs=1e-6)


def test_margin_is_added_to_negatives():
    """A negative 0.05 below a positive is inside the 0.1 margin: l_1 = (s_n + 0.1) - s_p."""
    items = [(0.6, True), (0.55, False), (0.2, False)]
    q, y, ref, ref_y = one_query(items)  # margin 0 here: s = s_hat
    assert TopKPrecisionLoss(k=1, margin=0.0)(q, y, ref, ref_y).item() == 0.0
    got = TopKPrecisionLoss(k=1, margin=0.1)(q, y, ref, ref_y).item()
    assert got == pytest.approx(0.55 + 0.1 - 0.6, abs=1e-6)


# --------------------------------------------------------------------- (2) differential


@pytest.mark.parametrize("reduction", ["class_sum", "sum", "mean"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_matches_loop_reference_value_and_grad(reduction, k):
    y = uneven_labels(k)
    e = unit(len(y), 6, k).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    ours = TopKPrecisionLoss(k=k, margin=0.1, reduction=reduction)(e, y)
    ref = loop_loss(e2, y, k, 0.1, reduction)
    torch.testing.assert_close(ours.double(), ref, atol=1e-5, rtol=1e-5)
    ours.backward()
    ref.backward()
    assert e.grad.abs().max() > 0
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)


def test_official_hard_topk_matches_the_official_another_p_at_k():
    """METHOD 8 with tau = 0 (fixture topk_another_p_at_k.json: losses/Another_P_at_K.py of
    BG2CRW/top_k_optimization, run outside the repository): its value and gradient are ours with
    official_hard_topk plus its decorrelation term 0.1 ||Cov(e) - I||_F (not in our loss)."""
    fx = official_fixture("topk_another_p_at_k")
    y = torch.cat([torch.full((n,), c) for c, n in enumerate(fx["class_sizes"])])  # contiguous classes
    e = unit(len(y), fx["embed_dim"], fx["seed"])
    assert input_digest(e) == fx["embeddings_sha256_16"] and fx["tau"] == 0
    e.requires_grad_()
    centred = e - e.mean(0)
    decorrelation = torch.linalg.matrix_norm(centred.T @ centred / len(y) - torch.eye(e.shape[1]))
    ours = TopKPrecisionLoss(k=fx["k"], margin=fx["margin"], official_hard_topk=True)(e, y) + 0.1 * decorrelation
    torch.testing.assert_close(ours.double(), torch.tensor(fx["loss"], dtype=torch.float64), atol=1e-6, rtol=1e-6)
    ours.backward()
    torch.testing.assert_close(e.grad.double(), torch.tensor(fx["grad_embeddings"], dtype=torch.float64),
                               atol=2e-6, rtol=1e-5)
    # the extra term makes a perfect case-1 ranking (n+ < k) non-zero
    items = [(0.9, True), (0.3, False), (0.2, False), (0.1, False)]
    q, yq, ref_e, ref_y = one_query(items)
    off = TopKPrecisionLoss(k=3, margin=0.0, official_hard_topk=True)
    assert off(q, yq, ref_e, ref_y).item() > 1e-3
    paper = TopKPrecisionLoss(k=3, margin=0.0)
    assert paper(q, yq, ref_e, ref_y).item() == pytest.approx(0.0, abs=1e-6)


def test_last_group_only_is_the_method_0_bug():
    """Groups in order of appearance A(n+=2), B(5), C(1), D(6), k = 5: only the last case-1
    group (C) and the last case-2 group (D) are kept."""
    sizes = {0: 3, 1: 6, 2: 2, 3: 7}
    y = torch.cat([torch.full((n,), c) for c, n in sizes.items()])
    e = unit(len(y), 6, 11).double()
    s = e @ e.T
    per_q = {}
    for q in range(len(y)):
        cand = [j for j in range(len(y)) if j != q]
        rel = y[cand] == y[q]
        per_q[q] = paper_lk(s[q, cand] + 0.1 * (~rel).double(), rel, 5)
    mean_of = lambda c: torch.stack([per_q[q] for q in range(len(y)) if y[q] == c]).mean()  # noqa: E731
    got = TopKPrecisionLoss(k=5, margin=0.1, last_group_only=True)(e.float(), y)
    assert got.item() == pytest.approx((mean_of(2) + mean_of(3)).item(), abs=1e-5)
    full = TopKPrecisionLoss(k=5, margin=0.1)(e.float(), y)
    assert full.item() == pytest.approx(sum(mean_of(c) for c in sizes).item(), abs=1e-5)


# ------------------------------------------------------------------------ (3) properties


def test_zero_when_top_k_are_positives_with_margin():
    y = uneven_labels(6)  # classes of 1..8: both cases for k = 5
    centers = torch.eye(16)[: int(y.max()) + 1]
    e = F.normalize(centers[y] + 0.01 * unit(len(y), 16, 6), dim=1)
    for k in (1, 3, 5):
        assert TopKPrecisionLoss(k=k, margin=0.1, reduction="sum")(e, y).item() == pytest.approx(0.0, abs=1e-6)
    # a negative j moved onto query q: positive loss
    q = int((y == 3).nonzero()[0, 0])
    j = int((y != 3).nonzero()[0, 0])
    e_bad = e.clone()
    e_bad[j] = e[q]
    assert TopKPrecisionLoss(k=5)(e_bad, y).item() > 0.5


def test_upper_bound_theorem_1_and_nonnegative():
    """l_k >= gamma * (l_Prec@k(s) - max(k - n+, 0)) (Theorem 1; case 2 analogue), l_k >= 0."""
    g = torch.Generator().manual_seed(0)
    n, gamma = 12, 0.1
    for _ in range(300):
        k = int(torch.randint(1, 8, (1,), generator=g))
        n_pos = int(torch.randint(1, n, (1,), generator=g))
        rel = torch.zeros(n, dtype=torch.bool)
        rel[torch.randperm(n, generator=g)[:n_pos]] = True
        s = torch.rand(n, generator=g, dtype=torch.float64)
        lk = topk_precision_per_query((s + gamma * (~rel).double())[None], rel[None], k)[0].item()
        prec_loss = int((~rel[torch.topk(s, k).indices]).sum())
        assert lk >= -1e-12
        assert lk >= gamma * (prec_loss - max(k - n_pos, 0)) - 1e-9


def test_gradient_direction_on_scores():
    """dL/ds <= 0 on positives (pulled into the top k), >= 0 on negatives (pushed out)."""
    n = 14
    ref = torch.eye(n)
    ref_y = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 1])
    pos = ref_y == 0
    g = torch.Generator().manual_seed(0)
    for k in (2, 5, 8):  # n+ = 5: both cases
        for _ in range(4):
            scores = (0.5 + 0.1 * torch.randn(1, n, generator=g)).requires_grad_()
            loss = TopKPrecisionLoss(k=k)(scores, torch.tensor([0]), ref, ref_y)
            (grad,) = torch.autograd.grad(loss, scores)
            assert (grad[0, pos] <= 0).all() and (grad[0, ~pos] >= 0).all()
            if loss.item() > 0:
                assert grad[0, pos].min() < 0 and grad[0, ~pos].max() > 0


@pytest.mark.parametrize("reduction", ["class_sum", "sum", "mean"])
def test_label_and_batch_order_invariance(reduction):
    y = uneven_labels(7)
    assert_order_and_label_invariant(TopKPrecisionLoss(reduction=reduction), unit(len(y), 8, 7), y, relabel=(7, 2))


def test_singletons_only_gives_zero_with_graph():
    assert_zero_with_graph(build("topk_precision"))


# ---------------------------------------------------------------------------- (4) ref set


def test_ref_set_starting_with_batch():
    y = uneven_labels(4)
    e = unit(len(y), 6, 4).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    mem, mem_y = unit(30, 6, 5), torch.randint(0, 8, (30,), generator=torch.Generator().manual_seed(2))
    ref = torch.cat([e.detach(), mem]).requires_grad_()
    ref_y = torch.cat([y, mem_y])
    own = torch.arange(len(y))  # the batch at the front of the reference set, as MemoryLoss says
    ours = build("topk_precision")(e, y, ref, ref_y, self_index=own)
    expect = loop_loss(e2, y, 5, 0.1, ref=ref, ref_labels=ref_y, ref_has_batch=True)
    torch.testing.assert_close(ours.double(), expect, atol=1e-5, rtol=1e-5)
    ours.backward()
    expect.backward()
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=1e-5, rtol=1e-4)
    assert ref.grad is None
    # detached batch as ref == in-batch value
    torch.testing.assert_close(build("topk_precision")(e, y, e.detach(), y, self_index=own),
                               build("topk_precision")(e, y))
    # a ref set without the batch
    other = build("topk_precision")(e, y, mem, mem_y)  # no self_index: the reference set holds no query
    torch.testing.assert_close(other.double(), loop_loss(e, y, 5, 0.1, ref=mem, ref_labels=mem_y),
                               atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- registry


def test_registry_and_validation():
    assert "topk_precision" in names()
    loss = build("topk_precision")
    assert (loss.k, loss.margin, loss.reduction, loss.last_group_only, loss.official_hard_topk) == (
        5, 0.1, "class_sum", False, False)
    for kw, word in [({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"margin": -0.1}, "margin"),
                     ({"reduction": "avg"}, "reduction")]:
        with pytest.raises(ValueError, match=word):
            build("topk_precision", **kw)
    with pytest.raises(TypeError, match="gamma"):
        build("topk_precision", gamma=0.1)
