# rankrepro: regenerate the tables of five rank-loss retrieval papers.
#   snakemake --cores all                          full reproduction (config.yaml)
#   snakemake --cores all --profile profiles/demo  the whole DAG on replicas, CPU, minutes
from snakemake.utils import min_version

min_version("9.1")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/cache.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/sweeps.smk"
include: "workflow/rules/synthetic.smk"
include: "workflow/rules/hgldv2.smk"


rule all:
    input:
        TARGETS.manifest_outputs(),
        TARGETS.table_outputs(),
        TARGETS.sweep_outputs(),
        TARGETS.synthetic_outputs(),
        TARGETS.hgldv2_outputs(),
        "results/mlflow/imported.json",
        TARGETS.report_outputs(),
        "results/README.md",
    default_target: True
