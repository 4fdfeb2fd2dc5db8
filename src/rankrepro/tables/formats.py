"""The Markdown, CSV, LaTeX and HTML primitives every table kind renders with.

Text from a spec (captions, methods, headers, a static table's cells) is escaped for the
format it is written to: in a Markdown table cell a ``|`` is ``\\|`` (:func:`md_cell`), in
LaTeX the special characters are escaped and the Unicode symbols pdflatex's utf8 input does
not know are set as math (:func:`tex_escape`; :func:`tex_text` keeps ``$...$`` math), in HTML
through :func:`html.escape` (:func:`html_text`). Text from outside (a scraped name) is shown verbatim in
Markdown through :func:`md_text`: no markup of it takes effect.
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
from pathlib import Path

from rankrepro.io import atomic_write_text

__all__ = ["BEST", "SECOND", "TEX_CHARS", "csv_text", "group_spans", "html_mark", "html_text", "markdown_html",
           "md_cell", "md_mark", "md_row", "md_rule", "numbers_csv", "paper_number", "parse_number", "read_table_csv",
           "tex_escape", "tex_mark", "tex_text", "write_outputs"]

#: a value's mark: the best of its column (bold) or the second best (underlined)
BEST, SECOND = "best", "second"


def paper_number(value: float | None, decimals: int = 1) -> str:
    """A paper's number as transcribed: ``decimals`` decimals (the column's: 1, 2 where the paper
    prints 70.70, 3 for fractions), or more where the transcription has more (0.828, 0.02)."""
    if value is None:
        return ""
    text = f"{value:.{decimals}f}"
    return text if float(text) == value else format(value, ".10g")


# ------------------------------------------------------------------------------- Markdown


def md_cell(text: str) -> str:
    """A cell of a Markdown pipe table: as given, its pipes escaped (``|P|`` -> ``\\|P\\|``)."""
    return text.replace("|", "\\|")


#: what :func:`md_text` backslash-escapes: the backslash itself, code, emphasis, strikethrough, link brackets, pipes
_MD_PUNCTUATION = re.compile(r"([\\`*_~\[\]|])")
_LINE_ENDS = re.compile(r"\r\n|\r|\n")


def md_text(text: str) -> str:
    """Text from outside (a scraped name) that Markdown shows verbatim inside a line or a table cell:
    each line end (LF, CR LF, CR) -> a space; ``\\ ` * _ ~ [ ] |`` backslash-escaped; ``&``, ``<``,
    ``>`` as HTML entities (no HTML of it renders). Already a cell: not for :func:`md_cell` /
    :func:`md_row`, which would escape its pipes again. Not for the start of a line (``#``, ``-``)."""
    return html.escape(_MD_PUNCTUATION.sub(r"\\\1", _LINE_ENDS.sub(" ", str(text))), quote=False)


def md_row(cells: list[str]) -> str:
    """One line of a Markdown pipe table, each cell escaped (:func:`md_cell`)."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_rule(ncol: int) -> str:
    """The line under a Markdown table's header of ``ncol`` columns."""
    return "|" + "---|" * ncol


def md_mark(text: str, mark: str) -> str:
    """A value marked best (bold) or second best (underlined) in Markdown."""
    return f"**{text}**" if mark == BEST else f"<u>{text}</u>" if mark == SECOND else text


def column_title(column: dict) -> str:
    """A column's title: its group (when it has one) and its header."""
    return f"{column.get('group', '')} {column['header']}".strip()


def markdown_page(spec: dict, intro: str, replica_note: str | None, header: list[str], rows: list[list[str]],
                  notes: list[str]) -> str:
    """A table's Markdown page: its title line (paper, table, caption), ``intro``, the replica
    warning when ``replica_note`` is given, the pipe table (``header`` and ``rows``, escaped) and
    the distinct ``notes`` in order."""
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "", intro, ""]
    if replica_note:
        lines += [f"> **Replica data.** {replica_note}", ""]
    lines += [md_row(header), md_rule(len(header))] + [md_row(cells) for cells in rows]
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ CSV


def csv_text(rows: list[dict], fieldnames: list[str]) -> str:
    """``rows`` as CSV text with a header of ``fieldnames``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def numbers_csv(rows: list[dict], replica: bool) -> str:
    """A table of numbers' CSV: its entries' keys, then ``replica`` (whether ours come from replicas)."""
    return csv_text([{**entry, "replica": replica} for entry in rows], [*rows[0].keys(), "replica"])


def parse_number(text: str | None) -> float | None:
    """A CSV field as a number: None when empty or NaN."""
    if text is None or text == "":
        return None
    value = float(text)
    return None if math.isnan(value) else value


def read_table_csv(path: str | Path) -> list[dict]:
    """The rows of a rendered table's CSV, ``paper`` and ``ours`` as floats (None when empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["paper"], row["ours"] = parse_number(row.get("paper")), parse_number(row.get("ours"))
    return rows


# ---------------------------------------------------------------------------------- LaTeX


#: LaTeX for the characters a spec's text may hold that pdflatex's utf8 input does not know
#: (Greek letters and symbols, as math) or that LaTeX treats specially
TEX_CHARS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$", "δ": r"$\delta$", "ε": r"$\epsilon$",
    "λ": r"$\lambda$", "μ": r"$\mu$", "ρ": r"$\rho$", "σ": r"$\sigma$", "τ": r"$\tau$", "Σ": r"$\Sigma$",
    "Δ": r"$\Delta$", "†": r"\textdagger{}", "‡": r"\textdaggerdbl{}", "×": r"$\times$", "±": r"$\pm$",
    "≤": r"$\leq$", "≥": r"$\geq$", "−": "-", "ℓ": r"$\ell$", "→": r"$\rightarrow$", "·": r"$\cdot$",
    "✓": r"$\checkmark$", "✗": r"$\times$", "≈": r"$\approx$",  # \checkmark: amssymb
}


def tex_escape(text: str) -> str:
    """``text`` as LaTeX that compiles with pdflatex (specials escaped, Greek letters as math)."""
    return "".join(TEX_CHARS.get(ch, ch) for ch in text)


#: ``$...$`` (math, kept as is in LaTeX) in a paper's text
_MATH = re.compile(r"(\$[^$]+\$)")
#: a superscript or subscript printed outside math (``10^{-6}``): set as math in LaTeX (``10$^{-6}$``)
_SCRIPT = re.compile(r"([\^_])\{([-−+]?[0-9A-Za-z.]+)\}")


def _tex_math(math_text: str) -> str:
    """A ``$...$`` segment with the Unicode symbols :data:`TEX_CHARS` sets as math written as commands."""
    return "".join(TEX_CHARS[ch][1:-1] + " " if TEX_CHARS.get(ch, "").startswith("$") and len(TEX_CHARS[ch]) > 2
                   else "-" if ch == "−" else ch for ch in math_text)  # "$αb$": "\\alpha b", not "\\alphab"


def tex_text(text: str) -> str:
    """Text as printed in a paper (``$...$`` math among plain text, ``10^{-6}`` superscripts) as LaTeX:
    math kept (its Unicode symbols as commands), the rest escaped (:func:`tex_escape`), a ``^{..}``
    or ``_{..}`` outside math set as math."""
    out = []
    for i, part in enumerate(_MATH.split(text)):
        if i % 2:
            out.append(_tex_math(part))
            continue
        last = 0
        for m in _SCRIPT.finditer(part):
            out.append(tex_escape(part[last:m.start()]) + f"${m.group(1)}{{{m.group(2).replace('−', '-')}}}$")
            last = m.end()
        out.append(tex_escape(part[last:]))
    return "".join(out)


REPLICA_TEX = r" \emph{Replica data: ours is meaningless.}"


def latex_table(caption_tex: str, colspec: str, body: list[str]) -> str:
    """A booktabs table: ``\\begin{table}[t]``, centred, its (already escaped) caption, a tabular of
    ``colspec`` holding ``body`` (header lines, ``\\midrule`` and rows, each line complete) between
    ``\\toprule`` and ``\\bottomrule``."""
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption_tex}}}", r"\begin{tabular}{" + colspec + "}",
             r"\toprule", *body, r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def tex_mark(text: str, mark: str) -> str:
    """A value marked best (bold) or second best (underlined) in LaTeX."""
    return rf"\textbf{{{text}}}" if mark == BEST else rf"\underline{{{text}}}" if mark == SECOND else text


def group_spans(columns: list[dict], width: int) -> list[tuple[str, int]]:
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


# ----------------------------------------------------------------------------------- HTML


def html_text(text) -> str:
    """Text as HTML (``<``, ``>``, ``&`` and quotes escaped)."""
    return html.escape(str(text))


def html_mark(text: str, mark: str | None) -> str:
    """A value as the rendered tables mark it (their CSV's ``paper_mark`` / ``ours_mark``)."""
    return {BEST: f"<b>{text}</b>", SECOND: f"<u>{text}</u>"}.get(mark or "", text)


#: a cell separator of a Markdown pipe table: a pipe not escaped (:func:`rankrepro.tables.formats.md_cell`)
_PIPE = re.compile(r"(?<!\\)\|")


def _inline(text: str) -> str:
    """Markdown inline markup of the index (code, bold, links, escaped pipes) as HTML."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', out)
    return out.replace("\\|", "|")


def markdown_html(text: str, title: str = "results") -> str:
    """The subset of Markdown the results index, the recipe cards and the leaderboards' pages write (headings,
    paragraphs, lists, pipe tables, code, bold, links) as a standalone HTML page."""
    body, i, lines = [], 0, text.splitlines()
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in _PIPE.split(lines[i].strip()[1:-1])])
                i += 1
            head, data = rows[0], [r for r in rows[1:] if not all(set(c) <= set("-:") for c in r)]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in data)
                        + "</table>")
            continue
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = ("body{font-family:sans-serif;font-size:14px;max-width:70em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px}code{background:#f3f3f3}")
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---------------------------------------------------------------------------------- files


def write_outputs(out_prefix: str | Path, md: str, csv_: str, tex: str) -> None:
    """``<out_prefix>.md``, ``.csv`` and ``.tex``, each written atomically."""
    out_prefix = Path(out_prefix)
    for suffix, text in ((".md", md), (".csv", csv_), (".tex", tex)):
        atomic_write_text(out_prefix.with_suffix(suffix), text)
