"""Full-state checkpoints: model, optimizer, scheduler, scaler, loss, RNG states, history."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from rankrepro.io import atomic_path


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, **state) -> None:
    """Write atomically: a job killed while saving keeps the previous checkpoint."""
    with atomic_path(path) as tmp:
        torch.save({**state, "rng": rng_state()}, tmp)


def load_checkpoint(path: str | Path) -> dict | None:
    path = Path(path)
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
