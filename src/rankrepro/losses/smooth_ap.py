"""Smooth-AP (Brown et al., ECCV 2020), label-based and memory-lean."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .inputs import attached_zero, check_batch, no_autocast
from .registry import register

__all__ = ["SmoothAP"]


def _ap_rows(
    s_omega: torch.Tensor,
    s_pos: torch.Tensor,
    pos_valid: torch.Tensor,
    n_pos: torch.Tensor,
    tau: float,
) -> torch.Tensor:
    """Smoothed AP for a block of queries.

    s_omega [b, N]: scores against the retrieval set (-inf = not in the set);
    s_pos [b, P]: scores of each query's positives (padded); pos_valid [b, P] bool;
    n_pos [b]: |P| per query. Returns AP [b].
    """
    # rank in the whole set: 1 + sum_{j in Omega, j != i} sigma((s_j - s_i)/tau).
    # The j == i term is sigma(0) = 0.5 exactly (and its gradient cancels), so it is
    # summed and subtracted instead of being masked: no [b, P, N] mask is materialised.
    diff_all = (s_omega.unsqueeze(1) - s_pos.unsqueeze(2)) / tau  # [b, P, N]
    rank_all = 1.0 + torch.sigmoid(diff_all).sum(-1) - 0.5  # [b, P]
    # rank among the positives: same expression over P only ([b, P, P]).
    diff_pos = (s_pos.unsqueeze(1) - s_pos.unsqueeze(2)) / tau  # [b, P(i), P(j)]
    sig_pos = torch.sigmoid(diff_pos) * pos_valid.unsqueeze(1).to(diff_pos.dtype)
    rank_pos = 1.0 + sig_pos.sum(-1) - 0.5  # [b, P]
    ratio = torch.where(pos_valid, rank_pos / rank_all, torch.zeros_like(rank_all))
    return ratio.sum(-1) / n_pos.to(ratio.dtype)


@register("smooth_ap")
class SmoothAP(torch.nn.Module):
    r"""Smooth-AP loss: ``1 - mean_q AP_q`` with a sigmoid-relaxed ranking.

    For query q with retrieval set Omega and positives P (same label, finest level)::

        AP_q = 1/|P| sum_{i in P} (1 + sum_{j in P, j!=i} s((s_j - s_i)/tau))
                                 / (1 + sum_{j in Omega, j!=i} s((s_j - s_i)/tau))

    with ``s = torch.sigmoid`` and ``s_j`` the cosine similarity (dot product of the
    L2-normalised embeddings) of item j to q. It is label-based: any batch layout and
    any number of samples per class.

    ``include_query`` (only without a reference set):

    * ``True`` (default) reproduces the official code (Andrew-Brown1/Smooth_AP): the
      query sits in its own list (score s_qq) and counts as a positive, so Omega = the
      whole batch, P includes q and AP is normalised by |P| including q. The papers'
      numbers come from this code.
    * ``False`` is the paper text: q is removed from Omega and from P.

    With ``ref_embeddings``/``ref_labels`` (memory bank), Omega is exactly the reference
    set (detached, no gradient into it) and P its items with the query's label; nothing
    is removed or added and ``include_query`` is ignored. Passing ``ref = batch.detach()``
    therefore gives the value of ``include_query=True`` without a reference set (when no
    query is the only member of its class). To get the paper convention with a memory
    bank, do not put the current batch into it.

    Queries with no positive other than themselves (no ref set), or with no item of their
    label in the ref set, are skipped (mean over the rest); if none is left the loss is 0
    (still attached to the graph).

    Embeddings are used as given (no normalisation inside), so gradients include the
    radial component; PML's SmoothAPLoss normalises internally.

    Memory: only positives need a rank, so each query's positives are gathered (padded
    to the largest count P_max) and a [B, P_max, N] difference tensor is built — never
    B x B x B. ``chunk_size`` processes queries in blocks under activation
    checkpointing, bounding the autograd memory to one block at a time.

    The official code clamps x/tau to [-50, 50] before the sigmoid; this only changes
    values/gradients below e^-50 and is not reproduced. Computation is in float32
    (autocast is disabled inside).
    """

    def __init__(self, tau: float = 0.01, include_query: bool = True, chunk_size: int | None = None):
        super().__init__()
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
        self.tau = float(tau)
        self.include_query = bool(include_query)
        self.chunk_size = chunk_size

    def extra_repr(self) -> str:
        return f"tau={self.tau}, include_query={self.include_query}, chunk_size={self.chunk_size}"

    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        with no_autocast(embeddings):
            emb, y, ref, yr = check_batch(embeddings, labels, ref_embeddings, ref_labels)
            same_set = ref is None
            if same_set:
                ref, yr = emb, y
            return self._loss(emb, y, ref, yr, same_set)

    def _loss(self, emb, y, ref, yr, same_set: bool) -> torch.Tensor:
        B = emb.shape[0]
        pos_mask = y.unsqueeze(1) == yr.unsqueeze(0)  # [B, N]
        n_pos = pos_mask.sum(1)
        drop_self = same_set and not self.include_query
        if same_set:
            eye = torch.eye(B, dtype=torch.bool, device=emb.device)
            if drop_self:
                pos_mask = pos_mask & ~eye
                n_pos = n_pos - 1
                valid = n_pos > 0
            else:
                valid = n_pos > 1  # at least one positive besides the query itself
        else:
            valid = n_pos > 0
        if not bool(valid.any()):
            return attached_zero(emb)

        q_idx = valid.nonzero(as_tuple=True)[0]
        pos_mask = pos_mask[q_idx]
        n_pos = n_pos[q_idx]
        p_max = int(n_pos.max())
        # column indices of each query's positives (any order), padded with non-positives
        pos_idx = torch.topk(pos_mask.to(torch.uint8), p_max, dim=1).indices  # [Q, P_max]
        pos_valid = torch.arange(p_max, device=emb.device).unsqueeze(0) < n_pos.unsqueeze(1)

        sims = emb[q_idx] @ ref.T  # [Q, N]
        s_pos = sims.gather(1, pos_idx)
        if drop_self:
            s_omega = sims.masked_fill(eye[q_idx], float("-inf"))
        else:
            s_omega = sims

        Q = q_idx.shape[0]
        step = self.chunk_size or Q
        aps = []
        for a in range(0, Q, step):
            args = (s_omega[a : a + step], s_pos[a : a + step], pos_valid[a : a + step],
                    n_pos[a : a + step], self.tau)
            if self.chunk_size is not None and torch.is_grad_enabled() and Q > step:
                aps.append(checkpoint(_ap_rows, *args, use_reentrant=False))
            else:
                aps.append(_ap_rows(*args))
        ap = torch.cat(aps) if len(aps) > 1 else aps[0]
        return 1.0 - ap.mean()
