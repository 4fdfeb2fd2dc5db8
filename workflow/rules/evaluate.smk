# Embed the test split with the trained model; exact k-NN metrics -> metrics.json.


rule evaluate:
    input:
        run="results/runs/{run_id}/run.json",
        model="results/runs/{run_id}/model.pt",
        manifest=run_manifest,
    output:
        "results/runs/{run_id}/metrics.json",
    params:
        device=RUNTIME["device"],
        workers=RUNTIME["num_workers"],
        batch_size=RUNTIME["eval_batch_size"],
    log:
        "results/logs/evaluate/{run_id}.log",
    conda:
        "../../envs/train.yaml"
    threads: 8
    resources:
        gpu=1,
        mem_mb=32000,
        runtime=2 * 60,
    shell:
        "python -m rankrepro evaluate --run {input.run} --model {input.model} --manifest $(dirname {input.manifest})"
        " --out {output} --device {params.device} --num-workers {params.workers} --batch-size {params.batch_size}"
        " --threads {threads} > {log} 2>&1"
