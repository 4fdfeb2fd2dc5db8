"""What every dataset shares: download, verify, extract, parse into a manifest, replicate.

A dataset is a subclass of :class:`Dataset` registered in
:data:`rankrepro.data.datasets.DATASETS`. It *declares* its facts as class attributes
and *implements* two methods; everything else (downloading with a checksum, the
manual-licence message, re-verifying the archive before it is extracted again,
extraction, count and disjointness checks, writing the manifest) lives here::

    @DATASETS.register("cub")
    class CUB(Dataset):
        title = "CUB-200-2011"
        archive, url, checksum = "CUB_200_2011.tgz", "https://...", "md5:..."
        top, marker = "CUB_200_2011", "images.txt"       # <top>/<marker> inside the archive
        levels, protocol = ["class"], "same-set"
        expected_counts = {"train": {"images": 5_864, "class": 100}, ...}
        disjoint = (("train", "test"),)

        def read_table(self, root): ...                  # -> path, split, label[, level_1 ...]
        def make_replica(self, out_archive, **options): ...  # uses rankrepro.data.replicas

A variant is another registration of the same class with fixed keywords, e.g.
``DATASETS.register("dyml_vehicle", domain="vehicle")(DyML)``: the constructor takes
exactly those keywords (and nothing else). :func:`rankrepro.data.datasets.load`
builds the instance and sets :attr:`Dataset.name` to the registered name.

Nothing here imports torch: the planner reads :meth:`Dataset.facts` cheaply.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rankrepro.data import sources
from rankrepro.data.manifest import Manifest, level_columns, write_manifest


class Dataset:
    """One dataset: its facts (class attributes) and the download -> prepare -> manifest steps.

    Attributes a subclass sets:

    ``title``: the name used in messages. ``archive``: the file name of the download,
    stored as ``<data_root>/downloads/<name>/<archive>``. ``url``, ``checksum``: where
    it comes from and its ``"md5:<hex>"`` / ``"sha256:<hex>"`` (``url`` None for a
    manual dataset). ``manual``: the archive cannot be downloaded automatically;
    ``how_to_get`` says how a user obtains it. ``top``: the folder the archive holds
    (the image root unless :meth:`find_root` says otherwise); ``marker``: a file
    under it that identifies the dataset. ``levels``: level names, finest first (the
    manifest's ``label``, ``level_1``, ...). ``protocol``: the evaluation protocol, one
    of :data:`rankrepro.metrics.protocols.PROTOCOLS`. ``expected_counts``: per split,
    ``images`` and the number of distinct labels per level name, checked unless the
    source is a replica. ``disjoint``: pairs of splits that must share no finest label.
    """

    _name: str = ""
    title: str = ""
    archive: str = ""
    url: str | None = None
    checksum: str | None = None
    manual: bool = False
    how_to_get: str = ""
    top: str = ""
    marker: str = ""
    levels: list[str] = ["class"]
    protocol: str = "same-set"
    expected_counts: dict[str, dict[str, int]] = {}
    disjoint: tuple[tuple[str, str], ...] = ()

    def __init__(self) -> None:
        """Datasets without variants take no arguments (a variant's constructor takes its fixed keywords)."""

    def __repr__(self) -> str:
        return f"<dataset {self._name or type(self).__name__}>"

    @property
    def name(self) -> str:
        """The registered name (set by :func:`rankrepro.data.datasets.load`): the folder under
        ``downloads/`` and ``data_root``, and ``meta.json``'s ``dataset``."""
        if not self._name:
            raise RuntimeError(f"{type(self).__name__} has no name: build it with "
                               "rankrepro.data.datasets.load(name)")
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    # -- to implement ---------------------------------------------------------------------------

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows from the dataset's own files under ``root``: ``path`` (relative to
        ``root``), ``split``, ``label`` and ``level_1 ...`` (integers, finest first)."""
        raise NotImplementedError

    def make_replica(self, out_archive: str | Path, **options) -> str:
        """Write a generated replica of the archive (same layout, tiny images); return its
        ``"sha256:<hex>"`` (also written to ``<out_archive>.sha256``)."""
        raise NotImplementedError(f"dataset {self.name!r} has no replica generator")

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """Dataset-specific entries for ``meta.json`` (e.g. class names)."""
        return {}

    # -- facts ----------------------------------------------------------------------------------

    def facts(self) -> dict:
        """What the planner needs without importing torch (JSON): ``archive`` (file name under
        ``downloads/<name>/``), ``protocol``, ``levels``, ``manual``, ``url``, ``checksum``, ``title``.
        Needs no name: ``DATASETS.get(name).build().facts()`` works too."""
        return {"title": self.title, "archive": self.archive, "protocol": self.protocol,
                "levels": list(self.levels), "manual": self.manual, "url": self.url, "checksum": self.checksum}

    def archive_path(self, data_root: str | Path) -> Path:
        """``<data_root>/downloads/<name>/<archive>``."""
        return Path(data_root) / "downloads" / self.name / self.archive

    def extract_dir(self, data_root: str | Path) -> Path:
        """Where the archive is extracted: ``<data_root>/<name>``."""
        return Path(data_root) / self.name

    # -- download -------------------------------------------------------------------------------

    def download(self, data_root: str | Path, url: str | None = None, checksum: str | None = None) -> Path:
        """Download and verify the archive to :meth:`archive_path`; return its path.

        ``url`` and ``checksum`` default to the dataset's. A manual dataset (no ``url``)
        checks that the user put the file there and raises
        :class:`~rankrepro.data.sources.ManualDownloadRequired` naming the path and the
        checksum otherwise. A verified archive gets a ``.verified`` sidecar, so an
        untouched archive is not hashed again (here or in :meth:`prepare`).
        """
        url, checksum = url or self.url, checksum or self.checksum
        if not checksum:
            raise ValueError(f"dataset {self.name!r} has no checksum: give one")
        dest = self.archive_path(data_root)
        if sources.is_verified(dest, checksum):
            return dest
        if url is None:
            sources.require_files(dest.parent, {dest.name: checksum}, self.name, self.how_to_get)
        else:
            sources.download(url, dest, checksum)
        sources.record_verified(dest, checksum)
        return dest

    # -- prepare --------------------------------------------------------------------------------

    def prepare(self, source: str | Path, manifest_dir: str | Path, *, data_root: str | Path,
                replica: bool = False) -> Manifest:
        """Build the manifest from the archive or an already-extracted copy.

        ``source``: the archive (re-verified, then extracted to :meth:`extract_dir`), the
        ``top`` folder, or its parent. Unless ``replica``, the counts must equal
        ``expected_counts``. Every listed image must exist. Nothing is written on failure.
        """
        root = self.locate_root(source, data_root)
        table = self.read_table(root)
        self.check_table(table, root, replica)
        meta = {"dataset": self.name, "root": str(root.resolve()), "levels": list(self.levels),
                "protocol": self.protocol, "replica": replica, **self.extra_meta(table)}
        return write_manifest(manifest_dir, table, meta)

    def locate_root(self, source: str | Path, data_root: str | Path) -> Path:
        """The image root for ``source``, verifying and extracting an archive first."""
        source = Path(source)
        if source.is_file():
            checksum = self.verify_archive(source)
            source = sources.extract(source, self.extract_dir(data_root), checksum=checksum)
        root = self.find_root(source)
        if root is None:
            raise FileNotFoundError(f"no {self.top}/{self.marker} under {source}: expected the {self.archive} "
                                    f"archive, the {self.top} folder or its parent")
        return root

    def find_root(self, directory: Path) -> Path | None:
        """The image root in ``directory`` (itself or its ``top`` folder holding ``marker``); None if absent."""
        for root in (directory, directory / self.top):
            if (root / self.marker).is_file():
                return root
        return None

    def verify_archive(self, archive: Path) -> str:
        """Re-verify ``archive`` before it is extracted (again); return its checksum.

        The expected checksum is the one it was verified against at download (its
        ``.verified`` sidecar), else the one a generated replica states beside it
        (``.sha256``), else the dataset's. It is hashed only when its size or mtime changed
        since the last verification; a mismatch raises :class:`~rankrepro.data.sources.ChecksumError`.
        """
        checksum = sources.recorded_checksum(archive) or self.checksum
        if not checksum:
            raise ValueError(f"dataset {self.name!r}: no checksum known for {archive}")
        sources.reverify(archive, checksum)
        return checksum

    # -- checks ---------------------------------------------------------------------------------

    def check_table(self, table: pd.DataFrame, root: Path, replica: bool) -> None:
        """The checks every manifest passes: disjoint splits, published counts (unless
        ``replica``), every listed image present."""
        for a, b in self.disjoint:
            shared = set(table.loc[table.split == a, "label"]) & set(table.loc[table.split == b, "label"])
            if shared:
                raise ValueError(f"{self.title}: {len(shared)} classes are in both {a} and {b}, "
                                 f"e.g. {sorted(shared)[:5]}")
        if not replica:
            self.check_counts(table)
        missing = [p for p in table["path"] if not (root / p).is_file()]
        if missing:
            raise FileNotFoundError(f"{self.title}: {len(missing)} listed images are missing under {root}, "
                                    f"e.g. {', '.join(missing[:5])}")

    def check_counts(self, table: pd.DataFrame) -> None:
        """Images and distinct labels per level, per split, must equal ``expected_counts``."""
        columns = dict(zip(self.levels, level_columns(len(self.levels))))
        for split, expected in self.expected_counts.items():
            rows = table[table.split == split]
            for key, value in expected.items():
                found = len(rows) if key == "images" else rows[columns[key]].nunique()
                what = "images" if key == "images" else f"{key} labels"
                if found != value:
                    raise ValueError(f"{self.title} {split}: expected {value:,} {what}, found {found:,} "
                                     "(pass replica=True for a generated replica)")
