r"""The step surrogates of the differentiable-rank core (:mod:`rankrepro.losses.rank`):
``A_ij`` and ``R`` in rank(i) and rank+(i).

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
* :class:`BlackboxStep` -- RaMBO's blackbox interpolation: exact ranks by sorting whole
  rows, gradient by :class:`BlackboxRank` (BlackBox-AP, RaMBO's recall and mAP).

Tie convention: exact steps count ties as "ahead" (H(0) = 1), H^-(0) = sigma(0) = 0.5,
so the upper bound of a SupRank loss can fail only on exact score ties with a
less relevant item.
"""

from __future__ import annotations

import math

import torch

from rankrepro.registry import NonNegativeFloat, PositiveFloat

__all__ = [
    "Step",
    "HeavisideStep",
    "SigmoidStep",
    "SupRankStep",
    "BlackboxStep",
    "BlackboxRank",
    "blackbox_rank",
    "exact_ranks",
    "heaviside",
    "sup_heaviside",
    "STEP_FIXES",
]

STEP_FIXES = ("post_pr13", "pre_pr13")


def heaviside(t: torch.Tensor) -> torch.Tensor:
    """Exact step H(t) = 1 if t >= 0 else 0 (no gradient)."""
    return (t >= 0).to(t.dtype)


def sup_heaviside(t: torch.Tensor, **params) -> torch.Tensor:
    """SupRank's H^-(t) (eq. 4; see the module docstring for the branches); ``params`` are
    :class:`SupRankStep`'s (``tau``, ``rho``, ``delta``, ``start``, ``offset`` = None:
    sigma(delta / tau) + start, ``step_fix``)."""
    return SupRankStep(**params).h_minus(t)


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

    def grad(self, t, lower, g):
        """``g * deriv(t, lower)`` (``g`` broadcasts); a step may fuse it."""
        return self.deriv(t, lower) * g

    def plus_grad(self, t, g):
        """``g * plus_deriv(t)``."""
        return self.plus_deriv(t) * g

    #: the step can give ``grad`` from its value alone (:meth:`grad_from_value`), so the core
    #: may keep a small batch's values for the backward instead of recomputing them
    grad_from_values = False

    def value_(self, t, lower):
        """:meth:`value`, allowed to overwrite the temporary ``t``."""
        return self.value(t, lower)

    def grad_from_value(self, v, g):  # pragma: no cover - only for steps with grad_from_values
        raise NotImplementedError

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

    def __init__(self, tau: PositiveFloat = 0.01):
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

    grad_from_values = True

    def value_(self, t, lower):
        return torch.sigmoid_(t.div_(self.tau))

    def grad(self, t, lower, g):
        return self.grad_from_value(self.value_(t, lower), g)

    def grad_from_value(self, v, g):
        # one fused kernel: g / tau * sig * (1 - sig)
        return torch.ops.aten.sigmoid_backward(g / self.tau, v)

    def plus_grad(self, t, g):
        return self.grad(t, None, g)

    @property
    def self_value(self) -> float:
        return 0.5

    def __repr__(self) -> str:
        return f"SigmoidStep(tau={self.tau})"


class SupRankStep(Step):
    """SupRank: H^- on strictly-less-relevant pairs, exact H elsewhere and in rank+."""

    #: SupRank's step makes a loss SupRank's (Ramzi et al., TPAMI): every loss built on it (Sup-AP, ROADMAP,
    #: HAPPIER, ...) declares that paper through :func:`~rankrepro.losses.registry.compose` (losses.registry)
    paper = "suprank"

    has_deriv = True

    def __init__(
        self,
        tau: PositiveFloat = 0.01,
        rho: NonNegativeFloat = 100.0,
        delta: NonNegativeFloat = 0.05,
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

    def h_minus(self, t: torch.Tensor) -> torch.Tensor:
        """H^-(t) on every entry (eq. 4)."""
        offset = self.offset
        if offset is None:
            offset = 1.0 / (1.0 + math.exp(-self.delta / self.tau)) + self.start
        sig = torch.sigmoid(t / self.tau)
        lin = self.rho * ((t - self.delta) if self.step_fix == "post_pr13" else t) + offset
        return torch.where(t <= 0, sig, torch.where(t <= self.delta, sig + self.start, lin))

    def value(self, t, lower):
        return torch.where(lower, self.h_minus(t), heaviside(t))

    def deriv(self, t, lower):
        d = torch.where(t > self.delta, torch.full_like(t, self.rho), _dsigmoid(t, self.tau))
        return d * lower

    def __repr__(self) -> str:
        return (f"SupRankStep(tau={self.tau}, rho={self.rho}, delta={self.delta}, start={self.start}, "
                f"offset={self.offset}, step_fix={self.step_fix!r})")


def exact_ranks(scores: torch.Tensor) -> torch.Tensor:
    """Ranks per row, 1 = highest score (long). Ties: the lower column index ranks first."""
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    pos = torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(order)
    return torch.empty_like(order).scatter_(1, order, pos)


class BlackboxRank(torch.autograd.Function):
    r"""Normalised ranks with the blackbox-interpolation gradient (RaMBO paper, Algorithm 1).

    Forward: ``rk(y) / n`` per row (rank 1 = highest score, n = row length), like the
    official ``TrueRanker`` / ``rank_normalised`` (which gives ``(argsort-rank + 1) / n``).
    Backward, for the incoming gradient g = dL/d (rk / n)::

        y_lambda = y + lambda * g
        dL/dy    = -(rk(y) - rk(y_lambda)) / (n * lambda)

    the official code's sign convention (its ``+1e-8`` on lambda is dropped). The
    gradient is that of a piecewise-linear interpolation of L(rk(y)) whose faithfulness
    vs informativeness is set by lambda. ``normalise=False`` returns rk itself (exact
    integers) with the same gradient rule (g = dL/d rk is scaled by n before the step).
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, lambda_val: float, normalise: bool = True) -> torch.Tensor:
        n = scores.shape[1]
        ranks = exact_ranks(scores).to(scores.dtype)
        ctx.lambda_val, ctx.normalise = lambda_val, normalise
        ctx.save_for_backward(scores, ranks)
        return ranks / n if normalise else ranks

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        scores, ranks = ctx.saved_tensors
        lam = ctx.lambda_val
        n = scores.shape[1]
        if ctx.normalise:
            ranks_prime = exact_ranks(scores + lam * grad_output).to(ranks.dtype) / n
            return -(ranks / n - ranks_prime) / lam, None, None
        ranks_prime = exact_ranks(scores + lam * (grad_output * n)).to(ranks.dtype)
        return -(ranks - ranks_prime) / (n * lam), None, None


def blackbox_rank(scores: torch.Tensor, lambda_val: float) -> torch.Tensor:
    """Normalised ranks of each row of ``scores`` [Q, n] (see :class:`BlackboxRank`)."""
    return BlackboxRank.apply(scores, lambda_val)


class BlackboxStep(Step):
    """RaMBO's blackbox interpolation (Rolinek et al. 2020): exact ranks by sorting each whole
    row (ties: lower column first), the gradient of rank by :class:`BlackboxRank` with
    ``lambda_val``; rank+ exact (no gradient). Ranks whole rows: no list or count mask."""

    uniform = True
    sorting = True
    has_deriv = True

    def __init__(self, lambda_val: PositiveFloat = 4.0):
        if not (lambda_val > 0 and math.isfinite(lambda_val)):
            raise ValueError(f"lambda_val must be > 0, got {lambda_val}")
        self.lambda_val = float(lambda_val)

    def ranks(self, scores: torch.Tensor, relevant: torch.Tensor):
        """(rank [Q, n], rank+ [Q, n]) of every item; rank+ = 1 + relevant items ranked before (exact)."""
        rank = BlackboxRank.apply(scores, self.lambda_val, False)
        with torch.no_grad():
            n = rank.shape[1]
            if n <= 1 << 24 and rank.dtype in (torch.float32, torch.float64):  # ranks exact in float32:
                # the permutation's inverse by one scatter, O(n) (a third sort took 25% of the time at 1M)
                r = rank.round().long() - 1
                order = torch.empty_like(r).scatter_(1, r, torch.arange(n, device=r.device).expand_as(r))
            else:  # float ranks beyond 2^24 are not all distinct: sort them
                order = torch.argsort(rank, dim=1, stable=True)
            cum = torch.cumsum(relevant.gather(1, order).to(scores.dtype), dim=1)
            rank_plus = torch.empty_like(cum).scatter_(1, order, cum)
        return rank, rank_plus

    def __repr__(self) -> str:
        return f"BlackboxStep(lambda_val={self.lambda_val})"
