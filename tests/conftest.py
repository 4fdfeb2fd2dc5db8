"""Shared pytest fixtures."""

import pytest

from httpserver import DownloadServer
from rankrepro.plan.planner import Planner
from setuputil import DEMO


@pytest.fixture
def http_server():
    """A running :class:`httpserver.DownloadServer` on 127.0.0.1, stopped after the test."""
    with DownloadServer() as server:
        yield server


@pytest.fixture(scope="session")
def planner():
    """A planner of the packaged setups, specs and catalog, without overrides (it returns copies)."""
    return Planner()


@pytest.fixture(scope="session")
def demo_planner():
    """A planner with the demo profile's run overrides (:data:`setuputil.DEMO`)."""
    return Planner(DEMO)
