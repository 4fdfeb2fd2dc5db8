r"""One differentiable-rank core for the ranking losses (SupRank paper, eq. 3).

For a query with retrieval list Omega (scores ``s_j``, levels ``l_j`` >= 0, relevances
``rel_j`` >= 0; ``l_j > 0`` <=> relevant) and each relevant item i::

    rank(i)  = 1 + sum_{j in Omega, j != i} A_ij(s_j - s_i)     (A_ij depends on l_j < l_i)
    rank+(i) = rel_i + sum_{j in Omega, j != i} R(s_j - s_i) * min(rel_i, rel_j)

(suprank.md §2.0; for binary labels rank+ = 1 + #positives ranked ahead, and with
hierarchical relevances it is the H-rank+ of eq. 18). The step surrogate is pluggable:

* :class:`HeavisideStep` -- exact H(t) = 1[t >= 0] everywhere (ties count as "ahead",
  ``torch.heaviside(t, 1)`` in the official code); no gradient. Gives the exact metrics.
* :class:`SigmoidStep` -- sigma(t / tau) on every pair, for rank and rank+ (Smooth-AP,
  Smooth-R@k, the sigmoid H-AP / NDCG baselines).
* :class:`SupRankStep` -- SupRank's H^- (eq. 4) on the pairs where j is *strictly less
  relevant* than i, the exact H on every other pair and in rank+, so the gradient only
  flows through rank^- (eq. 5):

  ========================  ==================================================
  t <= 0                    sigma(t / tau)
  0 < t <= delta            start + sigma(t / tau)
  t > delta                 rho * (t - delta) + offset   (``step_fix="post_pr13"``)
                            rho * t + offset             (``step_fix="pre_pr13"``)
  ========================  ==================================================

  with ``offset=None`` meaning sigma(delta / tau) + start (the paper's eq. 4 value,
  1.4933 at the defaults). ``post_pr13`` is the paper's eq. 4 and the SupRank/TPAMI
  code (ROADMAP PR #13, merged 2022-11-09); ``pre_pr13`` is the ROADMAP NeurIPS code the
  NeurIPS numbers were probably produced with. ``start >= 0.5`` and ``offset >= 1``
  make H^- >= H on t != 0, hence rank_s >= rank and every loss built on it an upper
  bound of the exact one. ``start=0`` (the iNat configs) breaks this on (0, delta].
  The official code clamps t / tau to [-50, 50] inside the sigmoid; this only changes
  values below e^-50 and is not reproduced.

Memory: only relevant items need a rank, so each query's relevant items are gathered
(padded to the largest count P) and a [b, P, N] difference tensor is built for a block
of b queries at a time, never B x N x N for all queries at once. ``max_elements`` bounds
the block's temporaries together: the SupRank step's forward or backward holds up to
``BLOCK_TEMPORARIES`` (8) [b, P, N] float tensors at once (the difference, masks, the
sigmoid and linear branches, their selection), so b * P * N <= max_elements / 8. The rank is a custom autograd function with the analytic derivative of the
step: the backward recomputes each block from the [Q, N] scores, so nothing of size
[Q, P, N] is kept for backward either (and it is faster than autograd through a
checkpointed block). For binary labels under m-per-class sampling P = m (4), so one
block of [B, 4, N] serves the whole batch; the hierarchical losses have P ~ N / 2.

Tie convention: exact steps count ties as "ahead" (H(0) = 1), H^-(0) = sigma(0) = 0.5,
so the upper bound of a SupRank loss can fail only on exact score ties with a
less relevant item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .inputs import check_batch

__all__ = [
    "Step",
    "HeavisideStep",
    "SigmoidStep",
    "SupRankStep",
    "heaviside",
    "sup_heaviside",
    "STEP_FIXES",
    "Ranks",
    "relevant_ranks",
    "prepare_lists",
    "shared_levels",
    "happier_relevance",
    "ap_head",
    "recall_head",
    "ndcg_head",
    "ideal_dcg",
    "DEFAULT_MAX_ELEMENTS",
    "BLOCK_TEMPORARIES",
]

STEP_FIXES = ("post_pr13", "pre_pr13")
DEFAULT_MAX_ELEMENTS = 1 << 21  # elements of a block's temporaries together (8 MiB in float32)
BLOCK_TEMPORARIES = 8  # [b, P, N] temporaries alive at once in a block (SupRank step, forward or backward)


def heaviside(t: torch.Tensor) -> torch.Tensor:
    """Exact step H(t) = 1 if t >= 0 else 0 (no gradient)."""
    return (t >= 0).to(t.dtype)


def sup_heaviside(
    t: torch.Tensor,
    tau: float = 0.01,
    rho: float = 100.0,
    delta: float = 0.05,
    start: float = 0.5,
    offset: float | None = None,
    step_fix: str = "post_pr13",
) -> torch.Tensor:
    """SupRank's H^-(t) (eq. 4; see the module docstring for the branches)."""
    if offset is None:
        offset = 1.0 / (1.0 + math.exp(-delta / tau)) + start
    sig = torch.sigmoid(t / tau)
    lin = rho * ((t - delta) if step_fix == "post_pr13" else t) + offset
    return torch.where(t <= 0, sig, torch.where(t <= delta, sig + start, lin))


class Step:
    """A rank surrogate.

    ``value(t, lower)`` gives the contribution of j to rank(i) (``lower`` [.., P, N] bool:
    j strictly less relevant than i; None when ``uniform``), ``deriv`` its derivative in t
    (None = no gradient); ``plus_value`` / ``plus_deriv`` the same for rank+.
    """

    uniform = False  # True when the rank contribution does not depend on ``lower``
    has_deriv = False  # rank has a gradient
    plus_has_deriv = False  # rank+ has a gradient

    def value(self, t, lower):
        raise NotImplementedError

    def deriv(self, t, lower):
        return None

    def plus_value(self, t):
        return heaviside(t)

    def plus_deriv(self, t):
        return None

    @property
    def self_value(self) -> float:
        """value(0, lower=False): the i-vs-i term, subtracted from the sums."""
        return 1.0


class HeavisideStep(Step):
    """Exact ranks (no gradient)."""

    uniform = True

    def value(self, t, lower):
        return heaviside(t)

    def __repr__(self) -> str:
        return "HeavisideStep()"


def _dsigmoid(t, tau):
    sig = torch.sigmoid(t / tau)
    return sig * (1.0 - sig) / tau


class SigmoidStep(Step):
    """sigma(t / tau) on every pair, in rank and rank+ (Smooth-AP, Brown et al. 2020)."""

    uniform = True
    has_deriv = True
    plus_has_deriv = True

    def __init__(self, tau: float = 0.01):
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.tau = float(tau)

    def value(self, t, lower):
        return torch.sigmoid(t / self.tau)

    def deriv(self, t, lower):
        return _dsigmoid(t, self.tau)

    def plus_value(self, t):
        return torch.sigmoid(t / self.tau)

    def plus_deriv(self, t):
        return _dsigmoid(t, self.tau)

    @property
    def self_value(self) -> float:
        return 0.5

    def __repr__(self) -> str:
        return f"SigmoidStep(tau={self.tau})"


class SupRankStep(Step):
    """SupRank: H^- on strictly-less-relevant pairs, exact H elsewhere and in rank+."""

    has_deriv = True

    def __init__(
        self,
        tau: float = 0.01,
        rho: float = 100.0,
        delta: float = 0.05,
        start: float = 0.5,
        offset: float | None = None,
        step_fix: str = "post_pr13",
    ):
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        if not rho >= 0:
            raise ValueError(f"rho must be >= 0, got {rho}")
        if not delta >= 0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        if step_fix not in STEP_FIXES:
            raise ValueError(f"step_fix must be one of {list(STEP_FIXES)}, got {step_fix!r}")
        self.tau, self.rho, self.delta, self.start = float(tau), float(rho), float(delta), float(start)
        self.offset = None if offset is None else float(offset)
        self.step_fix = step_fix

    def value(self, t, lower):
        hm = sup_heaviside(t, self.tau, self.rho, self.delta, self.start, self.offset, self.step_fix)
        return torch.where(lower, hm, heaviside(t))

    def deriv(self, t, lower):
        d = torch.where(t > self.delta, torch.full_like(t, self.rho), _dsigmoid(t, self.tau))
        return d * lower

    def __repr__(self) -> str:
        return (f"SupRankStep(tau={self.tau}, rho={self.rho}, delta={self.delta}, start={self.start}, "
                f"offset={self.offset}, step_fix={self.step_fix!r})")


# ------------------------------------------------------------------------------- core


@dataclass
class Ranks:
    """Ranks of the relevant items of each query, padded to P columns.

    ``index`` [Q, P]: column of the item in the list; ``valid`` [Q, P]: real (not padding);
    ``rank`` / ``rank_plus`` [Q, P] (1 / 0 at padding; ``rank_plus`` is None if not asked);
    ``rel`` / ``level`` [Q, P]: the item's relevance and level (0 at padding)."""

    index: torch.Tensor
    valid: torch.Tensor
    rank: torch.Tensor
    rank_plus: torch.Tensor | None
    rel: torch.Tensor
    level: torch.Tensor


def _blocks(q, chunk):
    return [slice(a, a + chunk) for a in range(0, q, chunk)]


class _RankFn(torch.autograd.Function):
    """rank, rank+ of the gathered relevant items; the backward recomputes each [b, P, N]
    block from the [Q, N] / [Q, P] inputs, so nothing cubic is ever kept."""

    @staticmethod
    def forward(ctx, s, s_pos, lvl, rel, lvl_pos, rel_pos, step, need_plus, chunk):
        ranks, pluses = [], []
        for sl in _blocks(s.shape[0], chunk):
            t = s[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)  # t[q, i, j] = s_qj - s_qi
            lower = None if step.uniform else lvl[sl].unsqueeze(1) < lvl_pos[sl].unsqueeze(2)
            ranks.append(1.0 - step.self_value + step.value(t, lower).sum(-1))
            if need_plus:
                r = step.plus_value(t) * torch.minimum(rel[sl].unsqueeze(1), rel_pos[sl].unsqueeze(2))
                pluses.append(rel_pos[sl] * (1.0 - step.self_value) + r.sum(-1))
            del t, lower
        ctx.save_for_backward(s, s_pos, lvl, rel, lvl_pos, rel_pos)
        ctx.step, ctx.need_plus, ctx.chunk = step, need_plus, chunk
        rank = torch.cat(ranks)
        rank_plus = torch.cat(pluses) if need_plus else torch.zeros_like(rank)
        return rank, rank_plus

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_rank, g_plus):
        s, s_pos, lvl, rel, lvl_pos, rel_pos = ctx.saved_tensors
        step = ctx.step
        grad_s = torch.zeros_like(s)
        grad_pos = torch.zeros_like(s_pos)
        plus_grad = ctx.need_plus and g_plus is not None and step.plus_has_deriv
        if not step.has_deriv and not plus_grad:
            return grad_s, grad_pos, None, None, None, None, None, None, None
        for sl in _blocks(s.shape[0], ctx.chunk):
            t = s[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)
            lower = None if step.uniform else lvl[sl].unsqueeze(1) < lvl_pos[sl].unsqueeze(2)
            if step.has_deriv:
                d = step.deriv(t, lower) * g_rank[sl].unsqueeze(2)
            else:
                d = torch.zeros_like(t)
            if plus_grad:
                m = torch.minimum(rel[sl].unsqueeze(1), rel_pos[sl].unsqueeze(2))
                d = d + step.plus_deriv(t) * m * g_plus[sl].unsqueeze(2)
            grad_s[sl] = d.sum(1)  # d t_ij / d s_j = +1
            grad_pos[sl] = -d.sum(2)  # d t_ij / d s_i = -1
            del t, lower, d
        return grad_s, grad_pos, None, None, None, None, None, None, None


def relevant_ranks(
    scores: torch.Tensor,
    level: torch.Tensor,
    step: Step,
    rel: torch.Tensor | None = None,
    list_mask: torch.Tensor | None = None,
    need_rank_plus: bool = True,
    chunk_size: int | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Ranks:
    """rank and rank+ (module docstring) of every relevant item of every query.

    Args:
        scores: [Q, N] similarity of each query to each item of its list.
        level: [Q, N] non-negative; an item is relevant iff level > 0; pair (i, j) is
            "j strictly less relevant than i" iff level_j < level_i. Binary labels: 0/1;
            hierarchical: number of shared levels.
        step: the surrogate (:class:`HeavisideStep`, :class:`SigmoidStep`, :class:`SupRankStep`).
        rel: [Q, N] relevances used in rank+ (rel_i + sum min(rel_i, rel_j) ...);
            defaults to ``level``. Must be 0 where level is 0.
        list_mask: [Q, N] bool, the items that are in each query's list (default all).
        need_rank_plus: compute rank+ (only the AP heads need it).
        chunk_size: queries per block; default: as many as keep the block's temporaries
            (``BLOCK_TEMPORARIES`` [b, P, N] tensors) within ``max_elements``.

    The gradient flows into ``scores`` only (relevances are constants).
    """
    if scores.ndim != 2 or level.shape != scores.shape:
        raise ValueError(f"scores and level must be [Q, N] of the same shape, got {tuple(scores.shape)}"
                         f" and {tuple(level.shape)}")
    level = level.to(scores.dtype)
    rel = level if rel is None else rel.to(scores.dtype)
    if list_mask is not None:
        # items outside the list: score -inf (every step gives 0 there, with 0 derivative)
        level = level * list_mask
        rel = rel * list_mask
        scores = scores.masked_fill(~list_mask, float("-inf"))
    relevant = level > 0
    q, n = scores.shape
    n_rel = relevant.sum(1)
    p = max(int(n_rel.max()) if q else 0, 1)
    idx = torch.topk(relevant.to(torch.uint8), p, dim=1).indices  # [Q, P], any order
    valid = torch.arange(p, device=scores.device).unsqueeze(0) < n_rel.unsqueeze(1)
    # padding points at an irrelevant column: give it a finite score (its rank is discarded)
    s_pos = torch.where(valid, scores.gather(1, idx), torch.zeros((), dtype=scores.dtype, device=scores.device))
    lvl_pos, rel_pos = level.gather(1, idx) * valid, rel.gather(1, idx) * valid
    if chunk_size is None:
        chunk_size = max(1, max_elements // (BLOCK_TEMPORARIES * p * max(n, 1)))
    rank, rank_plus = _RankFn.apply(scores, s_pos, level, rel, lvl_pos, rel_pos, step, bool(need_rank_plus),
                                    int(chunk_size))
    rank = torch.where(valid, rank, torch.ones_like(rank))
    rank_plus = torch.where(valid, rank_plus, torch.zeros_like(rank_plus)) if need_rank_plus else None
    return Ranks(idx, valid, rank, rank_plus, rel_pos, lvl_pos)


# ----------------------------------------------------------------- lists and relevances


def shared_levels(y: torch.Tensor, yr: torch.Tensor) -> torch.Tensor:
    """[B, N] number of hierarchy levels whose labels agree (SupRank's label matrix)."""
    if y.shape[1] != yr.shape[1]:
        raise ValueError(f"labels have {y.shape[1]} levels but ref_labels have {yr.shape[1]}")
    out = torch.zeros(y.shape[0], yr.shape[0], dtype=torch.long, device=y.device)
    for lv in range(y.shape[1]):
        out += (y[:, lv : lv + 1] == yr[:, lv].unsqueeze(0)).long()
    return out


def happier_relevance(levels: torch.Tensor, num_levels: int, alpha: float = 1.0,
                      list_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""HAPPIER's relevance (eq. 20): rel(k) = (l/L)^alpha / |Omega^(l)| for k in Omega^(l).

    ``levels`` [Q, N] = number of shared levels l in 0..L; |Omega^(l)| counts the items of
    the query's list at that level (the query itself included when it is in its list).
    The official code ('pop' relevance) uses (l / (L - 1))^alpha: a constant factor, which
    H-AP is invariant to.
    """
    levels = levels.long()
    if list_mask is None:
        list_mask = torch.ones_like(levels, dtype=torch.bool)
    onehot = torch.nn.functional.one_hot(levels.clamp(0, num_levels), num_levels + 1)
    counts = (onehot * list_mask.unsqueeze(-1)).sum(1)  # [Q, L+1]
    w = (torch.arange(num_levels + 1, device=levels.device, dtype=torch.float64) / num_levels) ** alpha
    w[0] = 0.0
    per_level = w.unsqueeze(0) / counts.clamp_min(1).to(torch.float64)  # [Q, L+1]
    rel = per_level.gather(1, levels.clamp(0, num_levels)).float()
    return rel * list_mask


def prepare_lists(embeddings, labels, ref_embeddings, ref_labels, include_query: bool):
    """Scores, label matrices and list conventions shared by the ranking losses.

    Returns ``(emb, y, ref, yr, scores, list_mask, self_col)`` in float32 (the caller
    disables autocast): ``y`` [B, L], ``yr`` [N, L] long; ``scores`` = emb @ ref.T;
    ``list_mask`` [B, N] the items in each query's list; ``self_col`` [B] the column
    of the query's own entry (-1 if it is not in the reference set).

    Without a reference set the list is the batch; the query is in its own list iff
    ``include_query``. With one (detached, no gradient into it) the list is the
    reference set; the query's own entry is recognised when the reference set starts
    with the batch (as :class:`rankrepro.losses.memory.MemoryLoss` builds it) and is
    then kept iff ``include_query``.
    """
    emb, y, ref, yr = check_batch(embeddings, labels, ref_embeddings, ref_labels, level=None)
    dev = emb.device
    b = emb.shape[0]
    if ref is None:
        ref, yr = emb, y
        self_col = torch.arange(b, device=dev)
    else:
        starts_with_batch = (ref.shape[0] >= b and yr.shape[1] == y.shape[1]
                             and torch.equal(ref[:b], emb.detach()) and torch.equal(yr[:b], y))
        self_col = torch.arange(b, device=dev) if starts_with_batch else torch.full((b,), -1, device=dev)
    scores = emb @ ref.T
    n = ref.shape[0]
    is_self = torch.arange(n, device=dev).unsqueeze(0) == self_col.unsqueeze(1)
    list_mask = torch.ones(b, n, dtype=torch.bool, device=dev)
    if not include_query:
        list_mask &= ~is_self
    return emb, y, ref, yr, scores, list_mask, self_col


# ------------------------------------------------------------------------------ heads


def ap_head(r: Ranks, norm: torch.Tensor) -> torch.Tensor:
    """AP / H-AP (eq. 9, 19): sum_i rank+(i) / rank(i) / norm, norm = sum of relevances."""
    ratio = torch.where(r.valid, r.rank_plus / r.rank, torch.zeros_like(r.rank))
    return ratio.sum(1) / norm


def recall_head(r: Ranks, n_pos: torch.Tensor, at_k, temp: float) -> torch.Tensor:
    """Recall surrogate (eq. 16): mean over k of sum_p sigma((k - rank_p) / temp) / min(|P|, k)."""
    out = torch.zeros(r.rank.shape[0], dtype=r.rank.dtype, device=r.rank.device)
    for k in at_k:
        hit = torch.sigmoid((k - r.rank) / temp) * r.valid
        out = out + hit.sum(1) / n_pos.to(out.dtype).clamp(max=float(k))
    return out / len(at_k)


def ideal_dcg(gains: torch.Tensor, list_mask: torch.Tensor) -> torch.Tensor:
    """max DCG: gains sorted decreasingly at exact ranks 1, 2, ... ([Q, N] -> [Q])."""
    g = torch.sort(gains * list_mask, dim=1, descending=True).values
    pos = torch.arange(1, g.shape[1] + 1, device=g.device, dtype=g.dtype)
    return (g / torch.log2(1.0 + pos)).sum(1)


def ndcg_head(r: Ranks, gains_pos: torch.Tensor, idcg: torch.Tensor) -> torch.Tensor:
    """NDCG (eq. 23/24): sum_i gain_i / log2(1 + rank(i)) / iDCG."""
    dcg = torch.where(r.valid, gains_pos / torch.log2(1.0 + r.rank), torch.zeros_like(r.rank))
    return dcg.sum(1) / idcg
