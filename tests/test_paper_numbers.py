"""Every paper number of every table spec, checked against the paper's text.

For each spec ``src/rankrepro/tables/specs/<paper>/<table>.yaml`` the table is located in
``../shared/papers/<file>`` by the spec's ``source`` (``"<file>, <heading>"``, e.g.
``"suprank_tpami.txt, TABLE IV"``): the block from the line starting ``<heading>:`` to the
first blank line or the next table heading (for a caption printed below its table, as in
RaMBO, the lines above it back to a blank line). Each row's line is found in row order: the
next line of the block (after the previous row's) that holds the row's ``paper_row`` text
(run rows; default its ``method``) or ``name`` (statistics rows) with numbers after it.
The row's non-null numbers must then appear, in order and contiguously, among the numbers
printed after that text ("-" placeholders and [n] citations skipped, "59,551" = 59551,
"3.31 M" = 3310000).

A static spec (``kind: static``: text, no numbers to reproduce) is checked as text: its header
line (``row_header`` and the column headers) and each row's line (its ``paper_row`` or
``method``, then its ``cells``), tab separated as the extraction prints them, must be lines of
the block, the rows in order; changing any digit of a cell, or a cell without digits, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rankrepro.plan.specs import load_spec, spec_names
from rankrepro.tables.kinds.base import row_label

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"

#: defects of the text extraction of a paper, fixed before matching: {file: [(printed, meant)]}
TEXT_FIXES = {
    # TABLE IV, ROADMAP (ours) on CUB: R@2 is printed "79 4" (the decimal point is lost)
    "suprank_tpami.txt": [("69.4 79 4 87.2", "69.4 79.4 87.2")],
    # Table 2 (SOP): the extraction puts the caption *below* the rows; a heading above them ("Table 2 rows")
    "smooth_ap_eccv2020.txt": [("SOP\nRecall@K 1 10 100 1000", "Table 2 rows: SOP\nRecall@K 1 10 100 1000")],
    # Table 1: three stacked dataset blocks of the same ten rows (specs topk/table1_{cub,cars,sop}); a heading per block
    "topk_precision_iccv2019.txt": [(f"\n{b}\t", f"\nTable 1 {b}:\t") for b in ("CUB-200-2011", "Standford Cars",
                                                                                 "Online Product")],
}

HEADING = re.compile(r"^(TABLE [IVXLC]+|Table S?\d+)\s*[:.]")
CITATION = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")
NUMBER = re.compile(r"(?<![\w@.^{}/\\])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(\s*M\b)?(?![\w@^{}])")

needs_papers = pytest.mark.skipif(not PAPERS.is_dir(), reason=f"the papers folder {PAPERS} is absent")


class Mismatch(AssertionError):
    pass


def parse_source(source: str) -> tuple[str, str]:
    """``"suprank_tpami.txt, TABLE I"`` -> (file, heading)."""
    file, _, heading = source.partition(",")
    return file.strip(), heading.strip()


def paper_text(file: str) -> str:
    text = (PAPERS / file).read_text().replace("\xa0", " ")  # no-break spaces print as spaces
    for printed, meant in TEXT_FIXES.get(file, ()):
        text = text.replace(printed, meant)
    return text


def table_block(text: str, heading: str) -> list[str]:
    """The lines of the table whose caption line starts ``<heading>:`` (caption excluded): the lines
    below it up to a blank line or the next heading, or, where none follow (a caption printed below its
    table), the lines above it back to a blank line or a heading."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(re.escape(heading) + r"\s*[:.]", line)]
    if len(starts) != 1:
        raise Mismatch(f"{len(starts)} lines start with {heading!r}: cannot locate the table")
    block = []
    for line in lines[starts[0] + 1:]:
        if not line.strip() or HEADING.match(line):
            break
        block.append(line)
    if not block:  # the caption is printed below its table (RaMBO): the rows above it
        above = starts[0] - 1
        while above >= 0 and not lines[above].strip():  # blank lines between the rows and the caption
            above -= 1
        while above >= 0 and lines[above].strip() and not HEADING.match(lines[above]):
            block.insert(0, lines[above])
            above -= 1
    return block


def numbers(text: str) -> list[float]:
    """The numbers printed in ``text``: citations [n] and numbers glued to words skipped."""
    out = []
    for m in NUMBER.finditer(CITATION.sub(" ", text)):
        value = float(m.group(1).replace(",", ""))
        out.append(value * 1e6 if m.group(2) else value)
    return out


def contains_run(haystack: list[float], needle: list[float]) -> bool:
    n = len(needle)
    return any(all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(haystack[i:i + n], needle))
               for i in range(len(haystack) - n + 1))


def check_rows(block: list[str], rows: list[dict]) -> None:
    """Raise :class:`Mismatch` unless every row's numbers are on its line of ``block``, in row order."""
    cursor = 0
    for r, row in enumerate(rows):
        hint = row.get("paper_row", row_label(row))
        want = [float(v) for v in row["paper"] if v is not None]
        for i in range(cursor, len(block)):
            at = block[i].find(hint)
            if at >= 0 and numbers(block[i][at + len(hint):]):
                break
        else:
            raise Mismatch(f"rows[{r}] ({row_label(row)}): no line holding {hint!r} with numbers after "
                           f"line {cursor} of the table")
        printed = numbers(block[i][at + len(hint):])
        if not contains_run(printed, want):
            raise Mismatch(f"rows[{r}] ({row_label(row)}): the spec's numbers {want} are not printed, in order, "
                           f"on its line: {block[i]!r} (numbers {printed})")
        cursor = i + 1


def static_lines(spec: dict) -> tuple[str, list[str]]:
    """The header line and each row's line of a static spec as the extraction prints them (tab separated)."""
    header = "\t".join([spec.get("row_header", "Method"), *(c["header"] for c in spec["columns"])])
    return header, ["\t".join([row.get("paper_row", row["method"]), *row["cells"]]) for row in spec["rows"]]


def check_static_rows(block: list[str], spec: dict) -> None:
    """Raise :class:`Mismatch` unless the static spec's header line and every row's line (label and
    cells exactly as printed) are lines of ``block``, the rows in order."""
    lines = [line.rstrip() for line in block]
    header, rows = static_lines(spec)
    if header.rstrip() not in lines:
        raise Mismatch(f"header: the line {header!r} is not printed in the table: {lines}")
    cursor = 0
    for r, (row, want) in enumerate(zip(spec["rows"], rows)):
        try:
            cursor = lines.index(want.rstrip(), cursor) + 1
        except ValueError:
            raise Mismatch(f"rows[{r}] ({row_label(row)}): the line {want!r} is not printed after line {cursor} "
                           f"of the table: {lines[cursor:]}") from None


SPECS = spec_names()
STATIC_SPECS = [(p, t) for p, t in SPECS if load_spec(p, t).get("kind") == "static"]


def table_spec(paper: str, table: str) -> dict:
    """The spec of ``paper``/``table``; a sweep skips the test (its points are figure readings)."""
    spec = load_spec(paper, table)
    if spec.get("kind") == "sweep":
        pytest.skip("a sweep's points are figure readings: tests/test_sweeps.py checks them")
    if spec.get("kind") == "leaderboard":
        pytest.skip("a leaderboard is a table of our own (issue 36): no paper numbers; tests/test_roof.py")
    return spec


def printed_table(spec: dict) -> list[str]:
    """The lines of the paper's text that print the table ``spec["source"]`` names."""
    file, heading = parse_source(spec["source"])
    assert (PAPERS / file).is_file(), f"{spec['_file']}: source names {file}, not in {PAPERS}"
    return table_block(paper_text(file), heading)


@needs_papers
@pytest.mark.parametrize("paper,table", SPECS, ids=[f"{p}/{t}" for p, t in SPECS])
def test_spec_numbers_are_the_papers(paper, table):
    spec = table_spec(paper, table)
    if spec.get("kind") == "static":
        check_static_rows(printed_table(spec), spec)
        return
    check_rows(printed_table(spec), spec["rows"])


def test_every_paper_dir_has_specs_checked():
    papers = {p for p, _ in SPECS}
    assert "suprank" in papers
    assert {f"suprank/table{i}" for i in range(1, 12)} <= {f"{p}/{t}" for p, t in SPECS}


@needs_papers
def test_a_mistyped_number_is_detected():
    spec = load_spec("suprank", "table1")
    block = table_block(paper_text("suprank_tpami.txt"), "TABLE I")
    check_rows(block, spec["rows"])
    for r, c, value in ((3, 1, 54.4), (0, 0, 78.7), (4, 3, 25.9)):
        rows = [dict(row, paper=list(row["paper"])) for row in spec["rows"]]
        rows[r]["paper"][c] = value
        with pytest.raises(Mismatch, match=rf"rows\[{r}\]"):
            check_rows(block, rows)
    swapped = [dict(row, paper=list(row["paper"])) for row in spec["rows"]]
    swapped[1]["paper"][0], swapped[1]["paper"][1] = swapped[1]["paper"][1], swapped[1]["paper"][0]
    with pytest.raises(Mismatch, match=r"rows\[1\]"):
        check_rows(block, swapped)


@needs_papers
@pytest.mark.parametrize("paper,table", SPECS, ids=[f"{p}/{t}" for p, t in SPECS])
def test_every_transcribed_number_is_checked(paper, table):
    """Changing any one number of any row (by one in its last printed digit) fails the check."""
    spec = table_spec(paper, table)
    if spec.get("kind") == "static":
        pytest.skip("a static table's cells are text: test_every_static_cell_is_checked")
    block = printed_table(spec)
    for r, row in enumerate(spec["rows"]):
        for c, value in enumerate(row["paper"]):
            if value is None:
                continue
            step = 1 if float(value).is_integer() else 10.0 ** -len(repr(float(value)).split(".")[1])
            rows = [dict(x, paper=list(x["paper"])) for x in spec["rows"]]
            rows[r]["paper"][c] = value + step
            with pytest.raises(Mismatch, match=rf"rows\[{r}\]"):
                check_rows(block, rows)


def _static_edits(cell: str) -> list[str]:
    """``cell`` with each of its digits changed in turn (by one), or, without digits, another cell."""
    edits = [cell[:i] + str((int(ch) + 1) % 10) + cell[i + 1:] for i, ch in enumerate(cell) if ch.isdigit()]
    return edits or [cell + "?", "x" if cell != "x" else "✓"]


@needs_papers
@pytest.mark.parametrize("paper,table", STATIC_SPECS, ids=[f"{p}/{t}" for p, t in STATIC_SPECS])
def test_every_static_cell_is_checked(paper, table):
    """Changing any digit of any cell of a static spec (or a cell without digits, or a header) fails."""
    spec = load_spec(paper, table)
    block = printed_table(spec)
    check_static_rows(block, spec)
    for r, row in enumerate(spec["rows"]):
        for c, cell in enumerate(row["cells"]):
            for edit in _static_edits(cell):
                rows = [dict(x, cells=list(x["cells"])) for x in spec["rows"]]
                rows[r]["cells"][c] = edit
                with pytest.raises(Mismatch, match=rf"rows\[{r}\]"):
                    check_static_rows(block, dict(spec, rows=rows))
    for c in range(len(spec["columns"])):
        columns = [dict(x) for x in spec["columns"]]
        columns[c]["header"] += "?"
        with pytest.raises(Mismatch, match="header"):
            check_static_rows(block, dict(spec, columns=columns))
    if len(spec["rows"]) > 1:
        with pytest.raises(Mismatch, match=r"rows\[1\]"):
            check_static_rows(block, dict(spec, rows=[spec["rows"][1], spec["rows"][0], *spec["rows"][2:]]))


def test_static_specs_exist():
    assert {("rambo", "table1"), ("rambo", "table9")} <= set(STATIC_SPECS)


@needs_papers
def test_rows_out_of_order_or_missing_are_detected():
    spec = load_spec("suprank", "table1")
    block = table_block(paper_text("suprank_tpami.txt"), "TABLE I")
    with pytest.raises(Mismatch, match=r"rows\[1\] \(Fast-AP"):
        check_rows(block, [spec["rows"][1], spec["rows"][0]])
    with pytest.raises(Mismatch, match="no line holding 'Smooth-APX'"):
        check_rows(block, [dict(spec["rows"][3], method="Smooth-APX")])
    with pytest.raises(Mismatch, match="cannot locate"):
        table_block(paper_text("suprank_tpami.txt"), "TABLE XCIX")


def test_the_number_reader():
    assert numbers("Fast-AP [24] 77.8 50.5 - 24.0") == [77.8, 50.5, 24.0]
    assert numbers("SOP train 59,551 11,318 5.3") == [59551, 11318, 5.3]
    assert numbers("VGGFace2 train 3.31 M 8,631") == [3310000, 8631]
    assert numbers("Method R@1 mAP@100 \\mathcal{L}_{1} 2^{3} H2O 36.32") == [36.32]
    assert contains_run([512, 1.0, 2.0, 3.0], [1.0, 2.0]) and not contains_run([1.0, 9.0, 2.0], [1.0, 2.0])
