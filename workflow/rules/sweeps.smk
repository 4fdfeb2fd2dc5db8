# Sweep figures (SupRank figs 6-8): the plot of a `kind: sweep` spec (its runs and table come from
# the plan and the table rule). Paths: TARGETS (rankrepro.plan.targets).


rule sweep_plot:
    input:
        plan=TARGETS.table_plan,
        metrics=TARGETS.sweep_inputs,
    output:
        report(
            "results/tables/{paper}/{table}.png",
            category="{paper}",
            subcategory="sweeps",
            labels=TARGETS.sweep_labels,
        ),
    wildcard_constraints:
        table=TARGETS.sweep_table_pattern(),
    log:
        "results/logs/sweep_plot/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro sweep-plot --plan {input.plan:q} --runs-dir results/runs --out {output:q} > {log:q} 2>&1"
