"""Render a table spec with the paper's numbers beside ours, to Markdown, CSV and LaTeX.

Run tables: ours is the mean over the cell's runs (seeds) of the metric in percent (a column
with ``unit: fraction`` keeps the metric as a fraction, printed with three decimals, as PNP
prints its cosine distances: 0.318), with ``± std`` when there are several; the difference is
ours − paper. A spec's ``best`` block
marks, per column and per set of compared rows, the best value in bold and the second best
underlined, separately for the paper's numbers and for ours (:func:`best_marks`; the rules:
``workflow/schemas/table.schema.yaml``).

Dataset statistics tables (``kind: dataset_statistics``): ours is counted from the
dataset's manifest (``<manifests_dir>/<dataset>/meta.json``, whose ``counts`` hold the
images and distinct finest labels of every split): ``images``, ``classes`` and
``images_per_class`` (rounded half up to one decimal, as papers print it). A row that
pools several splits sums them: the rows, and the distinct (split, label) pairs, so a
pooled value equals the sum of the splits' values (as papers sum VehicleID's test lists).

Static tables (``kind: static``: text the paper prints, e.g. a complexity or hyper-parameter
table): the paper's cells alone, nothing to reproduce (:func:`render_static`). Markdown keeps
the cells as printed; in LaTeX, ``$...$`` stays math and the text around it is escaped
(:func:`_tex_text`); ✓ prints as amssymb's check mark: the document needs the amssymb package.
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from fractions import Fraction
from pathlib import Path

from rankrepro.io import atomic_write_text

REPLICA_NOTE = ("Numbers under 'ours' come from generated replicas of the datasets (demo profile: tiny images, "
                "tiny backbone, random initialisation); they are meaningless as results.")
STATISTICS_REPLICA_NOTE = ("Numbers under 'ours' are counted from generated replicas of the datasets (demo "
                           "profile), not from the real files; they are meaningless as results.")
STATISTICS = "dataset_statistics"  # the spec kind (rankrepro.experiments.plan.STATISTICS)
STATIC = "static"  # the spec kind (rankrepro.experiments.plan.STATIC)
STATIC_NOTE = "A static table: text transcribed from the paper, nothing to reproduce (no runs, no \"ours\")."


class TableError(ValueError):
    """A spec that does not fit the files it is rendered from; the message names the spec file and row."""


#: a run column's unit: the factor on the metric and the decimals it is printed with (a percent
#: column: the spec's ``decimals``, default 1, as the paper prints them; top-k prints 62.89)
UNITS = {"percent": (100.0, 1), "fraction": (1.0, 3)}


def column_unit(spec: dict, column: int) -> tuple[float, int]:
    """(factor, decimals) of a run table's column (``unit``, default percent)."""
    unit = spec["columns"][column].get("unit", "percent")
    factor, decimals = UNITS[unit]
    return factor, spec.get("decimals", decimals) if unit == "percent" else decimals


def cell_values(cells: list[dict], runs_dir: str | Path, spec: dict) -> tuple[dict, bool]:
    """{(row, column): (mean, std or None, n)} in the column's unit (:func:`column_unit`), and
    whether any run used replica data."""
    values, replica = {}, False
    for cell in cells:
        factor = column_unit(spec, cell["column"])[0]
        found = []
        for rid in cell["run_ids"]:
            path = Path(runs_dir) / rid / "metrics.json"
            result = json.loads(path.read_text())
            replica |= bool(result.get("replica"))
            if cell["metric"] not in result["metrics"]:
                raise KeyError(f"{path} has no metric {cell['metric']!r} (it has {sorted(result['metrics'])}); "
                               "add it to the setup's eval.metrics")
            found.append(factor * result["metrics"][cell["metric"]])
        if found:
            std = statistics.stdev(found) if len(found) > 1 else None
            values[(cell["row"], cell["column"])] = (statistics.fmean(found), std, len(found))
    return values, replica


def paper_number(value: float | None, decimals: int = 1) -> str:
    """A paper's number as transcribed: ``decimals`` decimals (the column's: 1, 2 where the paper
    prints 70.70, 3 for fractions), or more where the transcription has more (0.828, 0.02)."""
    if value is None:
        return ""
    text = f"{value:.{decimals}f}"
    return text if float(text) == value else format(value, ".10g")


#: a value's mark: the best of its column (bold) or the second best (underlined)
BEST, SECOND = "best", "second"


def mark_groups(spec: dict) -> list[list[int]]:
    """The sets of rows (indexes) whose values the spec's ``best`` block compares; [] without one.

    ``best.groups`` names rows by method (which must name exactly one row) or by index."""
    best = spec.get("best")
    if best is None:
        return []
    rows = spec["rows"]
    if "groups" not in best:
        return [list(range(len(rows)))]
    where = f"{spec['paper']}/{spec['table']}: best.groups"
    by_method: dict[str, list[int]] = {}
    for r, row in enumerate(rows):
        by_method.setdefault(row.get("method"), []).append(r)
    groups = []
    for g, group in enumerate(best["groups"]):
        members = []
        for ref in group:
            if isinstance(ref, int) and not isinstance(ref, bool):
                if not 0 <= ref < len(rows):
                    raise TableError(f"{where}[{g}]: row index {ref} out of range (0..{len(rows) - 1})")
                members.append(ref)
            else:
                hits = by_method.get(ref, [])
                if len(hits) != 1:
                    raise TableError(f"{where}[{g}]: {ref!r} names {len(hits)} rows (a method naming exactly "
                                     "one row, or a row index)")
                members.append(hits[0])
        groups.append(members)
    return groups


def rank_marks(values: dict, better: str = "higher") -> dict:
    """``{key: BEST | SECOND}`` of ``values`` ({key: number or None}): the best value(s) and the
    next distinct one(s); None is skipped; nothing is marked unless two values differ."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    present = {k: v for k, v in values.items() if v is not None}
    ranked = sorted(set(present.values()), reverse=better == "higher")
    if len(ranked) < 2:
        return {}
    return {k: BEST if v == ranked[0] else SECOND for k, v in present.items() if v in ranked[:2]}


def best_marks(spec: dict, paper: dict, ours: dict) -> tuple[dict, dict]:
    """The marks ``{(row, column): BEST | SECOND}`` of the paper's numbers and of ours, from
    ``paper`` / ``ours`` = {(row, column): value or None}. Ours are compared as printed (one
    decimal, three in a fraction column); ``best.paper`` / ``best.ours`` (default true) switch either off."""
    best = spec.get("best")
    paper_marks: dict = {}
    ours_marks: dict = {}
    if best is None:
        return paper_marks, ours_marks
    printed = {k: None if v is None else round(v, column_unit(spec, k[1])[1]) for k, v in ours.items()}
    for group in mark_groups(spec):
        for c, column in enumerate(spec["columns"]):
            better = column.get("better", "higher")
            if best.get("paper", True):
                paper_marks.update(rank_marks({(r, c): paper.get((r, c)) for r in group}, better))
            if best.get("ours", True):
                ours_marks.update(rank_marks({(r, c): printed.get((r, c)) for r in group}, better))
    return paper_marks, ours_marks


def table_rows(spec: dict, cells: list[dict], values: dict) -> list[dict]:
    """One dict per (row, column): method, column, unit, decimals, paper, ours, std, diff, status, and the
    best / second best marks of the paper's number and of ours (``paper_mark``, ``ours_mark``:
    "best", "second" or "")."""
    out = []
    by_pos = {(c["row"], c["column"]): c for c in cells}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            paper = row["paper"][c]
            mean, std, n = values.get((r, c), (None, None, 0))
            decimals = column_unit(spec, c)[1]
            digits = decimals + 1
            cell = by_pos[(r, c)]
            status = "cited" if row.get("cited") else ("ours" if mean is not None else (cell["pending"] or "missing"))
            out.append({
                "method": row["method"], "column": f"{column['group']} {column['header']}", "metric": column["metric"],
                "unit": column.get("unit", "percent"), "decimals": decimals, "paper": paper,
                "ours": None if mean is None else round(mean, digits),
                "std": None if std is None else round(std, digits), "seeds": n,
                "diff": None if mean is None or paper is None else round(mean - paper, digits), "status": status,
            })
    ncol = len(spec["columns"])
    paper_marks, ours_marks = best_marks(spec, {(i // ncol, i % ncol): e["paper"] for i, e in enumerate(out)},
                                         {(i // ncol, i % ncol): e["ours"] for i, e in enumerate(out)})
    for i, entry in enumerate(out):
        entry["paper_mark"] = paper_marks.get((i // ncol, i % ncol), "")
        entry["ours_mark"] = ours_marks.get((i // ncol, i % ncol), "")
    return out


def _md_mark(text: str, mark: str) -> str:
    return f"**{text}**" if mark == BEST else f"<u>{text}</u>" if mark == SECOND else text


def _tex_mark(text: str, mark: str) -> str:
    return rf"\textbf{{{text}}}" if mark == BEST else rf"\underline{{{text}}}" if mark == SECOND else text


def _decimals(entry: dict) -> int:
    return entry["decimals"]


def _ours(entry: dict, pm: str = "±") -> str:
    if entry["ours"] is None:
        return "—"
    d = _decimals(entry)
    return f"{entry['ours']:.{d}f}" + (f" {pm} {entry['std']:.{d}f}" if entry["std"] is not None else "")


def _diff(entry: dict) -> str:
    return "" if entry["diff"] is None else f"{entry['diff']:+.{_decimals(entry)}f}"


def to_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    header = ["Method"] + [f"{c['group']} {c['header']} {part}" for c in spec["columns"]
                           for part in ("paper", "ours", "Δ")]
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "",
             f"Source: {spec['source']}. Paper numbers beside ours (percent unless a column says fraction); "
             "Δ = ours − paper; "
             "— = no run yet (see notes).", ""]
    if replica:
        lines += [f"> **Replica data.** {REPLICA_NOTE}", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        method = row["method"] + (" (cited)" if row.get("cited") else "")
        cells = [method] + [part for e in entries for part in (_md_mark(paper_number(e["paper"], e["decimals"]), e["paper_mark"]),
                                                                 _md_mark(_ours(e), e["ours_mark"]), _diff(e))]
        lines.append("| " + " | ".join(cells) + " |")
        notes += sorted({e["status"] for e in entries if e["status"] not in ("ours", "cited")})
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict], replica: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*rows[0].keys(), "replica"])
    writer.writeheader()
    for entry in rows:
        writer.writerow({**entry, "replica": replica})
    return buffer.getvalue()


#: LaTeX for the characters a spec's text may hold that pdflatex's utf8 input does not know
#: (Greek letters and symbols, as math) or that LaTeX treats specially
TEX_CHARS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$", "δ": r"$\delta$", "ε": r"$\epsilon$",
    "λ": r"$\lambda$", "μ": r"$\mu$", "ρ": r"$\rho$", "σ": r"$\sigma$", "τ": r"$\tau$", "Σ": r"$\Sigma$",
    "Δ": r"$\Delta$", "†": r"\textdagger{}", "‡": r"\textdaggerdbl{}", "×": r"$\times$", "±": r"$\pm$",
    "≤": r"$\leq$", "≥": r"$\geq$", "−": "-", "ℓ": r"$\ell$", "→": r"$\rightarrow$", "·": r"$\cdot$",
    "✓": r"$\checkmark$", "✗": r"$\times$",  # \checkmark: amssymb
}


def _tex_escape(text: str) -> str:
    """``text`` as LaTeX that compiles with pdflatex (specials escaped, Greek letters as math)."""
    return "".join(TEX_CHARS.get(ch, ch) for ch in text)


def _group_spans(columns: list[dict], width: int) -> list[tuple[str, int]]:
    """(group, LaTeX columns it spans) of each run of consecutive columns with the same ``group``,
    each column ``width`` LaTeX columns wide."""
    groups: list[tuple[str, int]] = []
    for column in columns:
        group = column.get("group", "")
        if groups and groups[-1][0] == group:
            groups[-1] = (group, groups[-1][1] + width)
        else:
            groups.append((group, width))
    return groups


def to_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    groups = _group_spans(spec["columns"], 3)  # paper, ours, Δ
    caption = _tex_escape(spec["caption"]) + (r" \emph{Replica data: ours is meaningless.}" if replica else "")
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}",
             r"\begin{tabular}{l" + "rrr" * ncol + "}", r"\toprule",
             "Method & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{_tex_escape(g)}}}" for g, n in groups) + r" \\",
             " & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{_tex_escape(c['header'])}}}" for c in spec["columns"])
             + r" \\",
             " & " + " & ".join(["paper & ours & $\\Delta$"] * ncol) + r" \\", r"\midrule"]
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        parts = [_tex_escape(row["method"])]
        for e in entries:
            ours = "--" if e["ours"] is None else _ours(e, pm="$\\pm$")
            parts += [_tex_mark(paper_number(e["paper"], e["decimals"]), e["paper_mark"]), _tex_mark(ours, e["ours_mark"]), _diff(e)]
        lines.append(" & ".join(parts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- dataset statistics


def split_counts(manifest_dir: str | Path) -> tuple[dict, bool]:
    """``{split: {"images", "classes"}}`` of a manifest (its meta.json's ``counts``; counted from
    manifest.csv when meta.json has none) and whether it is a generated replica."""
    manifest_dir = Path(manifest_dir)
    meta_path = manifest_dir / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: prepare the dataset first (snakemake {meta_path})")
    meta = json.loads(meta_path.read_text())
    counts = meta.get("counts")
    if counts is None:
        from rankrepro.data.manifest import read_manifest

        counts = read_manifest(manifest_dir).counts()
    return counts, bool(meta.get("replica"))


def images_per_class(images: int, classes: int) -> float | None:
    """``images / classes`` rounded half up to one decimal (exactly, on the fraction)."""
    if not classes:
        return None
    tenths = Fraction(images * 10, classes)
    return float(int(tenths + Fraction(1, 2))) / 10


def split_statistics(counts: dict, splits: list[str]) -> dict:
    """images, classes and images_per_class of ``splits`` pooled: sums over the splits (rows, and
    distinct (split, label) pairs)."""
    images = sum(int(counts[s]["images"]) for s in splits)
    classes = sum(int(counts[s]["classes"]) for s in splits)
    return {"images": images, "classes": classes, "images_per_class": images_per_class(images, classes)}


def statistics_values(table_plan: dict, manifests_dir: str | Path) -> tuple[dict, bool]:
    """{row: {statistic: value}} of a dataset statistics table's non-pending rows, and whether
    any manifest is a replica. A split the manifest lacks fails naming the spec file and row."""
    spec, where = table_plan["spec"], table_plan.get("spec_file", f"{table_plan['paper']}/{table_plan['table']}")
    values, replica, manifests = {}, False, {}
    for cell in table_plan["cells"]:
        if cell["pending"] or cell["row"] in values:
            continue
        dataset, splits, r = cell["dataset"], cell["splits"], cell["row"]
        if dataset not in manifests:
            manifests[dataset] = split_counts(Path(manifests_dir) / dataset)
        counts, is_replica = manifests[dataset]
        replica |= is_replica
        missing = [s for s in splits if s not in counts]
        if missing:
            raise TableError(f"{where}: rows[{r}].split ({spec['rows'][r]['name']}): the manifest of {dataset} "
                             f"({Path(manifests_dir) / dataset / 'meta.json'}) has no split "
                             f"{', '.join(map(repr, missing))}; its splits: {', '.join(sorted(counts))}")
        values[r] = split_statistics(counts, splits)
    return values, replica


def _diff_value(ours, paper):
    if ours is None or paper is None:
        return None
    return ours - paper if isinstance(ours, int) and float(paper).is_integer() else round(ours - paper, 2)


def statistics_rows(spec: dict, cells: list[dict], values: dict) -> list[dict]:
    """One dict per (row, column): name, dataset, splits, column, statistic, paper, ours, diff, status."""
    out = []
    by_pos = {(c["row"], c["column"]): c for c in cells}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            cell = by_pos[(r, c)]
            paper = row["paper"][c]
            if isinstance(paper, float) and paper.is_integer() and column["statistic"] != "images_per_class":
                paper = int(paper)
            ours = values[r][column["statistic"]] if r in values else None
            out.append({
                "name": row["name"], "dataset": row["dataset"], "splits": "+".join(cell["splits"]),
                "column": _column_title(column), "statistic": column["statistic"],
                "paper": paper, "ours": ours, "diff": _diff_value(ours, paper),
                "status": "ours" if ours is not None else (cell["pending"] or "missing"),
            })
    return out


def _stat(value, statistic: str, sign: bool = False) -> str:
    if value is None:
        return ""
    if statistic == "images_per_class" or not float(value).is_integer():
        return f"{value:+.1f}" if sign else f"{value:.1f}"
    return f"{int(value):+,}" if sign else f"{int(value):,}"


def _stat_parts(entry: dict) -> list[str]:
    ours = "—" if entry["ours"] is None else _stat(entry["ours"], entry["statistic"])
    return [_stat(entry["paper"], entry["statistic"]), ours, _stat(entry["diff"], entry["statistic"], sign=True)]


def _column_title(column: dict) -> str:
    return f"{column.get('group', '')} {column['header']}".strip()


def statistics_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    header = ["Dataset", "Manifest splits"] + [f"{_column_title(c)} {part}" for c in spec["columns"]
                                               for part in ("paper", "ours", "Δ")]
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "",
             f"Source: {spec['source']}. Paper numbers beside ours, counted from the dataset manifests "
             "(results/manifests/<dataset>/); pooled splits (a + b) are summed; Δ = ours − paper; "
             "— = no manifest yet (see notes).", ""]
    if replica:
        lines += [f"> **Replica data.** {STATISTICS_REPLICA_NOTE}", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        splits = " + ".join(entries[0]["splits"].split("+"))
        cells = [row["name"], f"{row['dataset']}: {splits}"] + [part for e in entries for part in _stat_parts(e)]
        lines.append("| " + " | ".join(cells) + " |")
        notes += sorted({e["status"] for e in entries if e["status"] != "ours"})
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


def statistics_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    caption = _tex_escape(spec["caption"]) + (r" \emph{Replica data: ours is meaningless.}" if replica else "")
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}",
             r"\begin{tabular}{ll" + "rrr" * ncol + "}", r"\toprule"]
    if any(c.get("group") for c in spec["columns"]):
        lines.append(" & & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{_tex_escape(c.get('group', ''))}}}"
                                           for c in spec["columns"]) + r" \\")
    lines += ["Dataset & Splits & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{_tex_escape(c['header'])}}}"
                                                 for c in spec["columns"]) + r" \\",
              " & & " + " & ".join(["paper & ours & $\\Delta$"] * ncol) + r" \\", r"\midrule"]
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        parts = [_tex_escape(row["name"]), _tex_escape(" + ".join(entries[0]["splits"].split("+")))]
        for e in entries:
            paper, ours, diff = _stat_parts(e)
            parts += [paper, "--" if e["ours"] is None else ours, diff]
        lines.append(" & ".join(parts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def render_statistics(table_plan: dict, manifests_dir: str | Path, out_prefix: str | Path) -> list[dict]:
    """Write a dataset statistics table (see the module docstring); return its entries."""
    spec, cells = table_plan["spec"], table_plan["cells"]
    values, replica = statistics_values(table_plan, manifests_dir)
    rows = statistics_rows(spec, cells, values)
    write_outputs(out_prefix, statistics_markdown(spec, rows, replica), to_csv(rows, replica),
                  statistics_latex(spec, rows, replica))
    return rows


# -------------------------------------------------------------------------------- static


#: ``$...$`` (math, kept as is in LaTeX) in a static cell's text
_MATH = re.compile(r"(\$[^$]+\$)")
#: a superscript or subscript printed outside math (``10^{-6}``): set as math in LaTeX (``10$^{-6}$``)
_SCRIPT = re.compile(r"([\^_])\{([-−+]?[0-9A-Za-z.]+)\}")


def _tex_math(math: str) -> str:
    """A ``$...$`` segment with the Unicode symbols :data:`TEX_CHARS` sets as math written as commands."""
    return "".join(TEX_CHARS[ch][1:-1] + " " if TEX_CHARS.get(ch, "").startswith("$") and len(TEX_CHARS[ch]) > 2
                   else "-" if ch == "−" else ch for ch in math)  # "$αb$": "\\alpha b", not "\\alphab"


def _tex_text(text: str) -> str:
    """Text as printed in a paper (``$...$`` math among plain text, ``10^{-6}`` superscripts) as LaTeX:
    math kept (its Unicode symbols as commands), the rest escaped (:func:`_tex_escape`), a ``^{..}``
    or ``_{..}`` outside math set as math."""
    out = []
    for i, part in enumerate(_MATH.split(text)):
        if i % 2:
            out.append(_tex_math(part))
            continue
        last = 0
        for m in _SCRIPT.finditer(part):
            out.append(_tex_escape(part[last:m.start()]) + f"${m.group(1)}{{{m.group(2).replace('−', '-')}}}$")
            last = m.end()
        out.append(_tex_escape(part[last:]))
    return "".join(out)


def _md_cell(text: str) -> str:
    """A cell of a Markdown pipe table: as printed, its pipes escaped."""
    return text.replace("|", "\\|")


def static_rows(spec: dict) -> list[dict]:
    """One dict per (row, column) of a static table: method, column, paper (the cell as printed)."""
    return [{"method": row["method"], "column": _column_title(column), "paper": row["cells"][c]}
            for row in spec["rows"] for c, column in enumerate(spec["columns"])]


def static_markdown(spec: dict) -> str:
    """The paper's cells as a Markdown table, as printed, under the note that the table is static."""
    header = [spec.get("row_header", "Method")] + [_column_title(c) for c in spec["columns"]]
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "",
             f"Source: {spec['source']}. {STATIC_NOTE}", "",
             "| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
    for row in spec["rows"]:
        lines.append("| " + " | ".join(_md_cell(t) for t in [row["method"], *row["cells"]]) + " |")
    notes = [f"{row['method']}: {row['note']}" for row in spec["rows"] if row.get("note")]
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def static_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["method", "column", "paper"])
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def static_latex(spec: dict) -> str:
    """The paper's cells as a booktabs tabular (math kept, text escaped: :func:`_tex_text`)."""
    columns = spec["columns"]
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{_tex_text(spec['caption'])}}}",
             r"\begin{tabular}{l" + "c" * len(columns) + "}", r"\toprule"]
    if any(c.get("group") for c in columns):
        groups = _group_spans(columns, 1)
        lines.append(" & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{_tex_text(g)}}}" for g, n in groups) + r" \\")
    lines += [" & ".join(_tex_text(t) for t in [spec.get("row_header", "Method"), *(c["header"] for c in columns)])
              + r" \\", r"\midrule"]
    for row in spec["rows"]:
        lines.append(" & ".join(_tex_text(t) for t in [row["method"], *row["cells"]]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def render_static(table_plan: dict, out_prefix: str | Path) -> list[dict]:
    """Write a static table (the paper's cells, see the module docstring); return its entries."""
    spec = table_plan["spec"]
    rows = static_rows(spec)
    write_outputs(out_prefix, static_markdown(spec), static_csv(rows), static_latex(spec))
    return rows


def write_outputs(out_prefix: str | Path, md: str, csv: str, tex: str) -> None:
    """``<out_prefix>.md``, ``.csv`` and ``.tex``, each written atomically."""
    out_prefix = Path(out_prefix)
    for suffix, text in ((".md", md), (".csv", csv), (".tex", tex)):
        atomic_write_text(out_prefix.with_suffix(suffix), text)


# ------------------------------------------------------------------------------- render


def render(table_plan: dict, runs_dir: str | Path, out_prefix: str | Path,
           manifests_dir: str | Path | None = None) -> list[dict]:
    """Write ``<out_prefix>.md``, ``.csv`` and ``.tex`` from a table's plan (``results/plan/tables/<paper>/<table>.json``:
    the spec and its cells, see :func:`rankrepro.experiments.plan.make_plan`); return the table's entries.

    A dataset statistics table reads ``<manifests_dir>/<dataset>/meta.json`` (default: ``manifests``
    beside ``runs_dir``, i.e. ``results/manifests`` for ``results/runs``); a static table writes its
    spec's cells (:func:`render_static`) and reads nothing."""
    if table_plan["spec"].get("kind", "runs") == "sweep":  # a figure's points: rankrepro.tables.sweep
        from rankrepro.tables.sweep import render_sweep

        return render_sweep(table_plan, runs_dir, out_prefix)
    if table_plan["spec"].get("kind", "runs") == STATISTICS:
        manifests_dir = Path(runs_dir).parent / "manifests" if manifests_dir is None else manifests_dir
        return render_statistics(table_plan, manifests_dir, out_prefix)
    if table_plan["spec"].get("kind", "runs") == STATIC:
        return render_static(table_plan, out_prefix)
    spec, cells = table_plan["spec"], table_plan["cells"]
    values, replica = cell_values(cells, runs_dir, spec)
    rows = table_rows(spec, cells, values)
    write_outputs(out_prefix, to_markdown(spec, rows, replica), to_csv(rows, replica), to_latex(spec, rows, replica))
    return rows
