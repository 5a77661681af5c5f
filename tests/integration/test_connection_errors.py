"""A connection that fails says why: a missing database and a refused login are configuration
errors naming what to fix; only a server that cannot be reached is a StorageError."""

from __future__ import annotations

from pathlib import Path

import pytest

from navi_memory import ConfigError, StorageError, open_memory
from navi_memory.testing import FakeOllama
from tests import dbtools
from tests.conftest import make_settings


async def test_a_missing_database_is_a_config_error_naming_it(
    pg_server: dbtools.EmbeddedServer, fake_ollama: FakeOllama
) -> None:
    """open_memory on a database the server lacks names the database and how to create it."""
    settings = make_settings(pg_server.url("not_created_yet"), fake_ollama)
    with pytest.raises(ConfigError, match=r"'not_created_yet' does not exist.*createdb"):
        async with open_memory(settings):
            pass


async def test_an_unknown_role_is_a_config_error_about_the_login(
    pg_server: dbtools.EmbeddedServer, fake_ollama: FakeOllama
) -> None:
    """A role the server does not know is a refused login, not an unreachable server."""
    url = f"postgresql+asyncpg://nobody_here@/postgres?host={pg_server.socket_dir}"
    with pytest.raises(ConfigError, match="refused the login"):
        async with open_memory(make_settings(url, fake_ollama)):
            pass


async def test_no_server_at_all_is_a_storage_error(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    """A socket directory with no server behind it cannot be reached: StorageError."""
    url = f"postgresql+asyncpg://postgres@/postgres?host={tmp_path}"
    with pytest.raises(StorageError, match="cannot reach PostgreSQL"):
        async with open_memory(make_settings(url, fake_ollama)):
            pass
