"""Fixtures for the model clients: a fake Ollama server per test, and a URL nobody serves."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from navi_memory.testing import FakeOllama


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


@pytest.fixture
def unused_url() -> str:
    """The URL of a port on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
