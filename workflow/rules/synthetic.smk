# Results that need no image dataset (toy figures, timing tables), paper beside ours:
# results/synthetic/<name>.{md,json} (and .png for a figure). Timing results take every
# core they are given, so the rule asks for all of them (--cores) and runs alone; a cluster
# executor gives no --cores: 8 (TARGETS.all_cores), at most cluster.max_threads.


rule synthetic:
    output:
        md="results/synthetic/{name}.md",
        json="results/synthetic/{name}.json",
    params:
        prefix=lambda wildcards, output: output.md.removesuffix(".md"),
        scale=PLAN.synthetic["scale"],
        seed=PLAN.synthetic["seed"],
    log:
        "results/logs/synthetic/{name}.log",
    conda:
        "../../envs/train.yaml"
    threads: TARGETS.all_cores(workflow.resource_settings.cores)
    resources:
        mem_mb=TARGETS.cluster.cap_mem(16000),
        runtime=2 * 60,
    shell:
        "python -m rankrepro synthetic {wildcards.name:q} --out-prefix {params.prefix:q} --scale {params.scale:q}"
        " --seed {params.seed:q} > {log:q} 2>&1"
