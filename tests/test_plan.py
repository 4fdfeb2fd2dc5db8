"""The planner: complete typed runs, ids that pin every default, errors that name file and key,
and a plan made without torch."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.complete import run_id
from rankrepro.plan.merge import deep_merge
from rankrepro.plan.planner import Planner, resolve_run
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import SETUPS_DIR, load_setups

REPO = Path(__file__).resolve().parents[1]
TABLE1 = {"suprank": ["table1"]}


def test_deep_merge_is_recursive_and_replaces_renamed_components():
    base = {"a": 1, "sampler": {"name": "hierarchical", "batch_size": 256, "batches_per_super_tuple": 5}}
    assert deep_merge(base, {"sampler": {"batch_size": 32}})["sampler"] == {
        "name": "hierarchical", "batch_size": 32, "batches_per_super_tuple": 5}
    assert deep_merge(base, {"sampler": {"name": "m_per_class", "batch_size": 8}})["sampler"] == {
        "name": "m_per_class", "batch_size": 8}
    assert base["sampler"]["batch_size"] == 256  # inputs untouched


def test_run_id_is_readable_stable_and_order_independent():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    rid = run_id(run)
    assert rid.startswith("sop-smooth_ap-") and len(rid.rsplit("-", 1)[1]) == 10
    shuffled = dict(reversed(list(run.items())))
    assert run_id(shuffled) == rid
    assert run_id(resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.02})) != rid


def test_suprank_sop_setup_is_the_paper_setup():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    assert run["model"]["backbone"] == "resnet50" and run["model"]["embed_dim"] == 512
    assert run["model"]["layernorm"] and run["model"]["pooling"] == {"name": "avg"}
    assert run["sampler"]["batch_size"] == 256 and run["sampler"]["samples_per_class"] == 4
    assert run["optimizer"]["groups"]["backbone"]["lr"] == 5e-5 and run["schedule"]["name"] == "cosine"
    assert run["epochs"] == 100 and run["images"]["train_crop"] == 224 and run["warmup_epochs"] == 5


def test_a_run_pins_every_default_of_every_component():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    cat = catalog.load()
    for block, kind, extra in ((run["loss"], "loss", {"name", "memory"}), (run["sampler"], "sampler", {"name"}),
                               (run["model"], "model", {"name"}), (run["schedule"], "schedule", {"name"}),
                               (run["optimizer"], "optimizer", {"name", "groups"})):
        assert set(block) - extra == set(cat[kind][block["name"]]["parameters"]), kind
    groups = run["optimizer"]["groups"]
    assert set(groups) == {"backbone", "head", "loss"}
    for group in groups.values():
        assert set(group) == {"lr", "optimizer", "weight_decay", "lr_min", "warmup_frozen"}
    # smooth_ap names no proxy group: the loss's (absent) parameters follow the head's settings, never frozen
    assert groups["loss"] == {**groups["head"], "warmup_frozen": False} and groups["backbone"]["warmup_frozen"]
    assert run["loss"]["memory"] is None
    assert run["amp"] == "fp16" and run["train_split"] == "train"
    assert run["images"]["rrc_scale"] == [0.16, 1.0]
    assert run["eval"]["metrics"] == ["R@1", "R@10", "R@100", "R@1000", "mAP@R", "RP"]


def test_the_committed_catalog_matches_the_code():
    problems = catalog.diff(catalog.load(), catalog.live())
    assert not problems, "run `python -m rankrepro catalog`: " + "; ".join(problems)


def _set_default(monkeypatch, builder, name, value):
    """Change the default of keyword ``name`` of a builder (a class's ``__init__`` or a function) as the
    registry sees it: its signature. (The value the code would fall back to does not matter: a run pins it.)"""
    import inspect

    fn = builder.__init__ if isinstance(builder, type) else builder
    sig = inspect.signature(fn)
    assert name in sig.parameters
    new = sig.replace(parameters=[p.replace(default=value) if p.name == name else p for p in sig.parameters.values()])
    monkeypatch.setattr(fn, "__signature__", new, raising=False)


def test_changing_a_default_in_code_changes_the_run_id(monkeypatch):
    from rankrepro import losses

    before = make_plan(TABLE1, catalog=catalog.live())["runs"]
    entry = losses.LOSSES.get("smooth_ap")
    _set_default(monkeypatch, entry.builder, "include_query", False)
    changed = catalog.live()
    assert changed["loss"]["smooth_ap"]["parameters"]["include_query"]["default"] is False
    after = make_plan(TABLE1, catalog=changed)["runs"]
    smooth_before = {k for k in before if k.split("-")[1] == "smooth_ap"}
    smooth_after = {k for k in after if k.split("-")[1] == "smooth_ap"}
    assert smooth_before and smooth_after and smooth_before.isdisjoint(smooth_after)
    assert {k for k in before if k.split("-")[1] != "smooth_ap"} == \
        {k for k in after if k.split("-")[1] != "smooth_ap"}  # the other runs keep their ids
    assert any("smooth_ap" in p for p in catalog.diff(catalog.load(), changed))  # and the stale catalog is caught


def test_training_refuses_a_run_that_does_not_pin_a_parameter_of_the_code():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    catalog.check_run(run)
    del run["loss"]["include_query"]  # as if the parameter had been added after the plan
    with pytest.raises(catalog.CatalogError, match=r"run loss: loss 'smooth_ap' needs 'include_query'.*catalog"):
        catalog.check_run(run)


def test_training_refuses_a_default_changed_in_code_without_rewriting_the_catalog(monkeypatch):
    from rankrepro import losses

    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    _set_default(monkeypatch, losses.LOSSES.get("smooth_ap").builder, "include_query", False)
    with pytest.raises(catalog.CatalogError, match=r"loss 'smooth_ap': parameters changed in code since .*catalog.json "
                                                   r"was written.*python -m rankrepro catalog"):
        catalog.check_run(run)


@pytest.mark.parametrize("overrides, message", [
    ({"epochz": 3}, r"config run_overrides: \(top level\): Additional properties are not allowed \('epochz'"),
    ({"epochs": -1}, r"config run_overrides: epochs: -1 is less than the minimum of 0"),
    ({"epochs": "3"}, r"config run_overrides: epochs: '3' is not of type 'integer'"),
    ({"loss": {"tau": 0}}, r"config run_overrides \(cell 'Fast-AP \[24\]' x sop_r1\): loss.tau: "
                           r"loss 'fast_ap' takes no parameter 'tau'; allowed: "),
    ({"loss": {"name": "smoth_ap"}}, r"config run_overrides: loss.name: unknown loss 'smoth_ap'; registered: "),
    ({"sampler": {"batch_size": "32"}}, r"config run_overrides \(cell .*\): sampler.batch_size: sampler "
                                        r"'hierarchical': batch_size must be integer, got '32'"),
    ({"model": {"pooling": {"name": "gem", "p": "3"}}}, r"config run_overrides \(cell .*\): model.pooling.p: "
                                                         r"pooling 'gem': p must be number"),
    ({"model": {"backbone": "resnet5O"}}, r"config run_overrides \(cell .*\): model.backbone: unknown backbone"),
    ({"warmup_epochs": 7, "epochs": 3}, r"warmup_epochs \(7, config run_overrides\) exceeds epochs \(3, config run_"),
    ({"epochs": 3}, r"warmup_epochs \(5, .*suprank.yaml: suprank_base\) exceeds epochs \(3, config run_overrides\)"),
    ({"eval": {"metrics": ["R@1", "mAP@X"]}}, r"config run_overrides \(cell .*\): eval.metrics\[1\]: "
                                              r"unknown metric 'mAP@X'"),
    ({"optimizer": {"name": "sgd", "momentum": 0.9}}, r"config run_overrides \(cell .*\): optimizer: 'groups' is "
                                                      r"required and given by no setup, spec or override"),
    ({"optimizer": {"groups": {"net": {"lr": 1e-5}}}}, r"config run_overrides \(cell .*\): optimizer.groups.net: 'net' "
                                                       r"is the whole model: set it alone"),
    ({"optimizer": {"groups": {"head": None}}}, r"optimizer.groups: the model's parameters need the groups 'backbone' "
                                                r"and 'head', or 'net' \(given: backbone\)"),
    ({"optimizer": {"groups": {"loss": {"lr": 1.0, "optimizer": "adagrad"}}}},
     r"config run_overrides \(cell .*\): optimizer.groups.loss.optimizer: unknown optimizer 'adagrad'"),
    ({"optimizer": {"groups": {"head": {"lr_min": 1.0}}}}, r"optimizer.groups.head.lr_min: floor 1.0 is above"),
    ({"schedule": {"name": "constant"}, "optimizer": {"groups": {"loss": {"lr": 1.0, "lr_min": 0.1}}}},
     r"optimizer.groups.loss.lr_min: a floor needs a schedule with one \(cosine\); the schedule is 'constant' "
     r"\(config run_overrides\)"),
    ({"optimizer": {"groups": {"proxies": {"lr": 1.0}}}}, r"config run_overrides: optimizer.groups: 'proxies' is not one of"),
    ({"per_loss": {"roadmapp": {"loss": {"lam": 0.2}}}}, r"config run_overrides: per_loss.roadmapp: unknown loss 'roadmapp'"),
    ({"per_loss": {"roadmap": {"loss": {"name": "sup_ap"}}}}, r"config run_overrides: per_loss.roadmap.loss.name: 'sup_ap' "
                                                              r"in the entry of loss 'roadmap'"),
    ({"eval": {"select_by": "R@5"}}, r"config run_overrides \(cell .*\): eval.select_by: 'R@5' is not one of "
                                     r"eval.metrics \(R@1, .*suprank.yaml: suprank_sop\)"),
    ({"eval": {"metrics": ["dists@intra", "R@1"]}}, r"config run_overrides \(cell .*\): eval.metrics: the best "
                                                    r"epoch maximises 'dists@intra', a metric where lower is better"),
    ({"eval": {"select": "best_test", "every": None}}, r"config run_overrides \(cell .*\): eval.select: best_test "
                                                       r"needs a test curve; set eval.every"),
    ({"eval": {"every": 0}}, r"config run_overrides: eval.every: 0 is less than the minimum of 1"),
])
def test_a_bad_override_fails_the_plan_naming_the_key(overrides, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, overrides)


def _setups_copy(tmp_path, text):
    d = tmp_path / "setups"
    d.mkdir()
    (d / "suprank.yaml").write_text((SETUPS_DIR / "suprank.yaml").read_text())
    (d / "mine.yaml").write_text(textwrap.dedent(text))
    return d


def test_setups_extend_one_another_across_files(tmp_path):
    d = _setups_copy(tmp_path, """
        mine_sop:
          extends: suprank_sop
          epochs: 3
          warmup_epochs: 0
          sampler: {name: m_per_class, batch_size: 32, samples_per_class: 4}
        """)
    run = Planner(setups=load_setups(d)).resolve("mine_sop", [("row", {"loss": {"name": "smooth_ap"}})])
    assert run["epochs"] == 3 and run["model"]["backbone"] == "resnet50"
    assert run["sampler"] == {"name": "m_per_class", "batch_size": 32, "samples_per_class": 4,
                              "reduce_per_class": None}


@pytest.mark.parametrize("text, message", [
    ("mine_sop:\n  extends: suprank_sop\n  epochz: 3\n", r"mine.yaml: mine_sop: Additional properties"),
    ("mine_sop:\n  extends: suprank_sopp\n", r"mine.yaml: mine_sop: extends: unknown setup 'suprank_sopp'"),
    ("suprank_sop:\n  epochs: 3\n", r"(mine|suprank).yaml: setup 'suprank_sop' is also defined in .*(suprank|mine).yaml"),
    ("mine_a:\n  extends: mine_b\nmine_b:\n  extends: mine_a\n", r"extends forms a cycle"),
    ("mine_sop:\n  extends: suprank_sop\n  images: {train_crop: 0}\n", r"mine.yaml: mine_sop.images.train_crop"),
])
def test_a_bad_setup_names_its_file_and_key(tmp_path, text, message):
    with pytest.raises(PlanError, match=message):
        load_setups(_setups_copy(tmp_path, text))


def test_a_wrong_loss_parameter_in_a_setup_names_the_setup(tmp_path):
    d = _setups_copy(tmp_path, "mine_sop:\n  extends: suprank_sop\n  loss: {name: smooth_ap, tauu: 0.1}\n")
    with pytest.raises(PlanError, match=r"mine.yaml: mine_sop.*: loss.tauu: loss 'smooth_ap' takes no parameter"):
        Planner(setups=load_setups(d)).resolve("mine_sop")


def _spec_copy(tmp_path, edit):
    src = REPO / "src" / "rankrepro" / "tables" / "specs" / "suprank" / "table1.yaml"
    spec = yaml.safe_load(src.read_text())
    edit(spec)
    d = tmp_path / "specs" / "suprank"
    d.mkdir(parents=True)
    (d / "table1.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path / "specs"


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["rows"][3]["loss"].update(tauu=0.1), r"table1.yaml: rows\[3\].loss .*: loss.tauu: loss "
                                                        r"'smooth_ap' takes no parameter 'tauu'"),
    (lambda s: s["rows"][0]["loss"].update(name="fastap"), r"table1.yaml: rows\[0\] \(Fast-AP \[24\]\) x columns\[0\] "
                                                            r"\(sop_r1\): unknown loss 'fastap'"),
    (lambda s: s["columns"][0].update(setup="suprank_sopp"), r"unknown setup 'suprank_sopp'"),
    (lambda s: s["rows"][1]["paper"].pop(), r"table1.yaml: rows\[1\].paper: 3 numbers for 4 columns"),
    (lambda s: s["columns"][1].update(metrc="R@1"), r"table1.yaml: columns\[1\]: Additional properties"),
    (lambda s: s["rows"][2].update(run={"epochs": -2}), r"table1.yaml: rows\[2\].run.epochs: -2 is less than"),
])
def test_a_bad_spec_names_its_file_and_key(tmp_path, edit, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, specs_dir=_spec_copy(tmp_path, edit))


def test_row_and_column_run_blocks_and_seeds(tmp_path):
    def edit(spec):
        spec["seeds"] = [0, 1]
        spec["rows"][3]["run"] = {"epochs": 7}

    plan = make_plan(TABLE1, specs_dir=_spec_copy(tmp_path, edit))
    cells = plan["tables"]["suprank/table1"]["cells"]
    smooth = next(c for c in cells if c["row"] == 3 and c["column"] == 0)
    assert len(smooth["run_ids"]) == 2
    assert sorted(plan["runs"][r]["seed"] for r in smooth["run_ids"]) == [0, 1]
    assert all(plan["runs"][r]["epochs"] == 7 for r in smooth["run_ids"])


def test_plan_files_are_rewritten_only_when_they_change(tmp_path):
    from rankrepro.plan.build import write_plan

    plan = make_plan(TABLE1)
    files = write_plan(plan, tmp_path)
    path, table = files.plan, files.tables["suprank/table1"]
    stamps = path.stat().st_mtime_ns, table.stat().st_mtime_ns
    os.utime(path, ns=(1, 1))
    os.utime(table, ns=(1, 1))
    write_plan(make_plan(TABLE1), tmp_path)
    assert path.stat().st_mtime_ns == 1 and table.stat().st_mtime_ns == 1 and stamps[0] > 1
    changed = write_plan(make_plan(TABLE1, {"epochs": 6}), tmp_path)  # other files (named by their content)
    assert changed.plan.stat().st_mtime_ns > 1 and json.loads(changed.tables["suprank/table1"].read_text())["runs"]


BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'torch', 'numba', 'torchvision', 'faiss', 'pytorch_metric_learning'}:
            raise ImportError(f'{name} imported while planning')
        return None
sys.meta_path.insert(0, _Block())
"""


def torch_blocked_env(tmp_path) -> dict:
    """The environment of a subprocess in which importing torch (or numba, faiss, ...) fails."""
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'block'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert "imported while planning" in probe.stderr  # the blocker works
    return env


def test_the_planner_imports_no_torch(tmp_path):
    env = torch_blocked_env(tmp_path)
    plan = subprocess.run([sys.executable, "-m", "rankrepro", "plan", "--config", str(REPO / "config.yaml"),
                           "--out", str(tmp_path / "plan")], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr


@pytest.mark.slow
def test_the_dry_run_imports_no_torch(tmp_path):
    env = torch_blocked_env(tmp_path)
    from rankrepro.bench.plan import workflow_copy

    wf = tmp_path / "wf"
    wf.mkdir()
    workflow_copy(wf)
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], env=env, cwd=wf,
                         capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "train" in dry.stdout


def test_synthetic_results_are_checked_and_planned():
    plan = make_plan(TABLE1, synthetic={"names": sorted(catalog.load()["synthetic"]), "scale": "demo"})
    assert plan["synthetic"]["scale"] == "demo" and plan["synthetic"]["seed"] == 0
    with pytest.raises(PlanError, match=r"config synthetic.names: unknown result 'pnp_fig66'; registered: "):
        make_plan(TABLE1, synthetic={"names": ["pnp_fig66"]})


# ----------------------------------------------------------------- model selection and seeds


def test_the_selection_keys_leave_the_run_id_alone_at_their_defaults():
    """eval.every / select / select_by came after run ids: at null / last / null a run keeps its id."""
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, {"eval": {"every": None}})
    assert (run["eval"]["every"], run["eval"]["select"], run["eval"]["select_by"]) == (None, "last", None)
    before = dict(run, eval={"metrics": run["eval"]["metrics"]})  # a record planned before the keys existed
    assert run_id(run) == run_id(before)
    assert run["eval"] == {"metrics": run["eval"]["metrics"], "every": None, "select": "last", "select_by": None,
                           "datasets": []}
    for key, value in (("every", 20), ("select_by", "R@1")):
        assert run_id(dict(run, eval={**run["eval"], key: value})) != run_id(run), key


@pytest.mark.parametrize("setup, every, select", [
    ("smooth_ap_sop_224", 1, "best_test"), ("smooth_ap_vehicleid", 1, "best_test"), ("pnp_sop_112", 1, "best_test"),
    ("pnp_inat_224", 1, "best_test"), ("rambo_cub", 1, "best_test"), ("topk_densenet201_cub", 1, "best_test"),
    ("topk_densenet201_cars", 2, "best_test"), ("topk_densenet201_sop", 1, "best_test"), ("suprank_sop", 20, "last"),
])
def test_the_papers_evaluate_and_select_as_their_code(setup, every, select):
    run = resolve_run(setup, {"name": "smooth_ap", "tau": 0.01})
    assert (run["eval"]["every"], run["eval"]["select"]) == (every, select)
    assert run["eval"]["select_by"] == ("R@1" if select == "best_test" else None)
    assert "R@1" in run["eval"]["metrics"]


def test_the_config_gives_a_table_more_seeds():
    from rankrepro.plan.build import plan_from_config

    config = {"data_root": "d", "datasets": {}, "tracking": {"tracking_uri": "sqlite:///x.db", "experiment": "x"},
              "tables": {"suprank": ["table1"], "rambo": ["table1"]}}
    plain = plan_from_config(json.loads(json.dumps(config)))
    more = plan_from_config({**json.loads(json.dumps(config)), "seeds": {"suprank/table1": [0, 3, 4]}})
    table = more["tables"]["suprank/table1"]
    assert table["spec"]["seeds"] == [0, 3, 4] and "seeds" not in plain["tables"]["suprank/table1"]["spec"]
    cell = next(c for c in table["cells"] if c["run_ids"])
    assert sorted(more["runs"][r]["seed"] for r in cell["run_ids"]) == [0, 3, 4]
    assert set(plain["runs"]) < set(more["runs"])  # seed 0 is the setup's: those runs are shared
    for seeds, message in [({"suprank/table99": [0]}, r"config seeds.suprank/table99: no table suprank/table99 in "
                                                       r"the config's tables \(suprank/table1, rambo/table1\) nor "
                                                       r"among the table specs"),
                           ({"rambo/table1": [0]}, r"config seeds.rambo/table1: a static table has no runs to seed"),
                           ({"suprank/table1": []}, r"config: seeds.suprank/table1: \[\] should be non-empty"),
                           ({"suprank": [0]}, r"config: seeds: 'suprank' does not match")]:
        with pytest.raises(PlanError, match=message):
            plan_from_config({**json.loads(json.dumps(config)), "seeds": seeds})
    # a table with a spec that this config does not list (a config layered over the demo's): its seeds unused
    assert plan_from_config({**json.loads(json.dumps(config)), "seeds": {"rambo/table5": [0]}})["runs"] == plain["runs"]
