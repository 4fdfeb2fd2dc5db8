"""Tests for rankrepro.losses.rank: the differentiable-rank core and SupRank's H^-."""

from __future__ import annotations

import math

import pytest
import torch

from rankrepro.losses.rank import ap_head, ideal_dcg, prepare_lists, relevant_ranks
from rankrepro.losses.relevance import happier_relevance, shared_levels
from rankrepro.losses.steps import HeavisideStep, SigmoidStep, SupRankStep, sup_heaviside


from lossutil import h_minus as h_minus_ref  # noqa: E402  (paper eq. 4, the one reference)
from lossutil import sig  # noqa: E402


# ----------------------------------------------------------- reference: paper eq. 3 / 4


def loop_ranks(scores, level, rel, list_mask, kind, **kw):
    """{(q, i): (rank, rank_plus)} with explicit loops over queries, items and pairs."""
    out = {}
    Q, N = scores.shape
    for q in range(Q):
        items = [j for j in range(N) if list_mask[q, j]]
        for i in items:
            if level[q, i] <= 0:
                continue
            rank, rank_plus = 1.0, rel[q, i]
            for j in items:
                if j == i:
                    continue
                t = scores[q, j] - scores[q, i]
                if kind == "heaviside":
                    a = r = (t >= 0).to(t.dtype)
                elif kind == "sigmoid":
                    a = r = torch.sigmoid(t / kw["tau"])
                else:  # suprank
                    a = h_minus_ref(t, **kw) if level[q, j] < level[q, i] else (t >= 0).to(t.dtype)
                    r = (t >= 0).to(t.dtype)
                rank = rank + a
                rank_plus = rank_plus + r * min(rel[q, i], rel[q, j])
            out[(q, i)] = (rank, rank_plus)
    return out


def make_step(kind, **kw):
    if kind == "heaviside":
        return HeavisideStep()
    if kind == "sigmoid":
        return SigmoidStep(kw["tau"])
    return SupRankStep(**{("step_fix" if k == "fix" else k): v for k, v in kw.items()})


def random_case(seed, Q=6, N=15, hierarchical=False, drop_self=False):
    g = torch.Generator().manual_seed(seed)
    scores = (torch.rand(Q, N, generator=g, dtype=torch.float64) * 2 - 1) * 0.3
    if hierarchical:
        level = torch.randint(0, 3, (Q, N), generator=g)
        rel = happier_relevance(level, 2, 1.0).double()
    else:
        level = (torch.rand(Q, N, generator=g) < 0.35).long()
        level[:, 0] = 1  # every query has a relevant item
        rel = level.double()
    mask = torch.ones(Q, N, dtype=torch.bool)
    if drop_self:
        mask[torch.arange(Q), torch.arange(Q) + 1] = False
        rel = rel * mask
    return scores, level, rel, mask


STEPS = [
    ("heaviside", {}),
    ("sigmoid", {"tau": 0.05}),
    ("suprank", {"tau": 0.01, "rho": 100.0, "delta": 0.05, "start": 0.5, "offset": 1.44, "fix": "post_pr13"}),
    ("suprank", {"tau": 0.02, "rho": 10.0, "delta": 0.05, "start": 0.5, "offset": None, "fix": "pre_pr13"}),
    ("suprank", {"tau": 0.01, "rho": 100.0, "delta": 0.05, "start": 0.0, "offset": 1.0, "fix": "post_pr13"}),
]


@pytest.mark.parametrize("kind,kw", STEPS)
@pytest.mark.parametrize("hierarchical", [False, True])
@pytest.mark.parametrize("drop_self,chunk", [(False, None), (True, 1), (False, 4)])
def test_core_matches_loop_values_and_grads(kind, kw, hierarchical, drop_self, chunk):
    seed = hash((kind, hierarchical, drop_self)) % 1000
    scores, level, rel, mask = random_case(seed, hierarchical=hierarchical, drop_self=drop_self)
    s1 = scores.clone().requires_grad_()
    s2 = scores.clone().requires_grad_()
    r = relevant_ranks(s1, level, make_step(kind, **kw), rel=rel, list_mask=mask, chunk_size=chunk)
    ref = loop_ranks(s2, level, rel, mask, kind, **kw)
    g = torch.Generator().manual_seed(seed)
    w1 = torch.rand(r.rank.shape, generator=g, dtype=torch.float64)
    w2 = torch.rand(r.rank.shape, generator=g, dtype=torch.float64)
    ours_total, ref_total, seen = 0.0, 0.0, set()
    for q in range(scores.shape[0]):
        for p in range(r.rank.shape[1]):
            if not r.valid[q, p]:
                assert r.rank[q, p] == 1 and r.rank_plus[q, p] == 0
                continue
            i = int(r.index[q, p])
            rank, rank_plus = ref[(q, i)]
            seen.add((q, i))
            torch.testing.assert_close(r.rank[q, p], torch.as_tensor(rank, dtype=torch.float64))
            torch.testing.assert_close(r.rank_plus[q, p], torch.as_tensor(rank_plus, dtype=torch.float64))
            assert r.level[q, p] == level[q, i] and r.rel[q, p] == rel[q, i]
            ours_total = ours_total + w1[q, p] * r.rank[q, p] + w2[q, p] * r.rank_plus[q, p]
            ref_total = ref_total + w1[q, p] * rank + w2[q, p] * rank_plus
    assert seen == set(ref)  # every relevant item of every query, nothing else
    if kind == "heaviside":
        assert not r.rank.requires_grad or torch.autograd.grad(ours_total, s1)[0].abs().max() == 0
        return
    (g1,) = torch.autograd.grad(ours_total, s1)
    (g2,) = torch.autograd.grad(ref_total, s2)
    assert g1.abs().max() > 0
    torch.testing.assert_close(g1, g2, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("step", [SigmoidStep(0.05), SupRankStep(tau=0.05, rho=3.0, delta=0.05)])
def test_gradcheck(step):
    scores, level, rel, mask = random_case(3, Q=3, N=8, hierarchical=True, drop_self=True)

    def f(s):
        r = relevant_ranks(s, level, step, rel=rel, list_mask=mask, chunk_size=2)
        return r.rank, r.rank_plus

    assert torch.autograd.gradcheck(f, (scores.clone().requires_grad_(),), eps=1e-7, atol=1e-5)


def test_chunking_is_exact_and_binary_rank_plus_counts_positives():
    scores, level, rel, mask = random_case(5, Q=9, N=20)
    step = SupRankStep()
    full = relevant_ranks(scores, level, step, list_mask=mask)
    for chunk, max_el in [(1, None), (2, None), (None, 50)]:
        kw = {"chunk_size": chunk} if chunk else {"max_elements": max_el}
        part = relevant_ranks(scores, level, step, list_mask=mask, **kw)
        torch.testing.assert_close(part.rank, full.rank)
        torch.testing.assert_close(part.rank_plus, full.rank_plus)
    # binary: rank+ = 1 + number of positives ranked at or above (ties count as ahead)
    for q in range(9):
        pos = level[q].nonzero().flatten()
        for p in range(full.rank.shape[1]):
            if full.valid[q, p]:
                s_i = scores[q, full.index[q, p]]
                assert full.rank_plus[q, p] == (scores[q, pos] >= s_i).sum()


def test_ties_count_as_ranked_before():
    scores = torch.tensor([[0.5, 0.5, 0.5, 0.1]])
    level = torch.tensor([[1, 1, 0, 0]])
    r = relevant_ranks(scores, level, HeavisideStep())
    assert r.rank[r.valid].tolist() == [3.0, 3.0]  # both positives and the negative tie: H(0) = 1
    assert r.rank_plus[r.valid].tolist() == [2.0, 2.0]


# ------------------------------------------------------------------------------ H^- (eq. 4)


@pytest.mark.parametrize(
    "t,fix,offset,expected",
    [
        (-0.01, "post_pr13", 1.44, sig(-1.0)),
        (0.0, "post_pr13", 1.44, 0.5),  # t = 0 takes the first branch
        (0.01, "post_pr13", 1.44, 0.5 + sig(1.0)),
        (0.05, "post_pr13", 1.44, 0.5 + sig(5.0)),
        (0.06, "post_pr13", 1.44, 100 * 0.01 + 1.44),
        (0.06, "pre_pr13", 1.44, 100 * 0.06 + 1.44),
        (0.06, "post_pr13", None, 100 * 0.01 + sig(5.0) + 0.5),
        (0.30, "post_pr13", 1.44, 100 * 0.25 + 1.44),
    ],
)
def test_sup_heaviside_hand_values(t, fix, offset, expected):
    v = sup_heaviside(torch.tensor(t, dtype=torch.float64), offset=offset, step_fix=fix)
    assert v.item() == pytest.approx(expected, abs=1e-12)


def test_h_minus_upper_bounds_heaviside_only_with_start_half():
    t = torch.linspace(-0.3, 0.3, 6001, dtype=torch.float64)
    t = t[t != 0]  # H(0) = 1 > H^-(0) = 0.5: exact ties are the one exception
    h = (t >= 0).double()
    for offset in (1.44, None, 1.0):
        for fix in ("post_pr13", "pre_pr13"):
            assert (sup_heaviside(t, start=0.5, offset=offset, step_fix=fix) >= h).all()
    # iNat configs (start 0, offset 1): H^- = sigma(t/tau) < 1 = H on (0, delta]
    inat = sup_heaviside(t, start=0.0, offset=1.0)
    bad = (inat < h)
    assert bad.any() and (t[bad] > 0).all() and (t[bad] <= 0.05).all()
    assert (inat[t > 0.05] >= 1.0).all()


def test_sup_step_derivative_matches_autograd():
    step = SupRankStep(tau=0.01, rho=100.0, delta=0.05, offset=1.44)
    t = torch.linspace(-0.2, 0.2, 401, dtype=torch.float64)
    t = t[(t - 0.05).abs() > 1e-9].requires_grad_()  # not exactly at the kink
    lower = torch.ones_like(t, dtype=torch.bool)
    (auto,) = torch.autograd.grad(step.value(t, lower).sum(), t)
    torch.testing.assert_close(step.deriv(t.detach(), lower), auto)
    assert (step.deriv(t.detach(), ~lower) == 0).all()  # exact H elsewhere: no gradient
    assert step.deriv(torch.tensor([0.2], dtype=torch.float64), torch.tensor([True])).item() == 100.0


@pytest.mark.parametrize("kw,name", [({"tau": 0}, "tau"), ({"rho": -1}, "rho"), ({"delta": -0.1}, "delta"),
                                     ({"step_fix": "pr13"}, "step_fix")])
def test_step_validation(kw, name):
    with pytest.raises(ValueError, match=name):
        SupRankStep(**kw)
    with pytest.raises(ValueError, match="tau"):
        SigmoidStep(0.0)


# ----------------------------------------------------------------- relevances and heads


def test_happier_relevance_hand_computed():
    levels = torch.tensor([[2, 2, 1, 1, 1, 0]])
    rel = happier_relevance(levels, 2, alpha=1.0)
    torch.testing.assert_close(rel, torch.tensor([[0.5, 0.5, 1 / 6, 1 / 6, 1 / 6, 0.0]]))
    rel = happier_relevance(levels, 2, alpha=2.0)  # weights (l/L)^2 = 0, 1/4, 1
    torch.testing.assert_close(rel, torch.tensor([[0.5, 0.5, 1 / 12, 1 / 12, 1 / 12, 0.0]]))
    # a masked item leaves the counts
    mask = torch.tensor([[True, False, True, True, True, True]])
    torch.testing.assert_close(happier_relevance(levels, 2, 1.0, mask),
                               torch.tensor([[1.0, 0.0, 1 / 6, 1 / 6, 1 / 6, 0.0]]))
    # paper example (Sec. B-A): L = 3, total weights 1, 2/3, 1/3 per level
    levels = torch.tensor([[3, 2, 1, 0]])
    torch.testing.assert_close(happier_relevance(levels, 3), torch.tensor([[1.0, 2 / 3, 1 / 3, 0.0]]))


def test_hap_paper_figure_14_example():
    """Fig. 14 (Sec. B-B): relevances 1, 2/3, 1/3 (one item each); ranking: a level-1 item
    first, then the level-3, level-2 items, and a negative.  H-AP by eq. 19."""
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6]])
    levels = torch.tensor([[1, 3, 2, 0]])
    rel = happier_relevance(levels, 3)
    r = relevant_ranks(scores, levels, HeavisideStep(), rel=rel)
    hap = ap_head(r, rel.sum(1)).item()
    # H-rank+: item(rel 1/3)=1/3 at rank 1; item(rel 1)=1+1/3 at rank 2; item(2/3)=2/3+1/3+2/3 at 3
    expected = (1 / 3 / 1 + (4 / 3) / 2 + (5 / 3) / 3) / 2.0
    assert hap == pytest.approx(expected)


def test_ap_head_and_ideal_dcg_hand_computed():
    scores = torch.tensor([[0.9, 0.5, 0.1]])
    level = torch.tensor([[1, 0, 1]])
    r = relevant_ranks(scores, level, HeavisideStep())
    assert ap_head(r, level.sum(1).float()).item() == pytest.approx((1 + 2 / 3) / 2)
    gains = torch.tensor([[1.0, 3.0, 0.0, 1.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert ideal_dcg(gains, mask).item() == pytest.approx(3.0 + 1.0 / math.log2(3))


def test_shared_levels_and_prepare_lists():
    y = torch.tensor([[0, 0], [1, 0], [2, 1]])
    yr = torch.tensor([[0, 0], [5, 0], [2, 1], [3, 1]])
    assert shared_levels(y, yr).tolist() == [[2, 1, 0, 0], [1, 1, 0, 0], [0, 0, 2, 1]]
    e = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    # no ref: the batch is the list; the query's own column is q
    *_, lst, self_col = prepare_lists(e, y, None, None, include_query=False)
    assert self_col.tolist() == [0, 1, 2] and not lst.diagonal().any() and lst.sum() == 6
    # a ref set that starts with the batch (MemoryLoss): own entry given by index
    ref = torch.cat([e, torch.randn(2, 4)])
    yref = torch.cat([y, torch.tensor([[7, 0], [8, 1]])])
    own = torch.arange(3)
    *_, lst, self_col = prepare_lists(e, y, ref, yref, include_query=False, self_index=own)
    assert self_col.tolist() == [0, 1, 2] and lst.sum() == 12
    *_, lst, self_col = prepare_lists(e, y, ref, yref, include_query=True, self_index=own)
    assert lst.all()
    # the same ref set without self_index holds no query: nothing removed
    *_, lst, self_col = prepare_lists(e, y, ref, yref, include_query=False)
    assert (self_col == -1).all() and lst.all()
    with pytest.raises(ValueError, match="self_index"):
        prepare_lists(e, y, ref, yref, True, self_index=torch.tensor([1, 0, 2]))  # labels differ
    # a foreign ref set: nothing removed
    *_, lst, self_col = prepare_lists(e, y, ref[1:], yref[1:], include_query=False)
    assert (self_col == -1).all() and lst.all()
    with pytest.raises(ValueError, match="together"):
        prepare_lists(e, y, ref, None, True)
    with pytest.raises(ValueError, match="levels"):
        shared_levels(y, yr[:, :1])


# ------------------------------------------------------------------------------ memory


def test_no_cubic_allocation_or_saved_tensor_at_b256():
    """Hierarchical B = 256 (a quarter of the batch relevant to each query, P = 64): no
    saved tensor and no single allocation reaches B^3 / 4 elements (one B x N x N tensor
    would be 4x that)."""
    from torch.profiler import ProfilerActivity, profile

    B = 256
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(B, B, generator=g).requires_grad_()
    y = torch.arange(B // 4).repeat_interleave(4)
    labels = torch.stack([y, y // 16], 1)
    level = shared_levels(labels, labels)
    rel = happier_relevance(level, 2)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            r = relevant_ranks(scores, level, SupRankStep(), rel=rel)
            loss = ap_head(r, rel.sum(1)).sum()
        loss.backward()
    assert r.rank.shape == (B, 64)
    assert saved and max(saved) < B**3 / 4
    biggest = max(ev.self_cpu_memory_usage for ev in prof.events())
    assert 0 < biggest < B**3 / 4 * 4  # bytes, float32
