"""Device and mixed-precision handling: CUDA when present, CPU everywhere."""

from __future__ import annotations

import contextlib

import torch

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available")
    return device


def autocast(device: torch.device, amp: str):
    """Autocast context on CUDA (``fp16`` or ``bf16``); a no-op on CPU or with ``amp: none``."""
    if device.type != "cuda" or amp == "none":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=AMP_DTYPES[amp])


def grad_scaler(device: torch.device, amp: str) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for fp16 autocast on CUDA."""
    return torch.amp.GradScaler("cuda", enabled=device.type == "cuda" and amp == "fp16")
