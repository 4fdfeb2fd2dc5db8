# Paper tables (paper number beside ours) and the single-writer MLflow import.


rule table:
    input:
        spec=table_spec,
        metrics=table_metrics,
    output:
        md="results/tables/{paper}/{table}.md",
        csv="results/tables/{paper}/{table}.csv",
        tex="results/tables/{paper}/{table}.tex",
    params:
        overrides=json.dumps(config["run_overrides"], sort_keys=True),
    log:
        "results/logs/table/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro table {wildcards.paper} {wildcards.table} --runs-dir results/runs"
        " --out-prefix results/tables/{wildcards.paper}/{wildcards.table} --overrides {params.overrides:q} > {log} 2>&1"


rule track:
    input:
        track_inputs(),
    output:
        "results/mlflow/imported.json",
    params:
        args=track_args(),
        uri=TRACKING["tracking_uri"],
        experiment=TRACKING["experiment"],
        artifact_root=TRACKING["artifact_root"],
    log:
        "results/logs/track.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro track {params.args} --tracking-uri {params.uri:q} --experiment {params.experiment:q}"
        " --artifact-root {params.artifact_root} --out {output} > {log} 2>&1"
