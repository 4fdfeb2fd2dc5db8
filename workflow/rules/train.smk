# One job per planned run. A retried job resumes from results/runs/<id>/checkpoint.pt. With
# runtime.evaluate_in_train_job the same job evaluates (metrics.json, curve.png) and evaluate.smk has no rule.
# With runtime.runs_per_job N > 1 (the demo), one job per training batch instead (train_batch_<dataset>_<k>):
# up to N runs of one dataset trained and evaluated one after the other in one process
# (rankrepro.plan.batches), each writing its own results/runs/<id>/ as a one-run job would.


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


if RUNS_PER_JOB == 1:

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

else:
    # Batches are tiny CPU runs: one thread each (`--cores N` runs N batches at once).
    for _batch, _ids in TRAIN_BATCHES.items():

        rule:
            name:
                f"train_batch_{_batch}"
            input:
                runs=[f"results/runs/{rid}/run.json" for rid in _ids],
                manifest=manifest_meta(RUNS[_ids[0]]["dataset"]),
                cache=ancient(batch_cache_inputs(_ids)),
            output:
                **batch_outputs(_ids),
            params:
                manifest=lambda wildcards, input: str(Path(input.manifest).parent),
                device=RUNTIME["device"],
                workers=RUNTIME["num_workers"],
                batch_size=RUNTIME["eval_batch_size"],
                cache=batch_cache_args(_ids),
            log:
                f"results/logs/train/batch_{_batch}.log",
            conda:
                "../../envs/train.yaml"
            threads: 1
            resources:
                gpu=0 if RUNTIME["device"] == "cpu" else 1,
                mem_mb=8000,
                runtime=20 * len(_ids),
            shell:
                "python -m rankrepro train-batch --runs {input.runs:q} --manifest {params.manifest:q}"
                " --device {params.device:q} --num-workers {params.workers:q} --threads {threads:q}"
                " --batch-size {params.batch_size:q} {params.cache:q} > {log:q} 2>&1"
