"""Shared pytest fixtures."""

import pytest

from httpserver import DownloadServer


@pytest.fixture
def http_server():
    """A running :class:`httpserver.DownloadServer` on 127.0.0.1, stopped after the test."""
    with DownloadServer() as server:
        yield server
