# The resized image cache of a dataset: results/cache/<dataset>/s<S>/, the manifest's images with
# the shorter side resized to S (a run's images.train_resize), JPEG q95, the same relative paths;
# cache.json is written last (an interrupted job resumes, skipping the images already written).
# Only with runtime.image_cache: true (the default); training and evaluation read it when it
# matches their manifest and transform (src/rankrepro/data/cache.py), else the originals.


rule image_cache:
    input:
        manifest="results/manifests/{dataset}/meta.json",
    output:
        "results/cache/{dataset}/s{size}/cache.json",
    params:
        manifest=lambda wildcards, input: os.path.dirname(input.manifest),
        out="results/cache/{dataset}/s{size}",
    wildcard_constraints:
        size="[1-9][0-9]*",
    log:
        "results/logs/image_cache/{dataset}-s{size}.log",
    conda:
        "../../envs/data.yaml"  # Pillow and pandas: torchvision's very resize without torch (resize_shorter_side)
    threads: TARGETS.cluster.cap_threads(8)
    resources:
        mem_mb=TARGETS.cluster.cap_mem(8000),
        runtime=4 * 60,
    shell:
        "python -m rankrepro cache --manifest {params.manifest:q} --size {wildcards.size:q} --out {params.out:q}"
        " --workers {threads:q} --no-progress > {log:q} 2>&1"
