"""The datasets' jobs of :class:`~rankrepro.plan.targets.WorkflowTargets`: replica -> download -> prepare
(``workflow/rules/data.smk``): the planned datasets, the sources their files download into, and the
manifests."""

from __future__ import annotations

from pathlib import Path

from rankrepro.plan.model import manifest_path
from rankrepro.plan.targets.common import TargetError


class DatasetTargets:
    """The datasets' part of :class:`~rankrepro.plan.targets.WorkflowTargets` (its ``plan``, ``data_root`` and
    ``sources``)."""

    def dataset(self, name: str) -> dict:
        """The planned dataset ``name`` (``{"facts", "config"}``)."""
        if name not in self.plan.datasets:
            raise TargetError(f"dataset {name!r} is not in the plan; planned: {', '.join(sorted(self.plan.datasets))}")
        return self.plan.datasets[name]

    def source_of(self, dataset: str) -> str:
        """The folder of the dataset's downloads (shared by datasets with the same files)."""
        return self.dataset(dataset)["facts"]["source"]

    def source_dataset(self, wildcards) -> str:
        """The planned dataset that downloads the files of ``wildcards.source``: of those using them, the
        first declaring the most files (``voc0712``'s three archives hold ``voc07``'s two; others declare
        the same files)."""
        if wildcards.source not in self.sources:
            raise TargetError(f"no planned dataset downloads into {wildcards.source!r}; sources: "
                              f"{', '.join(self.sources) or '(none)'}")
        return max(self.sources[wildcards.source], key=lambda name: self.dataset(name)["facts"]["files"])

    def download_record(self, dataset: str) -> str:
        return f"{self.data_root}/downloads/{self.source_of(dataset)}/download.json"

    def replica_record(self, source: str) -> str:
        return f"{self.data_root}/replicas/{source}/replica.json"

    def replica_dir(self, wildcards) -> str:
        return f"{self.data_root}/replicas/{wildcards.source}"

    def download_input(self, wildcards) -> list[str]:
        """The generated replica when the source's datasets are replicas, else nothing."""
        replica = self.dataset(self.source_dataset(wildcards))["config"]["replica"]
        return [self.replica_record(wildcards.source)] if replica else []

    @staticmethod
    def download_data_root(wildcards, output) -> str:
        """data_root, from the download's output path <data_root>/downloads/<source>/download.json."""
        return str(Path(output[0]).parents[2])

    def download_args(self, wildcards) -> list[str]:
        """The download's options as a list (each element quoted by the rule): the replica folder, or the
        config's url/checksum overrides (none: the dataset's official sources)."""
        cfg = self.dataset(self.source_dataset(wildcards))["config"]
        if cfg["replica"]:
            return ["--replica-dir", self.replica_dir(wildcards)]
        return [arg for key in ("url", "checksum") if cfg[key] for arg in (f"--{key}", cfg[key])]

    def prepare_input(self, wildcards) -> list[str]:
        """The base manifest (derived datasets) with the other files they read, the download record, or
        nothing (an extracted copy)."""
        entry = self.dataset(wildcards.dataset)
        if entry["facts"]["derived_from"]:
            # and the files derive() reads besides it (gldv2_hier_rebuilt: the curated H-GLDv2 labels)
            return [manifest_path(entry["facts"]["derived_from"]), *entry["facts"]["derive_inputs"]]
        return [] if entry["config"]["extracted"] else [self.download_record(wildcards.dataset)]

    def prepare_source(self, wildcards) -> str:
        """What prepare reads: the base manifest's folder, the extracted copy or the download record."""
        entry = self.dataset(wildcards.dataset)
        if entry["facts"]["derived_from"]:
            return f"results/manifests/{entry['facts']['derived_from']}"
        return entry["config"]["extracted"] or self.download_record(wildcards.dataset)

    def prepare_flags(self, wildcards) -> list[str]:
        """``--replica`` when the dataset (or the base of a derived one) is a replica."""
        entry = self.dataset(wildcards.dataset)
        base = entry["facts"]["derived_from"]
        replica = self.dataset(base)["config"]["replica"] if base else entry["config"]["replica"]
        return ["--replica"] if replica else []

    def manifest_outputs(self) -> list[str]:
        """Every planned dataset's manifest: `snakemake` prepares the datasets the config lists even
        before a table trains on them."""
        return [manifest_path(name) for name in self.plan.datasets]
