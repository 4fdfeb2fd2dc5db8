"""Reading torch files without running code.

Every torch file rankrepro reads (a run's ``checkpoint.pt`` and ``model.pt``, pretrained weights)
goes through :func:`load_plain`: ``torch.load(weights_only=True)``, which builds only tensors and
plain Python data (dict, list, tuple, str, int, float, bool, None, ``OrderedDict``, ``Counter``).
A file that holds anything else -- a crafted pickle whose objects would run code when built, or a
format that needs other classes -- is refused before any of it is built: nothing in it runs.
Errors name the file and say what to do.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from rankrepro.messages import ShortMessage


class TorchFileError(ShortMessage, RuntimeError):
    """A torch file that cannot be used: ``path``, ``reason`` (why) and what to do, in the message."""

    def __init__(self, path: Path, reason: str, remedy: str):
        super().__init__(f"{path}: {reason}; {remedy}")
        self.path, self.reason = path, reason


class UnsafeTorchFileError(TorchFileError):
    """The file holds objects other than tensors and plain data; it was refused unbuilt."""


class UnreadableTorchFileError(TorchFileError):
    """The file cannot be read as a torch file (truncated, or another kind of file)."""


def _unpickler_reason(err: pickle.UnpicklingError) -> str:
    """The line of torch's weights-only error that says what was refused (e.g. ``Unsupported
    global: GLOBAL builtins.exec ...``), without its advice to load the file unsafely."""
    found = re.search(r"WeightsUnpickler error: ([^\n]*)", str(err))
    return (found.group(1) if found else str(err).splitlines()[0]).split(". Please use")[0]


def load_plain(path: str | Path, remedy: str):
    """The contents of the torch file ``path`` (on the CPU), built from tensors and plain data only.

    Raises :class:`UnsafeTorchFileError` for a file holding anything else (nothing in it is run),
    :class:`UnreadableTorchFileError` for one that cannot be read; both name ``path`` and end with
    ``remedy`` (what the user should do). A missing or inaccessible file raises the ``OSError``."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeTorchFileError(
            path, "refused: it holds objects other than tensors and plain data (a crafted file, or a format "
            f"this version does not read: {_unpickler_reason(err)}); nothing in it was run", remedy) from None
    except OSError:
        raise
    except Exception as err:  # torch raises RuntimeError, EOFError, IndexError ... for a damaged file
        detail = ": ".join([type(err).__name__, *str(err).splitlines()[:1]])
        raise UnreadableTorchFileError(path, f"cannot be read, it is truncated or not a torch file ({detail})",
                                       remedy) from err
