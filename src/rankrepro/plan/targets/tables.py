"""The tables, tracking, the index and the report of :class:`~rankrepro.plan.targets.WorkflowTargets`
(``workflow/rules/tables.smk``, ``sweeps.smk``)."""

from __future__ import annotations

from rankrepro.plan.schema import PlanError
from rankrepro.plan.targets.common import RECIPES_HTML, RECIPES_MD, TargetError, run_dir
from rankrepro.tables.kinds.leaderboard import LEADERBOARDS, SUMMARY


class TableTargets:
    """The tables' and the report's part of :class:`~rankrepro.plan.targets.WorkflowTargets`."""

    def table_plan(self, wildcards) -> str:
        """The plan file of table {paper}/{table} (what the table rule renders)."""
        return str(self.files.tables[self.planned_table(wildcards).key])

    def planned_table(self, wildcards):
        """The plan of table {paper}/{table} (rankrepro.plan.model.TablePlan)."""
        try:
            return self.plan.table(f"{wildcards.paper}/{wildcards.table}")
        except PlanError as err:
            raise TargetError(str(err)) from None

    def table_inputs(self, wildcards) -> list[str]:
        """What the table reads: its runs' metrics.json, the manifests a dataset statistics table counts."""
        return self.planned_table(wildcards).inputs()

    def table_outputs(self) -> list[str]:
        return self.plan.table_outputs()

    def table_labels(self, wildcards) -> dict:
        return {"table": wildcards.table, "kind": self.planned_table(wildcards).kind.name}

    def synthetic_outputs(self) -> list[str]:
        return [f"results/synthetic/{name}.{ext}" for name in self.plan.synthetic["names"] for ext in ("md", "json")]

    def track_inputs(self) -> list[str]:
        """What the MLflow import reads: every run's records, every table."""
        files = [f"{run_dir(rid)}/{name}" for rid in self.plan.runs for name in ("run.json", "history.csv",
                                                                                   "metrics.json")]
        return files + [f"results/tables/{key}.md" for key in self.plan.tables]

    def run_paper(self, wildcards) -> str:
        """The report category of a run's training curve, and the paper whose curves job draws it: the first
        paper whose tables use it."""
        tables = self.plan.tables_using(wildcards.run_id)
        return self.plan.tables[tables[0]].paper if tables else "other runs"

    def curve_runs(self) -> dict[str, list[str]]:
        """``{paper: [run id, ...]}``: the table runs whose training curve each paper's curves job draws (each run
        under :meth:`run_paper`, the first paper whose tables use it), in plan order; none with runtime.curves
        false."""
        if not self.runtime["curves"]:
            return {}
        if getattr(self, "_curve_runs", None) is None:
            paper_of: dict[str, str] = {}
            for table in self.plan.tables.values():
                for rid in table.runs:
                    paper_of.setdefault(rid, table.paper)
            self._curve_runs: dict[str, list[str]] = {}
            for rid, paper in paper_of.items():
                self._curve_runs.setdefault(paper, []).append(rid)
        return self._curve_runs

    def curve_inputs(self, paper: str) -> list[str]:
        """What paper ``paper``'s curves job reads: each of its runs' history.csv and metrics.json."""
        return [f"{run_dir(rid)}/{name}" for rid in self.curve_runs()[paper] for name in ("history.csv", "metrics.json")]

    def run_labels(self, wildcards) -> dict:
        """The report labels of a run's training curve (a run shared by several tables names them all)."""
        run = self.run(wildcards.run_id)
        return {"run": wildcards.run_id, "dataset": run["dataset"], "loss": run["loss"]["name"],
                "tables": ", ".join(self.plan.tables_using(wildcards.run_id)) or "none"}

    def paper_table_csvs(self, wildcards) -> list[str]:
        """The CSVs of a paper's planned tables."""
        tables = self.plan.tables_of_paper(wildcards.paper)
        if not tables:
            raise TargetError(f"no table of paper {wildcards.paper!r} is in config.yaml's tables")
        return [f"results/tables/{key}.csv" for key in tables]

    @staticmethod
    def recipes_files() -> dict[str, str]:
        """What the recipes rule writes from the plan: ``md`` (linked from the index) and ``html`` (the report's)."""
        return {"md": RECIPES_MD, "html": RECIPES_HTML}

    def report_outputs(self) -> list[str]:
        """What the report shows, besides the index: an HTML page per table, a training curve per run
        of a table (runtime.curves), a paper-vs-ours scatter per paper (not per leaderboard benchmark: it has no paper numbers),
        the plot of each sweep and of each leaderboard, each benchmark's summary page, the recipe cards."""
        benchmarks = self.leaderboard_benchmarks()
        return ([f"results/tables/{key}.html" for key in self.plan.tables]
                + [self.curve_file(rid) for rids in self.curve_runs().values() for rid in rids]
                + [f"results/tables/{paper}/scatter.png" for paper in self.plan.papers() if paper not in benchmarks]
                + self.sweep_outputs() + self.leaderboard_plots()
                + [f"results/tables/{b}/{SUMMARY}.html" for b in benchmarks] + [RECIPES_HTML])

    # --------------------------------------------------------------------- leaderboards (issue 36)

    def leaderboard_tables(self) -> list[str]:
        """The planned leaderboards ("<benchmark>/<dataset>", kind leaderboard)."""
        return self.plan.tables_of_kind("leaderboard")

    def leaderboard_benchmarks(self) -> list[str]:
        """The benchmarks (the leaderboards' "paper": roof) with a planned leaderboard, in plan order."""
        return list(dict.fromkeys(self.plan.tables[key].paper for key in self.leaderboard_tables()))

    def leaderboard_plots(self) -> list[str]:
        """Each planned leaderboard's plot (results/tables/<benchmark>/<dataset>.png)."""
        return [path for key in self.leaderboard_tables() for path in self.plan.tables[key].figures()]

    def leaderboard_outputs(self) -> list[str]:
        """The leaderboards' pages besides their tables: the plots, each benchmark's summary (md, csv, html)."""
        return self.leaderboard_plots() + [f"results/tables/{b}/{SUMMARY}.{ext}" for b in self.leaderboard_benchmarks()
                                           for ext in ("md", "csv", "html")]

    def leaderboard_pattern(self) -> str:
        """The leaderboard plot's {table} wildcard: the planned leaderboards' names only."""
        return "|".join(sorted({self.plan.tables[key].table for key in self.leaderboard_tables()})) or "(?!)"

    def benchmark_pattern(self) -> str:
        """The leaderboard rules' {paper} wildcard: the planned benchmarks only."""
        return "|".join(sorted(self.leaderboard_benchmarks())) or "(?!)"

    def leaderboard_csvs(self, wildcards) -> list[str]:
        """The CSVs of benchmark {paper}'s planned leaderboards (what its summary reads)."""
        keys = [key for key in self.leaderboard_tables() if self.plan.tables[key].paper == wildcards.paper]
        if not keys:
            raise TargetError(f"no leaderboard of benchmark {wildcards.paper!r} is planned (config benchmarks)")
        return [f"results/tables/{key}.csv" for key in keys]

    def leaderboard_title(self, wildcards) -> str:
        """The plot's title: the leaderboard's spec title."""
        return self.planned_table(wildcards).title

    def table_category(self, wildcards) -> str:
        """The report category of a table's page: its paper, or "Leaderboards" for a leaderboard (apart from the
        papers' tables)."""
        return LEADERBOARDS if self.planned_table(wildcards).kind.name == "leaderboard" else wildcards.paper

    def index_inputs(self) -> list[str]:
        """Everything results/README.md summarises or links: every table's CSV, the runs' records, the
        synthetic results, the H-GLDv2 comparison, the recipe cards, the leaderboards' pages and the figures it
        links."""
        return (self.table_outputs() + self.leaderboard_outputs()
                + [f"{run_dir(rid)}/{name}" for rid in self.plan.table_runs()
                   for name in ("history.csv", "metrics.json")]
                + self.synthetic_outputs() + self.hgldv2_outputs() + [RECIPES_MD] + self.report_outputs())

    def sweep_tables(self) -> list[str]:
        """The planned tables of kind sweep ("<paper>/<table>": paper figures, one row per point)."""
        return self.plan.tables_of_kind("sweep")

    def sweep_outputs(self) -> list[str]:
        """The plots of the planned sweeps (results/tables/<paper>/<table>.png); their md/csv/tex are
        table_outputs()."""
        return [path for key in self.sweep_tables() for path in self.plan.tables[key].figures()]

    def sweep_table_pattern(self) -> str:
        """The sweep plot's {table} wildcard: the planned sweeps' names only (never scatter.png)."""
        return "|".join(sorted({self.plan.tables[key].table for key in self.sweep_tables()})) or "(?!)"

    def sweep_inputs(self, wildcards) -> list[str]:
        """A sweep's runs' metrics.json (its reference runs included); fails for a table that is not a sweep."""
        key = f"{wildcards.paper}/{wildcards.table}"
        if key not in self.sweep_tables():
            raise TargetError(f"{key} is not a planned sweep (kind: sweep in config.yaml's tables)")
        return self.table_inputs(wildcards)

    @staticmethod
    def sweep_labels(wildcards) -> dict:
        return {"figure": wildcards.table, "paper": wildcards.paper}
