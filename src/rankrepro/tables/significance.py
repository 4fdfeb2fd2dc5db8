"""Whether a leaderboard's loss is within noise of the best loss of a column: a two-sided Welch t-test over seeds.

For each column (a metric), the **best** loss is the one with the highest mean over its seeds (several when their
means are equal). Every other loss with a number is compared with it by Welch's two-sided t-test of the two sets of
per-seed values (:func:`welch`: ``scipy.stats.ttest_ind(equal_var=False)``, unequal variances), t = (m_a - m_b) /
sqrt(s_a² / n_a + s_b² / n_b) with s the sample standard deviations (n - 1), on the Welch-Satterthwaite degrees of
freedom. The loss is **within noise** of the best when p >= :data:`ALPHA` (no difference at that level), **below**
when p < :data:`ALPHA`. With fewer than two seeds on either side there is no spread to test against: ``n/a (one
seed)``. Two sets without spread (every seed equal on both sides, to 1e-9 relative: a replica's constant metric,
scaled to percent) have no t: equal means are within noise (p = 1), different ones below (p = 0).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

__all__ = ["ALPHA", "BELOW", "BEST", "ONE_SEED", "TEST", "WITHIN", "noise_verdicts", "verdict_text", "welch"]

#: the test's level [our choice: the conventional 5 %]
ALPHA = 0.05
#: how the pages name the test
TEST = (f"two-sided Welch t-test over seeds (unequal variances, scipy.stats.ttest_ind(equal_var=False)), "
        f"alpha {ALPHA:g} [our choice]")
#: a loss's verdict in a column (the CSV's ``vs_best``)
BEST, WITHIN, BELOW, ONE_SEED = "best", "within noise", "below", "n/a (one seed)"


#: values closer than this (relative) are one value: 100 * 0.2 is 20.000000000000004
_REL = 1e-9


def _constant(values: Sequence[float]) -> bool:
    return math.isclose(max(values), min(values), rel_tol=_REL, abs_tol=_REL)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """``(t, p)`` of the two-sided Welch t-test of samples ``a`` against ``b`` (module docstring; two values or
    more each). Without spread on both sides: (0, 1) for equal means, (±inf, 0) otherwise."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's t-test needs two values or more on each side, got {len(a)} and {len(b)}")
    if _constant(a) and _constant(b):
        diff = a[0] - b[0]
        return (0.0, 1.0) if math.isclose(a[0], b[0], rel_tol=_REL) else (math.copysign(math.inf, diff), 0.0)
    from scipy import stats

    with warnings.catch_warnings():  # one side without spread (its variance 0) is exact, not a precision loss
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        result = stats.ttest_ind(list(a), list(b), equal_var=False)
    return float(result.statistic), float(result.pvalue)


def noise_verdicts(samples: list[Sequence[float] | None]) -> list[tuple[str, float | None]]:
    """``(verdict, p)`` per loss of one column from its per-seed values (None or empty: no number; verdict "",
    p None): :data:`BEST` for the highest mean, else :data:`WITHIN` or :data:`BELOW` by :func:`welch` against
    the best (p its p-value), :data:`ONE_SEED` where either has a single seed (module docstring)."""
    means = [sum(s) / len(s) if s else None for s in samples]
    present = [m for m in means if m is not None]
    if not present:
        return [("", None)] * len(samples)
    top = max(present)
    best = next(s for s, m in zip(samples, means) if m == top)
    out = []
    for s, m in zip(samples, means):
        if m is None:
            out.append(("", None))
        elif m == top:
            out.append((BEST, None))
        elif len(s) < 2 or len(best) < 2:
            out.append((ONE_SEED, None))
        else:
            p = welch(best, s)[1]
            out.append((WITHIN if p >= ALPHA else BELOW, p))
    return out


def verdict_text(verdict: str, p: float | None) -> str:
    """A verdict as the pages print it: ``best``, ``≈ (p 0.29)`` (within noise), ``< (p 0.004)`` (below),
    ``n/a (one seed)``, ``—`` (no number)."""
    if verdict in (WITHIN, BELOW):
        return f"{'≈' if verdict == WITHIN else '<'} (p {p:.2g})"
    return verdict or "—"
