"""H-GLDv2 rebuilt: the jobs of ``workflow/rules/hgldv2.smk`` in :class:`~rankrepro.plan.targets.WorkflowTargets`
(the config's ``hgldv2`` block, as the plan holds it)."""

from __future__ import annotations

from pathlib import Path

import rankrepro.hgldv2
from rankrepro.plan.targets.common import HGLDV2_DIR


class HGLDv2Targets:
    """The H-GLDv2 part of :class:`~rankrepro.plan.targets.WorkflowTargets` (its ``hgldv2`` block)."""

    def hgldv2_outputs(self) -> list[str]:
        """The compare table when hgldv2.build is set (the planner checked that gldv2 is planned)."""
        return [f"{HGLDV2_DIR}/compare.json"] if self.hgldv2["build"] else []

    def gldv2_input(self, wildcards) -> list[str]:
        """The GLDv2 download record, or nothing when datasets.gldv2 is an extracted copy."""
        return [] if self.dataset("gldv2")["config"]["extracted"] else [self.download_record("gldv2")]

    def gldv2_metadata(self, wildcards=None) -> str:
        """The folder holding the GLDv2 metadata CSVs: <extracted>/metadata or downloads/<source>/metadata."""
        extracted = self.dataset("gldv2")["config"]["extracted"]
        downloads = f"{self.data_root}/downloads/{self.source_of('gldv2')}"
        return f"{extracted}/metadata" if extracted else f"{downloads}/metadata"

    def hgldv2_scrape_args(self, wildcards) -> list[str]:
        """The scrape's API options (hgldv2.api), as a list."""
        api = self.hgldv2["api"]
        args = ["--commons-url", api["commons_url"], "--wikidata-url", api["wikidata_url"],
                "--maxlag", str(api["maxlag"]), "--min-interval", str(api["min_interval_s"]),
                "--max-retries", str(api["max_retries"])]
        if api["contact"]:
            args += ["--contact", api["contact"]]
        if api["fake_world"]:
            args += ["--fake-world", api["fake_world"]]
        return args

    def hgldv2_curation(self) -> str:
        """hgldv2.curation, or the packaged curation.yaml."""
        return self.hgldv2["curation"] or str(Path(rankrepro.hgldv2.__file__).with_name("curation.yaml"))
