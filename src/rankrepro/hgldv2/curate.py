"""H-GLDv2 step 4: the curation file applied; the release's ``*_label_to_hierarchical.csv`` columns.

The paper (SupRank TPAMI §VI-B): "We manually assess the obtained clusters based on the scraped label
names. We create semantic groups by dividing the k-means clusters into sub-clusters. This leads to 78
supercategories", each natural or human-made. Here that manual step is a checked-in file
(``curation.yaml``, or the user's own) applied by fixed rules:

- **The 78.** ``supercategories.yaml``: the released ``hierarchical_label`` names by group
  (``human-made`` / ``natural``), verbatim (``"ocean area "`` keeps its trailing space).
- **Names.** A scraped name (``clean/landmarks.csv``'s ``supercategory``) and a ``names`` key match
  after whitespace normalisation, ``" ".join(name.split())``. Values (the supercategories) must be one
  of the 78 verbatim; a value equal to exactly one of them after stripping leading and trailing
  whitespace is accepted as that one (``ocean area`` -> ``"ocean area "``).
- **Precedence** per name: its ``names`` rule (a supercategory, or null = dropped); else the
  ``clusters`` rule of its cluster in ``cluster/names.csv`` (looked up verbatim, then normalised);
  else unmapped. Dropped and unmapped landmarks keep their row with empty ``hierarchical_label`` and
  ``natural_or_human_made`` cells (the release's convention for unlabelled landmarks).
- **Cluster rules are tied to one clustering**: they apply only when the file's ``cluster_fingerprint``
  equals ``cluster/cluster.json``'s ``fingerprint``; any other case with cluster rules is an error.
- **Output** per split (train, index): one row per landmark of ``clean/landmarks.csv``, sorted by
  integer ``landmark_id``, columns ``landmark_id,category,supercategory,hierarchical_label,
  natural_or_human_made`` (``supercategory`` = the scraped name verbatim). ``curate.md`` /
  ``curate.json`` (written last): per split labelled / unmapped / dropped, per supercategory counts,
  the unmapped names by landmark count (what to curate next), names matched by name vs cluster rule;
  ``curate.md`` escapes every name (:func:`~rankrepro.tables.formats.md_text`).

:func:`seed_curation` writes a curation file from the official release: per scraped name
(normalised; train and index rows together, rows with a non-empty ``hierarchical_label``) the
majority ``hierarchical_label``, ties to the alphabetically first, a comment where it was not
unanimous.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rankrepro.io import (
    atomic_write_json,
    atomic_write_text,
    csv_text,
    load_yaml,
    read_csv_columns,
)
from rankrepro.tables.formats import md_text

SUPERCATEGORIES_FILE = Path(__file__).with_name("supercategories.yaml")
CURATION_FILE = Path(__file__).with_name("curation.yaml")
GROUPS = ("human-made", "natural")
SPLITS = ("train", "index")
KEYS = ("cluster_fingerprint", "names", "clusters")
COLUMNS = ["landmark_id", "category", "supercategory", "hierarchical_label", "natural_or_human_made"]
HOWS = ("name", "cluster", "dropped", "unmapped")
RELEASE_FILES = {s: f"{s}_label_to_hierarchical.csv" for s in SPLITS}
# A malformed input file is a ValueError naming it, whatever the check (hence the TRY004 noqa's).


def norm(name: str) -> str:
    return " ".join(name.split())


def _load_yaml(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return load_yaml(path)


def load_supercategories(path: str | Path = SUPERCATEGORIES_FILE) -> dict[str, str]:
    """name -> group ("natural" | "human-made"), file order; a malformed file names the file and key."""
    path = Path(path)
    data = _load_yaml(path)
    if not isinstance(data, dict) or set(data) != set(GROUPS):
        keys = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: expected exactly the group keys {list(GROUPS)}, got {keys}")
    out: dict[str, str] = {}
    for group in GROUPS:
        if not isinstance(data[group], list):
            raise ValueError(f"{path}: {group}: expected a list of names")  # noqa: TRY004
        for i, name in enumerate(data[group]):
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{path}: {group}[{i}]: {name!r} is not a name (a non-empty string)")
            if name in out:
                raise ValueError(f"{path}: {group}[{i}]: {name!r} is already listed under {out[name]}")
            out[name] = group
    return out


@dataclass
class Curation:
    names: dict[str, str | None]  # normalised scraped name -> supercategory (None: dropped)
    clusters: dict[int, str | None] = field(default_factory=dict)
    fingerprint: str | None = None
    path: Path | None = None


def _target(value, where: str, supercategories: dict) -> str | None:
    """A curation value resolved to one of the 78 (module docstring), or None (drop)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is not a supercategory name (a string) or null")  # noqa: TRY004
    if value in supercategories:
        return value
    stripped = [s for s in supercategories if s.strip() == value.strip()]
    if len(stripped) == 1:
        return stripped[0]
    nearest = difflib.get_close_matches(value, list(supercategories), n=3, cutoff=0.0)
    raise ValueError(f"{where}: {value!r} is not one of the {len(supercategories)} supercategories "
                     f"(supercategories.yaml); nearest: {', '.join(nearest) or 'none'}")


def _parse_curation(path: Path, supercategories: dict) -> Curation:
    data = _load_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with keys {list(KEYS)}")  # noqa: TRY004
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown top-level key(s) {unknown}; allowed: {list(KEYS)}")
    fp = data.get("cluster_fingerprint")
    if fp is not None and not isinstance(fp, str):
        raise ValueError(f"{path}: cluster_fingerprint: {fp!r} is not a string (quote it)")
    raw_names, raw_clusters = data.get("names") or {}, data.get("clusters") or {}
    for key, raw in (("names", raw_names), ("clusters", raw_clusters)):
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: {key}: expected a mapping, got {type(raw).__name__}")  # noqa: TRY004
    names: dict[str, str | None] = {}
    origin: dict[str, str] = {}
    for key, value in raw_names.items():
        if not isinstance(key, str) or not norm(key):
            raise ValueError(f"{path}: names[{key!r}]: a scraped name must be a non-empty string (quote it)")
        target = _target(value, f"{path}: names[{key!r}]", supercategories)
        k = norm(key)
        if k in names and names[k] != target:
            raise ValueError(f"{path}: names[{origin[k]!r}] -> {names[k]!r} and names[{key!r}] -> {target!r}: "
                             f"the same name after whitespace normalisation ({k!r}) with two targets")
        names[k], origin[k] = target, key
    clusters: dict[int, str | None] = {}
    for key, value in raw_clusters.items():
        if not isinstance(key, int) or isinstance(key, bool) or key < 0:
            raise ValueError(f"{path}: clusters[{key!r}]: a cluster id must be an integer >= 0")
        clusters[key] = _target(value, f"{path}: clusters[{key}]", supercategories)
    return Curation(names, clusters, fp, path)


def load_curation(path: str | Path, supercategories: dict, cluster_fingerprint: str | None = None) -> Curation:
    """The validated curation file; ``cluster_fingerprint``: that of the clustering its ``clusters``
    rules would apply to (None: no clustering). Every error is a ValueError naming the file and key."""
    cur = _parse_curation(Path(path), supercategories)
    if cur.clusters:
        why = ("cluster ids only mean something for one clustering: re-run `cluster` with the settings "
               "that made it, or re-curate the clusters and copy the new fingerprint from cluster/review.md")
        if cur.fingerprint is None:
            raise ValueError(f"{path}: clusters: {len(cur.clusters)} rule(s) but cluster_fingerprint is null; {why}")
        if cluster_fingerprint is None:
            raise ValueError(f"{path}: clusters: {len(cur.clusters)} rule(s) for clustering {cur.fingerprint!r} but "
                             f"no clustering was given (cluster_dir); {why}")
        if cur.fingerprint != cluster_fingerprint:
            raise ValueError(f"{path}: cluster_fingerprint {cur.fingerprint!r} but the clustering given has "
                             f"{cluster_fingerprint!r}; {why}")
    return cur


def assign(names: Iterable[str], curation: Curation, cluster_of: dict[str, int] | None
           ) -> dict[str, tuple[str | None, str]]:
    """name -> (supercategory or None, how): ``name`` / ``cluster`` rule, ``dropped`` (a null rule) or
    ``unmapped``; precedence in the module docstring."""
    by_norm = {norm(k): v for k, v in (cluster_of or {}).items()}
    out = {}
    for name in names:
        n = norm(name)
        if n in curation.names:
            target = curation.names[n]
            out[name] = (target, "name" if target is not None else "dropped")
            continue
        c = (cluster_of or {}).get(name, by_norm.get(n))
        if c is not None and int(c) in curation.clusters:
            target = curation.clusters[int(c)]
            out[name] = (target, "cluster" if target is not None else "dropped")
        else:
            out[name] = (None, "unmapped")
    return out


def _read_landmarks(path: Path) -> pd.DataFrame:
    df = read_csv_columns(path, ["split", "landmark_id", "category", "supercategory"])
    bad = ~df["split"].isin(SPLITS) | ~df["landmark_id"].str.fullmatch(r"\d+")
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise ValueError(f"{path}, line {i + 2}: split {df['split'].iat[i]!r} / landmark_id "
                         f"{df['landmark_id'].iat[i]!r}: expected train|index and an integer")
    df["id"] = df["landmark_id"].astype("int64")
    dup = df.duplicated(["split", "id"])
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        raise ValueError(f"{path}, line {i + 2}: {df['split'].iat[i]} landmark {df['id'].iat[i]} is listed twice")
    return df


def _read_clusters(cluster_dir: Path) -> tuple[str, Path]:
    info_file = cluster_dir / "cluster.json"
    if not info_file.is_file():
        raise FileNotFoundError(f"{info_file}: no such file (the cluster step writes it)")
    fp = json.loads(info_file.read_text()).get("fingerprint")
    if not isinstance(fp, str):
        raise ValueError(f"{info_file}: no 'fingerprint'")  # noqa: TRY004
    return fp, cluster_dir / "names.csv"


def run_curate(landmarks_csv, cluster_dir, curation_file, out_dir, *,
               supercategories_file=SUPERCATEGORIES_FILE) -> dict:
    """Write ``{train,index}_label_to_hierarchical.csv``, ``curate.md`` and, last, ``curate.json``
    into ``out_dir``; return curate.json's dict (module docstring)."""
    landmarks_csv, out = Path(landmarks_csv), Path(out_dir)
    groups = load_supercategories(supercategories_file)
    fp, names_csv = _read_clusters(Path(cluster_dir)) if cluster_dir is not None else (None, None)
    cur = load_curation(curation_file, groups, fp)
    df = _read_landmarks(landmarks_csv)
    cluster_of = None
    if cur.clusters:
        table = read_csv_columns(names_csv, ["name", "cluster"])
        cluster_of = dict(zip(table["name"], table["cluster"].astype("int64")))
    mapping = assign(sorted(set(df["supercategory"])), cur, cluster_of)

    splits, per_sc = {}, {s: {"group": g, "train": 0, "index": 0} for s, g in groups.items()}
    by_name: dict[str, Counter] = defaultdict(Counter)
    landmarks_by_rule = Counter()
    for split in SPLITS:
        part = df[df["split"] == split].sort_values("id", kind="stable")
        rows, counts = [], Counter()
        for lid, category, name in part[["id", "category", "supercategory"]].itertuples(index=False):
            target, how = mapping[name]
            rows.append([lid, category, name, target or "", groups[target] if target else ""])
            counts[how] += 1
            by_name[name][split] += 1
            if target:
                per_sc[target][split] += 1
        landmarks_by_rule.update(counts)
        splits[split] = {"landmarks": len(part), "labelled": counts["name"] + counts["cluster"],
                         "unmapped": counts["unmapped"], "dropped": counts["dropped"]}
        atomic_write_text(out / RELEASE_FILES[split], csv_text(COLUMNS, rows))
    unmapped = sorted(({"name": n, "landmarks": sum(by_name[n].values()), "train": by_name[n]["train"],
                        "index": by_name[n]["index"]} for n, (_, how) in mapping.items() if how == "unmapped"),
                      key=lambda r: (-r["landmarks"], r["name"]))
    seen = {norm(n) for n in mapping}
    info = {
        "inputs": {"landmarks": str(landmarks_csv), "cluster_dir": None if cluster_dir is None else str(cluster_dir),
                   "curation": str(curation_file), "supercategories": str(supercategories_file),
                   "cluster_fingerprint": fp, "curation_cluster_fingerprint": cur.fingerprint},
        "splits": splits,
        "groups": {g: {s: sum(v[s] for v in per_sc.values() if v["group"] == g) for s in SPLITS} for g in GROUPS},
        "supercategories": per_sc,
        "names": {"total": len(mapping), **{h: sum(1 for _, how in mapping.values() if how == h) for h in HOWS}},
        "landmarks_by_rule": {h: landmarks_by_rule[h] for h in HOWS},
        "rules": {"names": len(cur.names), "names_unused": sum(1 for n in cur.names if n not in seen),
                  "clusters": len(cur.clusters)},
        "unmapped": unmapped,
    }
    atomic_write_text(out / "curate.md", render(info))
    atomic_write_json(out / "curate.json", info)
    return info


def render(info: dict, top: int = 50) -> str:
    """curate.md: the counts of :func:`run_curate` as Markdown tables; names and groups escaped
    (:func:`~rankrepro.tables.formats.md_text`: no markup of a scraped name takes effect)."""
    n, inputs = info["names"], info["inputs"]
    lines = ["# H-GLDv2 curation", "", (f"Curation file `{inputs['curation']}`, landmarks `{inputs['landmarks']}`, "
                                         f"clustering fingerprint `{inputs['cluster_fingerprint']}`."), "",
             "| split | landmarks | labelled | unmapped | dropped |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {s} | {c['landmarks']} | {c['labelled']} | {c['unmapped']} | {c['dropped']} |"
              for s, c in info["splits"].items()]
    lines += ["", (f"{n['total']} distinct scraped names: {n['name']} matched by a name rule, {n['cluster']} by a "
                   f"cluster rule, {n['dropped']} dropped (null rule), {n['unmapped']} unmapped. "
                   f"{info['rules']['names_unused']} of the {info['rules']['names']} name rules matched no "
                   "landmark."), "",
              "| supercategory | group | train | index |", "|---|---|---:|---:|"]
    lines += [f"| {md_text(s)} | {md_text(v['group'])} | {v['train']} | {v['index']} |"
              for s, v in info["supercategories"].items()]
    lines += [f"| **{md_text(g)}** | | {v['train']} | {v['index']} |" for g, v in info["groups"].items()]
    lines += ["", f"## Unmapped names (top {top} of {len(info['unmapped'])}, most landmarks first)", "",
              "| name | landmarks | train | index |", "|---|---:|---:|---:|"]
    lines += [f"| {md_text(u['name'])} | {u['landmarks']} | {u['train']} | {u['index']} |" for u in info["unmapped"][:top]]
    return "\n".join(lines) + "\n"


# what a YAML reader refuses, and the line breaks of YAML 1.1 (NEL, LS, PS) that it would fold
_YAML_UNSAFE = re.compile("[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _q(text: str) -> str:
    """A YAML double-quoted scalar: JSON's escaping, plus ``\\uXXXX`` for the characters above."""
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def seed_curation(release_dir, out_file, *, supercategories_file=SUPERCATEGORIES_FILE, base_curation=None) -> dict:
    """A curation file from the release's ``*_label_to_hierarchical.csv`` (module docstring); names of
    ``base_curation`` the release does not cover are kept after them. Returns counts and the path:
    ``names`` (all written), ``from_release``, ``from_base``, ``unanimous``, ``ties``, ``out``."""
    release_dir, out_file = Path(release_dir), Path(out_file)
    groups = load_supercategories(supercategories_file)
    files = [release_dir / f for f in RELEASE_FILES.values()]
    present = [f for f in files if f.is_file()]
    if not present:
        raise FileNotFoundError(f"{release_dir}: neither {files[0]} nor {files[1]} exists")
    votes: dict[str, Counter] = defaultdict(Counter)
    for f in present:
        df = read_csv_columns(f, ["supercategory", "hierarchical_label"])
        for name, label in df[["supercategory", "hierarchical_label"]].itertuples(index=False):
            if label.strip() and norm(name):
                try:
                    votes[norm(name)][_target(label, f"{f}: hierarchical_label", groups)] += 1
                except ValueError as err:
                    raise ValueError(f"{err} (a release label outside supercategories.yaml)") from None
    lines = ["# Seeded by `python -m rankrepro hgldv2 seed-curation` from", *(f"#   {f}" for f in present),
             "# Each scraped name (whitespace-normalised) -> its majority hierarchical_label over the labelled",
             "# landmarks of those files (ties: the alphabetically first); a comment marks the names that were",
             "# not unanimous.",
             "# Edit freely; the rules are in the packaged curation.yaml (rankrepro/hgldv2/curation.yaml).",
             "cluster_fingerprint: null", "names:"]
    unanimous = ties = 0
    for name in sorted(votes):
        counts = votes[name]
        best = max(counts.values())
        choice = min(label for label, c in counts.items() if c == best)
        others = sorted(((label, c) for label, c in counts.items() if label != choice), key=lambda x: (-x[1], x[0]))
        tie = sum(1 for c in counts.values() if c == best) > 1
        unanimous += not others
        ties += tie
        note = "" if not others else (f"  # {best} of {sum(counts.values())} landmarks{', tie' if tie else ''}; "
                                      f"also: {', '.join(f'{label} {c}' for label, c in others)}")
        lines.append(f"  {_q(name)}: {_q(choice)}{note}")
    kept = {}
    if base_curation is not None:
        base = _parse_curation(Path(base_curation), groups)
        kept = {n: t for n, t in base.names.items() if n not in votes}
        if kept:
            lines.append(f"  # kept from {base_curation}: names the release does not cover")
        lines += [f"  {_q(n)}: {'null' if t is None else _q(t)}" for n, t in kept.items()]
    if not votes and not kept:
        lines[-1] = "names: {}"
    lines.append("clusters: {}")
    atomic_write_text(out_file, "\n".join(lines) + "\n")
    return {"names": len(votes) + len(kept), "from_release": len(votes), "from_base": len(kept),
            "unanimous": unanimous, "ties": ties, "out": str(out_file)}


__all__ = ["CURATION_FILE", "SUPERCATEGORIES_FILE", "Curation", "assign", "load_curation", "load_supercategories",
           "run_curate", "seed_curation"]
