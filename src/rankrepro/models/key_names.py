"""Loading published weights into networks written here with the publishers' parameter names."""

from __future__ import annotations

from torch import nn

__all__ = ["load_by_key_names"]


def load_by_key_names(module: nn.Module, name: str, state: dict) -> None:
    """Load ``state`` into ``module`` by key names and shapes: every key must match, except the BatchNorm
    ``num_batches_tracked`` counters, which files saved before PyTorch 0.4.1 (Cadene's BN-Inception, the
    2018 pytorch-mcn ports) lack and which then stay at 0 (a BatchNorm with a momentum does not use them).
    A missing or unexpected key is a ``RuntimeError`` naming ``name`` and the first five of each."""
    result = module.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(".num_batches_tracked")]
    if missing or result.unexpected_keys:
        unexpected = result.unexpected_keys
        raise RuntimeError(f"{name} weights do not match the network: missing keys {missing[:5]} ({len(missing)} "
                           f"in all), unexpected keys {unexpected[:5]} ({len(unexpected)} in all)")
