"""What every dataset shares: download, verify, extract, parse into a manifest, replicate.

A dataset is a subclass of :class:`Dataset` registered in
:data:`rankrepro.data.datasets.DATASETS`. It *declares* its facts as class attributes
and *implements* two methods; everything else (downloading every source file with its
checksum, trust-on-first-use checksums, the manual-licence message, re-verifying files
before they are extracted again, extraction into one tree, count and disjointness
checks, writing the manifest) lives here::

    @DATASETS.register("cub")
    class CUB(Dataset):
        title = "CUB-200-2011"
        files = (SourceFile("CUB_200_2011.tgz", url="https://...", checksum="md5:...", size=1_150_585_339),)
        top, marker = "CUB_200_2011", "images.txt"       # <top>/<marker> in the dataset tree
        levels, protocol = ["class"], "same-set"
        expected_counts = {"train": {"images": 5_864, "class": 100}, ...}
        disjoint = (("train", "test"),)

        def read_table(self, root): ...                  # -> path, split, label[, level_1 ...]
        def make_replica(self, out_dir, **options): ...  # writes every source file, returns their names

:meth:`Dataset.read_table` reads the dataset's text files (lists, CSVs, JSON) through
:mod:`rankrepro.io` (``read_lines``, ``read_text``, ``text_stream`` for ``csv`` and
pandas): UTF-8, and an error naming the file, line and bytes where a file is not.

Where things go (``<source>`` is :attr:`Dataset.source`, the dataset's name unless
several datasets share their files, as ``inat``/``inat_base``/``inat_full`` do):

- ``<data_root>/downloads/<source>/<file>``: each :class:`SourceFile`, verified, with a
  ``.verified`` sidecar; ``download.json`` beside them lists them once all are there
  (the download rule's output).
- ``<data_root>/<source>/``: the dataset tree. Archives are extracted into it (at
  ``SourceFile.into``), other files are linked into it; ``<top>/<marker>`` is then the
  image root that :meth:`read_table` reads.
- ``<data_root>/checksums.lock.json``: sha256 of files without a published checksum,
  recorded the first time their data passes :meth:`check_counts`, checked ever after.

A variant is another registration of the same class with fixed keywords, e.g.
``DATASETS.register("dyml_vehicle", domain="vehicle")(DyML)``: the constructor takes
exactly those keywords (and nothing else). A *derived* dataset (``derived_from``, e.g.
``sop_merge3``) has no files: :meth:`derive` builds its table from the base manifest.
:func:`rankrepro.data.datasets.load` builds the instance and sets :attr:`Dataset.name`.

Nothing here imports torch: the planner reads :meth:`Dataset.facts` cheaply.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rankrepro.data import archives, checksums, downloads, errors, sources
from rankrepro.data.manifest import MANIFEST_CSV, META_JSON, Manifest, level_columns, read_manifest, write_manifest
from rankrepro.data.paths import leaves_root
from rankrepro.io import atomic_write_json, read_text

DOWNLOAD_RECORD = "download.json"
REPLICA_RECORD = "replica.json"


@dataclass(frozen=True)
class SourceFile:
    """One file a dataset is made of.

    ``name``: its path under ``downloads/<source>/`` (may hold a folder, e.g.
    ``train/images_000.tar``). ``url``: where it comes from (None: the user puts it there
    by hand, see :attr:`Dataset.how_to_get`). ``checksum``: ``"md5:<hex>"`` /
    ``"sha256:<hex>"`` as published; None when nobody publishes one (trust on first use,
    :class:`~rankrepro.data.checksums.ChecksumLock`). ``checksum_file``: the name of another
    source file whose first whitespace-separated field is this file's md5 (GLDv2's
    ``md5.images_NNN.txt``). ``size``: bytes, for messages. ``extract``: an archive,
    extracted into ``<tree>/<into>``; otherwise the file is linked to
    ``<tree>/<into>/<basename>``. ``optional``: a manual file the dataset reads when it is
    there (VGGFace2's boxes and landmarks); its absence stops nothing.
    """

    name: str
    url: str | None = None
    checksum: str | None = None
    size: int | None = None
    extract: bool = True
    into: str = ""
    checksum_file: str | None = None
    optional: bool = False


class Dataset:
    """One dataset: its facts (class attributes) and the download -> prepare -> manifest steps.

    Attributes a subclass sets:

    ``title``: the name used in messages. ``files``: the :class:`SourceFile` s (or
    override :meth:`source_files`). ``source``: the folder name of its downloads and tree
    when several datasets share them (default: the registered name); one may declare a
    subset of the others' files (``voc07``: two of ``voc0712``'s three archives), the
    download then runs as the one declaring the most. ``manual``: the
    files cannot be downloaded automatically; ``how_to_get`` says how a user obtains
    them. ``top``: the folder of the tree that is the image root unless :meth:`find_root`
    says otherwise (``""``: the tree itself); ``marker``: a file under it that identifies
    the dataset. ``root_in_only_subfolder``: :meth:`find_root` also takes the tree's only sub-folder
    holding ``marker`` (a copy extracted under another folder name). ``levels``: level names, finest first (the manifest's ``label``,
    ``level_1``, ...). ``protocol``: the evaluation protocol, one of
    :data:`rankrepro.metrics.protocols.PROTOCOLS` (``voc07`` for a detection dataset). ``expected_counts``: per split,
    ``images`` and the number of distinct labels per level name, checked unless the
    source is a replica. ``disjoint``: pairs of splits that must share no finest label.
    ``derived_from``: the dataset whose manifest :meth:`derive` transforms (no files).
    ``extra_columns``: per-row manifest columns after the levels (listed in ``meta.json``).
    """

    _name: str = ""
    title: str = ""
    files: tuple[SourceFile, ...] = ()
    source: str = ""
    manual: bool = False
    how_to_get: str = ""
    top: str = ""
    marker: str = ""
    root_in_only_subfolder: bool = False
    levels: list[str] = ["class"]
    protocol: str = "same-set"
    expected_counts: dict[str, dict[str, int]] = {}
    disjoint: tuple[tuple[str, str], ...] = ()
    derived_from: str | None = None
    extra_columns: tuple[str, ...] = ()
    #: files besides the base manifest that :meth:`derive` reads (the prepare rule's inputs)
    derive_inputs: tuple[str, ...] = ()

    def __init__(self) -> None:
        """Datasets without variants take no arguments (a variant's constructor takes its fixed keywords)."""

    def __repr__(self) -> str:
        return f"<dataset {self._name or type(self).__name__}>"

    @property
    def name(self) -> str:
        """The registered name (set by :func:`rankrepro.data.datasets.load`): the manifest folder
        and ``meta.json``'s ``dataset``."""
        if not self._name:
            raise RuntimeError(f"{type(self).__name__} has no name: build it with "
                               "rankrepro.data.datasets.load(name)")
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def source_name(self) -> str:
        """The folder of the downloads and the tree: :attr:`source`, else :attr:`name`."""
        return self.source or self.name

    # -- to implement ---------------------------------------------------------------------------

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows from the dataset's own files under ``root``: ``path`` (relative to
        ``root``), ``split``, ``label`` and ``level_1 ...`` (integers, finest first); optionally
        ``origin``, where each row's path was read, for messages (not written to the manifest):
        the list file relative to ``root`` and its 1-based line (``"Ebay_train.txt, line 2"``), or
        for a JSON / MAT file the entry (``"cars_annos.mat, annotations(3)"``)."""
        raise NotImplementedError

    def make_replica(self, out_dir: Path, **options) -> list[str]:
        """Write a generated replica of every source file into ``out_dir`` (same names, same
        layout inside, tiny images, few classes); return the names written. A replica may
        hold fewer shards than the real data (GLDv2)."""
        raise NotImplementedError(f"dataset {self.name!r} has no replica generator")

    def derive(self, base: Manifest) -> pd.DataFrame:
        """A derived dataset's manifest rows, from the manifest of :attr:`derived_from`."""
        raise NotImplementedError(f"dataset {self.name!r} is not derived")

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """Dataset-specific entries for ``meta.json`` (e.g. class names)."""
        return {}

    def source_files(self) -> list[SourceFile]:
        """The files of the real dataset (default: :attr:`files`)."""
        return list(self.files)

    # -- facts ----------------------------------------------------------------------------------

    def facts(self) -> dict:
        """What the planner needs without importing torch (JSON): ``source`` (folder of the
        downloads; None for a derived dataset), ``derived_from``, ``files`` (how many),
        ``protocol``, ``levels``, ``manual``, ``title``, ``derive_inputs``. Needs no name when
        :attr:`source` is set or the dataset is derived."""
        return {"title": self.title, "source": None if self.derived_from else (self.source or self._name or None),
                "derived_from": self.derived_from, "files": len(self.source_files()), "protocol": self.protocol,
                "levels": list(self.levels), "manual": self.manual, "derive_inputs": list(self.derive_inputs)}

    def downloads_dir(self, data_root: str | Path) -> Path:
        """``<data_root>/downloads/<source>``."""
        return Path(data_root) / "downloads" / self.source_name

    def extract_dir(self, data_root: str | Path) -> Path:
        """The dataset tree: ``<data_root>/<source>``."""
        return Path(data_root) / self.source_name

    # -- replica --------------------------------------------------------------------------------

    def write_replica(self, out_dir: str | Path, **options) -> dict[str, str]:
        """:meth:`make_replica` into ``out_dir``, then ``<file>.sha256`` beside each file and
        ``replica.json`` (``{"dataset", "files": {name: "sha256:<hex>"}}``, written last).
        Returns the files' checksums."""
        out_dir = Path(out_dir)
        names = self.make_replica(out_dir, **options)
        digests = {}
        for name in names:
            digests[name] = "sha256:" + checksums.file_digest(out_dir / name, "sha256")
            (out_dir / f"{name}.sha256").write_text(digests[name] + "\n")
        atomic_write_json(out_dir / REPLICA_RECORD, {"dataset": self.name, "files": digests})
        return digests

    # -- download -------------------------------------------------------------------------------

    def download(self, data_root: str | Path, url: str | None = None, checksum: str | None = None,
                 replica_dir: str | Path | None = None) -> Path:
        """Download and verify every source file into :meth:`downloads_dir`; return the path of
        ``download.json``, written once all are there.

        ``url``/``checksum`` override those of a single-file dataset. ``replica_dir``: take
        the files of a generated replica (``replica.json``) through ``file://`` instead.
        A file with a published checksum (or one recorded in ``checksums.lock.json``) is
        verified; one without is downloaded and verified later by its counts. A file
        without url must be put there by hand: all such missing files are listed in one
        :class:`~rankrepro.data.errors.ManualDownloadRequired`. A verified file gets a
        ``.verified`` sidecar, so it is not hashed again (here or in :meth:`prepare`).
        """
        files = self.replica_files(replica_dir) if replica_dir else self.source_files()
        if url or checksum:
            if len(files) != 1 or replica_dir:
                raise ValueError(f"dataset {self.name!r} has {len(files)} source files: a url/checksum "
                                 "override needs a single-file dataset (point `extracted` to a copy instead)")
            files = [SourceFile(files[0].name, url or files[0].url, checksum or files[0].checksum, files[0].size,
                                files[0].extract, files[0].into)]
        folder, lock = self.downloads_dir(data_root), checksums.ChecksumLock(data_root)
        record, manual = {}, {}
        for f in sorted(files, key=lambda f: f.checksum_file is not None):  # md5 files first
            dest = folder / f.name
            expected = self.expected_checksum(f, folder, lock)
            if expected and checksums.is_verified(dest, expected):
                pass
            elif f.url is None:
                if f.optional and not dest.is_file():
                    continue
                if not dest.is_file() or (expected and not checksums.verify(dest, expected)):
                    manual[f.name] = (expected, f.size)
                    continue
            else:
                with self._checksum_origin(f, lock, f"{folder.name}/{f.name}"):
                    downloads.download(f.url, dest, expected)
            if expected:
                checksums.record_verified(dest, expected)
            record[f.name] = {"checksum": expected, "size": dest.stat().st_size, "extract": f.extract,
                              "into": f.into}
        if manual:
            sources.require_files(folder, manual, self.name, self.how_to_get,
                                  note=f"Or set datasets.{self.name}.extracted to a copy already extracted "
                                       f"(a folder holding {self.top + '/' if self.top else ''}{self.marker}).")
        out = folder / DOWNLOAD_RECORD
        atomic_write_json(out, {"dataset": self.name, "source": self.source_name, "files": record})
        return out

    def replica_files(self, replica_dir: str | Path) -> list[SourceFile]:
        """The files of a generated replica, as :class:`SourceFile` s with ``file://`` urls."""
        replica_dir = Path(replica_dir).resolve()
        listed = json.loads((replica_dir / REPLICA_RECORD).read_text())["files"]
        real = {f.name: f for f in self.source_files()}
        out = []
        for name, checksum in listed.items():
            like = real.get(name) or self.replica_file_like(name)
            out.append(SourceFile(name, (replica_dir / name).as_uri(), checksum, extract=like.extract,
                                  into=like.into))
        return out

    def replica_file_like(self, name: str) -> SourceFile:
        """How to unpack a replica file that is not among :meth:`source_files` (e.g. a shard of a
        replica with other shard numbers); default: an error naming it."""
        raise ValueError(f"replica file {name!r} is not a source file of dataset {self.name!r}")

    @staticmethod
    def _checksum_origin(f: SourceFile, lock: checksums.ChecksumLock, key: str):
        """Around a verification: a mismatch against a checksum from the lock file says so."""
        return contextlib.nullcontext() if f.checksum or f.checksum_file else lock.explain(key)

    @staticmethod
    def expected_checksum(f: SourceFile, folder: Path, lock: checksums.ChecksumLock) -> str | None:
        """The checksum ``f`` must match: published, read from its ``checksum_file``, or recorded
        in the lock file; None when none is known yet."""
        if f.checksum:
            return f.checksum
        if f.checksum_file:
            path = folder / f.checksum_file
            text = read_text(path).split() if path.is_file() else []
            if not text:
                raise errors.ChecksumError(f"{path}: no md5 in the checksum file of {f.name}")
            return f"md5:{text[0].lower()}"
        return lock.get(f"{folder.name}/{f.name}")

    # -- prepare --------------------------------------------------------------------------------

    def prepare(self, source: str | Path, manifest_dir: str | Path, *, data_root: str | Path,
                replica: bool = False) -> Manifest:
        """Build the manifest; nothing is written on failure.

        ``source``: ``download.json`` (or its folder): every file is re-verified, archives
        are extracted and other files linked into :meth:`extract_dir`; a single archive
        (single-file datasets); an already-extracted copy (the ``top`` folder or its
        parent); for a derived dataset, the base manifest's folder. Unless ``replica``, the
        counts must equal ``expected_counts``, and files without a published checksum
        then get one recorded in ``checksums.lock.json``.
        """
        if self.derived_from:
            base = self.read_base(source, replica)
            table, root, unverified = self.derive(base), Path(base.meta["root"]), {}
        else:
            root, unverified = self.locate_root(source, data_root, replica)
            table = self.read_table(root)
        self.check_table(table, root, replica)
        if not replica:
            checksums.ChecksumLock(data_root).record(unverified)
        meta = {"dataset": self.name, "root": str(root.resolve()), "levels": list(self.levels),
                "protocol": self.protocol, "replica": replica, **self.extra_meta(table)}
        if self.derived_from:
            meta["derived_from"] = self.derived_from
        if self.extra_columns:
            meta["extra_columns"] = list(self.extra_columns)
        return write_manifest(manifest_dir, table, meta)

    def read_base(self, folder: str | Path, replica: bool) -> Manifest:
        """The manifest of :attr:`derived_from` in ``folder``: a clear error when it is not there
        (prepare the base first), or when it is a generated replica and ``replica`` is not set."""
        folder = Path(folder)
        missing = [name for name in (MANIFEST_CSV, META_JSON) if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{self.title}: no manifest of {self.derived_from!r} in {folder} (missing "
                                    f"{', '.join(missing)}); prepare {self.derived_from!r} first and pass its "
                                    "manifest folder as the source")
        base = read_manifest(folder)
        if base.meta.get("replica") and not replica:
            raise ValueError(f"{self.title}: the base manifest {folder} is a generated replica; "
                             "pass replica=True (--replica)")
        return base

    def locate_root(self, source: str | Path, data_root: str | Path,
                    replica: bool = False) -> tuple[Path, dict[str, Path]]:
        """The image root for ``source`` (see :meth:`prepare`), verifying and unpacking files first;
        and the files still without a checksum (``{lock key: path}``)."""
        source, unverified = Path(source), {}
        if source.is_dir() and (source / DOWNLOAD_RECORD).is_file():
            source = source / DOWNLOAD_RECORD
        if source.name == DOWNLOAD_RECORD and source.is_file():
            unverified = self.unpack(source, data_root)
            source = self.extract_dir(data_root)
        elif source.is_file():
            checksum, unverified = self.verify_archive(source, data_root, replica)
            source = archives.extract(source, self.extract_dir(data_root), checksum=checksum)
        root = self.find_root(source)
        if root is None:
            where = f"{self.top}/{self.marker}" if self.top else self.marker
            raise FileNotFoundError(f"no {where} under {source}: expected {DOWNLOAD_RECORD}, "
                                    f"an archive of {self.title}, or an already-extracted copy")
        return root, unverified

    def unpack(self, record_path: Path, data_root: str | Path) -> dict[str, Path]:
        """Re-verify every file ``download.json`` lists, extract or link it into the tree; return
        the files without a checksum yet."""
        record = json.loads(record_path.read_text())
        folder, tree, lock = record_path.parent, self.extract_dir(data_root), checksums.ChecksumLock(data_root)
        unverified = {}
        with checksums.file_lock(tree.with_name(f".{tree.name}.lock")):  # datasets sharing the tree take turns
            for name, entry in record["files"].items():
                unverified.update(self._unpack_one(folder, name, entry, tree, lock, record_path))
        return unverified

    @staticmethod
    def _unpack_one(folder: Path, name: str, entry: dict, tree: Path, lock: checksums.ChecksumLock,
                    record_path: Path) -> dict[str, Path]:
        """Re-verify one listed file and extract or link it; ``{lock key: path}`` when it has no checksum yet."""
        path, key = folder / name, f"{folder.name}/{name}"
        recorded = lock.get(key)
        checksum = entry.get("checksum") or recorded
        if checksum:
            with lock.explain(key) if checksum == recorded else contextlib.nullcontext():
                checksums.reverify(path, checksum)
        elif not path.is_file():
            raise FileNotFoundError(f"{path} is listed in {record_path} but missing; download it again")
        if entry.get("extract", True):
            archives.extract(path, tree / entry.get("into", ""), checksum=checksum)
        else:
            into = tree / entry.get("into", "")
            (into / archives.EXTRACTED_MARKER).mkdir(parents=True, exist_ok=True)  # ours: archives may extract here too
            sources.place(path, into / Path(name).name)
        return {} if checksum else {key: path}

    def find_root(self, directory: Path) -> Path | None:
        """The image root in ``directory`` (itself or its ``top`` folder holding ``marker``; with
        ``root_in_only_subfolder``, else its only sub-folder holding it); None if absent."""
        for root in (directory, directory / self.top):
            if (root / self.marker).is_file():
                return root
        if self.root_in_only_subfolder and directory.is_dir():
            children = [c for c in sorted(directory.iterdir()) if c.is_dir() and (c / self.marker).is_file()]
            if len(children) == 1:
                return children[0]
        return None

    def verify_archive(self, archive: Path, data_root: str | Path, replica: bool) -> tuple[str | None, dict]:
        """Re-verify a single ``archive`` before it is extracted (again); return its checksum and,
        when it has none yet, ``{lock key: archive}`` (recorded once the data passes its checks).

        The checksum it must match: the dataset's published one, else the one recorded in
        ``checksums.lock.json``; none yet: trusted on first use like a download. Sidecars never
        choose it (``.verified`` only spares the hash while it records that checksum for the
        file's current size and mtime), except for a generated ``replica``: the checksum it was
        verified against at download (``.verified``), else the one stated beside it
        (``.sha256``), else the dataset's. A mismatch raises :class:`~rankrepro.data.errors.ChecksumError`.
        """
        files = self.source_files()
        if len(files) != 1 and not replica:
            raise ValueError(f"dataset {self.name!r} has {len(files)} source files: prepare it from their "
                             f"{DOWNLOAD_RECORD} (rankrepro download) or an extracted copy, not from {archive}")
        published = files[0].checksum if len(files) == 1 else None
        if replica:
            checksum = checksums.recorded_checksum(archive) or published
            if not checksum:
                raise ValueError(f"dataset {self.name!r}: no checksum known for {archive} (a generated replica "
                                 f"states it in {archive}{checksums.STATED_SUFFIX})")
            checksums.reverify(archive, checksum)
            return checksum, {}
        lock = checksums.ChecksumLock(data_root)
        key = f"{self.source_name}/{files[0].name}"
        checksum = published or lock.get(key)
        if checksum is None:
            return None, {key: archive}
        with self._checksum_origin(files[0], lock, key):
            checksums.reverify(archive, checksum)
        return checksum, {}

    # -- checks ---------------------------------------------------------------------------------

    def check_table(self, table: pd.DataFrame, root: Path, replica: bool) -> None:
        """The checks every manifest passes: every path stays inside ``root``, disjoint splits,
        published counts (unless ``replica``), every listed image present."""
        self.check_paths(table, root)
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

    def check_paths(self, table: pd.DataFrame, root: Path) -> None:
        """Refuse a listed path that could leave ``root`` (absolute, or with ``..``: a tampered
        list file would have training read, and the image cache write, any file); the error
        names where the path was listed (``origin``, else the table row)."""
        bad = [i for i, path in enumerate(table["path"]) if not isinstance(path, str) or leaves_root(path)]
        if not bad:
            return
        i = bad[0]
        origin = table["origin"].iat[i] if "origin" in table.columns else \
            f"row {i} of the table read from {root} (split {table['split'].iat[i]!r})"
        raise ValueError(f"{self.title}: {origin}: image path {table['path'].iat[i]!r} leaves the image root "
                         f"{root} (absolute, or climbing out with '..'; {len(bad)} such paths in all); refusing "
                         "it: fix the list file or use an unmodified copy of the dataset")

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
