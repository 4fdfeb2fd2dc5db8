"""Smooth-AP (Brown et al., ECCV 2020): the AP head of the rank core with the sigmoid step."""

from __future__ import annotations

from .rank import APLoss, stepped
from .registry import register
from .steps import SigmoidStep

__all__ = ["SmoothAP"]

SmoothAP = register("smooth_ap", stepped("SmoothAP", __name__, APLoss, SigmoidStep, paper="smooth_ap", doc=r"""Smooth-AP loss: ``1 - mean_q AP_q`` with a sigmoid-relaxed ranking.

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

    With ``ref_embeddings``/``ref_labels`` (memory bank), Omega is the reference set
    (detached, no gradient into it) and P its items with the query's label. The query's
    own entry is the column ``self_index`` gives (``MemoryLoss`` passes it), kept iff
    ``include_query``; without ``self_index`` the reference set holds no query and
    nothing is removed. Passing ``ref = batch.detach()`` without ``self_index`` therefore
    gives the value of ``include_query=True`` without a reference set (when no query is
    the only member of its class).

    Queries with no positive other than themselves (no ref set), or with no item of their
    label in the ref set, are skipped (mean over the rest); if none is left the loss is 0
    (still attached to the graph).

    Embeddings are used as given (no normalisation inside), so gradients include the
    radial component; PML's SmoothAPLoss normalises internally.

    This is the AP head of the rank core with the sigmoid step
    (``APLoss(step=SigmoidStep(tau))``, :mod:`rankrepro.losses.rank`): only positives need
    a rank, so each query's positives are gathered (padded to the largest count P_max)
    and [b, P_max, N] blocks of queries are built — never B x B x B; the backward
    recomputes each block (``chunk_size`` queries, default from ``max_elements``).

    The official code clamps x/tau to [-50, 50] before the sigmoid; this only changes
    values/gradients below e^-50 and is not reproduced. Computation is in float32
    (autocast is disabled inside).
    """))
