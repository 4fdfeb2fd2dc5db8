"""Every YAML the project reads refuses a repeated key (PyYAML keeps the last one silently), naming the
file and the line: setups, table specs, planned.yaml, schemas, the H-GLDv2 YAMLs and the config files
Snakemake loads itself (read by the Snakefile first: rankrepro.plan.schema.check_config_files)."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from rankrepro.hgldv2 import clean, curate
from rankrepro.io import load_yaml
from rankrepro.plan.build import make_plan
from rankrepro.plan.planned import load_planned
from rankrepro.plan.schema import PlanError, load_schema
from rankrepro.plan.setups import SETUPS_DIR, load_setups
from rankrepro.plan.specs import SPECS_DIR


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_the_loader_names_the_file_the_key_and_both_lines(tmp_path):
    path = _write(tmp_path / "x.yaml", "a: 1\nb:\n  c: 2\n  d: 3\n  c: 4\n")
    with pytest.raises(ValueError, match=r"x.yaml:5: key 'c' appears twice \(first on line 3\)"):
        load_yaml(path)
    assert load_yaml(_write(tmp_path / "ok.yaml", "a: {b: [1, {c: 2}]}\n")) == {"a": {"b": [1, {"c": 2}]}}


def test_the_loader_keeps_libyaml_and_yaml_merge_keys(tmp_path):
    from rankrepro import io

    assert issubclass(io.StrictLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    path = _write(tmp_path / "m.yaml", "base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 3\n")
    assert load_yaml(path)["child"] == {"x": 1, "y": 3}  # a merge key's values may be overridden


def test_a_key_twice_in_a_setup_fails_naming_file_and_line(tmp_path):
    d = tmp_path / "setups"
    _write(d / "suprank.yaml", (SETUPS_DIR / "suprank.yaml").read_text())
    _write(d / "mine.yaml", """
        mine_sop:
          extends: suprank_sop
          dataset: sop
          epochs: 3
          dataset: cub
        """)
    with pytest.raises(PlanError, match=r"mine.yaml:6: key 'dataset' appears twice \(first on line 4\)"):
        load_setups(d)


def test_a_setup_defined_twice_in_one_file_fails(tmp_path):
    d = tmp_path / "setups"
    _write(d / "suprank.yaml", (SETUPS_DIR / "suprank.yaml").read_text())
    _write(d / "mine.yaml", "mine_sop:\n  extends: suprank_sop\nmine_sop:\n  epochs: 3\n")
    with pytest.raises(PlanError, match=r"mine.yaml:3: key 'mine_sop' appears twice \(first on line 1\)"):
        load_setups(d)


def test_a_key_twice_in_a_table_spec_fails(tmp_path):
    text = (SPECS_DIR / "suprank" / "table1.yaml").read_text()
    spec = _write(tmp_path / "specs" / "suprank" / "table1.yaml",
                  text.replace("\ncaption:", "\ntitle: again\ncaption:", 1))
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith("caption:"))) + 1
    with pytest.raises(PlanError, match=rf"table1.yaml:{line}: key 'title' appears twice"):
        make_plan({"suprank": ["table1"]}, specs_dir=spec.parents[1])


def test_a_key_twice_in_planned_yaml_and_in_a_schema_fails(tmp_path):
    with pytest.raises(PlanError, match=r"planned.yaml:2: key 'setups' appears twice"):
        load_planned(_write(tmp_path / "planned.yaml", "setups: [a]\nsetups: [b]\n"))
    _write(tmp_path / "schemas" / "run.schema.yaml", "type: object\nproperties: {a: {type: string, type: integer}}\n")
    with pytest.raises(PlanError, match=r"run.schema.yaml:2: key 'type' appears twice"):
        load_schema("run", str(tmp_path / "schemas"))


def test_a_key_twice_in_the_hgldv2_yamls_fails(tmp_path):
    bad = _write(tmp_path / "irrelevant.yaml", "- {id: Q1, name: a, name: b}\n")
    with pytest.raises(ValueError, match=r"irrelevant.yaml:1: key 'name' appears twice"):
        clean.load_irrelevant(bad)
    groups = _write(tmp_path / "supercategories.yaml", "natural: [lake]\nhuman-made: [church]\nnatural: [bay]\n")
    with pytest.raises(ValueError, match=r"supercategories.yaml:3: key 'natural' appears twice"):
        curate.load_supercategories(groups)


def test_the_plan_command_refuses_a_config_with_a_key_twice(tmp_path):
    config = _write(tmp_path / "config.yaml", "tables: {}\ntables: {suprank: [table1]}\n")
    out = subprocess.run([sys.executable, "-m", "rankrepro", "plan", "--config", str(config), "--out",
                          str(tmp_path / "plan")], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0 and "config.yaml:2: key 'tables' appears twice" in out.stderr


@pytest.mark.slow  # starts snakemake
def test_the_workflow_refuses_a_configfile_with_a_key_twice(tmp_path):
    from rankrepro.bench.plan import workflow_copy

    wf = tmp_path / "wf"
    wf.mkdir()
    workflow_copy(wf)
    _write(wf / "extra.yaml", "run_overrides: {epochs: 2}\nrun_overrides: {epochs: 3}\n")
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "extra.yaml"],
                         cwd=wf, capture_output=True, text=True, timeout=300)
    assert dry.returncode != 0
    assert "extra.yaml:2: key 'run_overrides' appears twice" in dry.stdout + dry.stderr
