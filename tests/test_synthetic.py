"""The synthetic-results pattern: write_result's files and the run() entry point."""

import json

import pytest

from rankrepro.synthetic import SYNTHETIC, markdown_table, run, write_result


def test_write_result_writes_json_md_and_png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    record = {"title": "T", "source": "paper.txt, Table 9", "scale": "demo", "seed": 3, "choices": ["c1"],
              "ours": {"x": 0.5}}
    body = markdown_table(["method", "paper", "ours"], [["a", 1.0, 0.123456], ["b", None, 2]])
    write_result(tmp_path / "r", record, body, fig)
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# T\n") and "| a | 1 | 0.1235 |" in md and "| b | — | 2 |" in md
    assert "reduced: not the paper" in md and "- c1" in md and "![T](r.png)" in md
    assert json.loads((tmp_path / "r.json").read_text()) == record
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="lacks"):
        write_result(tmp_path / "s", {"title": "x"}, "")


def test_run_checks_scale_and_name(tmp_path):
    with pytest.raises(ValueError, match="scale must be one of paper, demo"):
        run("anything", tmp_path / "x", scale="full")
    with pytest.raises(ValueError, match="unknown synthetic 'nope'; registered"):
        run("nope", tmp_path / "x", scale="demo")
    assert SYNTHETIC.context == ("out_prefix", "scale", "seed")
