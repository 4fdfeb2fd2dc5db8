"""PNP loss (Li et al., AAAI 2022): penalise the negatives ranked before each positive."""

from __future__ import annotations

import torch

from rankrepro.registry import AtLeastTwoInt, PositiveFloat, PositiveInt

from .rank import DEFAULT_MAX_ELEMENTS, RankingLoss
from .steps import SigmoidStep
from .registry import register

__all__ = ["PNPLoss"]


class PNPLoss(RankingLoss):
    r"""PNP loss: a function of the number of negatives ranked before each positive.

    For query q with positives P and negatives N (finest-level labels), each positive i has::

        R(i) = sum_{k in N} sigmoid((s_k - s_i) / tau)          (eqs. 2-3; no "+1")

    and ``L_q = 1/|P| sum_{i in P} f(R(i))`` with, per variant (eqs. 5, 7, 9, 12, 13):

    =======  ==========================================  ===========================
    variant  f(R)                                        loss
    =======  ==========================================  ===========================
    ``O``    R                                           mean_q L_q
    ``Iu``   (1 + R) log(1 + R)                          mean_q L_q
    ``Ib``   (b R - log(1 + b R)) / b^2                  mean_q L_q
    ``Ds``   log(1 + R)                                  mean_q L_q
    ``Dq``   (1 + R)^(-alpha)                            1 - mean_q L_q
    =======  ==========================================  ===========================

    Registered one name per variant, a registration with fixed keywords:
    ``pnp_o``, ``pnp_iu``, ``pnp_ib``, ``pnp_ds``, ``pnp_dq`` (``variant`` fixed, and the
    hyper-parameters that do not apply fixed to None: each name accepts only its own --
    ``b`` for Ib, ``alpha`` and ``dq_legacy_sign`` for Dq). Label-based: any layout, any
    number of samples per class; queries with no positive besides themselves are skipped.

    Official code (interestingzhuo/PNPloss ``criteria/PNP.py``) vs the paper, as options:

    * ``include_query`` (default True = official code, whose runs gave the paper's
      numbers; PML's PNPLoss does the same): the query is one of its own positives, so the
      j = q term f(R(q)) (R(q) ~ 0, s_qq = 1 tops the list) is in the mean, which divides
      by |P| including q. Harmless for O/I (f(0) = 0), but for Dq it adds a near-constant
      1 and rescales. False = paper text (q not in its retrieval set).
    * ``dq_legacy_sign`` (Dq only, default False): the code released before commit
      809a508 (2023-02-07, "fix bug in pnp loss") tested ``variant == 'reci'`` and so
      returned ``mean (1+R)^-alpha`` without the ``1 -``: minimising it pushes negatives
      *above* positives. The paper (eq. 13) and the fixed code use ``1 - mean``; the
      released variant names suggest the bug came from renaming 'reci' -> 'PNP-D_q' for the
      release, so the paper's runs had the right sign. True reproduces the buggy release.
    * ``index_blocks`` (default None = label-based): the official loss ignores labels and
      treats the batch as contiguous blocks of ``index_blocks`` samples, each block a
      distinct class. Its sampler (``class_random``, the sampler of that name in
      :mod:`rankrepro.data.samplers`) draws classes with replacement, so a class repeated
      in two blocks counts as negative there. An int reproduces that exactly
      (B must be a multiple; no reference set). With a sampler that draws distinct classes
      per batch the two are identical.

    Defaults: tau = 0.01 (paper); alpha = 4 (README's best SOP run ``--variant PNP-D_q
    --alpha 4``, which gives Table 3; the code's argparse default is 1 and the paper only
    says "as large as possible"); b = 4 (paper: best on SOP; b = 1 is best on VehicleID;
    the code's default is 2).

    Reference set (memory): positives/negatives are taken from the (detached) reference
    set; each query's own entry is the column ``self_index`` gives (what
    ``memory={"size": ..}`` passes), kept as a positive if ``include_query``, removed
    otherwise; without ``self_index`` the reference set holds no query.

    A head over the rank core (:mod:`rankrepro.losses.rank`): R(i) = rank(i) - 1 with the
    sigmoid step counting the negatives only (``count_mask``), i.e. rank^-(i) of SupRank's
    eq. 3. Each query's positives are gathered (padded to P_max) and [b, P_max, N] blocks
    are built, never B x B x B; the backward recomputes each block (``chunk_size`` queries,
    default from ``max_elements``). The official sigmoid clamps x/tau to [-50, 50]: only
    changes values below e^-50, not reproduced. Float32 (autocast disabled inside).
    """

    VARIANTS = ("O", "Iu", "Ib", "Ds", "Dq")
    paper = "pnp"  # introduced by PNP (Li et al., AAAI 2022), every variant (losses.registry)
    def __init__(
        self,
        variant: str = "Dq",
        tau: PositiveFloat = 0.01,
        b: float | None = 4.0,
        alpha: float | None = 4.0,
        include_query: bool = True,
        dq_legacy_sign: bool = False,
        index_blocks: AtLeastTwoInt | None = None,
        chunk_size: PositiveInt | None = None,
        max_elements: PositiveInt = DEFAULT_MAX_ELEMENTS,
    ):
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(self.VARIANTS)}, got {variant!r}")
        # b / alpha belong to Ib / Dq; another variant ignores them (its registration fixes them to None)
        for name, value, owner in (("b", b, "Ib"), ("alpha", alpha, "Dq")):
            if value is None and variant == owner:
                raise ValueError(f"{name} is required for variant {owner!r}")
        if b is not None and not b > 0:
            raise ValueError(f"b must be > 0, got {b}")
        if alpha is not None and not alpha > 0:
            raise ValueError(f"alpha must be > 0 (the paper uses alpha >= 1), got {alpha}")
        if dq_legacy_sign and variant != "Dq":
            raise ValueError("dq_legacy_sign applies to variant 'Dq' only")
        if index_blocks is not None and (isinstance(index_blocks, bool) or int(index_blocks) < 2):
            raise ValueError(f"index_blocks must be an int >= 2 or None, got {index_blocks!r}")
        super().__init__(step=SigmoidStep(tau), include_query=include_query, chunk_size=chunk_size,
                         max_elements=max_elements)
        self.variant = variant
        self.b = None if b is None else float(b)
        self.alpha = None if alpha is None else float(alpha)
        self.dq_legacy_sign = bool(dq_legacy_sign)
        self.index_blocks = None if index_blocks is None else int(index_blocks)

    def extra_repr(self) -> str:
        s = f"variant={self.variant}, tau={self.tau}, include_query={self.include_query}"
        if self.variant == "Ib":
            s += f", b={self.b}"
        if self.variant == "Dq":
            s += f", alpha={self.alpha}, dq_legacy_sign={self.dq_legacy_sign}"
        if self.index_blocks is not None:
            s += f", index_blocks={self.index_blocks}"
        return s

    def f(self, R: torch.Tensor) -> torch.Tensor:
        """The variant's function of R (element-wise)."""
        v = self.variant
        if v == "O":
            return R
        if v == "Ds":
            return torch.log1p(R)
        if v == "Dq":
            return (1.0 + R).pow(-self.alpha)
        if v == "Iu":
            return (1.0 + R) * torch.log1p(R)
        b = self.b  # Ib
        return (b * R - torch.log1p(b * R)) / (b * b)

    def _level_labels(self, y, yr, ref_given: bool):
        if self.index_blocks is None:
            return y[:, :1], yr[:, :1]
        if ref_given:
            raise ValueError("index_blocks (official index-based layout) takes no reference set")
        B = y.shape[0]
        if B % self.index_blocks:
            raise ValueError(f"index_blocks={self.index_blocks} does not divide the batch size {B}")
        y = (torch.arange(B, device=y.device) // self.index_blocks).unsqueeze(1)
        return y, y

    def _metric(self, scores, level, list_mask, num_levels):
        """L_q = 1/|P| sum_{i in P} f(R(i)), R(i) = rank^-(i) (the negatives counted only)."""
        r = self._ranks(scores, level, list_mask=list_mask, need_rank_plus=False, count_mask="irrelevant")
        per_pos = torch.where(r.valid, self.f(r.count), torch.zeros_like(r.rank))
        return per_pos.sum(1) / r.valid.sum(1).to(per_pos.dtype)

    def _reduce(self, metric: torch.Tensor) -> torch.Tensor:
        value = metric.mean()
        if self.variant == "Dq" and not self.dq_legacy_sign:
            return 1.0 - value
        return value


# variants: registrations with fixed keywords (hyper-parameters of other variants fixed to None)
register("pnp_o", variant="O", b=None, alpha=None, dq_legacy_sign=False)(PNPLoss)
register("pnp_iu", variant="Iu", b=None, alpha=None, dq_legacy_sign=False)(PNPLoss)
register("pnp_ib", variant="Ib", alpha=None, dq_legacy_sign=False)(PNPLoss)
register("pnp_ds", variant="Ds", b=None, alpha=None, dq_legacy_sign=False)(PNPLoss)
register("pnp_dq", variant="Dq", b=None)(PNPLoss)
