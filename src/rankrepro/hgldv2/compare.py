"""H-GLDv2 step 5: our labels against the official release.

Inputs: two folders (ours, the release) each holding ``train_label_to_hierarchical.csv`` and
``index_label_to_hierarchical.csv`` with the release's columns (``category`` is not read). A landmark
is **labelled** on a side when its ``hierarchical_label.strip() != ""``; train and index landmark ids
are different id spaces, so a landmark is the pair (split, landmark_id). A landmark listed twice in
one file with different ``hierarchical_label`` / ``natural_or_human_made`` is an error; identical
repeats count once (first row kept).

Per split (train, index) and ``overall`` (both pooled), with R / O the release's / our labelled
landmarks and B = R ∩ O:

- ``release_labelled`` |R|, ``ours_labelled`` |O|, ``both`` |B|, ``release_only`` |R \\ O|,
  ``ours_only`` |O \\ R|; ``coverage`` = |B| / |R| (the share of the release's labelled landmarks we
  label too).
- On B: ``ari_label`` / ``ari_group``: adjusted Rand index (Hubert & Arabie) between the two
  partitions by ``hierarchical_label`` / ``natural_or_human_made``; ``agreement_label`` /
  ``agreement_group``: the share with the identical value (verbatim strings, so names must match
  too, while the ARI ignores names); ``supercategory_agreement``: the share whose scraped
  ``supercategory`` equals the release's after whitespace normalisation (``" ".join(s.split())``):
  a low value means the scrape differs, a high one with low label agreement that the curation does.
- The ARI is :func:`adjusted_rand_score`, ``sklearn.metrics.adjusted_rand_score``'s formula (pair
  confusion matrix; 1.0 when no pair disagrees, e.g. one landmark) written out here, because the
  step's environment (envs/data.yaml) has no scikit-learn; the tests check it equals sklearn's.
- Every ratio is None when its denominator is 0.

Per hierarchical label (the union of both sides' labels on B, splits pooled), the release taken as
truth: ``support`` = release count, ``ours`` = our count, ``tp`` = both say it;
``precision`` = tp / ours, ``recall`` = tp / support (None when the denominator is 0),
``f1`` = 2 tp / (ours + support) when both are defined, else None. ``group``: the label's
``natural_or_human_made`` in the release (ours when the release never uses it).

Outputs: ``<prefix>.md`` (the summary per split, then the per-label rows by support descending, then
name), ``<prefix>.csv`` (the per-label table), ``<prefix>.json`` (everything; written last).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rankrepro.io import (
    atomic_write_json,
    atomic_write_text,
    csv_text,
    read_csv_columns,
)

SPLITS = ("train", "index")
FILES = {s: f"{s}_label_to_hierarchical.csv" for s in SPLITS}
NEEDED = ["landmark_id", "supercategory", "hierarchical_label", "natural_or_human_made"]
LEVELS = ["hierarchical_label", "natural_or_human_made"]
LABEL_COLUMNS = ["hierarchical_label", "group", "support", "ours", "tp", "precision", "recall", "f1"]


def read_labels(path: Path) -> pd.DataFrame:
    """The labelled landmarks of one file, indexed by integer landmark_id: supercategory and the levels."""
    df = read_csv_columns(path, NEEDED)
    bad = ~df["landmark_id"].str.strip().str.fullmatch(r"\d+")
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise ValueError(f"{path}, line {i + 2}: landmark_id {df['landmark_id'].iat[i]!r} is not an integer")
    df = df[NEEDED].assign(landmark_id=df["landmark_id"].astype("int64"))
    clash = df.groupby("landmark_id")[LEVELS].nunique().max(axis=1) > 1
    if clash.any():
        raise ValueError(f"{path}: landmark {clash[clash].index[0]} is listed twice with different labels")
    df = df.drop_duplicates("landmark_id").set_index("landmark_id")
    return df[df["hierarchical_label"].str.strip() != ""]


def adjusted_rand_score(a, b) -> float:
    """ARI of two labelings (sklearn's definition and special case), exact in Python integers."""
    table = pd.crosstab(pd.Series(list(a), dtype=object), pd.Series(list(b), dtype=object)).to_numpy()
    n = int(table.sum())
    squares = int((table.astype(object) ** 2).sum())
    fp = sum(int(x) ** 2 for x in table.sum(axis=0)) - squares  # ordered pairs split by a, together in b
    fn = sum(int(x) ** 2 for x in table.sum(axis=1)) - squares  # together in a, split in b
    tp, tn = squares - n, n * n - fp - fn - squares
    if fp == 0 and fn == 0:
        return 1.0
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def _ratio(a, b):
    return a / b if b else None


def summary(ours: pd.DataFrame, release: pd.DataFrame) -> dict:
    """The per-split numbers of the module docstring for two :func:`read_labels` tables."""
    both = release.index.intersection(ours.index)
    r, o = release.loc[both], ours.loc[both]
    n = len(both)
    out = {"release_labelled": len(release), "ours_labelled": len(ours), "both": n,
           "release_only": len(release) - n, "ours_only": len(ours) - n, "coverage": _ratio(n, len(release))}
    for key, col in (("label", "hierarchical_label"), ("group", "natural_or_human_made")):
        out[f"ari_{key}"] = float(adjusted_rand_score(r[col], o[col])) if n else None
        out[f"agreement_{key}"] = _ratio(int((r[col] == o[col]).sum()), n)
    same = [" ".join(a.split()) == " ".join(b.split()) for a, b in zip(r["supercategory"], o["supercategory"])]
    out["supercategory_agreement"] = _ratio(sum(same), n)
    return out


def per_label(ours: pd.DataFrame, release: pd.DataFrame) -> list[dict]:
    both = release.index.intersection(ours.index)
    r, o = release.loc[both], ours.loc[both]
    groups = {**dict(zip(o["hierarchical_label"], o["natural_or_human_made"])),
              **dict(zip(r["hierarchical_label"], r["natural_or_human_made"]))}
    support, mine = r["hierarchical_label"].value_counts(), o["hierarchical_label"].value_counts()
    tp = r["hierarchical_label"][r["hierarchical_label"] == o["hierarchical_label"]].value_counts()
    rows = []
    for label in sorted(groups):
        s, m, t = int(support.get(label, 0)), int(mine.get(label, 0)), int(tp.get(label, 0))
        p, rec = _ratio(t, m), _ratio(t, s)
        rows.append({"hierarchical_label": label, "group": groups[label], "support": s, "ours": m, "tp": t,
                     "precision": p, "recall": rec, "f1": 2 * t / (m + s) if p is not None and rec is not None
                     else None})
    return sorted(rows, key=lambda x: (-x["support"], x["hierarchical_label"]))


def _fmt(x) -> str:
    return "" if x is None else f"{x:.4f}" if isinstance(x, float) else str(x)


def render(info: dict) -> str:
    cols = ["release_labelled", "ours_labelled", "both", "coverage", "ours_only", "release_only", "ari_label",
            "agreement_label", "ari_group", "agreement_group", "supercategory_agreement"]
    lines = ["# H-GLDv2: ours against the release", "", f"Ours `{info['ours']}`, release `{info['release']}`.", "",
             "| split | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    lines += [f"| {s} | " + " | ".join(_fmt(v[c]) for c in cols) + " |" for s, v in info["splits"].items()]
    lines += ["", "Per hierarchical label, on the landmarks both label (release = truth), by support:", "",
              "| " + " | ".join(LABEL_COLUMNS) + " |", "|---|---|" + "---:|" * (len(LABEL_COLUMNS) - 2)]
    lines += ["| " + " | ".join(f"`{_fmt(row[c])}`" if c == "hierarchical_label" else _fmt(row[c])
                                for c in LABEL_COLUMNS) + " |" for row in info["per_label"]]
    return "\n".join(lines) + "\n"


def run_compare(ours_dir, release_dir, out_prefix) -> dict:
    """Compare the two folders; write ``<prefix>.md``, ``.csv`` and, last, ``.json``; return the json dict."""
    ours_dir, release_dir, prefix = Path(ours_dir), Path(release_dir), str(out_prefix)
    tables = {side: {s: read_labels(d / FILES[s]) for s in SPLITS} for side, d in
              (("ours", ours_dir), ("release", release_dir))}
    pooled = {side: pd.concat(t, names=["split", "landmark_id"]) for side, t in tables.items()}
    splits = {s: summary(tables["ours"][s], tables["release"][s]) for s in SPLITS}
    splits["overall"] = summary(pooled["ours"], pooled["release"])
    info = {"ours": str(ours_dir), "release": str(release_dir), "splits": splits,
            "per_label": per_label(pooled["ours"], pooled["release"])}
    rows = [["" if row[c] is None else round(row[c], 6) if isinstance(row[c], float) else row[c]
             for c in LABEL_COLUMNS] for row in info["per_label"]]
    atomic_write_text(prefix + ".md", render(info))
    atomic_write_text(prefix + ".csv", csv_text(LABEL_COLUMNS, rows))
    atomic_write_json(prefix + ".json", info)
    return info


__all__ = ["read_labels", "run_compare"]
