"""Every table's LaTeX compiles in a booktabs document (pdflatex), with our numbers, best/second
marks, the replica note and every character a spec holds (Greek letters, underscores, daggers), and
static tables' text (math as $...$, check marks: amssymb, printed powers 3×10^{-6})."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from rankrepro.plan.build import make_plan
from rankrepro.plan.specs import spec_names
from rankrepro.tables.formats import tex_escape as _tex_escape, tex_text as _tex_text
from rankrepro.tables.render import render

PDFLATEX = shutil.which("pdflatex")
needs_pdflatex = pytest.mark.skipif(PDFLATEX is None, reason="pdflatex is not installed (apt: texlive-latex-recommended)")

DOCUMENT = r"""\documentclass{article}
\usepackage[utf8]{inputenc}
\usepackage[T1]{fontenc}
\usepackage{booktabs}
\usepackage{amssymb}
\usepackage{graphicx}
\usepackage[paperwidth=200cm,paperheight=100cm,margin=1cm]{geometry}
\begin{document}
%s
\end{document}
"""


def _fake_results(plan, root):
    """metrics.json for every run of ``plan`` (a value per metric its cells read, different per run, so
    that best / second marks appear; with a test curve one epoch better than the last, so that the
    tables show both) and a manifest meta.json per statistics dataset."""
    from rankrepro.record.selection import select_by_of, selection_record

    metrics: dict[str, set] = {}
    for table in plan["tables"].values():
        for cell in table["cells"]:
            for rid in cell.get("run_ids", []) + cell.get("reference_run_ids", []):
                metrics.setdefault(rid, set()).add(cell["metric"])
    for rid, names in metrics.items():
        (root / "runs" / rid).mkdir(parents=True)
        run = plan["runs"][rid]
        names = names | {select_by_of(run["eval"])}
        values = {m: int(hashlib.sha1(f"{rid}{m}".encode()).hexdigest()[:6], 16) / 0xFFFFFF for m in names}
        curve = [{"epoch": 1, "seconds": 0.0, **{m: v + 0.01 for m, v in values.items()}}] if run["eval"]["every"] else []
        (root / "runs" / rid / "metrics.json").write_text(json.dumps(
            {"replica": True, "metrics": values, **selection_record(run, values, curve)}))


def test_escape_makes_every_special_character_latex():
    assert _tex_escape("ΣTL_SH & 50% #1 {x} λ=0.5 †") == r"$\Sigma$TL\_SH \& 50\% \#1 \{x\} $\lambda$=0.5 \textdagger{}"


def test_static_text_keeps_math_and_escapes_the_rest():
    assert _tex_text(r"$O(n \log n)$") == r"$O(n \log n)$"
    assert _tex_text("✓") == r"$\checkmark$" and _tex_text("x") == "x" and _tex_text("✗") == r"$\times$"
    assert _tex_text("3×10^{-6}") == r"3$\times$10$^{-6}$" and _tex_text("10^{-5}") == r"10$^{-5}$"
    assert _tex_text(r"a_b 50% $h \approx n$ & $α$") == r"a\_b 50\% $h \approx n$ \& $\alpha $"
    assert _tex_text("one $ sign") == r"one \$ sign"


@needs_pdflatex
def test_every_table_compiles_in_a_booktabs_document(tmp_path):
    tables = {}
    for paper, table in spec_names():
        tables.setdefault(paper, []).append(table)
    plan = make_plan(tables)
    _fake_results(plan, tmp_path)
    inputs = []
    for key, table_plan in sorted(plan["tables"].items()):
        if table_plan["spec"].get("kind") == "dataset_statistics":
            continue  # read from manifests; their LaTeX is the same tabular code (test_statistics.py)
        render(table_plan, tmp_path / "runs", tmp_path / "tex" / key)
        tex = (tmp_path / "tex" / f"{key}.tex").read_text()
        assert r"\toprule" in tex and r"\bottomrule" in tex, key
        inputs.append(rf"\input{{tex/{key}.tex}}")
    assert any(r"\textbf{" in (tmp_path / "tex" / f"{k}.tex").read_text() for k in plan["tables"]
               if (tmp_path / "tex" / f"{k}.tex").exists())
    rambo2 = (tmp_path / "tex" / "rambo" / "table2.tex").read_text()  # best on test, last beside it, 3 seeds
    assert r"paper & ours & $\Delta$ & last" in rambo2 and r"over 3 seeds" in rambo2
    static = [k for k, t in plan["tables"].items() if t["spec"].get("kind") == "static"]
    assert {"rambo/table1", "rambo/table9"} <= set(static)  # static tables are compiled too
    table1 = (tmp_path / "tex" / "rambo" / "table1.tex").read_text()
    assert r"RaMBO & $O(n \log n)$ & $\checkmark$ \\" in table1 and r"$O(n^2)$ & x \\" in table1
    (tmp_path / "all.tex").write_text(DOCUMENT % "\n\\clearpage\n".join(inputs))
    result = subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "all.tex"], cwd=tmp_path,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    assert (tmp_path / "all.pdf").stat().st_size > 0
