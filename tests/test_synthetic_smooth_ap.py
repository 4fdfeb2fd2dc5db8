"""Smooth-AP Table S1 (loss time vs backbone time) at demo scale: files, every loss timed, paper numbers exact."""

import json
import math
import re
from pathlib import Path

import pytest

from rankrepro import losses
from rankrepro.synthetic import SYNTHETIC, run
from rankrepro.synthetic.smooth_ap_table_s1 import PAPER

PAPER_TXT = Path(__file__).resolve().parents[2] / "shared" / "papers" / "smooth_ap_eccv2020.txt"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("syn") / "smooth_ap_table_s1"
    record = run("smooth_ap_table_s1", prefix, scale="demo", seed=0)
    return prefix, record


def test_registered():
    assert "smooth_ap_table_s1" in SYNTHETIC.names()


def test_files_and_every_loss_timed(demo):
    prefix, record = demo
    assert prefix.with_suffix(".json").is_file() and prefix.with_suffix(".md").is_file()
    assert json.loads(prefix.with_suffix(".json").read_text()) == json.loads(json.dumps(record))
    assert record["scale"] == "demo" and record["seed"] == 0 and record["choices"]
    names = losses.names()
    assert record["order"][:3] == ["blackbox_ap", "fast_ap", "smooth_ap"]
    assert sorted(record["order"]) == sorted(names)
    assert "cpu" in record["ours"]
    for dev, res in record["ours"].items():
        bb = res["backbone"]["ms"]
        assert math.isfinite(bb) and bb > 0, dev
        for name in names:
            row = res["losses"][name]
            assert row["ms"] is not None and math.isfinite(row["ms"]) and row["ms"] > 0, (dev, name, row["note"])
            assert row["pct_of_backbone"] == pytest.approx(100 * row["ms"] / bb)
    assert record["setting"]["threads"] >= 1


def test_paper_rows_in_record(demo):
    _, record = demo
    assert record["paper"]["rows"] == json.loads(json.dumps(PAPER))
    assert [PAPER[n]["loss_ms"] for n in ("blackbox_ap", "fast_ap", "smooth_ap")] == [3.7, 4.2, 6.6]
    assert {p["backbone_ms"] for p in PAPER.values()} == {705.0}


@pytest.mark.skipif(not PAPER_TXT.exists(), reason="paper text not beside the checkout")
def test_paper_numbers_match_paper_text():
    text = PAPER_TXT.read_text()
    assert "backbone takes 705 ms" in text and "mini-batch size" in text
    section = text[text.index("Complexity of the proposed loss"):]
    section = section[:section.index("Table S1:")]
    for name, p in PAPER.items():
        lines = [ln for ln in section.splitlines() if ln.startswith(p["method"] + " ")]
        assert len(lines) == 1, (name, lines)
        line = lines[0]
        assert p["complexity_latex"] in line, (name, line)
        backbone, loss = (float(x) for x in re.findall(r"\d+\.\d+", line)[-2:])
        assert (backbone, loss) == (p["backbone_ms"], p["loss_ms"]), name


def test_markdown_lists_paper_beside_ours(demo):
    prefix, record = demo
    md = prefix.with_suffix(".md").read_text()
    assert "| method | complexity (paper) | paper loss ms | ours loss ms | paper backbone ms | ours backbone ms |" in md
    assert "reduced: not the paper" in md and "resnet_tiny" in md and "torch threads: 1" in md
    for name, p in PAPER.items():
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {p['method']} (`{name}`, *paper*)"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == p["complexity"] and float(cells[2]) == p["loss_ms"] and float(cells[4]) == p["backbone_ms"]
        assert float(cells[3]) > 0 and float(cells[5]) > 0
    for name in losses.names():
        assert f"`{name}`" in md
