"""The task registry: a run's ``task`` selects its trainer and evaluator (rankrepro.engine.tasks); the planner
fills and checks it, and the default task leaves run ids as they were."""

from __future__ import annotations

import copy

import pytest
import yaml

from rankrepro import catalog
from rankrepro.engine.evaluate import evaluate
from rankrepro.engine.tasks import TASKS, task_of
from rankrepro.engine.tasks.retrieval import RetrievalTask
from rankrepro.record.tasks import DEFAULT_TASK
from rankrepro.plan.complete import ID_NEUTRAL_DEFAULTS, run_id
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.schema import SCHEMA_DIR, PlanError
from rankrepro.registry import UnknownNameError


def test_the_retrieval_task_trains_and_evaluates_retrieval_runs():
    task = task_of({"task": "retrieval"})
    assert isinstance(task, RetrievalTask) and type(task).evaluator is evaluate
    assert type(task_of({})) is RetrievalTask  # a run.json written before runs named their task
    assert task_of({}) is not task_of({})  # one instance per run: a task keeps its run's parts


def test_unknown_task_names_the_file_and_the_registered_tasks():
    with pytest.raises(UnknownNameError, match=r"results/runs/x/run.json: task: unknown task 'segmentation'; "
                                               r"registered: detection, retrieval"):
        task_of({"task": "segmentation"}, where="results/runs/x/run.json")


def test_the_catalog_lists_the_registered_tasks_and_the_schema_their_default():
    schema = yaml.safe_load((SCHEMA_DIR / "run.schema.yaml").read_text())
    task = schema["properties"]["task"]
    assert "enum" not in task  # the catalog is the one list: a task is one registration + `rankrepro catalog`
    assert sorted(catalog.load()["task"]) == TASKS.names()
    assert task["default"] == DEFAULT_TASK == ID_NEUTRAL_DEFAULTS["task"]
    assert "task" in schema["required"]


def test_planning_fills_the_task_and_keeps_the_run_id():
    run = resolve_run("suprank_sop", {"name": "smooth_ap"})
    assert run["task"] == "retrieval"
    without = {k: v for k, v in run.items() if k != "task"}
    assert run_id(run) == run_id(without)  # ids fixed before runs had a task stay
    other = copy.deepcopy(run)
    other["task"] = "face_retrieval"  # any other task is hashed
    assert run_id(other) != run_id(run)
    assert run_id(run) == run_id(resolve_run("suprank_sop", {"name": "smooth_ap"}, {"task": "retrieval"}))


def test_an_unknown_task_fails_planning_naming_the_key():
    with pytest.raises(PlanError, match=r"config run_overrides: task: unknown task 'segmentation'; registered: "
                                        r"detection, retrieval"):
        resolve_run("suprank_sop", {"name": "smooth_ap"}, {"task": "segmentation"})
