"""Blackbox differentiation of ranking (RaMBO, Rolinek et al., CVPR 2020) and its losses.

* :class:`BlackboxRank` — exact ranks forward, blackbox interpolation backward; the rank
  core's :class:`~rankrepro.losses.steps.BlackboxStep` (both live in :mod:`rankrepro.losses.steps`).
* ``rambo_recall`` — RaMBO's recall loss (eqs. 16-20), ``weight_fn`` "log" / "loglog":
  w(rank - rank+) over the core's blackbox ranks.
* ``rambo_map`` — RaMBO's AP / mAP loss (eqs. 21-23; official ``MapLoss``) for retrieval: the
  core's AP head (:func:`~rankrepro.losses.rank.ap_head`) over blackbox ranks.
* ``blackbox_ap`` — BlackBox-AP as used in SupRank's Table I (SupRank ``BlackBoxAPLoss``): a
  registration of ``rambo_map`` (no L_APC term, SupRank's defaults).
* :class:`RaMBOMapDetLoss` ("rambo_map_det") — the official ``MapLoss`` itself, over [rows, classes]
  scores (object detection, RaMBO section 5.2): the classifier loss of the detector's
  ``faster_rcnn`` loss (:mod:`rankrepro.losses.detection`); not registered on its own.

The retrieval lists come from :func:`rankrepro.losses.inputs.retrieval_lists` (the query's
own entry given by ``self_index``); the lists are then the rows without the own entry when
it is left out (``include_query=False``), so that the blackbox ranks are normalised by the
list's length as in the official code.
"""

from __future__ import annotations

from collections import deque

import torch

from rankrepro.registry import NonNegativeFloat, NonNegativeInt, PositiveFloat

from .inputs import attached_zero, drop_self, no_autocast, retrieval_lists
from .rank import ap_head, relevant_ranks
from .registry import compose, register
from .steps import BlackboxRank, BlackboxStep, blackbox_rank, exact_ranks

__all__ = ["BlackboxRank", "BlackboxStep", "blackbox_rank", "exact_ranks", "RaMBORecallLoss", "RaMBOMapLoss",
           "BlackBoxAPLoss", "RaMBOMapDetLoss"]


def _check_margin(margin: float) -> None:
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin}")


def _shift(s: torch.Tensor, rel: torch.Tensor, margin: float, random_margin: bool) -> torch.Tensor:
    """Score margin (eq. 14): positives down, negatives up by margin/2 (x |N(0,1)| if random)."""
    dev = rel.to(s.dtype) - 0.5
    if random_margin:
        dev = dev * torch.randn_like(s).abs()
    return s - margin * dev


def _ap_rows(y: torch.Tensor, rel: torch.Tensor, step: BlackboxStep) -> torch.Tensor:
    """AP per row of ``y`` [Q, n] (eq. 21): the core's AP head over blackbox ranks, rk(y+) / rk(y)."""
    return ap_head(relevant_ranks(y, rel, step), rel.sum(1).to(y.dtype))


class _BlackboxBase(torch.nn.Module):
    """Shared input handling: scores [B, N'] and relevance of each query's retrieval list."""

    family = "rank"  # a ranking metric (recall, AP) through blackbox ranks (losses.registry)
    paper = "rambo"  # introduced by RaMBO (Rolínek et al., CVPR 2020) (losses.registry)

    include_query: bool

    def __init__(self, lambda_val: float, margin: float, include_query: bool):
        super().__init__()
        _check_margin(margin)
        self.step = BlackboxStep(lambda_val)
        self.margin = float(margin)
        self.include_query = bool(include_query)

    @property
    def lambda_val(self) -> float:
        return self.step.lambda_val

    def _lists(self, embeddings, labels, ref_embeddings, ref_labels, self_index):
        lists = retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index)
        s, rel, own = lists.scores(), lists.same(), lists.self_index
        n_other = rel.sum(1) - (0 if own is None else 1)  # positives besides the query
        if not self.include_query:
            s, rel = drop_self(s, own), drop_self(rel, own)
        return lists.emb, s, rel, n_other > 0


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
    * ``batch_memory`` (default 0: none): the official ``BatchMemoryRecallLoss(batch_memory,
      ...)``, the paper's "score memory" (section 4.3: "It stores the scores for elements of
      the last tau previous batches ... All entries are concatenated for loss evaluation, but
      the gradients only flow through the current batch"; supplement A: "a batch memory of
      length 3"). The loss keeps the detached score rows and relevance rows of the last
      ``batch_memory`` training batches (margin-free scores, own entry removed) and appends
      them, as extra query rows, to the current batch's rows; the reduction then runs over
      all rows. A stored row is ranked on its own, so it never enters a current query's
      ranking: it adds a constant to the loss and its positives to the ``pairs``
      denominator (the current rows' gradient shrinks by their share of the pairs, and so
      does the blackbox's effective lambda), and -- with ``length: "rows"``, the official
      scaling -- its rows to the row count, so the current rows' r grow by
      (1 + stored batches) x B / row length (x 4 in-batch once 3 batches are stored).
      Rows are stored only when gradients are on (training), survive epochs, and are part
      of the state dict (a checkpoint resumes them); stored rows of another length than
      the current batch's (after a shorter batch) are dropped, where the official
      ``torch.cat`` would fail. It takes no reference set. The other memory,
      ``memory={"size": tau * B}`` (:class:`rankrepro.losses.memory.MemoryLoss`), instead
      enlarges every current query's retrieval list with the earlier batches' embeddings,
      a reading of the paper's text that no official code has.

    With a reference set, each query's own entry (the column ``self_index`` gives; the
    memory passes it) is removed unless ``include_query``. A head over the rank core
    (:class:`~rankrepro.losses.steps.BlackboxStep`): r_i = rank(i) - rank+(i). Cost
    O(B N log N) time, O(B N) memory (x (1 + batch_memory) rows with the row memory). Float32.
    """

    _WEIGHTS = ("log", "loglog")

    def __init__(
        self,
        lambda_val: PositiveFloat = 4.0,
        margin: float = 0.02,
        weight_fn: str = "loglog",
        reduction: str = "pairs",
        length: str = "ref",
        include_query: bool = False,
        batch_memory: NonNegativeInt = 0,
    ):
        super().__init__(lambda_val, margin, include_query)
        if batch_memory < 0:
            raise ValueError(f"batch_memory must be >= 0, got {batch_memory}")
        if weight_fn not in self._WEIGHTS:
            raise ValueError(f"weight_fn must be one of {', '.join(self._WEIGHTS)}, got {weight_fn!r}")
        if reduction not in ("pairs", "queries"):
            raise ValueError(f"reduction must be 'pairs' or 'queries', got {reduction!r}")
        if length not in ("ref", "rows"):
            raise ValueError(f"length must be 'ref' or 'rows', got {length!r}")
        self.weight_fn = weight_fn
        self.reduction = reduction
        self.length = length
        self.batch_memory = int(batch_memory)
        self.stored: deque = deque(maxlen=max(self.batch_memory, 1))  # (scores, relevance, valid) rows, oldest first

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, weight_fn={self.weight_fn}, "
                f"reduction={self.reduction}, length={self.length}, include_query={self.include_query}, "
                f"batch_memory={self.batch_memory}")

    def _with_stored_rows(self, s, rel, valid):
        """The current rows followed by the stored ones of the same length; stores the current rows
        (detached) when training. Rows of another length are dropped (module docstring)."""
        if not self.batch_memory:
            return s, rel, valid
        while self.stored and self.stored[0][0].shape[1] != s.shape[1]:
            self.stored.popleft()
        rows = list(self.stored)
        if torch.is_grad_enabled():
            self.stored.append((s.detach(), rel.detach(), valid.detach()))
        return tuple(torch.cat([current, *(row[i].to(current.device) for row in rows)])
                     for i, current in enumerate((s, rel, valid)))

    def get_extra_state(self):
        return {"stored": list(self.stored)}

    def set_extra_state(self, state) -> None:
        self.stored.clear()
        self.stored.extend(state["stored"])

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None) -> torch.Tensor:
        if self.batch_memory and ref_embeddings is not None:
            raise ValueError("rambo_recall with batch_memory > 0 (score rows) takes no reference set "
                             "(no cross-batch embedding memory)")
        with no_autocast(embeddings):
            emb, s, rel, valid = self._lists(embeddings, labels, ref_embeddings, ref_labels, self_index)
            current_valid = bool(valid.any())
            s, rel, valid = self._with_stored_rows(s, rel, valid)
            if not current_valid:
                return attached_zero(emb)
            n_rows = s.shape[0]  # the official code's "length" (all query rows, the stored ones included)
            s, rel = s[valid], rel[valid]
            y = _shift(s, rel, self.margin, random_margin=False)
            r = relevant_ranks(y, rel, self.step, need_rank_plus=True)
            scale = 1.0 if self.length == "ref" else n_rows / y.shape[1]
            # r >= 0 exactly (integer ranks); no clamp: it would zero dw/dr at r = 0
            cnt = torch.where(r.valid, (r.rank - r.rank_plus) * scale, torch.zeros_like(r.rank))
            w = torch.log1p(cnt) if self.weight_fn == "log" else torch.log1p(torch.log1p(cnt))
            w = torch.where(r.valid, w, torch.zeros_like(w))
            if self.reduction == "pairs":
                return w.sum() / r.valid.sum().to(w.dtype)
            return (w.sum(1) / r.valid.sum(1).to(w.dtype)).mean()


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

    Memory (the paper's last tau batches): ``memory={"size": tau * B}``; each query's own
    entry is the column ``self_index`` gives (the memory passes it). The AP is the rank
    core's AP head over :class:`~rankrepro.losses.steps.BlackboxStep` ranks.
    Cost O(B N log N) time, O(B N) memory. Float32.
    """

    def __init__(
        self,
        lambda_val: PositiveFloat = 4.0,
        margin: float = 0.02,
        random_margin: bool = True,
        interclass_coef: float = 1.0 / 3.0,
        include_query: bool = False,
    ):
        super().__init__(lambda_val, margin, include_query)
        if not 0.0 <= interclass_coef <= 1.0:
            raise ValueError(f"interclass_coef must be in [0, 1], got {interclass_coef}")
        self.random_margin = bool(random_margin)
        self.interclass_coef = float(interclass_coef)

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, random_margin={self.random_margin}, "
                f"interclass_coef={self.interclass_coef}, include_query={self.include_query}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, s, rel, valid = self._lists(embeddings, labels, ref_embeddings, ref_labels, self_index)
            if not bool(valid.any()):
                return attached_zero(emb)
            loss = attached_zero(emb)
            if self.interclass_coef < 1.0:
                sv, rv = s[valid], rel[valid]
                y = _shift(sv, rv, self.margin, self.random_margin)
                loss = loss + (1.0 - self.interclass_coef) * (1.0 - _ap_rows(y, rv, self.step).mean())
            if self.interclass_coef > 0.0:
                flat_s, flat_r = s.reshape(1, -1), rel.reshape(1, -1)
                y = _shift(flat_s, flat_r, self.margin, self.random_margin)
                loss = loss + self.interclass_coef * (1.0 - _ap_rows(y, flat_r, self.step)[0])
            return loss


BlackBoxAPLoss = register("blackbox_ap", compose(
    "BlackBoxAPLoss", __name__, lambda v: RaMBOMapLoss(**v), RaMBOMapLoss, fixed={"interclass_coef": 0.0},
    include_query=True, doc=r"""BlackBox-AP as trained in SupRank's Table I (SupRank ``losses/blackbox_ap_loss.py``).

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

    It is :class:`RaMBOMapLoss` with ``interclass_coef`` fixed to 0 and the SupRank
    defaults. With a reference set (memory), each query's own entry is the column
    ``self_index`` gives (kept if ``include_query``, removed otherwise). Cost O(B N log N)
    time, O(B N) memory.
    """))


class RaMBOMapDetLoss(torch.nn.Module):
    r"""RaMBO's mAP loss for object detection ("rambo_map_det"): the official ``MapLoss`` over
    scores [rows, classes] and 0/1 targets of the same shape (martius-lab/blackbox-backprop
    ``blackbox_backprop/mAP.py``, unchanged since it was added in 075bf56).

    With y = the scores shifted by the margin (below) and, per ranked list, AP = 1/|P| sum_{i in P}
    rk(y+)_i / rk(y)_i (eq. 21; rk(y) blackbox-differentiated, rk(y+) exact)::

        L_mAP = 1 - mean_{c present} AP(column c of [current rows; stored rows])
        L_APC = 1 - AP(every score of the current rows, flattened into one list)     (eq. 23)
        loss  = (1 - interclass_coef) * L_mAP + interclass_coef * L_APC

    Each column (class) is ranked over the current rows plus the detached rows of the last
    ``memory_batches`` calls (the paper's memory, section 4.3: "the gradients only flow through the
    current batch"); L_APC uses the current rows only. A class is *present* when the rows it is
    ranked over -- the current and the stored ones, as in the official code (whose mask reads the
    concatenated targets) -- hold one of its positives; absent classes are left out of the mean.

    Defaults: lambda_val = 0.5, margin = 0.15, memory_batches = 7, interclass_coef = 1/3
    (L_mAP : L_APC = 2 : 1), all from the paper, section 5.2 (detection). Official code vs
    paper, as an option:

    * ``random_margin`` (default True = official ``MapLoss``, whose runs gave the paper's
      numbers): each score is shifted by ``margin * |N(0,1)| * (t - 1/2)``, fresh draws at
      every call from torch's global RNG, in the official order and shapes (one draw for the
      [classes, rows] matrix of L_mAP, the stored rows included, then one for the flattened
      list of L_APC), so that a seeded call reproduces the official code's value. False = the
      paper's eq. 14: positives - margin/2, negatives + margin/2.

    Other differences from the official code, none of which changes a value beyond 1e-5: the
    ``+1e-5`` in the AP denominator and the ``+1e-8`` on lambda are dropped; exact ties rank
    the lower index first (the official argsort leaves them to the sort). The official code
    fails on a call whose targets hold no positive at all (NaN) or with ``batch_memory = 0``;
    here such a term is 0 and ``memory_batches = 0`` means no memory.

    Memory: rows are stored (detached, scores before the margin) after each call made with
    gradients on (training), at most ``memory_batches`` calls, oldest dropped first; they
    survive epochs, are part of the state dict (``get_extra_state``: a checkpoint resumes
    them exactly) and :meth:`reset` clears them. Float32 (autocast disabled inside). Cost
    O(C n log n + n C log(n C)) for n rows of C classes (sorting).
    """

    def __init__(
        self,
        lambda_val: PositiveFloat = 0.5,
        margin: NonNegativeFloat = 0.15,
        interclass_coef: float = 1.0 / 3.0,
        memory_batches: NonNegativeInt = 7,
        random_margin: bool = True,
    ):
        super().__init__()
        _check_margin(margin)
        if not 0.0 <= interclass_coef <= 1.0:
            raise ValueError(f"interclass_coef must be in [0, 1], got {interclass_coef}")
        if memory_batches < 0:
            raise ValueError(f"memory_batches must be >= 0, got {memory_batches}")
        self.step = BlackboxStep(lambda_val)
        self.margin = float(margin)
        self.interclass_coef = float(interclass_coef)
        self.memory_batches = int(memory_batches)
        self.random_margin = bool(random_margin)
        self.stored: deque = deque(maxlen=max(self.memory_batches, 1))  # (scores, targets), oldest first

    @property
    def lambda_val(self) -> float:
        return self.step.lambda_val

    def extra_repr(self) -> str:
        return (f"lambda_val={self.lambda_val}, margin={self.margin}, interclass_coef={self.interclass_coef}, "
                f"memory_batches={self.memory_batches}, random_margin={self.random_margin}")

    def reset(self) -> None:
        """Forget the stored rows."""
        self.stored.clear()

    def get_extra_state(self):
        return {"stored": [list(rows) for rows in self.stored]}

    def set_extra_state(self, state) -> None:
        self.stored.clear()
        self.stored.extend(tuple(rows) for rows in state["stored"])

    def _one_minus_map(self, y: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """1 - mean AP over the rows of ``y`` [K, n] (margin-shifted here) that hold a positive."""
        y = _shift(y, rel, self.margin, self.random_margin)
        present = rel.sum(1) > 0
        if not bool(present.any()):
            return attached_zero(y)
        return 1.0 - _ap_rows(y[present], rel[present], self.step).mean()

    def forward(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss of ``scores`` [rows, classes] with 0/1 ``targets`` of the same shape (module docstring)."""
        if scores.ndim != 2 or targets.shape != scores.shape:
            raise ValueError(f"scores and targets must be [rows, classes] of the same shape, got "
                             f"{tuple(scores.shape)} and {tuple(targets.shape)}")
        if self.stored and self.stored[0][0].shape[1] != scores.shape[1]:
            raise ValueError(f"scores have {scores.shape[1]} classes but the stored rows "
                             f"{self.stored[0][0].shape[1]}: reset() the memory first")
        with no_autocast(scores):
            s, rel = scores.float(), targets.to(torch.float32)
            stored = list(self.stored) if self.memory_batches else []
            # the official order: the current rows first; [classes, rows] views of contiguous rows,
            # so that the margin's draws match the official code's
            long_s = torch.cat([s, *(row[0].to(s.device) for row in stored)])
            long_rel = torch.cat([rel, *(row[1].to(s.device) for row in stored)])
            cross = self._one_minus_map(long_s.t(), long_rel.t())
            inter = self._one_minus_map(s.reshape(1, -1), rel.reshape(1, -1))
            if self.memory_batches and torch.is_grad_enabled():
                self.stored.append((s.detach(), rel.detach()))
            return (1.0 - self.interclass_coef) * cross + self.interclass_coef * inter
