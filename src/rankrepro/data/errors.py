"""The data errors that retrying cannot fix, and the CLI exit statuses they end with.

:class:`ChecksumError` and :class:`ManualDownloadRequired` are final; a :class:`DownloadError`
is raised once network failures outlived the in-job retries (:mod:`rankrepro.data.downloads`).
:func:`exit_codes` ends a CLI command with a distinct status for each: ``EXIT_CHECKSUM`` 3,
``EXIT_MANUAL`` 4, ``EXIT_DOWNLOAD`` 5.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rankrepro.messages import ShortMessage

__all__ = ["DownloadError", "ChecksumError", "ManualDownloadRequired", "exit_codes", "EXIT_CHECKSUM", "EXIT_MANUAL",
           "EXIT_DOWNLOAD"]


EXIT_CHECKSUM, EXIT_MANUAL, EXIT_DOWNLOAD = 3, 4, 5


class DownloadError(ShortMessage, RuntimeError):
    """A download failed; the message names the URL."""


class ChecksumError(DownloadError):
    """A file did not match its checksum (final: downloading again gives the same bytes)."""


class ManualDownloadRequired(ShortMessage, RuntimeError):
    """Files a licence keeps us from downloading are missing or wrong."""


@contextmanager
def exit_codes():
    """For CLI commands: a final data error prints its message and exits with its own status.

    :class:`ChecksumError` -> ``EXIT_CHECKSUM`` (3), :class:`ManualDownloadRequired` ->
    ``EXIT_MANUAL`` (4), any other :class:`DownloadError` (network failures after the
    in-job retries, HTTP 4xx) -> ``EXIT_DOWNLOAD`` (5). Other errors propagate (status 1).
    """
    try:
        yield
    except ChecksumError as err:
        _exit(err, EXIT_CHECKSUM)
    except ManualDownloadRequired as err:
        _exit(err, EXIT_MANUAL)
    except DownloadError as err:
        _exit(err, EXIT_DOWNLOAD)


def _exit(err: Exception, status: int):
    print(f"rankrepro: {type(err).__name__}: {err}", file=sys.stderr)
    raise SystemExit(status)
