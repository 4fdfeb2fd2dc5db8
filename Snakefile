# rankrepro: regenerate the tables of five rank-loss retrieval papers.
#   snakemake --cores all                          full reproduction (config.yaml)
#   snakemake --cores all --profile profiles/demo  the whole DAG on replicas, CPU, minutes
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from rankrepro.plan.profile_config import PROFILE_CONFIGFILE, profile_configfile
from rankrepro.plan.schema import check_config_files

min_version("9.1")

# Each config file read with the package's loader before a configfile: directive loads it with Snakemake's,
# which keeps the last of a key given twice and expands YAML aliases without bound where it merges mappings
# (rankrepro.plan.schema.check_config_files). The command line's --configfile files were loaded already, when
# Snakemake read its arguments: docs/planning.md "The config".
try:
    check_config_files(f for f in ("config.yaml", *workflow.overwrite_configfiles) if os.path.isfile(f))
except ValueError as err:
    raise WorkflowError(f"invalid config: {err}") from None


configfile: "config.yaml"


# A profile's settings file (profiles/demo/demo.yaml) over config.yaml and under the command line's
# --configfile and --config, also when these replace the profile's configfile: (rankrepro.plan.profile_config).
try:
    _PROFILE_CONFIGFILE = profile_configfile(config, sys.argv)
    check_config_files([_PROFILE_CONFIGFILE] if _PROFILE_CONFIGFILE else [])
except ValueError as err:
    raise WorkflowError(str(err)) from None
if _PROFILE_CONFIGFILE:

    configfile: _PROFILE_CONFIGFILE

    config.pop(PROFILE_CONFIGFILE, None)  # the directive merged the command line's config in again


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/sweeps.smk"
include: "workflow/rules/synthetic.smk"
include: "workflow/rules/hgldv2.smk"
include: "workflow/rules/pilot.smk"


rule all:
    input:
        TARGETS.manifest_outputs(),
        TARGETS.table_outputs(),
        TARGETS.sweep_outputs(),
        TARGETS.leaderboard_outputs(),
        TARGETS.synthetic_outputs(),
        TARGETS.hgldv2_outputs(),
        "results/mlflow/imported.json",
        TARGETS.report_outputs(),
        "results/README.md",
    default_target: True
