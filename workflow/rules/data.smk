# download -> prepare (manifest). A replica is generated first and then goes through the same
# download (file://, checksum-verified) and prepare code as the real files.


rule replica:
    output:
        f"{DATA_ROOT}/replicas/{{source}}/replica.json",
    params:
        dataset=TARGETS.source_dataset,
        out_dir=TARGETS.replica_dir,
    log:
        "results/logs/replica/{source}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=30,
    shell:
        "python -m rankrepro replica {params.dataset:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


# Every file of a source (shared by datasets such as inat / inat_base / inat_full), then
# download.json. Network errors are retried inside the job (with back-off and resume); a
# checksum mismatch or a missing manual file is final, so Snakemake does not retry this
# rule (whatever the profile says). A manual dataset's job fails with the list of files to
# put in place; with --keep-going the rest of the DAG still runs.
rule download:
    input:
        TARGETS.download_input,
    output:
        f"{DATA_ROOT}/downloads/{{source}}/download.json",
    params:
        dataset=TARGETS.source_dataset,
        data_root=TARGETS.download_data_root,
        args=TARGETS.download_args,
    log:
        "results/logs/download/{source}.log",
    conda:
        "../../envs/data.yaml"
    retries: 0
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=24 * 60,
    shell:
        "python -m rankrepro download {params.dataset:q} --data-root {params.data_root:q} {params.args:q}"
        " > {log:q} 2>&1"


# The source's files are re-verified, extracted into <data_root>/<source>/ and parsed; a
# derived dataset (sop_merge3) is built from its base's manifest.
rule prepare:
    input:
        TARGETS.prepare_input,
    output:
        manifest="results/manifests/{dataset}/manifest.csv",
        meta="results/manifests/{dataset}/meta.json",
    params:
        source=TARGETS.prepare_source,
        flags=TARGETS.prepare_flags,
        data_root=DATA_ROOT,
        out="results/manifests/{dataset}",
    log:
        "results/logs/prepare/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        mem_mb=TARGETS.cluster.cap_mem(8000),
        runtime=6 * 60,
    shell:
        "python -m rankrepro prepare {wildcards.dataset:q} --source {params.source:q} --data-root {params.data_root:q}"
        " --out {params.out:q} {params.flags:q} > {log:q} 2>&1"
