"""Benchmarks (``python -m rankrepro bench <what>``): each module has ``main(out_dir)``
and writes a Markdown table to ``<out_dir>/<what>.md``."""

from __future__ import annotations

from pathlib import Path


def gpu_not_measured() -> str:
    """Why a benchmark's GPU rows are empty: no GPU here, or one was present and ``--device cpu`` kept it out."""
    import torch

    return "not measured: --device cpu" if torch.cuda.is_available() else "not measured: no GPU on this machine"


def write_record(out_dir: str | Path, name: str, record: dict, markdown: str) -> dict:
    """Write a benchmark's ``<out_dir>/<name>.json`` (``record``) and ``<name>.md`` (``markdown``), atomically."""
    from rankrepro.io import atomic_write_json, atomic_write_text

    out_dir = Path(out_dir)
    atomic_write_json(out_dir / f"{name}.json", record)
    atomic_write_text(out_dir / f"{name}.md", markdown)
    return record
