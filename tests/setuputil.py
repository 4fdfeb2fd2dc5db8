"""Helpers shared by the paper setup tests (``test_setups_<paper>.py``): a setup resolved in a
table row that trains a loss, and the demo profile's run overrides with what they must set.

Imported as ``setuputil`` (pytest puts ``tests/`` on ``sys.path``, as for ``httpserver``); the
planners are conftest.py's fixtures ``planner`` and ``demo_planner``.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.io import load_yaml

#: profiles/demo/demo.yaml's run_overrides
DEMO = load_yaml(Path(__file__).resolve().parents[1] / "profiles" / "demo" / "demo.yaml")["run_overrides"]


def run_of(planner, setup: str, loss: dict) -> dict:
    """The complete run of ``setup`` in a table row that trains ``loss``."""
    return planner.resolve(setup, [("loss", {"loss": loss})])


def assert_demo_overrides_applied(run: dict) -> None:
    """``run``, resolved with :data:`DEMO`, has the demo's backbone, epochs, crop and batch size."""
    assert run["model"]["backbone"] == DEMO["model"]["backbone"] and run["epochs"] == DEMO["epochs"]
    assert run["images"]["train_crop"] == DEMO["images"]["train_crop"]
    assert run["sampler"]["batch_size"] == DEMO["sampler"]["batch_size"]
