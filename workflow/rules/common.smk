import os
from types import SimpleNamespace
# The plan and the rules' input functions (no rules). Imports no torch: the planner reads the
# config, the setups, the table specs and the catalog (data), and writes results/plan/ (files named
# by their content, a run's by its id); the rules read that plan through TARGETS
# (rankrepro.plan.targets: every path and argument, unit-tested).
from snakemake.exceptions import WorkflowError

from rankrepro.plan.build import plan_from_config, write_plan
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import PlanError
from rankrepro.plan.targets import HGLDV2_DIR, STAGED_DIR, TargetError, WorkflowTargets, run_dir
from rankrepro.tables.index import ESTIMATE_GPU

# where the config comes from, as messages name it: its files (the command line's over the Snakefile's), --config
CONFIG_SOURCES = ", ".join([str(f) for f in workflow.configfiles]
                           + (["--config"] if workflow.config_settings.config else []))
try:  # validates config (the schema, its defaults filled in) as `python -m rankrepro plan` does; the Snakefile
    # read its config files with the package's loader first (rankrepro.plan.schema.check_config_files)
    _PLAN_JSON = plan_from_config(config)
except PlanError as err:
    raise WorkflowError(f"invalid plan of the config from {CONFIG_SOURCES}: {err}") from None

# content-addressed (results/plan/plan.<hash>.json, tables/<paper>/<table>.<hash>.json, runs/<id>.json):
# another snakemake planning in this folder, even -n, never rewrites the files this workflow's jobs read
PLAN_FILES = write_plan(_PLAN_JSON, "results/plan")
PLAN_FILE = str(PLAN_FILES.plan)
PLAN = Plan.from_json(_PLAN_JSON)
DATA_ROOT = config["data_root"]
RUNTIME = config["runtime"]
TRACKING = config["tracking"]
try:
    TARGETS = WorkflowTargets(PLAN, config, PLAN_FILES)
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
    """A run's metrics.json."""
    return TARGETS.evaluate_files()


def train_outputs():
    """model.pt (unless runtime.keep_model is false) and history.csv, and evaluate_outputs() too with
    runtime.evaluate_in_train_job."""
    return TARGETS.train_files()


def batch_rule_settings(name, shared):
    """Apply the set-threads and set-resources of ``shared`` (train_batch), from the profile or the command line,
    to ``name``, one of a family of rules defined in a loop (train_batch_<batch>), under those given for ``name``
    itself; Snakemake applies them by exact rule name only."""
    settings, batch_rule = workflow.resource_settings, workflow.get_rule(name)
    threads, resources = settings._parsed_overwrite_threads, settings._parsed_overwrite_resources
    if shared in threads and name not in threads:
        batch_rule.resources["_cores"] = threads[shared]
    if shared in resources:
        batch_rule.resources.update(resources[shared])
        batch_rule.resources.update(resources.get(name, {}))
