r"""One differentiable-rank core for the ranking losses (SupRank paper, eq. 3).

For a query with retrieval list Omega (scores ``s_j``, levels ``l_j`` >= 0, relevances
``rel_j`` >= 0; ``l_j > 0`` <=> relevant) and each relevant item i::

    rank(i)  = 1 + sum_{j in Omega, j != i} A_ij(s_j - s_i)     (A_ij depends on l_j < l_i)
    rank+(i) = rel_i + sum_{j in Omega, j != i} R(s_j - s_i) * min(rel_i, rel_j)

(suprank.md §2.0; for binary labels rank+ = 1 + #positives ranked ahead, and with
hierarchical relevances it is the H-rank+ of eq. 18). The step surrogate is pluggable: exact
Heaviside, sigmoid, SupRank's H^-, blackbox interpolation (:mod:`rankrepro.losses.steps`). The
relevances of the hierarchical losses are in :mod:`rankrepro.losses.relevance`.

The heads: :func:`ap_head` (AP / H-AP: Smooth-AP, Sup-AP, BlackBox-AP, RaMBO's mAP, H-AP),
:func:`recall_head`, :func:`ndcg_head`, and PNP's f(rank^-) (``count_mask="irrelevant"``:
rank(i) - 1 = the smoothed number of negatives before i). :class:`RankingLoss` is the
shared module: the retrieval lists (:func:`rankrepro.losses.inputs.retrieval_lists`,
the query's own entry given by ``self_index``), the levels, the kept queries, then a head;
:func:`stepped` registers a head with a step under flat JSON keywords.

Memory: only relevant items need a rank, so each query's relevant items are gathered
(:func:`gather_relevant`, padded to the largest count P) and a [b, P, N] difference tensor
is built for a block of b queries at a time, never B x N x N for all queries at once;
rank+ only involves relevant items, so it is summed over [b, P, P]. ``max_elements`` bounds
the block's temporaries together: the SupRank step's forward or backward holds up to
``BLOCK_TEMPORARIES`` (8) [b, P, N] float tensors at once (the difference, masks, the
sigmoid and linear branches, their selection), so b * P * N <= max_elements / 8. The rank is a custom autograd function with the analytic derivative of the
step: the backward recomputes each block from the [Q, N] scores, so nothing of size
[Q, P, N] is kept for backward either (and it is faster than autograd through a
checkpointed block). Exception: when the whole [Q, P, N] is at most ``max_elements`` (binary
labels under m-per-class sampling, P = m = 4) and the step's derivative follows from its
value (the sigmoid), the forward keeps the values for the backward instead of
recomputing them. The hierarchical losses have P ~ N / 2 and always recompute.

Tie convention: that of the steps (:mod:`rankrepro.losses.steps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rankrepro.registry import PositiveInt

from .inputs import attached_zero, no_autocast, retrieval_lists
from .registry import compose, pick
from .relevance import shared_levels
from .steps import Step

__all__ = [
    "Ranks",
    "gather_relevant",
    "relevant_ranks",
    "prepare_lists",
    "RankingLoss",
    "APLoss",
    "stepped",
    "ap_head",
    "recall_head",
    "ndcg_head",
    "ideal_dcg",
    "DEFAULT_MAX_ELEMENTS",
    "BLOCK_TEMPORARIES",
]

DEFAULT_MAX_ELEMENTS = 1 << 21  # elements of a block's temporaries together (8 MiB in float32)
BLOCK_TEMPORARIES = 8  # [b, P, N] temporaries alive at once in a block (SupRank step, forward or backward)


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

    @property
    def count(self) -> torch.Tensor:
        """Number of items ranked before each relevant item: rank - 1 (0 at padding)."""
        return torch.where(self.valid, self.rank - 1.0, torch.zeros_like(self.rank))


def gather_relevant(relevant: torch.Tensor):
    """The one place that gathers each query's relevant items (positives).

    ``relevant`` [Q, N] bool -> ``(index [Q, P], valid [Q, P], n [Q])``: the columns of each
    row's relevant items in any order, padded with irrelevant columns to P = max(1, max n);
    ``valid`` marks the real ones; ``n`` counts them."""
    q = relevant.shape[0]
    n = relevant.sum(1)
    p = max(int(n.max()) if q else 0, 1)
    idx = torch.topk(relevant.to(torch.uint8), min(p, relevant.shape[1]), dim=1).indices
    valid = torch.arange(idx.shape[1], device=relevant.device).unsqueeze(0) < n.unsqueeze(1)
    return idx, valid, n


def _blocks(q, chunk):
    return [slice(a, a + chunk) for a in range(0, q, chunk)]


class _RankFn(torch.autograd.Function):
    """rank, rank+ of the gathered relevant items; the backward recomputes each block from
    the [Q, N] / [Q, P] inputs, so nothing cubic is ever kept.

    ``s`` [Q, N]: the scores of the items counted in rank (-inf elsewhere); ``s_pos`` [Q, P]
    the relevant items' scores. rank sums ``step.value`` over [b, P, N]; rank+ sums
    ``step.plus_value * min(rel_i, rel_j)`` over the relevant items only ([b, P, P]: an
    irrelevant j has rel_j = 0)."""

    @staticmethod
    def forward(ctx, s, s_pos, lvl, lvl_pos, rel_pos, base, step, need_plus, chunk, keep_values):
        ranks, pluses, values = [], [], []
        for sl in _blocks(s.shape[0], chunk):
            t = s[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)  # t[q, i, j] = s_qj - s_qi
            lower = None if step.uniform else lvl[sl].unsqueeze(1) < lvl_pos[sl].unsqueeze(2)
            v = step.value_(t, lower)
            ranks.append(base[sl] + v.sum(-1))
            if keep_values:
                values.append(v)
            del t, lower, v
            if need_plus:
                tp = s_pos[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)
                m = torch.minimum(rel_pos[sl].unsqueeze(1), rel_pos[sl].unsqueeze(2))
                pluses.append(rel_pos[sl] * (1.0 - step.self_value) + (step.plus_value(tp) * m).sum(-1))
        ctx.save_for_backward(s, s_pos, lvl, lvl_pos, rel_pos, *values)
        ctx.step, ctx.need_plus, ctx.chunk = step, need_plus, chunk
        rank = torch.cat(ranks)
        rank_plus = torch.cat(pluses) if need_plus else torch.zeros_like(rank)
        return rank, rank_plus

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_rank, g_plus):
        s, s_pos, lvl, lvl_pos, rel_pos, *values = ctx.saved_tensors
        step = ctx.step
        grad_s = torch.zeros_like(s)
        grad_pos = torch.zeros_like(s_pos)
        plus_grad = ctx.need_plus and g_plus is not None and step.plus_has_deriv
        rank_grad = step.has_deriv and g_rank is not None
        none = (None,) * 8
        if not rank_grad and not plus_grad:
            return (grad_s, grad_pos) + none
        for k, sl in enumerate(_blocks(s.shape[0], ctx.chunk)):
            if rank_grad:
                g = g_rank[sl].unsqueeze(2)
                if values:  # kept by the forward (small batches): no recomputation
                    d = step.grad_from_value(values[k], g)
                else:
                    t = s[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)
                    lower = None if step.uniform else lvl[sl].unsqueeze(1) < lvl_pos[sl].unsqueeze(2)
                    d = step.grad(t, lower, g)
                    del t, lower
                grad_s[sl] = d.sum(1)  # d t_ij / d s_j = +1
                grad_pos[sl] = -d.sum(2)  # d t_ij / d s_i = -1
                del d
            if plus_grad:
                tp = s_pos[sl].unsqueeze(1) - s_pos[sl].unsqueeze(2)
                m = torch.minimum(rel_pos[sl].unsqueeze(1), rel_pos[sl].unsqueeze(2))
                dp = step.plus_grad(tp, m * g_plus[sl].unsqueeze(2))
                grad_pos[sl] += dp.sum(1) - dp.sum(2)
        return (grad_s, grad_pos) + none  # items not counted (-inf) got a 0 derivative


def relevant_ranks(
    scores: torch.Tensor,
    level: torch.Tensor,
    step: Step,
    rel: torch.Tensor | None = None,
    list_mask: torch.Tensor | None = None,
    need_rank_plus: bool = True,
    chunk_size: int | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    count_mask: torch.Tensor | None = None,
) -> Ranks:
    """rank and rank+ (module docstring) of every relevant item of every query.

    Args:
        scores: [Q, N] similarity of each query to each item of its list.
        level: [Q, N] non-negative; an item is relevant iff level > 0; pair (i, j) is
            "j strictly less relevant than i" iff level_j < level_i. Binary labels: 0/1;
            hierarchical: number of shared levels.
        step: the surrogate (:mod:`~rankrepro.losses.steps`: ``HeavisideStep``, ``SigmoidStep``,
            ``SupRankStep``, ``BlackboxStep``).
        rel: [Q, N] relevances used in rank+ (rel_i + sum min(rel_i, rel_j) ...);
            defaults to ``level``. Must be 0 where level is 0.
        list_mask: [Q, N] bool, the items that are in each query's list (default all).
        need_rank_plus: compute rank+ (only the AP heads need it).
        chunk_size: queries per block; default: as many as keep the block's temporaries
            (``BLOCK_TEMPORARIES`` [b, P, N] tensors) within ``max_elements``.
        count_mask: [Q, N] bool, the items j counted in rank (default: the list), or
            ``"irrelevant"``: the items of level 0 in the list (the negatives), so that
            rank(i) = 1 + rank^-(i), the smoothed number of negatives ranked before i (PNP's R).

    The gradient flows into ``scores`` only (relevances are constants).
    """
    if scores.ndim != 2 or level.shape != scores.shape:
        raise ValueError(f"scores and level must be [Q, N] of the same shape, got {tuple(scores.shape)}"
                         f" and {tuple(level.shape)}")
    level = level.to(scores.dtype)
    rel = level if rel is None else rel.to(scores.dtype)
    if list_mask is not None:
        level = level * list_mask
        rel = rel * list_mask
    relevant = level > 0
    idx, valid, _ = gather_relevant(relevant)
    q, n = scores.shape
    p = idx.shape[1]
    # padding points at an irrelevant column: give it a finite score (its rank is discarded)
    s_pos = torch.where(valid, scores.gather(1, idx), torch.zeros((), dtype=scores.dtype, device=scores.device))
    lvl_pos, rel_pos = level.gather(1, idx) * valid, rel.gather(1, idx) * valid
    if getattr(step, "sorting", False):
        if list_mask is not None or count_mask is not None:
            raise ValueError(f"{step!r} ranks whole rows: pass the list's scores without list_mask / count_mask")
        rank_all, plus_all = step.ranks(scores, relevant)
        rank = torch.where(valid, rank_all.gather(1, idx), torch.ones_like(s_pos))
        rank_plus = torch.where(valid, plus_all.gather(1, idx), torch.zeros_like(s_pos)) if need_rank_plus else None
        return Ranks(idx, valid, rank, rank_plus, rel_pos, lvl_pos)
    # items outside the counted set: score -inf (every step gives 0 there, with 0 derivative)
    if isinstance(count_mask, str):
        if count_mask != "irrelevant":
            raise ValueError(f"count_mask must be a [Q, N] bool tensor, 'irrelevant' or None, got {count_mask!r}")
        not_counted = relevant if list_mask is None else relevant | ~list_mask
    elif count_mask is not None:
        not_counted = ~count_mask if list_mask is None else ~(count_mask & list_mask)
    else:
        not_counted = None if list_mask is None else ~list_mask
    counted = scores if not_counted is None else scores.masked_fill(not_counted, float("-inf"))
    # rank(i) = 1 + sum_{j counted, j != i} value: the i-vs-i term (value self_value) is
    # summed and taken off when i itself is counted, so no [b, P, N] mask is built for it
    base = torch.ones_like(s_pos)
    if step.self_value:
        in_count = valid if not_counted is None else ~not_counted.gather(1, idx) & valid
        base = base - step.self_value * in_count.to(scores.dtype)
    if chunk_size is None:
        chunk_size = max(1, max_elements // (BLOCK_TEMPORARIES * p * max(n, 1)))
    # a small [Q, P, N] (binary labels, P = m): keep the step's values for the backward
    keep_values = (step.grad_from_values and torch.is_grad_enabled() and scores.requires_grad
                   and q * p * n <= max_elements)
    rank, rank_plus = _RankFn.apply(counted, s_pos, level, lvl_pos, rel_pos, base, step, bool(need_rank_plus),
                                    int(chunk_size), keep_values)
    rank = torch.where(valid, rank, torch.ones_like(rank))
    rank_plus = torch.where(valid, rank_plus, torch.zeros_like(rank_plus)) if need_rank_plus else None
    return Ranks(idx, valid, rank, rank_plus, rel_pos, lvl_pos)


# ----------------------------------------------------------------------- lists


def prepare_lists(embeddings, labels, ref_embeddings, ref_labels, include_query: bool, self_index=None):
    """Scores, label matrices and list conventions shared by the ranking losses.

    Returns ``(emb, y, ref, yr, scores, list_mask, self_col)`` in float32 (the caller
    disables autocast): ``y`` [B, L], ``yr`` [N, L] long; ``scores`` = emb @ ref.T;
    ``list_mask`` [B, N] the items in each query's list; ``self_col`` [B] the column
    of the query's own entry (-1 if it is not in the reference set).

    The lists come from :func:`~rankrepro.losses.inputs.retrieval_lists`: without a
    reference set the list is the batch; with one (detached, no gradient into it) the list
    is the reference set, and ``self_index`` (what
    :class:`~rankrepro.losses.memory.MemoryLoss` passes) locates each query's own entry. The
    own entry is in the query's list iff ``include_query``.
    """
    lists = retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index, level=None)
    emb, y, ref, yr = lists.emb, lists.y, lists.ref, lists.yr
    b = emb.shape[0]
    self_col = lists.self_index if lists.self_index is not None else torch.full((b,), -1, device=emb.device)
    scores = lists.scores()
    list_mask = torch.ones(b, ref.shape[0], dtype=torch.bool, device=emb.device)
    if not include_query and lists.self_index is not None:
        list_mask &= ~lists.self_mask()
    return emb, y, ref, yr, scores, list_mask, self_col


def _check_chunk(chunk_size, max_elements):
    if chunk_size is not None and (isinstance(chunk_size, bool) or int(chunk_size) < 1):
        raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
    if int(max_elements) < 1:
        raise ValueError(f"max_elements must be >= 1, got {max_elements}")


class RankingLoss(nn.Module):
    """A ranking loss = a head over the rank core.

    ``forward(embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None)``:
    the lists (:func:`prepare_lists`), the levels (number of shared label levels; column 0
    only unless ``hierarchical``), the queries that have a relevant item other than
    themselves in their list, then :meth:`_metric` [Q] per kept query and
    :meth:`_reduce` (default ``1 - mean``). ``step`` (keyword-only) is the rank surrogate;
    ``include_query``: the query's own entry is in its list; ``chunk_size`` /
    ``max_elements``: see :func:`relevant_ranks`. Float32, autocast disabled.
    """

    hierarchical = False
    family = "rank"  # a relaxed ranking metric (AP, recall, H-AP, NDCG) (losses.registry)

    def __init__(self, *, step: Step, include_query: bool = True, chunk_size: PositiveInt | None = None,
                 max_elements: PositiveInt = DEFAULT_MAX_ELEMENTS):
        super().__init__()
        _check_chunk(chunk_size, max_elements)
        self.step = step
        self.include_query = bool(include_query)
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.max_elements = int(max_elements)

    @property
    def tau(self) -> float:
        return self.step.tau

    def extra_repr(self) -> str:
        return f"step={self.step!r}, include_query={self.include_query}"

    def _ranks(self, scores, level, rel=None, list_mask=None, need_rank_plus=True, count_mask=None):
        return relevant_ranks(scores, level, self.step, rel=rel, list_mask=list_mask,
                              need_rank_plus=need_rank_plus, chunk_size=self.chunk_size,
                              max_elements=self.max_elements, count_mask=count_mask)

    def _level_labels(self, y, yr, ref_given: bool):
        """The label columns that define the levels ([B, L'], [N, L'])."""
        return (y, yr) if self.hierarchical else (y[:, :1], yr[:, :1])

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        with no_autocast(embeddings):
            lists = retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index, level=None)
            y, yr = self._level_labels(lists.y, lists.yr, ref_embeddings is not None)
            scores = lists.scores()
            level = shared_levels(y, yr, scores.dtype)
            own, list_mask = lists.self_index, None
            if own is not None and not self.include_query:  # the own entry leaves the list
                list_mask = ~lists.self_mask()
                level = level * list_mask
            return self.loss_from_scores(scores, level, list_mask, own, num_levels=y.shape[1])

    def loss_from_scores(self, scores, level, list_mask, self_col, num_levels=1):
        """The loss from [B, N] scores and levels (0 outside the list), the lists (``list_mask``
        [B, N] bool, None = every item) and the own entries (``self_col`` [B], -1 = none, or None)."""
        n_rel = (level > 0).sum(1)
        if self_col is not None:  # relevant items other than the query itself
            own = self_col.clamp_min(0).unsqueeze(1)
            n_rel = n_rel - ((level.gather(1, own).squeeze(1) > 0) & (self_col >= 0)).long()
        keep = n_rel > 0
        if not bool(keep.any()):
            return attached_zero(scores)
        if not bool(keep.all()):
            q = keep.nonzero(as_tuple=True)[0]
            scores, level = scores[q], level[q]
            list_mask = None if list_mask is None else list_mask[q]
        return self._reduce(self._metric(scores, level, list_mask, num_levels))

    def _metric(self, scores, level, list_mask, num_levels):  # pragma: no cover - abstract
        raise NotImplementedError

    def _reduce(self, metric: torch.Tensor) -> torch.Tensor:
        return 1.0 - metric.mean()


def stepped(name: str, module: str, head: type, step_cls: type, doc: str | None = None, paper: str | None = None,
            **defaults):
    """A registrable builder ``head(step=step_cls(<step keywords>), <head keywords>)`` with one flat
    keyword signature (the step's parameters, then the head's; ``defaults`` override), named
    ``name`` in ``module``, introduced by ``paper`` (see :func:`rankrepro.losses.registry.compose`)."""
    return compose(name, module, lambda v: head(step=step_cls(**pick(v, step_cls)), **pick(v, head)),
                   step_cls, head, doc=doc, paper=paper, **defaults)


class APLoss(RankingLoss):
    """1 - mean AP (eq. 9 / 11) with the ranks of ``step``: sum_i rank+(i) / rank(i) / |P|."""

    def _metric(self, scores, level, list_mask, num_levels):
        r = self._ranks(scores, level, list_mask=list_mask)
        return ap_head(r, level.sum(1).to(scores.dtype))


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


def ideal_dcg(gains: torch.Tensor, list_mask: torch.Tensor | None = None) -> torch.Tensor:
    """max DCG: gains sorted decreasingly at exact ranks 1, 2, ... ([Q, N] -> [Q])."""
    g = torch.sort(gains if list_mask is None else gains * list_mask, dim=1, descending=True).values
    pos = torch.arange(1, g.shape[1] + 1, device=g.device, dtype=g.dtype)
    return (g / torch.log2(1.0 + pos)).sum(1)


def ndcg_head(r: Ranks, gains_pos: torch.Tensor, idcg: torch.Tensor) -> torch.Tensor:
    """NDCG (eq. 23/24): sum_i gain_i / log2(1 + rank(i)) / iDCG."""
    dcg = torch.where(r.valid, gains_pos / torch.log2(1.0 + r.rank), torch.zeros_like(r.rank))
    return dcg.sum(1) / idcg
