# H-GLDv2 rebuilt (SupRank TPAMI §VI; src/rankrepro/hgldv2): scrape -> clean -> cluster -> curate
# -> compare, from the GLDv2 download's *_label_to_category.csv; the dataset gldv2_hier_rebuilt
# (prepare rule) trains on the curated labels. Config: the `hgldv2` block of config.yaml.
# Paths and arguments: TARGETS (rankrepro.plan.targets).


# Serial by design (Wikimedia's etiquette): one job, one request at a time. Every answer is cached
# under <data_root>/hgldv2/api-cache, so a rerun after a failure resumes where it stopped.
rule hgldv2_scrape:
    input:
        TARGETS.gldv2_input,
    output:
        landmarks=f"{HGLDV2_DIR}/scrape/landmarks.jsonl",
        summary=f"{HGLDV2_DIR}/scrape/scrape.json",
    params:
        train=lambda wildcards: f"{TARGETS.gldv2_metadata()}/train_label_to_category.csv",
        index=lambda wildcards: f"{TARGETS.gldv2_metadata()}/index_label_to_category.csv",
        out=lambda wildcards, output: os.path.dirname(output.landmarks),
        cache=f"{DATA_ROOT}/hgldv2/api-cache",
        args=TARGETS.hgldv2_scrape_args,
    log:
        "results/logs/hgldv2/scrape.log",
    conda:
        "../../envs/data.yaml"
    retries: 2
    resources:
        mem_mb=TARGETS.cluster.cap_mem(4000),
        runtime=24 * 60,
    shell:
        "python -m rankrepro hgldv2 scrape --train {params.train:q} --index {params.index:q} --out {params.out:q}"
        " --cache {params.cache:q} {params.args:q} > {log:q} 2>&1"


rule hgldv2_clean:
    input:
        f"{HGLDV2_DIR}/scrape/landmarks.jsonl",
    output:
        landmarks=f"{HGLDV2_DIR}/clean/landmarks.csv",
        report=f"{HGLDV2_DIR}/clean/report.json",
    params:
        out=lambda wildcards, output: os.path.dirname(output.landmarks),
        several=TARGETS.hgldv2["several_classes"],
    log:
        "results/logs/hgldv2/clean.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=TARGETS.cluster.cap_mem(4000),
        runtime=30,
    shell:
        "python -m rankrepro hgldv2 clean --scrape {input:q} --out {params.out:q} --several {params.several:q}"
        " > {log:q} 2>&1"


rule hgldv2_cluster:
    input:
        f"{HGLDV2_DIR}/clean/landmarks.csv",
    output:
        names=f"{HGLDV2_DIR}/cluster/names.csv",
        info=f"{HGLDV2_DIR}/cluster/cluster.json",
    params:
        out=lambda wildcards, output: os.path.dirname(output.names),
        model=TARGETS.hgldv2["clip"]["model"],
        pretrained=TARGETS.hgldv2["clip"]["pretrained"] or "none",
        prompt=TARGETS.hgldv2["clip"]["prompt"],
        k=TARGETS.hgldv2["kmeans"]["k"],
        seed=TARGETS.hgldv2["kmeans"]["seed"],
        niter=TARGETS.hgldv2["kmeans"]["niter"],
        nredo=TARGETS.hgldv2["kmeans"]["nredo"],
        device=RUNTIME["device"],
    log:
        "results/logs/hgldv2/cluster.log",
    conda:
        "../../envs/train.yaml"
    threads: TARGETS.cluster.cap_threads(4)
    resources:
        mem_mb=TARGETS.cluster.cap_mem(8000),
        runtime=60,
    shell:
        "python -m rankrepro hgldv2 cluster --landmarks {input:q} --out {params.out:q} --model {params.model:q}"
        " --pretrained {params.pretrained:q} --prompt {params.prompt:q} --k {params.k:q} --seed {params.seed:q}"
        " --niter {params.niter:q} --nredo {params.nredo:q} --device {params.device:q} > {log:q} 2>&1"


rule hgldv2_curate:
    input:
        landmarks=f"{HGLDV2_DIR}/clean/landmarks.csv",
        cluster=f"{HGLDV2_DIR}/cluster/cluster.json",
        curation=TARGETS.hgldv2_curation(),
    output:
        train=f"{HGLDV2_DIR}/labels/train_label_to_hierarchical.csv",
        index=f"{HGLDV2_DIR}/labels/index_label_to_hierarchical.csv",
        info=f"{HGLDV2_DIR}/labels/curate.json",
    params:
        cluster_dir=lambda wildcards, input: os.path.dirname(input.cluster),
        out=lambda wildcards, output: os.path.dirname(output.train),
        release=TARGETS.gldv2_metadata,
    log:
        "results/logs/hgldv2/curate.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=TARGETS.cluster.cap_mem(4000),
        runtime=30,
    shell:
        "python -m rankrepro hgldv2 curate --landmarks {input.landmarks:q} --cluster-dir {params.cluster_dir:q}"
        " --curation {input.curation:q} --release-dir {params.release:q} --out {params.out:q} > {log:q} 2>&1"


rule hgldv2_compare:
    input:
        TARGETS.gldv2_input,
        train=f"{HGLDV2_DIR}/labels/train_label_to_hierarchical.csv",
        index=f"{HGLDV2_DIR}/labels/index_label_to_hierarchical.csv",
    output:
        md=f"{HGLDV2_DIR}/compare.md",
        csv=f"{HGLDV2_DIR}/compare.csv",
        json=f"{HGLDV2_DIR}/compare.json",
    params:
        ours=lambda wildcards, input: os.path.dirname(input.train),
        release=TARGETS.gldv2_metadata,
        prefix=lambda wildcards, output: os.path.splitext(output.json)[0],
    log:
        "results/logs/hgldv2/compare.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=TARGETS.cluster.cap_mem(4000),
        runtime=30,
    shell:
        "python -m rankrepro hgldv2 compare --ours {params.ours:q} --release-dir {params.release:q}"
        " --out-prefix {params.prefix:q} > {log:q} 2>&1"
