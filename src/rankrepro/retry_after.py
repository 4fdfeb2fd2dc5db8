"""The ``Retry-After`` header of an HTTP answer (RFC 9110 §10.2.3) as the seconds to wait.

Its two forms: delta-seconds (ASCII digits: ``120``) and an HTTP-date (``Wed, 21 Oct 2026 07:28:00 GMT``;
the obsolete RFC 850 and asctime forms too, read by :func:`email.utils.parsedate_to_datetime`). A date
without a zone is GMT, as HTTP-dates are; a date in the past means "now" (0 s). Anything else (``soon``,
``-5``, ``1.5``, ``nan``, an impossible date) is no hint: None, and the caller backs off as it would
without the header. Callers cap the wait (a server may ask for hours).

Used by the downloads (:mod:`rankrepro.data.downloads`) and the H-GLDv2 scrape (:mod:`rankrepro.hgldv2.scrape`).
"""

from __future__ import annotations

import email.utils
import re
import time
from datetime import timezone

__all__ = ["parse_retry_after"]

_DELTA_SECONDS = re.compile(r"[0-9]+")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait (>= 0) that ``value`` asks for, ``now`` (a Unix time, default the clock's)
    being when the answer came; None when ``value`` is absent, blank or neither form."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
