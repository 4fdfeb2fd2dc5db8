"""PNP loss (Li et al., AAAI 2022): penalise the negatives ranked before each positive."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .inputs import attached_zero, no_autocast, query_lists, self_mask
from .registry import register

__all__ = ["PNPLoss", "PNPO", "PNPIu", "PNPIb", "PNPDs", "PNPDq"]


# ------------------------------------------------------------------------------- PNP


def _pnp_rows(s_pos, s_neg, pos_valid, tau: float, f) -> torch.Tensor:
    """Sum over each query's positives of f(R): [b] (R [b, P] = smoothed negatives before)."""
    diff = (s_neg.unsqueeze(1) - s_pos.unsqueeze(2)) / tau  # [b, P, N]; -inf where k not negative
    R = torch.sigmoid(diff).sum(-1)  # [b, P], no "+1"
    return torch.where(pos_valid, f(R), torch.zeros_like(R)).sum(-1)


class PNPLoss(torch.nn.Module):
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

    Registered one name per variant: ``pnp_o``, ``pnp_iu``, ``pnp_ib``, ``pnp_ds``,
    ``pnp_dq`` (each accepts only its own hyper-parameters). Label-based: any layout, any
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
      distinct class. Its sampler (``class_random``) draws classes with replacement, so a
      class repeated in two blocks counts as negative there. An int reproduces that exactly
      (B must be a multiple; no reference set). With a sampler that draws distinct classes
      per batch the two are identical.

    Defaults: tau = 0.01 (paper); alpha = 4 (README's best SOP run ``--variant PNP-D_q
    --alpha 4``, which gives Table 3; the code's argparse default is 1 and the paper only
    says "as large as possible"); b = 4 (paper: best on SOP; b = 1 is best on VehicleID;
    the code's default is 2).

    Reference set (memory): positives/negatives are taken from the (detached) reference
    set. With ``ref_includes_batch`` (default; what ``memory={"size": ..}`` passes) each
    query's own entry is found at index q and handled as its self entry (kept as a
    positive if ``include_query``, removed otherwise).

    Memory: each query's positives are gathered (padded to P_max) and a [B, P_max, N]
    tensor is built, never B x B x B; ``chunk_size`` processes queries in blocks under
    activation checkpointing. The official sigmoid clamps x/tau to [-50, 50]: only changes
    values below e^-50, not reproduced. Float32 (autocast disabled inside).
    """

    VARIANTS = ("O", "Iu", "Ib", "Ds", "Dq")

    def __init__(
        self,
        variant: str = "Dq",
        tau: float = 0.01,
        b: float = 4.0,
        alpha: float = 4.0,
        include_query: bool = True,
        dq_legacy_sign: bool = False,
        index_blocks: int | None = None,
        ref_includes_batch: bool = True,
        chunk_size: int | None = None,
    ):
        super().__init__()
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(self.VARIANTS)}, got {variant!r}")
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        if not b > 0:
            raise ValueError(f"b must be > 0, got {b}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0 (the paper uses alpha >= 1), got {alpha}")
        if dq_legacy_sign and variant != "Dq":
            raise ValueError("dq_legacy_sign applies to variant 'Dq' only")
        if index_blocks is not None and (isinstance(index_blocks, bool) or int(index_blocks) < 2):
            raise ValueError(f"index_blocks must be an int >= 2 or None, got {index_blocks!r}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
        self.variant = variant
        self.tau = float(tau)
        self.b = float(b)
        self.alpha = float(alpha)
        self.include_query = bool(include_query)
        self.dq_legacy_sign = bool(dq_legacy_sign)
        self.index_blocks = None if index_blocks is None else int(index_blocks)
        self.ref_includes_batch = bool(ref_includes_batch)
        self.chunk_size = chunk_size

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

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, y, ref, yr, self_idx = query_lists(
                embeddings, labels, ref_embeddings, ref_labels, self.ref_includes_batch
            )
            if self.index_blocks is not None:
                if ref_embeddings is not None:
                    raise ValueError("index_blocks (official index-based layout) takes no reference set")
                B = emb.shape[0]
                if B % self.index_blocks:
                    raise ValueError(f"index_blocks={self.index_blocks} does not divide the batch size {B}")
                y = yr = torch.arange(B, device=emb.device) // self.index_blocks
            return self._loss(emb, y, ref, yr, self_idx)

    def _loss(self, emb, y, ref, yr, self_idx) -> torch.Tensor:
        same = y.unsqueeze(1) == yr.unsqueeze(0)  # [B, N]
        selfm = self_mask(same.shape, self_idx, emb.device)
        others = same if selfm is None else same & ~selfm
        valid = others.any(1)  # at least one positive besides the query itself
        if not bool(valid.any()):
            return attached_zero(emb)
        pos_mask = same if (self.include_query or selfm is None) else others
        q_idx = valid.nonzero(as_tuple=True)[0]
        pos_mask, neg_mask = pos_mask[q_idx], ~same[q_idx]
        n_pos = pos_mask.sum(1)
        p_max = int(n_pos.max())
        pos_idx = torch.topk(pos_mask.to(torch.uint8), p_max, dim=1).indices  # [Q, P_max]
        pos_valid = torch.arange(p_max, device=emb.device).unsqueeze(0) < n_pos.unsqueeze(1)

        sims = emb[q_idx] @ ref.T  # [Q, N]
        s_pos = sims.gather(1, pos_idx)
        s_neg = sims.masked_fill(~neg_mask, float("-inf"))

        Q = q_idx.shape[0]
        step = self.chunk_size or Q
        parts = []
        for a in range(0, Q, step):
            args = (s_pos[a : a + step], s_neg[a : a + step], pos_valid[a : a + step], self.tau, self.f)
            if self.chunk_size is not None and torch.is_grad_enabled() and Q > step:
                parts.append(checkpoint(_pnp_rows, *args, use_reentrant=False))
            else:
                parts.append(_pnp_rows(*args))
        per_query = torch.cat(parts) / n_pos.to(sims.dtype)
        value = per_query.mean()
        if self.variant == "Dq" and not self.dq_legacy_sign:
            return 1.0 - value
        return value


@register("pnp_o")
class PNPO(PNPLoss):
    """PNP-O (eq. 5): mean number of negatives before each positive. See :class:`PNPLoss`."""

    def __init__(self, tau: float = 0.01, include_query: bool = True, index_blocks: int | None = None,
                 ref_includes_batch: bool = True, chunk_size: int | None = None):
        super().__init__("O", tau=tau, include_query=include_query, index_blocks=index_blocks,
                         ref_includes_batch=ref_includes_batch, chunk_size=chunk_size)


@register("pnp_iu")
class PNPIu(PNPLoss):
    """PNP-I_u (eq. 7): f(R) = (1+R) log(1+R). See :class:`PNPLoss`."""

    def __init__(self, tau: float = 0.01, include_query: bool = True, index_blocks: int | None = None,
                 ref_includes_batch: bool = True, chunk_size: int | None = None):
        super().__init__("Iu", tau=tau, include_query=include_query, index_blocks=index_blocks,
                         ref_includes_batch=ref_includes_batch, chunk_size=chunk_size)


@register("pnp_ib")
class PNPIb(PNPLoss):
    """PNP-I_b (eq. 9): f(R) = (bR - log(1+bR)) / b^2; b = 4 (SOP best; 1 on VehicleID)."""

    def __init__(self, tau: float = 0.01, b: float = 4.0, include_query: bool = True,
                 index_blocks: int | None = None, ref_includes_batch: bool = True,
                 chunk_size: int | None = None):
        super().__init__("Ib", tau=tau, b=b, include_query=include_query, index_blocks=index_blocks,
                         ref_includes_batch=ref_includes_batch, chunk_size=chunk_size)


@register("pnp_ds")
class PNPDs(PNPLoss):
    """PNP-D_s (eq. 12): f(R) = log(1+R). See :class:`PNPLoss`."""

    def __init__(self, tau: float = 0.01, include_query: bool = True, index_blocks: int | None = None,
                 ref_includes_batch: bool = True, chunk_size: int | None = None):
        super().__init__("Ds", tau=tau, include_query=include_query, index_blocks=index_blocks,
                         ref_includes_batch=ref_includes_batch, chunk_size=chunk_size)


@register("pnp_dq")
class PNPDq(PNPLoss):
    """PNP-D_q (eq. 13): 1 - mean (1+R)^-alpha; alpha = 4 (README best run). See :class:`PNPLoss`."""

    def __init__(self, tau: float = 0.01, alpha: float = 4.0, include_query: bool = True,
                 dq_legacy_sign: bool = False, index_blocks: int | None = None,
                 ref_includes_batch: bool = True, chunk_size: int | None = None):
        super().__init__("Dq", tau=tau, alpha=alpha, include_query=include_query,
                         dq_legacy_sign=dq_legacy_sign, index_blocks=index_blocks,
                         ref_includes_batch=ref_includes_batch, chunk_size=chunk_size)
