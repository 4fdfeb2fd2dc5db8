# Embed the evaluation splits with the trained model (protocol from the manifest); exact k-NN metrics ->
# metrics.json (the run's training curve is drawn by its paper's curves job: tables.smk). With
# runtime.evaluate_in_train_job the train job writes it too, and `ruleorder: train > evaluate` (train.smk) makes
# it their job: this rule then runs for no run. No rule with runtime.runs_per_job > 1: the batches evaluate.


if not TARGETS.batched:

    rule evaluate:
        input:
            run="results/runs/{run_id}/run.json",
            model="results/runs/{run_id}/model.pt",
            manifest=TARGETS.run_manifest,
            eval_manifests=TARGETS.eval_manifests,
            cache=ancient(TARGETS.run_eval_cache),
        output:
            **evaluate_outputs(),
        params:
            manifest=TARGETS.run_manifest_dir,
            device=RUNTIME["device"],
            workers=RUNTIME["num_workers"],
            batch_size=RUNTIME["eval_batch_size"],
            cache=TARGETS.run_eval_cache_args,
        log:
            "results/logs/evaluate/{run_id}.log",
        conda:
            "../../envs/train.yaml"
        threads: TARGETS.cluster.cap_threads(8)
        resources:
            gpu=1,
            mem_mb=TARGETS.evaluate_mem_mb,
            runtime=TARGETS.evaluate_runtime,
            attempt=TARGETS.attempt_number,
        shell:
            TARGETS.attempt_logged(
                "python -m rankrepro evaluate --run {input.run:q} --model {input.model:q} --manifest {params.manifest:q}"
                " --out {output.metrics:q} --device {params.device:q}"
                " --num-workers {params.workers:q} --batch-size {params.batch_size:q} --threads {threads:q} {params.cache:q}"
            )
