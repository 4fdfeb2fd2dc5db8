"""A setup's ``per_loss`` entry for the run's final loss is never lost without an explicit override (issue 34,
group 1): a column naming another loss, a row naming the setup's loss again, must not drop the setup's values
(SupRank Table III's iNaturalist ROADMAP cells trained at the code defaults 0.5 / 1.44, not ROADMAP_pp_inat's
0.0 / 1.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankrepro.io import load_yaml
from rankrepro.plan.build import make_plan, plan_from_config
from rankrepro.plan.complete import leaf_paths, run_id
from rankrepro.plan.merge import deep_merge, get_path
from rankrepro.plan.planner import Planner, resolve_run
from rankrepro.plan.setups import PER_LOSS, setup_layers
from setuputil import DEMO

REPO = Path(__file__).resolve().parents[1]


def sets(layer: dict, path: tuple, below: dict) -> bool:
    """``layer`` gives the key at ``path`` (any value, null included), a non-mapping above it, or a block above it
    that names another component than ``below`` (the setup's run: ``optimizer: {name: adamw}`` replaces the
    setup's Adam whole). The ``loss`` block is not such a block: ``per_loss`` is chosen by the run's loss."""
    for depth, key in enumerate(path):
        if not isinstance(layer, dict):
            return True
        setup_name = get_path(below, (*path[:depth], "name"))
        if depth and path[:depth] != ("loss",) and layer.get("name", setup_name) != setup_name:
            return True
        if key not in layer:
            return False
        layer = layer[key]
    return True


def explicit(layer: dict, loss: str, path: tuple, below: dict) -> bool:
    """A spec block or override sets ``path`` for the run's ``loss`` (:func:`sets`): itself (a ``loss`` block of
    another loss sets none of this one's keys) or in its own ``per_loss`` entry of ``loss``."""
    own = not (path[0] == "loss" and get_path(layer, ("loss", "name")) not in (None, loss)) and sets(layer, path, below)
    return own or sets((layer.get(PER_LOSS) or {}).get(loss) or {}, path, below)


def lost_per_loss_values(planner: Planner, calls: list) -> list[str]:
    """Every value of a setup's ``per_loss`` entry for a run's final loss that its run does not hold although no
    spec block or override set that key, one line per value (the cell, key, setup value and run value)."""
    lost = []
    for setup, layers, run, context in calls:
        loss = run["loss"]["name"]
        chain = setup_layers(setup, planner.setups)
        entry: dict = {}
        below: dict = {}
        for _, data in chain:
            entry = deep_merge(entry, (data.get(PER_LOSS) or {}).get(loss) or {})
            below = deep_merge(below, {k: v for k, v in data.items() if k != PER_LOSS})
        above = [data or {} for _, data in [*layers, planner.overrides_for([*chain, *layers])]]
        for path in leaf_paths(entry):
            value = get_path(entry, path)
            if any(explicit(layer, loss, path, below) for layer in above):
                continue
            if get_path(run, path) != value:
                lost.append(f"{setup}{context}: {'.'.join(path)} = {get_path(run, path)!r}, per_loss.{loss} gives "
                            f"{value!r}")
    return lost


def recorded_plan(monkeypatch, plan) -> tuple[Planner, list, dict]:
    """``plan()``'s result, with its planner and every cell's ``(setup, layers, run, context)``."""
    calls, planners = [], []
    resolve = Planner.resolve

    def recording(self, setup, layers=(), seed=None, context=""):
        run = resolve(self, setup, layers, seed, context)
        planners.append(self)
        calls.append((setup, list(layers), run, context))
        return run

    monkeypatch.setattr(Planner, "resolve", recording)
    result = plan()
    assert len(set(map(id, planners))) == 1 and calls
    return planners[0], calls, result


@pytest.mark.parametrize("overrides", ["config.yaml", "demo run_overrides"])
def test_no_run_of_config_yaml_loses_a_per_loss_value_of_its_setup(monkeypatch, overrides):
    config = load_yaml(REPO / "config.yaml")
    if overrides == "demo run_overrides":  # per_loss entries of their own (PNP's index_blocks 2): explicit
        config["run_overrides"] = DEMO
    planner, calls, plan = recorded_plan(monkeypatch, lambda: plan_from_config(config))
    assert {run_id(run) for _, _, run, _ in calls} == set(plan["runs"])  # every run of the plan is checked
    assert lost_per_loss_values(planner, calls) == []


def test_the_check_finds_a_value_a_column_drops():
    # hand-made: the column names contrastive, the row roadmap again; suprank_inat's per_loss.roadmap has
    # start 0.0, offset 1.0; the row's own offset 2.0 is explicit
    planner = Planner()
    layers = [("column", {"loss": {"name": "contrastive", "formulation": "xbm"}}),
              ("row", {"loss": {"name": "roadmap", "offset": 2.0}})]
    run = planner.resolve("suprank_inat", layers)
    kept = {**run, "loss": {**run["loss"], "start": 0.0, "offset": 2.0}}
    assert lost_per_loss_values(planner, [("suprank_inat", layers, kept, "")]) == []
    dropped = {**run, "loss": {**run["loss"], "start": 0.5, "offset": 1.44}}
    assert lost_per_loss_values(planner, [("suprank_inat", layers, dropped, "")]) == [
        "suprank_inat: loss.start = 0.5, per_loss.roadmap gives 0.0"]


def test_per_loss_comes_back_under_the_layer_that_names_the_loss_again():
    inat = {"name": "contrastive", "formulation": "xbm", "memory": {"size": 10, "warmup_epochs": 5}}
    planner = Planner()
    run = planner.resolve("suprank_inat", [("column", {"loss": inat}), ("row", {"loss": {"name": "roadmap"}})])
    # ROADMAP_pp_inat.yaml: start 0.0, offset 1.0, the proxies' Adam 10; the column's memory belonged to XBM
    assert (run["loss"]["start"], run["loss"]["offset"], run["loss"]["memory"]) == (0.0, 1.0, None)
    assert run["optimizer"]["groups"]["loss"]["lr"] == 10.0
    assert run == resolve_run("suprank_inat", {"name": "roadmap"})
    origin = planner.provenance[next(iter(planner.provenance))]
    assert origin["loss.start"] == "src/rankrepro/plan/setups/suprank.yaml: suprank_inat: per_loss.roadmap"
    # a key the row sets for the loss wins; one a column sets for the same loss, below the row, too
    run = planner.resolve("suprank_inat", [("column", {"loss": inat}), ("row", {"loss": {"name": "roadmap",
                                                                                          "start": 0.25}})])
    assert (run["loss"]["start"], run["loss"]["offset"]) == (0.25, 1.0)
    run = planner.resolve("suprank_inat", [("column", {"loss": {"name": "roadmap", "start": 0.25}}),
                                           ("row", {"loss": {"name": "roadmap"}})])
    assert (run["loss"]["start"], run["loss"]["offset"]) == (0.25, 1.0)


def test_table_iii_inat_roadmap_cells_are_table_i_runs():
    plan = make_plan({"suprank": ["table1", "table3"]})

    def roadmap_runs(table: str) -> dict[str, list[str]]:
        t = plan["tables"][f"suprank/{table}"]
        r = next(i for i, row in enumerate(t["spec"]["rows"]) if row["method"] == "ROADMAP")
        return {t["spec"]["columns"][cell["column"]]["key"]: cell["run_ids"] for cell in t["cells"]
                if cell["row"] == r}

    table1, table3 = roadmap_runs("table1"), roadmap_runs("table3")
    for column in ("inat_r1", "inat_map_r", "sop_r1", "sop_map_r"):
        assert table3[column] == table1[column], column
    run = plan["runs"][table3["inat_r1"][0]]
    assert (run["loss"]["start"], run["loss"]["offset"]) == (0.0, 1.0)  # ROADMAP_pp_inat.yaml @ d3d0e3c
