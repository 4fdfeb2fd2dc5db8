# Sweep figures (SupRank figs 6-8): the plot of a `kind: sweep` spec (its runs and table come from
# the plan and the table rule). Helpers live in common.smk.


rule sweep_plot:
    input:
        plan=table_plan,
        metrics=sweep_inputs,
    output:
        report(
            "results/tables/{paper}/{table}.png",
            category="{paper}",
            subcategory="sweeps",
            labels=sweep_labels,
        ),
    wildcard_constraints:
        table=sweep_table_pattern(),
    log:
        "results/logs/sweep_plot/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    shell:
        "python -m rankrepro sweep-plot --plan {input.plan:q} --runs-dir results/runs --out {output:q} > {log:q} 2>&1"
