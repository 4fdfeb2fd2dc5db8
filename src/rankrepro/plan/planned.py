"""Names planned but not implemented yet (``planned.yaml`` in this package), and pending cells.

A cell whose setup, dataset or loss is *planned* (listed in ``planned.yaml``) but not
implemented yet is pending: the table shows the paper number alone, with the reason. A
name that is neither registered nor planned is an error naming the file and key.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.plan.merge import merge_layers
from rankrepro.plan.schema import PlanError, load_yaml_mapping
from rankrepro.plan.setups import Setup, setup_layers

__all__ = ["PLANNED_FILE", "dataset_pending", "load_planned", "run_pending"]

PLANNED_FILE = Path(__file__).resolve().parent / "planned.yaml"


def load_planned(path: Path = PLANNED_FILE) -> dict:
    """Names planned but not implemented yet: ``{"setups": {...}, "datasets": {...}, "losses": {...}}``."""
    data = load_yaml_mapping(path, allow_empty=True)
    return {k: set(data.get(k) or ()) for k in ("setups", "datasets", "losses")}


def run_pending(setup: str, loss: str, where: str, *, setups: dict[str, Setup], catalog: dict,
                planned: dict) -> str | None:
    """Why the run of ``loss`` in ``setup`` cannot be planned yet (a planned name), None when it can;
    an unknown name fails (``where``: the spec file and key)."""
    if setup not in setups:
        if setup in planned["setups"]:
            return f"setup {setup} not implemented yet"
        raise PlanError(f"{where}: unknown setup {setup!r}; known: {', '.join(sorted(setups))}; "
                        f"planned: {', '.join(sorted(planned['setups']))}")
    dataset = merge_layers(setup_layers(setup, setups))[0].get("dataset")
    if dataset not in catalog["dataset"] and dataset in planned["datasets"]:
        return f"dataset {dataset} not implemented yet"
    if loss not in catalog["loss"]:
        if loss in planned["losses"]:
            return f"loss {loss} not implemented yet"
        raise PlanError(f"{where}: unknown loss {loss!r}; registered: {', '.join(sorted(catalog['loss']))}")
    return None


def dataset_pending(dataset: str, where: str, *, catalog: dict, planned: dict) -> str | None:
    """Why ``dataset`` has no manifest yet (planned), None when it is registered; unknown names fail."""
    if dataset in catalog["dataset"]:
        return None
    if dataset in planned["datasets"]:
        return f"dataset {dataset} not implemented yet"
    raise PlanError(f"{where}: unknown dataset {dataset!r}; registered: "
                    f"{', '.join(sorted(catalog['dataset']))}; planned: "
                    f"{', '.join(sorted(planned['datasets']))}")
