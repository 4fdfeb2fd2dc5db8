"""Reading torch files without running code, and checking that a state dict fits a module.

Every torch file rankrepro reads (a run's ``checkpoint.pt`` and ``model.pt``, pretrained weights)
goes through :func:`load_plain`: ``torch.load(weights_only=True)``, which builds only tensors and
plain Python data (dict, list, tuple, str, int, float, bool, None, ``OrderedDict``, ``Counter``).
A file that holds anything else -- a crafted pickle whose objects would run code when built, or a
format that needs other classes -- is refused before any of it is built: nothing in it runs.
Errors name the file, say what was refused or what is wrong, and say what to do; they never pass on
torch's advice to load the file with the protection off or to allow-list what was refused.

:func:`state_dict_mismatch` says how a state dict read from a file differs from a module's (keys
missing, keys unexpected, shapes), before anything is loaded into the module.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from rankrepro.messages import ShortMessage

__all__ = ["TorchFileError", "UnreadableTorchFileError", "UnsafeTorchFileError", "load_plain", "refused_object",
           "state_dict_mismatch"]

#: the most keys of one kind (missing, unexpected, other shape) a message lists; the rest are counted
LISTED_KEYS = 5
#: the most characters of torch's own wording a message quotes
QUOTED_CHARS = 200



class TorchFileError(ShortMessage, RuntimeError):
    """A torch file that cannot be used: ``path``, ``reason`` (why) and what to do, in the message."""

    def __init__(self, path: Path, reason: str, remedy: str):
        super().__init__(f"{path}: {reason}; {remedy}")
        self.path, self.reason = path, reason


class UnsafeTorchFileError(TorchFileError):
    """The file holds objects other than tensors and plain data; it was refused unbuilt."""


class UnreadableTorchFileError(TorchFileError):
    """The file cannot be read as a torch file (truncated, or another kind of file)."""


# torch's sentences that advise loading unsafely (weights_only=False) or allow-listing what it refused
_ADVICE = re.compile(r"weights_only|safe_globals|trust|documentation of torch\.load|file an issue|"
                     r"Weights only load failed|do those steps", re.IGNORECASE)


def _torch_wording(message: str) -> str:
    """Torch's error ``message`` without its advice (:data:`_ADVICE`), its sentences joined on one line and cut
    to :data:`QUOTED_CHARS`."""
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+|\n+", message) if s.strip()]
    kept = " ".join(s for s in sentences if not _ADVICE.search(s))
    return kept if len(kept) <= QUOTED_CHARS else kept[:QUOTED_CHARS - 3] + "..."


def refused_object(message: str) -> str:
    """What torch's weights-only unpickler refused, from its error ``message``: ``the global <module.name>``
    (a function or class the pickle names, e.g. ``posix.system``, ``exec``, ``mypackage.MyClass``), ``an
    object of <class>``, ``a call of <function>``, or else torch's own wording without its advice."""
    found = re.search(r"GLOBAL (\S+)", message)
    if found:
        blocked = re.search(r"whose module (\S+) is blocked", message)
        return f"the global {found.group(1)}" + (f" (module {blocked.group(1)} is blocked)" if blocked else "")
    found = re.search(r"create new object .* but got (.+)", message)
    if found:
        return f"an object of {found.group(1).strip()}"
    found = re.search(r"unrecognized function (.+)", message)
    if found:
        return f"a call of {found.group(1).strip()}"
    return _torch_wording(message) or "an object torch does not build"


def load_plain(path: str | Path, remedy: str):
    """The contents of the torch file ``path`` (on the CPU), built from tensors and plain data only.

    Raises :class:`UnsafeTorchFileError` for a file holding anything else (nothing in it is run; the message says
    what was refused, :func:`refused_object`), :class:`UnreadableTorchFileError` for one that cannot be read
    (truncated, another kind of file); both name ``path`` and end with ``remedy`` (what the user should do). A
    missing or inaccessible file raises the ``OSError`` of opening it."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnsafeTorchFileError(
            path, f"refused: its pickle names {refused_object(str(err))}, and only tensors and plain data are "
            "read (a crafted file, or a format this version does not read); nothing in it was run", remedy) from None
    except OSError as err:
        if err.filename is not None:  # opening it failed (missing, a folder, no permission): not its contents
            raise
        reason = _unreadable(err)  # torch's zip reader fails on a truncated file with a bare EINVAL
    except Exception as err:  # torch raises RuntimeError, EOFError, IndexError ... for a damaged file
        if "TorchScript" in str(err) or "legacy .tar format" in str(err):
            raise UnsafeTorchFileError(
                path, "refused: it is a TorchScript program or in torch's legacy .tar format, not tensors and plain "
                "data; nothing in it was run", remedy) from None
        reason = _unreadable(err)
    raise UnreadableTorchFileError(path, reason, remedy)


def _unreadable(err: BaseException) -> str:
    detail = ": ".join(filter(None, [type(err).__name__, _torch_wording(str(err))]))
    return f"cannot be read, it is truncated or not a torch file ({detail})"


def _listed(keys: list[str]) -> str:
    shown = ", ".join(keys[:LISTED_KEYS])
    return shown + (f" ... ({len(keys)} in all)" if len(keys) > LISTED_KEYS else "")


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "a scalar"


def state_dict_mismatch(module: torch.nn.Module, state) -> str:
    """How ``state`` (a state dict read from a file) differs from ``module.state_dict()``: its keys missing from
    ``state``, those ``state`` has and the module has not, and those whose tensors differ in shape (file, module),
    at most :data:`LISTED_KEYS` of each listed; "" when ``state`` fits (what ``module.load_state_dict(state)``
    accepts, strictly)."""
    if not isinstance(state, dict):
        return f"not a state dict (a {type(state).__name__})"
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [str(k) for k in state if k not in own]
    shapes = [f"{k} ({_shape(state[k])} in the file, {_shape(v)} in the module)" for k, v in own.items()
              if isinstance(v, torch.Tensor) and isinstance(state.get(k), torch.Tensor) and state[k].shape != v.shape]
    parts = [f"{label}: {_listed(keys)}" for label, keys in
             [("keys missing", missing), ("keys unexpected", unexpected), ("shapes differ", shapes)] if keys]
    return "; ".join(parts)
