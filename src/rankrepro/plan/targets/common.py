"""What every part of :class:`~rankrepro.plan.targets.WorkflowTargets` shares: its error, the fixed
result folders and files, and a run's folder and image-cache size."""

from __future__ import annotations

from rankrepro.messages import ShortMessage

#: where training batches stage their runs (``staged/<id>/``) before writing their folders
BATCHES_DIR = "results/batches"
STAGED_DIR = f"{BATCHES_DIR}/staged"
HGLDV2_DIR = "results/hgldv2"
#: the families of rules defined in a loop, one rule each per batch (train_batch_<batch>, train.smk) or per paper
#: (curves_<paper>, tables.smk): their outputs are runs' own files, which no wildcard pattern names
RULE_FAMILIES = ("train_batch", "curves")
#: every run's recipe card, grouped by paper and table, and its HTML copy shown in the report
RECIPES_MD, RECIPES_HTML = "results/recipes.md", "results/recipes.html"


class TargetError(ShortMessage, LookupError):
    """An unknown name asked of the plan, or a runtime setting the workflow cannot run with; the
    message names it (and what is planned, or the config key)."""


def run_dir(run_id: str) -> str:
    return f"results/runs/{run_id}"


def run_cache_size(run: dict) -> int | None:
    """The shorter side S of the run's image cache: its images.train_resize when that is an int
    (a squash pair or null: no cache, the run reads the originals; nor with images.face, whose boxes are
    in the originals' pixels)."""
    if run["images"].get("face") is not None:
        return None
    size = run["images"]["train_resize"]
    if isinstance(size, list) and len(size) == 1:
        size = size[0]
    return size if isinstance(size, int) and not isinstance(size, bool) else None
