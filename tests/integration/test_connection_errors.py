"""A connection that fails says why: a missing database and a refused login are configuration
errors naming what to fix; only a server that cannot be reached is a StorageError."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
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


async def test_a_missing_database_named_by_the_database_option_is_the_one_named(
    pg_server: dbtools.EmbeddedServer, fake_ollama: FakeOllama
) -> None:
    """?database= is connected to like ?dbname=: the error named the URL path's database."""
    url = f"postgresql+asyncpg://postgres@/postgres?host={pg_server.socket_dir}"
    settings = make_settings(f"{url}&database=not_created_yet", fake_ollama)
    with pytest.raises(ConfigError, match=r"'not_created_yet' does not exist"):
        async with open_memory(settings):
            pass


@pytest.fixture
def role_without_grants(pg_server: dbtools.EmbeddedServer) -> Iterator[str]:
    role = f"no_grants_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    yield role
    with pg_server.admin() as conn:
        conn.execute(f'DROP ROLE "{role}"')


async def test_a_role_without_grants_is_told_which_grants_it_needs(
    db_url: str, role_without_grants: str, fake_ollama: FakeOllama
) -> None:
    """The server was reached and refused the probe's read of alembic_version (42501): it said
    "cannot reach PostgreSQL at ...: ProgrammingError: (sqlalchemy...)"."""
    url = db_url.replace("postgresql+asyncpg://postgres@", f"postgresql://{role_without_grants}@")
    with pytest.raises(ConfigError) as caught:
        async with open_memory(make_settings(url, fake_ollama)):
            pass
    message = str(caught.value)
    assert "permission denied for table alembic_version" in message
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " in message
    assert role_without_grants in message
    assert "cannot reach" not in message and "sqlalchemy" not in message


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ("-c%20bogus_guc%3D1", 'unrecognized configuration parameter "bogus_guc"'),
        ("-c%20work_mem%3D1", 'outside the valid range for parameter "work_mem"'),
    ],
)
async def test_a_startup_option_the_server_refuses_names_the_options_parameter(
    db_url: str, fake_ollama: FakeOllama, options: str, reason: str
) -> None:
    """The server refused the URL's options=-c ... (42704, 22023): it was reached."""
    settings = make_settings(f"{db_url}&options={options}&password=qsecret", fake_ollama)
    with pytest.raises(ConfigError) as caught:
        async with open_memory(settings):
            pass
    message = str(caught.value)
    assert reason in message and "DATABASE_URL's options" in message
    assert "cannot reach" not in message and "sqlalchemy" not in message
    assert "qsecret" not in message


async def test_a_statement_timeout_that_cancels_the_probe_is_named(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A statement_timeout too short for the probe's statements (57014) said "cannot reach
    PostgreSQL"; the server was reached and cancelled them."""
    settings = make_settings(f"{db_url}&options=-c%20statement_timeout%3D1", fake_ollama)
    with pytest.raises(StorageError) as caught:
        async with open_memory(settings):
            pass
    message = str(caught.value)
    assert "statement timeout" in message and "statement_timeout" in message
    assert "cannot reach" not in message and "sqlalchemy" not in message


@pytest.fixture
def pg_trgm_installed_later(
    db_url: str, pg_server: dbtools.EmbeddedServer
) -> Iterator[tuple[str, str]]:
    """A database at head whose pg_trgm was installed after the migration (its indexes not
    made), and a role that may use the tables but does not own them: (database url, role)."""
    dbname = db_url.split("@/", 1)[1].split("?", 1)[0]
    role = f"app_{uuid.uuid4().hex[:8]}"
    with pg_server.admin(dbname) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        for grant in (
            "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES",
            "USAGE, SELECT ON ALL SEQUENCES",
            "EXECUTE ON ALL FUNCTIONS",
        ):
            conn.execute(f'GRANT {grant} IN SCHEMA public TO "{role}"')
        conn.execute("CREATE EXTENSION pg_trgm")
    yield db_url, role
    with pg_server.admin(dbname) as conn:
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


def trgm_indexes(pg_server: dbtools.EmbeddedServer, db_url: str) -> int:
    dbname = db_url.split("@/", 1)[1].split("?", 1)[0]
    with pg_server.admin(dbname) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'memory_facts'"
            " AND indexname LIKE '%_trgm'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_role_that_does_not_own_the_tables_starts_when_pg_trgm_came_later(
    pg_trgm_installed_later: tuple[str, str],
    pg_server: dbtools.EmbeddedServer,
    fake_ollama: FakeOllama,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Creating the trigram indexes needs the tables' owner: the start-up said "must be owner
    of table memory_facts" and every call failed. The indexes only speed up a filter, so
    start-up logs why they were not made and goes on; the owner's next start makes them."""
    db_url, role = pg_trgm_installed_later
    url = db_url.replace("postgresql+asyncpg://postgres@", f"postgresql://{role}@")
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        async with open_memory(make_settings(url, fake_ollama)) as memory:
            uid = uuid.uuid4()
            await memory.users.ensure(uid, "app")
            await memory.store.upsert_fact("p", "editor", "vim", user_id=uid)
            listed = await memory.store.get_all_facts(user_id=uid, search="vi")
    assert [f.value for f in listed] == ["vim"]
    [skipped] = [r for r in caplog.records if r.getMessage().startswith("db.trgm_indexes_skipped")]
    assert "must be owner of table memory_facts" in skipped.getMessage()
    assert trgm_indexes(pg_server, db_url) == 0
    async with open_memory(make_settings(db_url, fake_ollama)):
        pass
    assert trgm_indexes(pg_server, db_url) == 3


async def test_processes_starting_together_make_the_trigram_indexes_once(
    pg_trgm_installed_later: tuple[str, str],
    pg_server: dbtools.EmbeddedServer,
    fake_ollama: FakeOllama,
) -> None:
    """Four processes opening at once where pg_trgm came later: three of four failed on the
    catalog's unique index (two CREATE INDEX IF NOT EXISTS of one name). Now all open, and
    the indexes are made."""
    db_url, _ = pg_trgm_installed_later

    async def start() -> None:
        async with open_memory(make_settings(db_url, fake_ollama)):
            pass

    await asyncio.gather(*(start() for _ in range(4)))
    assert trgm_indexes(pg_server, db_url) == 3
