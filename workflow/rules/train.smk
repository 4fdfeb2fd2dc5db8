# One train job per planned run (runtime.runs_per_job 1): results/runs/<id>/model.pt and history.csv (a
# retried job resumes from results/runs/<id>/checkpoint.pt), with runtime.evaluate_in_train_job its metrics.json
# too (the evaluate rule then never runs: ruleorder), and with runtime.keep_model false no model.pt (removed
# once the run is evaluated). With runtime.runs_per_job N > 1 (the demo) there is no job per run: one rule per
# training batch, train_batch_<batch> (rankrepro.plan.batches), whose outputs are its runs' files
# (`snakemake results/runs/<id>/metrics.json` runs the run's batch). Its job writes, trains and evaluates up to
# N runs of one dataset one after the other in one process, each into results/batches/staged/<id>/ as a
# one-run job would write results/runs/<id>/, then writes every run's folder (rankrepro.engine.batch). A failed
# run does not stop its batch; the job then fails naming it, writes no run folder, and a retry trains only the
# runs not staged yet. A job that evaluates keeps each training until its evaluation succeeds
# (<run folder>/trained/, not an output: rankrepro.engine.kept_training), so a failed evaluation never retrains
# the run. Training curves (curve.png) are drawn by one job per paper (tables.smk), not by a training process.
# Resources (runtime from the run's cost estimate, memory from its dataset and batch, the caps of the
# config's cluster block) and one log per attempt: TARGETS (rankrepro.plan.resources; README "Cluster").


if not TARGETS.batched:

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
        output:
            **train_outputs(),
        params:
            command=TARGETS.train_command,
        log:
            "results/logs/train/{run_id}.log",
        conda:
            "../../envs/train.yaml"
        threads: TARGETS.cluster.cap_threads(8)
        resources:
            gpu=1,
            mem_mb=TARGETS.train_mem_mb,
            runtime=TARGETS.train_runtime,
            attempt=TARGETS.attempt_number,
        shell:
            TARGETS.attempt_logged("python -m rankrepro {params.command:q}")  # one log per attempt


# Batches are tiny CPU runs: one thread each (`--cores N` runs N batches at once). A profile's set-threads and
# set-resources for `train_batch` apply to every train_batch_<batch> rule (batch_rule_settings, common.smk).
for _batch in TARGETS.batches:
    _w = TARGETS.batch_wildcards(_batch)

    rule:
        name:
            f"train_batch_{_batch}"
        input:
            plans=ancient(TARGETS.batch_plan_files(_w)),  # a run's content is fixed by its id
            manifest=TARGETS.batch_manifest(_w),
            cache=ancient(TARGETS.batch_cache_inputs(_w)),
        output:
            TARGETS.batch_outputs(_w),
        params:
            staged=STAGED_DIR,
            runs_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),  # results/runs
            manifest=lambda wildcards, input: os.path.dirname(input.manifest[0]),  # the batch's dataset's
            device=RUNTIME["device"],
            workers=RUNTIME["num_workers"],
            batch_size=RUNTIME["eval_batch_size"],
            cache=TARGETS.batch_cache_args(_w),
            flags=TARGETS.batch_flags(_w),
            runtime=TARGETS.runtime_flags,
        log:
            f"results/logs/train/batch_{_batch}.log",
        conda:
            "../../envs/train.yaml"
        threads: 1
        resources:
            gpu=0 if RUNTIME["device"] == "cpu" else 1,
            mem_mb=TARGETS.batch_mem_mb(_w),
            runtime=TARGETS.batch_runtime(_w),
            attempt=TARGETS.attempt_number,
        shell:
            TARGETS.attempt_logged(
                "python -m rankrepro train-batch --runs {input.plans:q} --staged {params.staged:q}"
                " --runs-dir {params.runs_dir:q} --manifest {params.manifest:q} --device {params.device:q}"
                " --num-workers {params.workers:q} --threads {threads:q} --batch-size {params.batch_size:q}"
                " {params.cache:q} {params.flags:q} {params.runtime:q}"
            )

    batch_rule_settings(f"train_batch_{_batch}", "train_batch")
