"""Reading a user's YAML or JSON file (issue 33): YAML aliases add at most ``MAX_ALIAS_NODES`` values (a
"billion laughs" config is refused in milliseconds, naming the alias's line), every message has a bounded
length, and a config, plan or run file that holds no mapping names the file, for every command that reads one."""

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from rankrepro import io
from rankrepro.io import FileFormatError, load_yaml
from rankrepro.plan.schema import PlanError

REPO = Path(__file__).resolve().parents[1]


def bomb(levels: int = 8, width: int = 10, mapping: bool = False) -> str:
    """A config whose anchors repeat the one before ``width`` times: ``width ** levels`` leaves in ~1 kB, with
    the alias that crosses :data:`rankrepro.io.MAX_ALIAS_NODES` on line 6 (*l3, its anchor on line 5)."""
    def values(i: int) -> str:
        items = ["lol" if i == 0 else f"*l{i - 1}"] * width
        return "{" + ", ".join(f"k{j}: {v}" for j, v in enumerate(items)) + "}" if mapping else f"[{', '.join(items)}]"

    lines = ["data_root: data"] + [f"l{i}: &l{i} {values(i)}" for i in range(levels)]
    return "\n".join(lines) + f"\nrun_overrides: {{epochs: *l{levels - 1}}}\n"


def test_a_billion_laughs_yaml_is_refused_in_milliseconds_naming_the_alias(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())  # 10^8 values once expanded
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"bomb.yaml:6: alias \*l3 \(anchor on line 5\) repeats 11,111 values: "
                                         r"the file's aliases would add 101,218 values, more than the 100,000"):
        load_yaml(path)
    seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 0.5 and peak < 1_000_000  # measured: ~2 ms, ~13 kB


def test_the_alias_bound_counts_what_aliases_add_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_ALIAS_NODES", 17)
    path = tmp_path / "a.yaml"
    # &a: the list and 3 scalars = 4 values; &b: itself + 2 x 4 = 9 values (its aliases add 8); *b adds 9: 17
    path.write_text("a: &a [1, 2, 3]\nb: &b [*a, *a]\nc: *b\n")
    assert load_yaml(path) == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]], "c": [[1, 2, 3], [1, 2, 3]]}
    path.write_text("a: &a [1, 2, 3]\nb: &b [*a, *a]\nc: *b\nd: *a\n")  # 17 + 4
    with pytest.raises(ValueError, match=r"a.yaml:4: alias \*a \(anchor on line 1\) repeats 4 values: the file's "
                                         r"aliases would add 21 values, more than the 17 allowed"):
        load_yaml(path)
    path.write_text("x: &s 5\ny: {<<: {k: *s}, m: &m {p: 1}}\nz: *m\n")  # scalar anchors and merge keys count too
    assert load_yaml(path) == {"x": 5, "y": {"k": 5, "m": {"p": 1}}, "z": {"p": 1}}


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("a: 1\nb: &b\n  - 2\n  - *b\n")  # PyYAML would build a list that contains itself
    with pytest.raises(ValueError, match=r"loop.yaml:4: alias \*b lies inside its own anchor &b"):
        load_yaml(path)


def test_the_projects_own_yaml_files_are_far_below_the_bound(monkeypatch):
    files = [REPO / "config.yaml", *REPO.glob("profiles/*/*.yaml"), *(REPO / "src").rglob("*.yaml")]
    assert len(files) > 50
    # what their aliases add (setups/suprank.yaml: 153 values, the most) is under 1% of the bound
    monkeypatch.setattr(io, "MAX_ALIAS_NODES", io.MAX_ALIAS_NODES // 100)
    for path in files:
        load_yaml(path)


def test_a_non_utf8_yaml_names_the_file_and_byte(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"data_root: caf\xe9\n")
    with pytest.raises(FileFormatError, match=r"latin.yaml, line 1: byte 15 of the line \(byte 15 of the file\) is not "
                                              r"UTF-8: e9"):
        load_yaml(path)


def _cli(tmp_path, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "rankrepro", *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=timeout, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_the_plan_command_refuses_a_yaml_bomb_at_once(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(bomb(levels=6))  # 10^6 values: past 2 minutes and 2.4 GB before the bound
    out = _cli(tmp_path, "plan", "--config", config, "--out", tmp_path / "plan", timeout=30)
    assert out.returncode == 1 and "config.yaml:6: alias *l3 (anchor on line 5)" in out.stderr
    assert len(out.stderr) < 500


# --- messages of a bounded length ---------------------------------------------------------------------------

def test_short_text_keeps_both_ends_and_says_the_length():
    from rankrepro.messages import short_text

    assert short_text("abcdef", 6) == "abcdef"
    assert short_text("abcdefgh", 6) == "abc ... [8 characters in all] ... fgh"


def test_short_repr_does_bounded_work_and_says_how_many_items():
    from rankrepro.messages import short_repr

    assert short_repr([1, 2, 3]) == "[1, 2, 3]"
    assert short_repr(list(range(10))) == "[0, 1, 2, 3, 4, 5, ...] (10 items)"
    assert short_repr("x" * 100) == repr("x" * 37 + "..." + "x" * 38) + " (100 characters)"
    deep = [[[[[1]]]]]
    assert short_repr(deep) == "[[[[...]]]]"


def test_the_project_errors_cut_their_message():
    from rankrepro.messages import MESSAGE_LIMIT

    text = str(PlanError("x" * 10**6))
    assert len(text) < MESSAGE_LIMIT + 50 and "[1,000,000 characters in all]" in text


def _project_error_types() -> list[type]:
    """Every public exception class defined in a module of the package (each module imported but the entry
    points; warnings, private ones and SystemExit's left out: none reaches a user as an error message of ours)."""
    import importlib
    import pkgutil

    import rankrepro

    for module in pkgutil.walk_packages(rankrepro.__path__, "rankrepro."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = [], [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if (sub.__module__.startswith("rankrepro.") and sub not in found and issubclass(sub, Exception)
                    and not issubclass(sub, Warning) and not sub.__name__.startswith("_")):
                found.append(sub)
    return found


def test_every_error_type_of_the_project_cuts_its_message():
    """Every error type of the package is a ShortMessage (or cuts its message itself: UnknownNameError; or is
    PyYAML's, turned into a FileFormatError: DuplicateKeyError), so that a new one cannot print a huge value; and
    each of those built from one message cuts it."""
    from rankrepro.messages import MESSAGE_LIMIT, ShortMessage
    from rankrepro.io import DuplicateKeyError
    from rankrepro.registry import UnknownNameError

    errors = _project_error_types()
    assert len(errors) > 20  # the walk found the package's errors
    cut = (ShortMessage, UnknownNameError, DuplicateKeyError)
    assert [e.__qualname__ for e in errors if not issubclass(e, cut)] == []
    for error in errors:
        if error is DuplicateKeyError:
            continue
        try:
            built = error("z" * 10**5)
        except TypeError:  # another signature: below
            continue
        assert len(str(built)) < MESSAGE_LIMIT + 50, error
    from rankrepro.engine.batch import BatchRunsFailed
    from rankrepro.torchfile import TorchFileError

    assert len(str(TorchFileError("m.pt", "z" * 10**5, "remedy"))) < MESSAGE_LIMIT + 50
    assert len(str(BatchRunsFailed({"r": "z" * 10**5}, 1, "staged"))) < MESSAGE_LIMIT + 50


def test_a_schema_error_quotes_a_huge_value_briefly(tmp_path):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["tables"] = {"smooth_ap": ["table1"]}
    config["run_overrides"] = {"epochs": list(range(50_000))}  # a ~300 kB repr
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    out = _cli(tmp_path, "plan", "--config", path, "--out", tmp_path / "plan")
    assert out.returncode == 1 and "run_overrides" in out.stderr and "epochs" in out.stderr
    assert "49999] is not of type 'integer'" in out.stderr and len(out.stderr) < 1000  # jsonschema's reprlib
    config["run_overrides"] = {}
    config["data_root"] = list(range(50_000))  # the config schema's (Snakemake's message: the schema, the value)
    path.write_text(yaml.safe_dump(config))
    out = _cli(tmp_path, "plan", "--config", path, "--out", tmp_path / "plan")
    assert out.returncode == 1 and f"invalid plan: {path}: config: data_root: [0, 1, 2, " in out.stderr
    assert "is not of type 'string'" in out.stderr and len(out.stderr) < 1000


def test_the_cli_cuts_an_uncaught_errors_message(monkeypatch, capsys):
    from rankrepro import cli
    from rankrepro.cli import plan as cli_plan
    from rankrepro.messages import MESSAGE_LIMIT

    def huge(args):
        raise RuntimeError("y" * 10**6)

    monkeypatch.setattr(cli_plan, "cmd_plan", huge)
    assert cli.run(["plan"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: yyy" in err and "[1,000,014 characters in all]" in err
    assert len(err) < 4 * MESSAGE_LIMIT + 100


# --- a user file that holds no mapping ----------------------------------------------------------------------

@pytest.mark.parametrize("text, found", [("- a\n- b\n", "holds a list"), ("", "is empty"), ("3\n", "holds a number"),
                                         ("just text\n", "holds a string")])
def test_the_plan_command_names_a_config_that_is_no_mapping(tmp_path, text, found):
    config = tmp_path / "config.yaml"
    config.write_text(text)
    out = _cli(tmp_path, "plan", "--config", config, "--out", tmp_path / "plan")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"config.yaml: must be a mapping of keys to values (key: value), but {found}" in out.stderr


def _commands(bad: Path, tmp: Path) -> dict:
    """Each command that reads a config, plan or run file, given ``bad`` as that file."""
    runs = tmp / "runs"
    return {
        "plan": ["plan", "--config", bad, "--out", tmp / "plan"],
        "cost": ["cost", "--config", bad],
        "recipe --config": ["recipe", "--all", "--config", bad],
        "recipe --plan": ["recipe", "--all", "--plan", bad],
        "table": ["table", "--plan", bad, "--runs-dir", runs, "--out-prefix", tmp / "t"],
        "sweep-plot": ["sweep-plot", "--plan", bad, "--runs-dir", runs, "--out", tmp / "s.png"],
        "table-html": ["table-html", "--plan", bad, "--csv", tmp / "t.csv", "--out", tmp / "t.html"],
        "results-index": ["results-index", "--plan", bad, "--out", tmp / "README.md"],
        "track": ["track", "--plan", bad, "--tracking-uri", f"sqlite:///{tmp}/m.db", "--experiment", "x",
                  "--out", tmp / "imported.json"],
        "write-run": ["write-run", "--plan", bad, "--run-id", "a-b-0123456789", "--out", tmp / "run.json"],
        "train": ["train", "--run", bad, "--manifest", tmp],
        "evaluate": ["evaluate", "--run", bad, "--manifest", tmp, "--model", tmp / "m.pt", "--out", tmp / "m.json"],
        "train-batch": ["train-batch", "--runs", bad, "--staged", tmp / "staged", "--runs-dir", tmp / "runs",
                        "--manifest", tmp],
    }


@pytest.mark.parametrize("command", list(_commands(Path("x"), Path("y"))))
def test_each_command_names_a_file_that_is_a_list(tmp_path, command, capsys):
    from rankrepro.cli import run

    bad = tmp_path / ("bad.yaml" if "--config" in _commands(Path("x"), Path("y"))[command] else "bad.json")
    bad.write_text("[1, 2]\n")
    with pytest.raises(SystemExit) as done:
        run(list(map(str, _commands(bad, tmp_path)[command])))
    assert f"{bad}: must be a mapping of keys to values (key: value), but holds a list" in str(done.value.code)
    if command != "train-batch":  # a batch prints each failed run's traceback, then names them all
        assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "plan").exists() and not (tmp_path / "run.json").exists()


def test_a_plan_file_without_its_keys_or_not_json_is_named(tmp_path):
    from rankrepro.plan.model import Plan, TablePlan

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"runs": {}}))
    with pytest.raises(ValueError, match=r"plan.json: not a plan file: it has no 'tables' key"):
        Plan.load(path)
    with pytest.raises(ValueError, match=r"plan.json: not a table plan file: it has no 'paper', 'table', 'spec' key"):
        TablePlan.load(path)
    path.write_text('{"tables": {}\n,,}')
    with pytest.raises(ValueError, match=r"plan.json:2: not valid JSON: Expecting property name enclosed in double "
                                         r"quotes \(column 2\)"):
        Plan.load(path)


def test_setups_specs_and_a_profile_that_are_no_mapping_are_named(tmp_path):
    from rankrepro.plan.build import make_plan
    from rankrepro.plan.profile_config import profile_configfile
    from rankrepro.plan.setups import load_setups

    (tmp_path / "setups").mkdir()
    (tmp_path / "setups" / "mine.yaml").write_text("- a\n")
    with pytest.raises(PlanError, match=r"mine.yaml: must be a mapping of keys to values \(key: value\), but holds a "
                                        r"list"):
        load_setups(tmp_path / "setups")
    (tmp_path / "specs" / "suprank").mkdir(parents=True)
    (tmp_path / "specs" / "suprank" / "table1.yaml").write_text("- a\n")
    with pytest.raises(PlanError, match=r"table1.yaml: must be a mapping of keys to values"):
        make_plan({"suprank": ["table1"]}, specs_dir=tmp_path / "specs")
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "config.yaml").write_text("- a\n")
    with pytest.raises(ValueError, match=r"prof/config.yaml: must be a mapping of keys to values"):
        profile_configfile({}, ["snakemake", "--profile", str(tmp_path / "prof")])
    (tmp_path / "prof" / "config.yaml").write_text("config: [a]\n")
    with pytest.raises(ValueError, match=r"prof/config.yaml: config: must be a mapping of keys to values"):
        profile_configfile({}, ["snakemake", "--profile", str(tmp_path / "prof")])


@pytest.mark.slow  # starts snakemake
def test_the_workflow_refuses_a_mapping_bomb_in_config_yaml_before_snakemake_expands_it(tmp_path):
    from rankrepro.bench.plan import workflow_copy

    wf = tmp_path / "wf"
    wf.mkdir()
    workflow_copy(wf)
    (wf / "config.yaml").write_text(bomb(levels=7, mapping=True))  # Snakemake's merge would copy 10^7 mappings
    start = time.perf_counter()
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=wf, capture_output=True,
                         text=True, timeout=120)
    assert dry.returncode != 0 and time.perf_counter() - start < 60
    assert "invalid config: config.yaml:6: alias *l3 (anchor on line 5)" in dry.stdout + dry.stderr
