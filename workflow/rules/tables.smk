# Paper tables (paper number beside ours) from the plan, and the single-writer MLflow import of
# every run and table of the plan.


#: a table name other than a benchmark's summary (rankrepro.tables.kinds.leaderboard.SUMMARY: the
#: leaderboard_summary rule writes results/tables/<benchmark>/summary.*)
NOT_SUMMARY = r"(?!summary\.)[^/]+"  # the file name goes on: {table}.md


rule table:
    input:
        plan=TARGETS.table_plan,
        inputs=TARGETS.table_inputs,
    output:
        md="results/tables/{paper}/{table}.md",
        csv="results/tables/{paper}/{table}.csv",
        tex="results/tables/{paper}/{table}.tex",
    wildcard_constraints:
        table=NOT_SUMMARY,
    params:
        prefix="results/tables/{paper}/{table}",
    log:
        "results/logs/table/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro table --plan {input.plan:q} --runs-dir results/runs --out-prefix {params.prefix:q}"
        " > {log:q} 2>&1"


rule track:
    input:
        plan=PLAN_FILE,
        finished=TARGETS.track_inputs(),
    output:
        "results/mlflow/imported.json",
    params:
        uri=TRACKING["tracking_uri"],
        experiment=TRACKING["experiment"],
        artifact_root=TRACKING["artifact_root"],
    log:
        "results/logs/track.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(4000),
        runtime=60,
    shell:
        "python -m rankrepro track --plan {input.plan:q} --tracking-uri {params.uri:q}"
        " --experiment {params.experiment:q} --artifact-root {params.artifact_root:q} --out {output:q} > {log:q} 2>&1"


# -- Results index and the Snakemake report (snakemake --report results/report.html): each table as
# an HTML page, a training curve per run (curves_<paper>, runtime.curves), a paper-vs-ours scatter per paper, all under the paper's
# category; every run's recipe card (category Recipes); results/README.md indexes them. Paths: TARGETS
# (rankrepro.plan.targets).


report: "../report/workflow.rst"


rule table_html:
    input:
        plan=TARGETS.table_plan,
        csv="results/tables/{paper}/{table}.csv",
    output:
        report(
            "results/tables/{paper}/{table}.html",
            caption="../report/table.rst",
            category=TARGETS.table_category,  # the paper; a leaderboard: Leaderboards
            subcategory="tables",
            labels=TARGETS.table_labels,
        ),
    wildcard_constraints:
        table=NOT_SUMMARY,
    log:
        "results/logs/table_html/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro table-html --plan {input.plan:q} --csv {input.csv:q} --out {output:q} > {log:q} 2>&1"


rule paper_scatter:
    input:
        TARGETS.paper_table_csvs,
    output:
        report(
            "results/tables/{paper}/scatter.png",
            caption="../report/scatter.rst",
            category="{paper}",
            subcategory="paper vs ours",
            labels={"figure": "paper vs ours", "paper": "{paper}"},
        ),
    log:
        "results/logs/paper_scatter/{paper}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro plot scatter --paper {wildcards.paper:q} --tables {input:q} --out {output:q} > {log:q} 2>&1"


# One job per paper draws the training curves of the table runs it is the first paper of (TARGETS.curve_runs;
# none with runtime.curves false): matplotlib is imported once per paper, never by a training process. One rule
# per paper, since its outputs are the runs' own files.
for _paper, _runs in TARGETS.curve_runs().items():

    rule:
        name:
            f"curves_{_paper}"
        input:
            TARGETS.curve_inputs(_paper),
        output:
            [
                report(
                    TARGETS.curve_file(rid),
                    caption="../report/curve.rst",
                    category=_paper,
                    subcategory="training curves",
                    labels=TARGETS.run_labels(SimpleNamespace(run_id=rid)),
                )
                for rid in _runs
            ],
        params:
            runs=[run_dir(rid) for rid in _runs],
        log:
            f"results/logs/curves/{_paper}.log",
        conda:
            "../../envs/train.yaml"
        localrule: True
        resources:
            mem_mb=TARGETS.cluster.cap_mem(2000),
            runtime=10,
        shell:
            "python -m rankrepro plot curves --runs {params.runs:q} > {log:q} 2>&1"


# -- The leaderboards (issue 36, docs/planning.md "Leaderboards: under one roof"): a plot per leaderboard and a
# summary across datasets per benchmark, in the report's category Leaderboards.

rule leaderboard_plot:
    input:
        csv="results/tables/{paper}/{table}.csv",
    output:
        report(
            "results/tables/{paper}/{table}.png",
            caption="../report/leaderboard.rst",
            category="Leaderboards",
            subcategory="{paper} plots",
            labels={"figure": "R@1 vs mAP@R", "leaderboard": "{paper}/{table}"},
        ),
    wildcard_constraints:
        paper=TARGETS.benchmark_pattern(),
        table=TARGETS.leaderboard_pattern(),
    params:
        title=TARGETS.leaderboard_title,
    log:
        "results/logs/leaderboard_plot/{paper}/{table}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro plot leaderboard --tables {input.csv:q} --title {params.title:q} --out {output:q}"
        " > {log:q} 2>&1"


rule leaderboard_summary:
    input:
        TARGETS.leaderboard_csvs,
    output:
        md="results/tables/{paper}/summary.md",
        csv="results/tables/{paper}/summary.csv",
        html=report(
            "results/tables/{paper}/summary.html",
            caption="../report/summary.rst",
            category="Leaderboards",
            subcategory="{paper} summary",
            labels={"page": "{paper} summary across datasets"},
        ),
    wildcard_constraints:
        paper=TARGETS.benchmark_pattern(),
    params:
        prefix="results/tables/{paper}/summary",
    log:
        "results/logs/leaderboard_summary/{paper}.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro leaderboard-summary --benchmark {wildcards.paper:q} --tables {input:q}"
        " --out-prefix {params.prefix:q} --html {output.html:q} > {log:q} 2>&1"


rule recipes:
    input:
        plan=PLAN_FILE,
    output:
        md=TARGETS.recipes_files()["md"],
        html=report(
            TARGETS.recipes_files()["html"],
            caption="../report/recipes.rst",
            category="Recipes",
            labels={"page": "results/recipes.md"},
        ),
    log:
        "results/logs/recipes.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro recipe --all --markdown --plan {input.plan:q} --out {output.md:q}"
        " --html {output.html:q} > {log:q} 2>&1"


rule results_index:
    input:
        plan=PLAN_FILE,
        results=TARGETS.index_inputs(),
        throughput=f"profiles/throughput/{ESTIMATE_GPU}.yaml",  # the est. GPU h column's profile
    output:
        md="results/README.md",
        html=report(
            "results/index.html",
            caption="../report/index.rst",
            category="Results index",
            labels={"page": "results/README.md"},
        ),
    log:
        "results/logs/results_index.log",
    conda:
        "../../envs/train.yaml"
    localrule: True
    resources:
        mem_mb=TARGETS.cluster.cap_mem(2000),
        runtime=10,
    shell:
        "python -m rankrepro results-index --plan {input.plan:q} --results-dir results --out {output.md:q}"
        " --html {output.html:q} > {log:q} 2>&1"
