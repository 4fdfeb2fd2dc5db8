# One job per planned run. A retried job resumes from results/runs/<id>/checkpoint.pt. With
# runtime.evaluate_in_train_job the same job evaluates (metrics.json, curve.png) and evaluate.smk has no rule.


rule run_config:
    output:
        "results/runs/{run_id}/run.json",
    params:
        run=run_json,
    log:
        "results/logs/run_config/{run_id}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro write-run --run {params.run:q} --out {output:q} > {log:q} 2>&1"


rule train:
    input:
        run="results/runs/{run_id}/run.json",
        manifest=run_manifest,
        cache=ancient(run_train_cache),  # a rebuilt cache does not retrain a finished run
        eval_cache=ancient(run_fused_eval_cache),
    output:
        **train_outputs(),
    params:
        manifest=run_manifest_dir,
        device=RUNTIME["device"],
        workers=RUNTIME["num_workers"],
        cache=run_train_cache_args,
        evaluate=run_fused_evaluate_args,
    log:
        "results/logs/train/{run_id}.log",
    conda:
        "../../envs/train.yaml"
    threads: 8
    resources:
        gpu=1,
        mem_mb=64000,
        runtime=48 * 60,
    shell:
        "python -m rankrepro train --run {input.run:q} --manifest {params.manifest:q} --device {params.device:q}"
        " --num-workers {params.workers:q} --threads {threads:q} {params.cache:q} {params.evaluate:q} > {log:q} 2>&1"
