"""Tests for rankrepro.losses.blackbox (RaMBO ranking, rambo_recall, rambo_map, blackbox_ap)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score

from rankrepro.losses import build, names
from rankrepro.losses.blackbox import BlackBoxAPLoss, RaMBOMapLoss, RaMBORecallLoss, blackbox_rank, exact_ranks

from lossutil import (assert_order_and_label_invariant, assert_score_gradient_signs, input_digest, official_fixture,
                      uneven_labels, unit)

LOSSES = ("rambo_recall", "rambo_map", "blackbox_ap")


def count_ranks(x):
    """Independent exact ranks: 1 + #{j: x_j > x_i} + #{j < i: x_j == x_i} (row-wise)."""
    gt = (x.unsqueeze(1) > x.unsqueeze(2)).sum(-1)
    n = x.shape[1]
    earlier_tie = ((x.unsqueeze(1) == x.unsqueeze(2)) & torch.ones(n, n, dtype=torch.bool).tril(-1)).sum(-1)
    return 1 + gt + earlier_tie


def score_rows(rows, ref_labels):
    """Identity trick: with ref = I, the query embeddings ARE the score rows."""
    s = torch.tensor(rows, dtype=torch.float32)
    return s, torch.eye(s.shape[1]), torch.as_tensor(ref_labels)


def finite_lambda_grad(y, lam, loss_of_ranks):
    """-(rk(y) - rk(y + lam * g)) / (n lam) with g = dL/d(normalised ranks), all computed here."""
    n = y.shape[1]
    R = (count_ranks(y).double() / n).requires_grad_()
    (g,) = torch.autograd.grad(loss_of_ranks(R), R)
    y_lam = y.double() + lam * g
    return -(count_ranks(y.double()) - count_ranks(y_lam)).double() / (n * lam)


def rank_plus(R, rel):
    """1 + number of positives with a smaller rank (exact)."""
    return (rel.unsqueeze(1) & (R.unsqueeze(1) <= R.unsqueeze(2))).sum(-1).double()


# ------------------------------------------------------------------------ ranking core


def test_exact_ranks_hand_computed():
    assert exact_ranks(torch.tensor([[0.3, 0.9, 0.1, 0.5]])).tolist() == [[3, 1, 4, 2]]
    assert exact_ranks(torch.tensor([[0.5, 0.7, 0.5, 0.5]])).tolist() == [[2, 1, 3, 4]]  # ties: index order
    x = torch.randn(5, 17, generator=torch.Generator().manual_seed(0))
    assert torch.equal(exact_ranks(x), count_ranks(x))


@pytest.mark.parametrize("lam", [0.1, 1.0, 4.0, 20.0])
def test_blackbox_rank_backward_is_the_finite_lambda_interpolation(lam):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 11, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(3, 11, generator=g, dtype=torch.float64)
    ranks = blackbox_rank(x, lam)
    torch.testing.assert_close(ranks, count_ranks(x.detach()).double() / 11)
    (ranks * w).sum().backward()
    expected = -(count_ranks(x.detach()) - count_ranks(x.detach() + lam * w)).double() / (11 * lam)
    torch.testing.assert_close(x.grad, expected)
    assert x.grad.abs().max() > 0


def test_blackbox_rank_is_the_official_true_ranker():
    """The official TrueRanker's normalised ranks and gradients (fixture blackbox_true_ranker.json:
    blackbox_backprop/ranking.py of martius-lab/blackbox-backprop, run outside the repository)."""
    fx = official_fixture("blackbox_true_ranker")
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(3, 11, generator=g, dtype=torch.float64)
    w = torch.randn(3, 11, generator=g, dtype=torch.float64)
    assert (input_digest(x0), input_digest(w)) == (fx["x_sha256_16"], fx["w_sha256_16"])
    assert [c["lambda_val"] for c in fx["cases"]] == [0.1, 1.0, 4.0, 20.0]
    for ref in fx["cases"]:
        x = x0.clone().requires_grad_()
        ranks = blackbox_rank(x, ref["lambda_val"])
        (ranks * w).sum().backward()
        # the official ranks are float32 and its step divides by lambda + 1e-8
        torch.testing.assert_close(ranks.float(), torch.tensor(ref["ranks"]), atol=0, rtol=0)
        torch.testing.assert_close(x.grad, torch.tensor(ref["grad_x"], dtype=torch.float64), atol=1e-6, rtol=1e-6)
        assert x.grad.abs().max() > 0


# ------------------------------------------------------------------------- rambo_recall

ROW = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
ROW_NEG = [0, 1, 0, 1, 1, 0]  # 0 = the query's label: positives at 0.9, 0.7, 0.4


@pytest.mark.parametrize("weight_fn", ["log", "loglog"])
def test_recall_hand_computed_and_margin(weight_fn):
    q, ref, ref_y = score_rows([ROW], ROW_NEG)
    w = (lambda r: math.log1p(r)) if weight_fn == "log" else (lambda r: math.log1p(math.log1p(r)))
    loss = RaMBORecallLoss(margin=0.0, weight_fn=weight_fn)
    # negatives before each positive: 0, 1, 3
    assert loss(q, torch.tensor([0]), ref, ref_y).item() == pytest.approx((w(0) + w(1) + w(3)) / 3, abs=1e-6)
    # margin 0.25: positives -0.125, negatives +0.125 -> .775 .925 .575 .725 .625 .275: r = 1, 3, 3
    loss_m = RaMBORecallLoss(margin=0.25, weight_fn=weight_fn)
    assert loss_m(q, torch.tensor([0]), ref, ref_y).item() == pytest.approx((w(1) + w(3) + w(3)) / 3, abs=1e-6)
    # official length bug: r scaled by rows / row length = 1 / 6
    rows = RaMBORecallLoss(margin=0.0, weight_fn=weight_fn, length="rows")
    expect = (w(0) + w(1 / 6) + w(3 / 6)) / 3
    assert rows(q, torch.tensor([0]), ref, ref_y).item() == pytest.approx(expect, abs=1e-6)


def test_recall_reductions():
    """pairs: sum over all pairs / #pairs (official); queries: mean of per-query means."""
    q, ref, ref_y = score_rows([ROW, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], ROW_NEG)
    labels = torch.tensor([0, 1])  # query 1's positives: 0.2, 0.4, 0.5 (label 1)
    # query 0: r = 0, 1, 3; query 1 (positives 0.5, 0.4, 0.2; negatives 0.6, 0.3, 0.1): r = 1, 1, 2
    w = [math.log1p(r) for r in (0, 1, 3)], [math.log1p(r) for r in (1, 1, 2)]
    pairs = RaMBORecallLoss(margin=0.0, weight_fn="log")(q, labels, ref, ref_y)
    queries = RaMBORecallLoss(margin=0.0, weight_fn="log", reduction="queries")(
        q, labels, ref, ref_y)
    assert pairs.item() == pytest.approx(sum(w[0] + w[1]) / 6, abs=1e-6)
    assert queries.item() == pytest.approx((sum(w[0]) / 3 + sum(w[1]) / 3) / 2, abs=1e-6)
    # unequal numbers of positives: the two differ
    ref_y2 = torch.tensor([0, 1, 0, 0, 1, 0])
    a = RaMBORecallLoss(margin=0.0)(q, labels, ref, ref_y2)
    b = RaMBORecallLoss(margin=0.0, reduction="queries")(q, labels, ref, ref_y2)
    assert abs(a.item() - b.item()) > 1e-3


@pytest.mark.parametrize("weight_fn", ["log", "loglog"])
@pytest.mark.parametrize("lam", [0.5, 4.0])
def test_recall_backward_matches_finite_lambda(weight_fn, lam):
    g = torch.Generator().manual_seed(2)
    n, margin = 16, 0.05
    s = 0.5 + 0.1 * torch.randn(3, n, generator=g)
    ref_y = torch.randint(0, 3, (n,), generator=g)
    labels = torch.tensor([0, 1, 2])
    rel = ref_y.unsqueeze(0) == labels.unsqueeze(1)
    y = s.double() - margin * (rel.double() - 0.5)
    wf = torch.log1p if weight_fn == "log" else (lambda r: torch.log1p(torch.log1p(r)))

    def loss_of_ranks(R):
        r = (R - rank_plus(R.detach(), rel) / n) * n
        return torch.where(rel, wf(r), torch.zeros_like(r)).sum() / rel.sum()

    expected = finite_lambda_grad(y, lam, loss_of_ranks)
    q = s.clone().requires_grad_()
    loss = RaMBORecallLoss(lambda_val=lam, margin=margin, weight_fn=weight_fn)
    out = loss(q, labels, torch.eye(n), ref_y)
    out.backward()
    assert out.item() == pytest.approx(loss_of_ranks(count_ranks(y).double() / n).item(), abs=1e-6)
    torch.testing.assert_close(q.grad.double(), expected, atol=1e-6, rtol=1e-5)
    assert q.grad.abs().max() > 0


# --------------------------------------------------------------- blackbox_ap / rambo_map


def sklearn_one_minus_map(emb, labels, include_query, ref=None, ref_labels=None, ref_has_batch=False):
    emb = emb.double()
    own = ref is None or ref_has_batch
    ref = emb if ref is None else ref.double()
    ref_labels = labels if ref_labels is None else ref_labels
    aps = []
    for q in range(emb.shape[0]):
        keep = torch.ones(ref.shape[0], dtype=torch.bool)
        if own and not include_query:
            keep[q] = False
        rel = (ref_labels == labels[q])[keep]
        if int(rel.sum()) - (1 if own and include_query else 0) == 0:
            continue
        aps.append(average_precision_score(rel.numpy(), (ref[keep] @ emb[q]).numpy()))
    return 1 - sum(aps) / len(aps)


@pytest.mark.parametrize("include_query", [True, False])
def test_blackbox_ap_equals_exact_one_minus_ap(include_query):
    for seed in range(3):
        y = uneven_labels(seed)
        e = unit(len(y), 8, seed)
        got = BlackBoxAPLoss(margin=0.0, include_query=include_query)(e, y).item()
        assert got == pytest.approx(sklearn_one_minus_map(e, y, include_query), abs=1e-5)
        got_map = RaMBOMapLoss(margin=0.0, interclass_coef=0.0, include_query=include_query)(e, y).item()
        assert got_map == pytest.approx(got, abs=1e-6)


def test_rambo_map_interclass_term_is_ap_of_all_pairs():
    """L_APC: AP of all (query, item) scores as one list. In-batch, s_qj == s_jq are exact
    ties; both sides rank them by (flattened) index, lower first."""
    y = uneven_labels(4)
    e = unit(len(y), 8, 4)
    s = e @ e.T
    keep = ~torch.eye(len(y), dtype=torch.bool)
    rel = (y.unsqueeze(0) == y.unsqueeze(1))[keep].unsqueeze(0)
    R = count_ranks(s[keep].unsqueeze(0)).double()
    apc = (torch.where(rel, rank_plus(R, rel) / R, torch.zeros_like(R)).sum() / rel.sum()).item()
    got = RaMBOMapLoss(margin=0.0, interclass_coef=1.0)(e, y).item()
    assert got == pytest.approx(1 - apc, abs=1e-5)
    mixed = RaMBOMapLoss(margin=0.0, interclass_coef=1 / 3)(e.float(), y).item()
    assert mixed == pytest.approx(2 / 3 * sklearn_one_minus_map(e, y, False) + 1 / 3 * (1 - apc), abs=1e-5)


def ap_loss_of_ranks(rel):
    def f(R):
        rp = rank_plus(R.detach(), rel)
        prec = torch.where(rel, rp / (R * R.shape[1]), torch.zeros_like(R))
        return 1 - (prec.sum(1) / rel.sum(1)).mean()
    return f


@pytest.mark.parametrize("lam", [0.5, 4.0])
@pytest.mark.parametrize("margin", [0.0, 0.04])
def test_blackbox_ap_backward_matches_finite_lambda(lam, margin):
    g = torch.Generator().manual_seed(3)
    n = 15
    s = 0.5 + 0.1 * torch.randn(4, n, generator=g)
    ref_y = torch.randint(0, 3, (n,), generator=g)
    labels = torch.tensor([0, 1, 2, 0])
    rel = ref_y.unsqueeze(0) == labels.unsqueeze(1)
    y = s.double() - margin * (rel.double() - 0.5)  # deterministic margin (eq. 14)
    expected = finite_lambda_grad(y, lam, ap_loss_of_ranks(rel))
    for cls in (BlackBoxAPLoss, lambda **kw: RaMBOMapLoss(interclass_coef=0.0, **kw)):
        q = s.clone().requires_grad_()
        loss = cls(lambda_val=lam, margin=margin, random_margin=False)
        out = loss(q, labels, torch.eye(n), ref_y)
        out.backward()
        assert out.item() == pytest.approx(ap_loss_of_ranks(rel)(count_ranks(y).double() / n).item(), abs=1e-6)
        torch.testing.assert_close(q.grad.double(), expected, atol=1e-6, rtol=1e-5)
        assert q.grad.abs().max() > 0


def test_random_margin_draws_abs_gaussian_per_entry():
    g = torch.Generator().manual_seed(4)
    n = 12
    s = 0.5 + 0.05 * torch.randn(3, n, generator=g)
    ref_y = torch.randint(0, 2, (n,), generator=g)
    labels = torch.tensor([0, 1, 0])
    rel = ref_y.unsqueeze(0) == labels.unsqueeze(1)
    torch.manual_seed(123)
    got = BlackBoxAPLoss(margin=0.3)(s, labels, torch.eye(n), ref_y)
    torch.manual_seed(123)
    y = s - 0.3 * torch.randn(3, n).abs() * (rel.float() - 0.5)
    expect = ap_loss_of_ranks(rel)(count_ranks(y.double()).double() / n)
    assert got.item() == pytest.approx(expect.item(), abs=1e-6)
    deterministic = BlackBoxAPLoss(margin=0.3, random_margin=False)
    y_det = s - 0.15 * (2 * rel.float() - 1)
    assert deterministic(s, labels, torch.eye(n), ref_y).item() == pytest.approx(
        ap_loss_of_ranks(rel)(count_ranks(y_det.double()).double() / n).item(), abs=1e-6)


# ----------------------------------------------------------------------- all three losses


@pytest.mark.parametrize("name", LOSSES)
def test_gradient_direction_on_scores(name):
    assert_score_gradient_signs(build(name), rows=2, tol=0.0, reseed=True)


@pytest.mark.parametrize("name", LOSSES)
def test_zero_gradient_and_minimum_at_perfect_ranking_with_margin(name):
    y = torch.arange(6).repeat_interleave(4)
    e = F.normalize(torch.eye(16)[y] + 0.01 * unit(len(y), 16, 1), dim=1).requires_grad_()
    out = build(name, lambda_val=0.01)(e, y)
    out.backward()
    assert out.item() == pytest.approx(0.0, abs=1e-6)
    assert e.grad.abs().max() == 0  # a small lambda cannot move any positive past a negative


@pytest.mark.parametrize("name", LOSSES)
def test_label_and_batch_order_invariance(name):
    y = uneven_labels(7)
    loss = build(name, margin=0.02, **({} if name == "rambo_recall" else {"random_margin": False}))
    assert_order_and_label_invariant(loss, unit(len(y), 8, 7), y, relabel=(5, 1))


@pytest.mark.parametrize("name", LOSSES)
def test_ref_set_starting_with_batch(name):
    y = uneven_labels(3)
    e = unit(len(y), 6, 3).requires_grad_()
    kw = {"margin": 0.0} if name == "rambo_recall" else {"margin": 0.0, "random_margin": False}
    loss = build(name, **kw)
    # ref = the detached batch (own entry q, as MemoryLoss says): same value as in-batch, no gradient into the ref
    ref = e.detach().clone().requires_grad_()
    own = torch.arange(len(y))
    torch.testing.assert_close(loss(e, y, ref, y, self_index=own), loss(e, y), atol=1e-6, rtol=1e-6)
    out = loss(e, y, ref, y, self_index=own)
    out.backward()
    assert ref.grad is None and e.grad.abs().max() > 0
    # with a memory after the batch: own entry (index q) removed / kept by index
    mem, mem_y = unit(25, 6, 5), torch.randint(0, 7, (25,), generator=torch.Generator().manual_seed(2))
    full, full_y = torch.cat([e.detach(), mem]), torch.cat([y, mem_y])
    if name != "rambo_recall":
        iq = name == "blackbox_ap"
        got = build(name, **kw, **({"interclass_coef": 0.0} if name == "rambo_map" else {}))(e, y, full, full_y,
                                                                                            self_index=own)
        expect = sklearn_one_minus_map(e.detach(), y, iq, full, full_y, ref_has_batch=True)
        assert got.item() == pytest.approx(expect, abs=1e-5)
    with pytest.raises(ValueError, match="self_index"):
        loss(e, y, mem, mem_y, self_index=own)  # the memory does not start with the batch


def test_recall_ref_set_removes_own_entry():
    y = uneven_labels(5)
    e = unit(len(y), 6, 5)
    mem, mem_y = unit(20, 6, 6), torch.randint(0, 7, (20,), generator=torch.Generator().manual_seed(3))
    full, full_y = torch.cat([e, mem]), torch.cat([y, mem_y])
    got = RaMBORecallLoss(margin=0.0, weight_fn="log")(e, y, full, full_y, self_index=torch.arange(len(y))).item()
    num, den = 0.0, 0
    for q in range(len(y)):
        keep = torch.ones(len(full_y), dtype=torch.bool)
        keep[q] = False
        s, rel = full[keep] @ e[q], full_y[keep] == y[q]
        for i in rel.nonzero().flatten():
            num += math.log1p(int(((s > s[i]) & ~rel).sum()))
            den += 1
    assert got == pytest.approx(num / den, abs=1e-5)


# ------------------------------------------------ rambo_recall batch_memory (official score rows)


def official_rows(e, y):
    """The in-batch score rows of the official RecallLoss's caller with the self-similarity removed:
    [B, B-1] cosine scores and 0/1 relevance (the paper: "the similarity of each element with
    itself is disregarded")."""
    keep = ~torch.eye(len(y), dtype=torch.bool)
    return (e @ e.T)[keep].view(len(y), -1), (y[:, None] == y[None, :])[keep].view(len(y), -1).double()


@pytest.mark.parametrize("weight_fn", ["log", "loglog"])
def test_batch_memory_equals_the_official_batch_memory_recall_loss(weight_fn):
    """The official BatchMemoryRecallLoss's values and gradients (fixture blackbox_batch_memory_recall.json:
    blackbox_backprop/recall.py of martius-lab/blackbox-backprop, run outside the repository on the rows of
    ``official_rows``) over six batches: with batch_memory 3 (the memory filling and rolling over) and with
    batch_memory 0 (the official RecallLoss on the batch alone)."""
    y = torch.arange(4).repeat_interleave(3)
    cases = [c for c in official_fixture("blackbox_batch_memory_recall")["cases"] if c["weight_fn"] == weight_fn]
    assert sorted(c["batch_memory"] for c in cases) == [0, 3]
    for case in cases:
        loss = RaMBORecallLoss(lambda_val=case["lambda_val"], margin=case["margin"], weight_fn=weight_fn,
                               length="rows", batch_memory=case["batch_memory"])
        for ref in case["steps"]:
            e = unit(len(y), 5, ref["seed"]).requires_grad_()
            assert input_digest(e) == ref["embeddings_sha256_16"]
            out = loss(e, y)
            out.backward()
            torch.testing.assert_close(out, torch.tensor(ref["loss"]), atol=1e-6, rtol=1e-5)
            # one rank more or less moves a gradient entry by ~1e-2
            torch.testing.assert_close(e.grad, torch.tensor(ref["grad_embeddings"]), atol=1e-6, rtol=1e-4)
            assert e.grad.abs().max() > 0


def test_batch_memory_hand_computed():
    """Two batches of 3 on a line (1-d unit vectors +-1), labels [0, 0, 1], margin 0, log weight.

    Batch 1 e = [1, 1, -1]: rows without self: q0 [1 (pos), -1 (neg)]: r = 0; q1 the same; q2 has no
    positive. Batch 2 e = [1, -1, 1]: q0 [-1 (pos), 1 (neg)]: r = 1; q1 [-1 (pos), -1 (neg)]: a tie, the
    lower index (the positive) first: r = 0. Second call with batch_memory 1, length "rows": 6 rows of
    length 2, so r x 3: pairs (q0, 1 x 3), (q1, 0) and the stored (0), (0): log(1 + 3) / 4."""
    y = torch.tensor([0, 0, 1])
    first, second = torch.tensor([[1.0], [1.0], [-1.0]]), torch.tensor([[1.0], [-1.0], [1.0]])
    loss = RaMBORecallLoss(margin=0.0, weight_fn="log", length="rows", batch_memory=1)
    assert loss(first, y).item() == pytest.approx(0.0)
    assert loss(second, y).item() == pytest.approx(math.log(4.0) / 4, abs=1e-6)
    ref = RaMBORecallLoss(margin=0.0, weight_fn="log", length="ref", batch_memory=1)
    ref(first, y)
    assert ref(second, y).item() == pytest.approx(math.log(2.0) / 4, abs=1e-6)  # no x 3: only the denominator


def test_batch_memory_holds_the_last_k_batches_rows_detached():
    y = torch.arange(3).repeat_interleave(2)
    loss = RaMBORecallLoss(batch_memory=3)
    batches = [unit(len(y), 4, seed).requires_grad_() for seed in range(5)]
    for e in batches:
        loss(e, y).backward()
    assert len(loss.stored) == 3
    for (s, rel, valid), e in zip(loss.stored, batches[-3:]):  # oldest first
        rows, relevance = official_rows(e.detach(), y)
        torch.testing.assert_close(s, rows)
        assert torch.equal(rel, relevance.bool()) and bool(valid.all()) and not s.requires_grad
    with torch.no_grad():  # evaluation stores nothing
        loss(unit(len(y), 4, 9), y)
    torch.testing.assert_close(loss.stored[-1][0], official_rows(batches[-1].detach(), y)[0])
    clone = RaMBORecallLoss(batch_memory=3)
    clone.load_state_dict(loss.state_dict())  # a checkpoint resumes the rows
    e = unit(len(y), 4, 11)
    assert clone(e, y).item() == pytest.approx(loss(e, y).item())


def test_batch_memory_gradient_flows_through_the_current_batch_only():
    """length "ref": the stored rows are constants and the current pairs are 1/3 of all pairs (two
    stored batches), so the rank gradient reaching the blackbox is 1/3 of the memory-free one: the
    gradient is 1/3 of the memory-free loss's at lambda / 3 (the interpolation -(rk(y) - rk(y + lambda
    g)) / lambda sees lambda g / 3)."""
    y = torch.arange(4).repeat_interleave(3)
    loss, plain = RaMBORecallLoss(length="ref", batch_memory=2), RaMBORecallLoss(lambda_val=4.0 / 3, length="ref")
    for seed in range(2):
        loss(unit(len(y), 5, seed), y)
    e1, e2 = unit(len(y), 5, 7).requires_grad_(), unit(len(y), 5, 7).requires_grad_()
    loss(e1, y).backward()
    plain(e2, y).backward()
    torch.testing.assert_close(e1.grad, e2.grad / 3)
    assert e1.grad.abs().max() > 0 and all(not s.requires_grad for s, _, _ in loss.stored)


def test_batch_memory_drops_rows_of_another_length_and_refuses_a_reference_set():
    loss = RaMBORecallLoss(batch_memory=2)
    loss(unit(6, 4, 0), torch.arange(3).repeat_interleave(2))
    loss(unit(4, 4, 1), torch.arange(2).repeat_interleave(2))  # a shorter batch: the 6-row memory goes
    assert [s.shape for s, _, _ in loss.stored] == [torch.Size([4, 3])]
    e, y = unit(4, 4, 2), torch.arange(2).repeat_interleave(2)
    with pytest.raises(ValueError, match="takes no reference set"):
        loss(e, y, e, y, self_index=torch.arange(4))
    with pytest.raises(ValueError, match="batch_memory"):
        build("rambo_recall", batch_memory=-1)


@pytest.mark.parametrize("name", LOSSES)
def test_autocast_and_no_valid_query(name):
    y = uneven_labels(9)
    e = unit(len(y), 8, 9)
    loss = build(name, **({} if name == "rambo_recall" else {"random_margin": False}))
    base = loss(e, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = loss(e, y)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, base)
    e = e.requires_grad_()
    zero = loss(e, torch.arange(len(y)))
    assert zero.item() == 0.0 and zero.requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    y = torch.arange(96).repeat_interleave(4)
    e = unit(384, 128, 0)
    for name in LOSSES:
        loss = build(name, **({} if name == "rambo_recall" else {"random_margin": False}))
        torch.testing.assert_close(loss(e.cuda(), y.cuda()).cpu(), loss(e, y), atol=1e-5, rtol=1e-5)


def test_registry_defaults_and_validation():
    for name in LOSSES:
        assert name in names()
    r = build("rambo_recall")
    assert (r.lambda_val, r.margin, r.weight_fn, r.reduction, r.length, r.include_query, r.batch_memory) == (
        4.0, 0.02, "loglog", "pairs", "ref", False, 0)
    m = build("rambo_map")
    assert (m.lambda_val, m.margin, m.random_margin, m.include_query) == (4.0, 0.02, True, False)
    assert m.interclass_coef == pytest.approx(1 / 3)
    b = build("blackbox_ap")
    assert (b.lambda_val, b.margin, b.random_margin, b.include_query) == (4.0, 0.02, True, True)
    for name, kw, word in [("rambo_recall", {"lambda_val": 0}, "lambda_val"),
                           ("rambo_recall", {"weight_fn": "sqrt"}, "weight_fn"),
                           ("rambo_recall", {"reduction": "x"}, "reduction"),
                           ("rambo_recall", {"length": "cols"}, "length"),
                           ("rambo_map", {"interclass_coef": 2}, "interclass_coef"),
                           ("blackbox_ap", {"margin": -1}, "margin")]:
        with pytest.raises(ValueError, match=word):
            build(name, **kw)
    with pytest.raises(TypeError, match="lambda_val"):
        build("blackbox_ap", lam=4)
