"""Results of the papers that need no image dataset: toy figures and timing tables.

Each result is one module of this package holding one function registered in
:data:`SYNTHETIC`::

    @SYNTHETIC.register("pnp_fig6")
    def pnp_fig6(out_prefix: str, scale: str, seed: int) -> dict: ...

It computes the result at ``scale`` (``"paper"``: the paper's sizes, for the full DAG;
``"demo"``: a reduced size that runs in seconds, for the demo profile and the tests),
deterministically for ``seed``, and writes through :func:`write_result`:

* ``<out_prefix>.json``: ours and the paper's numbers, the scale, the seed, and the
  choices made where the paper leaves one open (``choices``);
* ``<out_prefix>.md``: the same as a page -- caption, a table with the paper's numbers
  beside ours, the choices, and the figure when there is one (``<out_prefix>.png``).

``python -m rankrepro synthetic <name> --out-prefix results/synthetic/<name> --scale paper``
runs one; the Snakemake rule ``synthetic`` runs every name listed in the config's
``synthetic.names``.
"""

from __future__ import annotations

import json
from pathlib import Path

from rankrepro.registry import Registry

__all__ = ["SYNTHETIC", "SCALES", "run", "write_result", "markdown_table"]

SYNTHETIC = Registry("synthetic", package="rankrepro.synthetic", context=("out_prefix", "scale", "seed"))
SCALES = ("paper", "demo")


def run(name: str, out_prefix: str | Path, scale: str = "paper", seed: int = 0) -> dict:
    """Compute result ``name`` and write its files; return the JSON record."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    return SYNTHETIC.build(name, context={"out_prefix": str(out_prefix), "scale": scale, "seed": int(seed)})


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; floats with 4 significant digits, None as an em dash."""
    def fmt(v):
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(out_prefix: str | Path, record: dict, body: str, figure=None) -> dict:
    """Write ``<out_prefix>.json`` (``record``), ``<out_prefix>.md`` and, given a matplotlib ``figure``,
    ``<out_prefix>.png``, each atomically. ``record`` must hold ``title``, ``source`` (where in
    ../shared/papers/), ``scale``, ``seed`` and ``choices`` (list of sentences); ``body`` is the
    Markdown between the header and the choices (tables with the paper beside ours)."""
    from rankrepro.io import atomic_path, atomic_write_json, atomic_write_text

    out_prefix = Path(out_prefix)
    missing = [k for k in ("title", "source", "scale", "seed", "choices") if k not in record]
    if missing:
        raise ValueError(f"result record lacks {missing}")
    lines = [f"# {record['title']}", "", f"Source: {record['source']}. Scale: `{record['scale']}`"
             f"{' (reduced: not the paper’s size)' if record['scale'] != 'paper' else ''}; seed {record['seed']}.", "",
             body.rstrip(), ""]
    if figure is not None:
        png = out_prefix.with_suffix(".png")
        with atomic_path(png) as tmp:
            figure.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        lines += [f"![{record['title']}]({png.name})", ""]
    if record["choices"]:
        lines += ["Choices where the paper leaves one open:", ""] + [f"- {c}" for c in record["choices"]] + [""]
    atomic_write_json(out_prefix.with_suffix(".json"), json.loads(json.dumps(record)))
    atomic_write_text(out_prefix.with_suffix(".md"), "\n".join(lines))
    return record
