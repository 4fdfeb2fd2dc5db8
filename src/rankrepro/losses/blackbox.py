"""Blackbox differentiation of ranking (RaMBO, Rolinek et al., CVPR 2020) and its losses.

* :class:`BlackboxRank` — exact ranks forward, blackbox interpolation backward.
* ``rambo_recall`` — RaMBO's recall loss (eqs. 16-20), ``weight_fn`` "log" / "loglog".
* ``rambo_map`` — RaMBO's AP / mAP loss (eqs. 21-23; official ``MapLoss``) for retrieval.
* ``blackbox_ap`` — BlackBox-AP as used in SupRank's Table I (SupRank ``BlackBoxAPLoss``).
"""

from __future__ import annotations

import math

import torch

from .inputs import attached_zero, drop_self, no_autocast, query_lists
from .registry import register

__all__ = ["BlackboxRank", "blackbox_rank", "exact_ranks", "RaMBORecallLoss", "RaMBOMapLoss", "BlackBoxAPLoss"]


def exact_ranks(scores: torch.Tensor) -> torch.Tensor:
    """Ranks per row, 1 = highest score (long). Ties: the lower column index ranks first."""
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    pos = torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(order)
    return torch.empty_like(order).scatter_(1, order, pos)


class BlackboxRank(torch.autograd.Function):
    r"""Normalised ranks with the blackbox-interpolation gradient (paper Algorithm 1).

    Forward: ``rk(y) / n`` per row (rank 1 = highest score, n = row length), like the
    official ``TrueRanker`` / ``rank_normalised`` (which gives ``(argsort-rank + 1) / n``).
    Backward, for the incoming gradient g = dL/d rk::

        y_lambda = y + lambda * g
        dL/dy    = -(rk(y) - rk(y_lambda)) / (n * lambda)

    the official code's sign convention (its ``+1e-8`` on lambda is dropped). The
    gradient is that of a piecewise-linear interpolation of L(rk(y)) whose faithfulness
    vs informativeness is set by lambda.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lambda_val: float) -> torch.Tensor:
        n = scores.shape[1]
        ranks = exact_ranks(scores).to(scores.dtype) / n
        ctx.lambda_val = lambda_val
        ctx.save_for_backward(scores, ranks)
        return ranks

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        scores, ranks = ctx.saved_tensors
        lam = ctx.lambda_val
        n = scores.shape[1]
        ranks_prime = exact_ranks(scores + lam * grad_output).to(ranks.dtype) / n
        return -(ranks - ranks_prime) / lam, None


def blackbox_rank(scores: torch.Tensor, lambda_val: float) -> torch.Tensor:
    """Normalised ranks of each row of ``scores`` [Q, n] (see :class:`BlackboxRank`)."""
    return BlackboxRank.apply(scores, lambda_val)


def ranks_within_positives(ranks: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """rk(y+): 1 + number of positives ranked before each item (exact, no gradient; long)."""
    with torch.no_grad():
        order = torch.argsort(ranks, dim=1)
        cum = torch.cumsum(rel.gather(1, order).long(), dim=1)
        return torch.empty_like(cum).scatter_(1, order, cum)


def _check_lambda_margin(lambda_val: float, margin: float) -> None:
    if not (lambda_val > 0 and math.isfinite(lambda_val)):
        raise ValueError(f"lambda_val must be > 0, got {lambda_val}")
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin}")


def _shift(s: torch.Tensor, rel: torch.Tensor, margin: float, random_margin: bool) -> torch.Tensor:
    """Score margin (eq. 14): positives down, negatives up by margin/2 (x |N(0,1)| if random)."""
    dev = rel.to(s.dtype) - 0.5
    if random_margin:
        dev = dev * torch.randn_like(s).abs()
    return s - margin * dev


def _ap_rows(y: torch.Tensor, rel: torch.Tensor, lambda_val: float) -> torch.Tensor:
    """AP per row from blackbox ranks of ``y`` [Q, n] (eq. 21): mean over positives of rk+/rk."""
    ranks = blackbox_rank(y, lambda_val)  # rk / n
    rk_plus = ranks_within_positives(ranks, rel).to(ranks.dtype) / y.shape[1]
    prec = torch.where(rel, rk_plus / ranks, torch.zeros_like(ranks))
    return prec.sum(1) / rel.sum(1).to(prec.dtype)


class _BlackboxBase(torch.nn.Module):
    """Shared input handling: scores [B, N'] and relevance of each query's retrieval list."""

    include_query: bool
    ref_includes_batch: bool

    def _lists(self, embeddings, labels, ref_embeddings, ref_labels):
        emb, y, ref, yr, self_idx = query_lists(
            embeddings, labels, ref_embeddings, ref_labels, self.ref_includes_batch
        )
        s = emb @ ref.T
        rel = y.unsqueeze(1) == yr.unsqueeze(0)
        n_other = rel.sum(1) - (0 if self_idx is None else 1)  # positives besides the query
        if not self.include_query:
            s, rel = drop_self(s, self_idx), drop_self(rel, self_idx)
        return emb, s, rel, n_other > 0


@register("rambo_recall")
class RaMBORecallLoss(_BlackboxBase):
    r"""RaMBO recall loss (eqs. 16-20) with blackbox-differentiated ranks.

    For query q, margin-shifted scores y (eq. 14: positives - margin/2, negatives +
    margin/2), r_i = rk(y)_i - rk(y+)_i = the number of negatives ranked before positive i
    (eq. 17), and::

        L_rec = E_{i positive} w(r_i),  w(r) = log(1 + r)            ("log",   w_K ~ 1/K)
                                        w(r) = log(1 + log(1 + r))   ("loglog", w_K ~ 1/(K log K))

    rk(y) goes through :class:`BlackboxRank` (hyper-parameter ``lambda_val``); rk(y+) is
    exact (no gradient). Paper: "the similarity of each element with itself is
    disregarded" (``include_query=False``); True keeps it as what the official
    ``RecallLoss`` does when fed the full B x B matrix (a positive at rank 1: w(0) = 0 in
    the numerator, +1 in the denominator).

    Defaults lambda_val = 4, margin = 0.02 (supplement Table 9, Online Products; In-shop
    0.2 / 0.05, CUB 0.2 / 0.02), weight_fn = "loglog" (the "full RaMBO" of Table 7 on SOP
    and CUB; "log" on In-shop). Official code (martius-lab/blackbox-backprop
    ``RecallLoss``) vs paper, as options:

    * ``reduction`` (default "pairs" = official): sum of w over all (query, positive)
      pairs / number of pairs. "queries" = the paper's text (L_rec per query, averaged
      over the batch). Identical when every query has the same number of positives.
    * ``length`` (default "ref" = paper): the official code denormalises ranks with
      ``score_sequences.shape[0]`` (number of query rows) instead of the row length, so r
      is scaled by rows / row length whenever the input is not square; "rows" reproduces
      it. In-batch (B x B, or B x (B-1) without self) the two agree up to B / (B - 1).

    The paper's memory of the last tau batches: use ``memory={"size": tau * B}``. The
    official ``BatchMemoryRecallLoss`` instead stacks earlier batches' detached score
    *rows*, which never enter the current queries' rankings (see reference/losses.md §3.4);
    that variant is not reproduced. With a reference set, ``ref_includes_batch`` (default;
    what the memory passes) removes each query's own entry (index q) unless
    ``include_query``. Cost O(B N log N) time, O(B N) memory. Float32.
    """

    _WEIGHTS = ("log", "loglog")

    def __init__(
        self,
        lambda_val: float = 4.0,
        margin: float = 0.02,
        weight_fn: str = "loglog",
        reduction: str = "pairs",
        length: str = "ref",
        include_query: bool = False,
        ref_includes_batch: bool = True,
    ):
        super().__init__()
        _check_lambda_margin(lambda_val, margin)
        if weight_fn not in self._WEIGHTS:
            raise ValueError(f"weight_fn must be one of {', '.join(self._WEIGHTS)}, got {weight_fn!r}")
        if reduction not in ("pairs", "queries"):
            raise ValueError(f"reduction must be 'pairs' or 'queries', got {reduction!r}")
        if length not in ("ref", "rows"):
            raise ValueError(f"length must be 'ref' or 'rows', got {length!r}")
        self.lambda_val = float(lambda_val)
        self.margin = float(margin)
        self.weight_fn = weight_fn
        self.reduction = reduction
        self.length = length
        self.include_query = bool(include_query)
        self.ref_includes_batch = bool(ref_includes_batch)

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, weight_fn={self.weight_fn}, "
                f"reduction={self.reduction}, length={self.length}, include_query={self.include_query}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, s, rel, valid = self._lists(embeddings, labels, ref_embeddings, ref_labels)
            if not bool(valid.any()):
                return attached_zero(emb)
            n_rows = s.shape[0]  # the official code's "length" (all query rows)
            s, rel = s[valid], rel[valid]
            y = _shift(s, rel, self.margin, random_margin=False)
            ranks = blackbox_rank(y, self.lambda_val)  # rk / n
            rk_plus = ranks_within_positives(ranks, rel).to(ranks.dtype) / y.shape[1]
            scale = y.shape[1] if self.length == "ref" else n_rows
            # r >= 0 exactly (same float ops on integers); no clamp: it would zero dw/dr at r = 0
            r = torch.where(rel, (ranks - rk_plus) * scale, torch.zeros_like(ranks))
            w = torch.log1p(r) if self.weight_fn == "log" else torch.log1p(torch.log1p(r))
            w = torch.where(rel, w, torch.zeros_like(w))
            if self.reduction == "pairs":
                return w.sum() / rel.sum().to(w.dtype)
            return (w.sum(1) / rel.sum(1).to(w.dtype)).mean()


@register("rambo_map")
class RaMBOMapLoss(_BlackboxBase):
    r"""RaMBO AP / mAP loss (eqs. 21-23), the official ``MapLoss`` adapted to retrieval.

    Each query is a "class" of the official code: its retrieval list is the batch (or the
    reference set) with margin-shifted scores y, and (eq. 21-22)::

        AP_q = 1/|P| sum_{i in P} rk(y+)_i / rk(y)_i,      L_mAP = 1 - mean_q AP_q

    with rk(y) blackbox-differentiated and rk(y+) (rank among the positives) exact. Eq. 23
    adds L_APC, the AP of all (query, item) scores concatenated into one list::

        loss = (1 - interclass_coef) * L_mAP + interclass_coef * L_APC

    Defaults: interclass_coef = 1/3 (the paper weights L_mAP : L_APC as 2 : 1, §5.2);
    lambda_val = 4 and margin = 0.02 (the retrieval values of supplement Table 9, SOP; the
    detection runs used 0.5 / 0.15). ``random_margin`` (default True = official
    ``MapLoss``): the shift is margin * |N(0,1)| * (y* - 1/2) per entry (fresh draws each
    call, from torch's global RNG); False = the paper's deterministic +-margin/2 (eq. 14).
    ``include_query`` (default False): the paper's retrieval convention (self
    disregarded). The official code's ``+1e-5`` in the AP denominator is dropped; queries
    with no positive are skipped (the official mask of "present classes").

    Memory (the paper's last tau batches): ``memory={"size": tau * B}``; with
    ``ref_includes_batch`` (default) each query's own entry (index q) is found by index.
    Cost O(B N log N) time, O(B N) memory. Float32.
    """

    def __init__(
        self,
        lambda_val: float = 4.0,
        margin: float = 0.02,
        random_margin: bool = True,
        interclass_coef: float = 1.0 / 3.0,
        include_query: bool = False,
        ref_includes_batch: bool = True,
    ):
        super().__init__()
        _check_lambda_margin(lambda_val, margin)
        if not 0.0 <= interclass_coef <= 1.0:
            raise ValueError(f"interclass_coef must be in [0, 1], got {interclass_coef}")
        self.lambda_val = float(lambda_val)
        self.margin = float(margin)
        self.random_margin = bool(random_margin)
        self.interclass_coef = float(interclass_coef)
        self.include_query = bool(include_query)
        self.ref_includes_batch = bool(ref_includes_batch)

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, random_margin={self.random_margin}, "
                f"interclass_coef={self.interclass_coef}, include_query={self.include_query}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, s, rel, valid = self._lists(embeddings, labels, ref_embeddings, ref_labels)
            if not bool(valid.any()):
                return attached_zero(emb)
            loss = attached_zero(emb)
            if self.interclass_coef < 1.0:
                sv, rv = s[valid], rel[valid]
                y = _shift(sv, rv, self.margin, self.random_margin)
                loss = loss + (1.0 - self.interclass_coef) * (1.0 - _ap_rows(y, rv, self.lambda_val).mean())
            if self.interclass_coef > 0.0:
                flat_s, flat_r = s.reshape(1, -1), rel.reshape(1, -1)
                y = _shift(flat_s, flat_r, self.margin, self.random_margin)
                loss = loss + self.interclass_coef * (1.0 - _ap_rows(y, flat_r, self.lambda_val)[0])
            return loss


@register("blackbox_ap")
class BlackBoxAPLoss(_BlackboxBase):
    r"""BlackBox-AP as trained in SupRank's Table I (SupRank ``losses/blackbox_ap_loss.py``).

    ``1 - mean_q AP_q`` with ``AP_q = 1/|P| sum_{i in P} rk(y+)_i / rk(y)_i``: rk(y) exact
    ranks with the blackbox gradient (:class:`BlackboxRank`), rk(y+) the exact rank among
    the positives, y the scores shifted by ``margin * |N(0,1)| * (y* - 1/2)``.

    Defaults = SupRank's class and config: lambda_val = 4, margin = 0.02, random margin
    (``random_margin=False`` gives the deterministic +-margin/2 of RaMBO eq. 14), and the
    query inside its own list as a positive (``include_query=True``; the SupRank/Smooth-AP
    convention: rank 1, counted in |P|). No L_APC term (SupRank has none). Differences
    from the SupRank code: its ``+1e-5`` in the AP denominator is dropped, and queries with
    no positive besides themselves are skipped instead of counting AP = 1 (no such query
    with SupRank's m-per-class samplers). Ties (zero margin) rank the lower index first.

    With a reference set (memory), ``ref_includes_batch`` (default; what
    ``memory={"size": ..}`` passes) finds each query's own entry at index q (kept if
    ``include_query``, removed otherwise). Cost O(B N log N) time, O(B N) memory.
    """

    def __init__(
        self,
        lambda_val: float = 4.0,
        margin: float = 0.02,
        random_margin: bool = True,
        include_query: bool = True,
        ref_includes_batch: bool = True,
    ):
        super().__init__()
        _check_lambda_margin(lambda_val, margin)
        self.lambda_val = float(lambda_val)
        self.margin = float(margin)
        self.random_margin = bool(random_margin)
        self.include_query = bool(include_query)
        self.ref_includes_batch = bool(ref_includes_batch)

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, random_margin={self.random_margin}, "
                f"include_query={self.include_query}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, s, rel, valid = self._lists(embeddings, labels, ref_embeddings, ref_labels)
            if not bool(valid.any()):
                return attached_zero(emb)
            s, rel = s[valid], rel[valid]
            y = _shift(s, rel, self.margin, self.random_margin)
            return 1.0 - _ap_rows(y, rel, self.lambda_val).mean()
