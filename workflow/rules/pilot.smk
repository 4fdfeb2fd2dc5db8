# The pilot (issue 35): a few real-size training steps and an evaluation slice per training signature of the
# plan, on the prepared manifests where they are, else on replicas at the real image size
# (src/rankrepro/bench/pilot.py). Not part of `all`: `snakemake --cores all pilot` before the first GPU-hour;
# results/pilot/throughput.yaml then prices `cost --profile` and, with cluster.profile, the SLURM runtimes.


rule pilot:
    input:
        plan=PLAN_FILE,
    output:
        report="results/pilot/report.md",
        profile="results/pilot/throughput.yaml",
    params:
        out=lambda wildcards, output: os.path.dirname(output.report),
        device=RUNTIME["device"],
        workers=RUNTIME["num_workers"],
        gpu=TARGETS.cluster.settings["gpu"],
    log:
        "results/logs/pilot/pilot.log",
    conda:
        "../../envs/train.yaml"
    threads: TARGETS.cluster.cap_threads(8)
    resources:
        gpu=1,
        mem_mb=TARGETS.cluster.cap_mem(32000),
        runtime=120,
    shell:
        "python -m rankrepro pilot --plan {input.plan:q} --out {params.out:q} --device {params.device:q}"
        " --workers {params.workers:q} --gpu {params.gpu:q} > {log:q} 2>&1"
