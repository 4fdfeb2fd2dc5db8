# One train job per planned run: results/runs/<id>/model.pt and history.csv (a retried job resumes
# from results/runs/<id>/checkpoint.pt), with runtime.evaluate_in_train_job its metrics.json and
# curve.png too (the evaluate rule then never runs: ruleorder). With runtime.runs_per_job N > 1 (the
# demo), a train_batch job trains and evaluates up to N runs of one dataset one after the other in one
# process (rankrepro.plan.batches), each into results/batches/staged/<id>/ as a one-run job would,
# then writes its record results/batches/<batch>/batch.json; each run's train job adopts its files
# from there (rankrepro.engine.batch: a cheap local job, no torch). A failed run does not stop its
# batch; the job then fails naming it, and a retry trains only the runs not staged yet. A job that
# evaluates keeps each training until its evaluation succeeds (results/runs/<id>/trained/, not an
# output: rankrepro.engine.kept_training), so a failed evaluation never retrains the run.
# Resources (runtime from the run's cost estimate, memory from its dataset and batch, the caps of the
# config's cluster block) and one log per attempt: TARGETS (rankrepro.plan.resources; README "Cluster").


rule run_config:
    input:
        plan=ancient(TARGETS.run_plan_file),  # a run's content is fixed by its id: a new plan never rewrites run.json
    output:
        "results/runs/{run_id}/run.json",
    log:
        "results/logs/run_config/{run_id}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(1000),
        runtime=5,
    shell:
        "python -m rankrepro write-run --plan {input.plan:q} --run-id {wildcards.run_id:q} --out {output:q}"
        " > {log:q} 2>&1"


ruleorder: train > evaluate


rule train:
    input:
        run="results/runs/{run_id}/run.json",
        manifest=TARGETS.train_manifest,
        cache=ancient(TARGETS.train_caches),  # a rebuilt cache does not retrain a finished run
        batch=ancient(TARGETS.run_batch_record),  # runs_per_job > 1: the batch that staged its files
    output:
        **train_outputs(),
    params:
        # `train ...`, or `adopt ...` the run's files from its training batch (runs_per_job > 1)
        command=TARGETS.train_command,
    log:
        "results/logs/train/{run_id}.log",
    conda:
        "../../envs/train.yaml"
    localrule: TARGETS.batched
    threads: TARGETS.cluster.cap_threads(1 if TARGETS.batched else 8)
    resources:
        gpu=0 if TARGETS.batched else 1,
        mem_mb=TARGETS.train_mem_mb,
        runtime=TARGETS.train_runtime,
        attempt=TARGETS.attempt_number,
    shell:
        TARGETS.attempt_logged("python -m rankrepro {params.command:q}")  # one log per attempt


# Batches are tiny CPU runs: one thread each (`--cores N` runs N batches at once).
rule train_batch:
    input:
        runs=TARGETS.batch_run_configs,
        manifest=TARGETS.batch_manifest,
        cache=ancient(TARGETS.batch_cache_inputs),
    output:
        TARGETS.batch_record(),
    params:
        staged=STAGED_DIR,
        manifest=TARGETS.batch_manifest_dir,
        device=RUNTIME["device"],
        workers=RUNTIME["num_workers"],
        batch_size=RUNTIME["eval_batch_size"],
        cache=TARGETS.batch_cache_args,
        runtime=TARGETS.runtime_flags,
    log:
        "results/logs/train/batch_{batch}.log",
    conda:
        "../../envs/train.yaml"
    threads: 1
    resources:
        gpu=0 if RUNTIME["device"] == "cpu" else 1,
        mem_mb=TARGETS.batch_mem_mb,
        runtime=TARGETS.batch_runtime,
        attempt=TARGETS.attempt_number,
    shell:
        TARGETS.attempt_logged(
            "python -m rankrepro train-batch --runs {input.runs:q} --staged {params.staged:q} --out {output:q}"
            " --manifest {params.manifest:q} --device {params.device:q} --num-workers {params.workers:q}"
            " --threads {threads:q} --batch-size {params.batch_size:q} {params.cache:q} {params.runtime:q}"
        )
