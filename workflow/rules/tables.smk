# Paper tables (paper number beside ours) from the plan, and the single-writer MLflow import of
# every run and table of the plan.


rule table:
    input:
        plan=table_plan,
        inputs=table_inputs,
    output:
        md="results/tables/{paper}/{table}.md",
        csv="results/tables/{paper}/{table}.csv",
        tex="results/tables/{paper}/{table}.tex",
    params:
        prefix="results/tables/{paper}/{table}",
    log:
        "results/logs/table/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro table --plan {input.plan:q} --runs-dir results/runs --out-prefix {params.prefix:q}"
        " > {log:q} 2>&1"


rule track:
    input:
        plan=PLAN_FILE,
        finished=track_inputs(),
    output:
        "results/mlflow/imported.json",
    params:
        uri=TRACKING["tracking_uri"],
        experiment=TRACKING["experiment"],
        artifact_root=TRACKING["artifact_root"],
    log:
        "results/logs/track.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro track --plan {input.plan:q} --tracking-uri {params.uri:q}"
        " --experiment {params.experiment:q} --artifact-root {params.artifact_root:q} --out {output:q} > {log:q} 2>&1"
