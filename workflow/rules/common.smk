import os
# The plan and the rules' input functions (no rules). Imports no torch: the planner reads the
# config, the setups, the table specs and the catalog (data), and writes results/plan/; the rules
# read that plan through TARGETS (rankrepro.plan.targets: every path and argument, unit-tested).
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from rankrepro.plan.build import plan_from_config, write_plan
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import SCHEMA_DIR, PlanError
from rankrepro.plan.targets import HGLDV2_DIR, STAGED_DIR, TargetError, WorkflowTargets

validate(config, schema=str(SCHEMA_DIR / "config.schema.yaml"))
try:
    _PLAN_JSON = plan_from_config(config)
except PlanError as err:
    raise WorkflowError(f"invalid plan: {err}") from None

PLAN_DIR = "results/plan"
PLAN_FILE = str(write_plan(_PLAN_JSON, PLAN_DIR))
PLAN = Plan.from_json(_PLAN_JSON)
DATA_ROOT = config["data_root"]
RUNTIME = config["runtime"]
TRACKING = config["tracking"]
try:
    TARGETS = WorkflowTargets(PLAN, config, PLAN_FILE)
except TargetError as err:
    raise WorkflowError(f"config: {err}") from None


wildcard_constraints:
    dataset="[a-z0-9_]+",
    run_id="[a-z0-9_]+-[a-z0-9_]+-[0-9a-f]{10}",
    batch="[a-z0-9_]+_[0-9]+",
    paper="[a-z0-9_]+",
    table="[a-z0-9_]+",
    source="[a-z0-9_]+",


def evaluate_outputs():
    """A run's metrics.json and its training curve, shown in the report under its paper."""
    files = TARGETS.evaluate_files()
    return {"metrics": files["metrics"],
            "curve": report(files["curve"], caption="../report/curve.rst", subcategory="training curves",
                            category=TARGETS.run_paper, labels=TARGETS.run_labels)}


def train_outputs():
    """model.pt and history.csv, and evaluate_outputs() too with runtime.evaluate_in_train_job."""
    files = TARGETS.train_files()
    return {**files, **evaluate_outputs()} if RUNTIME["evaluate_in_train_job"] else files
