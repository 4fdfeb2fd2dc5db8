"""Shared pytest fixtures."""

import pytest

from httpserver import LoopbackServer


@pytest.fixture
def http_server():
    """A running :class:`httpserver.LoopbackServer` on 127.0.0.1, stopped after the test."""
    with LoopbackServer() as server:
        yield server
