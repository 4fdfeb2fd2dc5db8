# download -> prepare (manifest). A replica dataset is generated first and then goes
# through the same download (file://, checksum-verified) and prepare code as the real one.


rule replica:
    output:
        archive=f"{DATA_ROOT}/replicas/{{dataset}}/{{archive}}",
        checksum=f"{DATA_ROOT}/replicas/{{dataset}}/{{archive}}.sha256",
    log:
        "results/logs/replica/{dataset}/{archive}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=2000,
        runtime=30,
    shell:
        "python -m rankrepro replica {wildcards.dataset:q} --out {output.archive:q} > {log:q} 2>&1"


# Network errors are retried inside the job (with back-off and resume); a checksum
# mismatch is final, so Snakemake does not retry this rule (whatever the profile says).
rule download:
    input:
        download_input,
    output:
        f"{DATA_ROOT}/downloads/{{dataset}}/{{archive}}",
    params:
        data_root=download_data_root,
        args=download_args,
    log:
        "results/logs/download/{dataset}/{archive}.log",
    conda:
        "../../envs/data.yaml"
    retries: 0
    resources:
        mem_mb=2000,
        runtime=24 * 60,
    shell:
        "python -m rankrepro download {wildcards.dataset:q} --data-root {params.data_root:q} {params.args:q}"
        " > {log:q} 2>&1"


rule prepare:
    input:
        prepare_input,
    output:
        manifest="results/manifests/{dataset}/manifest.csv",
        meta="results/manifests/{dataset}/meta.json",
    params:
        source=prepare_source,
        flags=prepare_flags,
        data_root=DATA_ROOT,
        out="results/manifests/{dataset}",
    log:
        "results/logs/prepare/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=8000,
        runtime=6 * 60,
    shell:
        "python -m rankrepro prepare {wildcards.dataset:q} --source {params.source:q} --data-root {params.data_root:q}"
        " --out {params.out:q} {params.flags:q} > {log:q} 2>&1"
