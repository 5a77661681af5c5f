"""Fixtures on a real PostgreSQL: one embedded server per test process (per xdist worker under
`make test`), two migrated templates (with and without pg_trgm) cloned per test by
pytest-postgresql, and a fake Ollama."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import settings as hypothesis_settings
from pytest_postgresql import factories

from navi_memory import Memory, Settings, open_memory
from navi_memory.testing import FakeOllama
from tests import dbtools

# The tests configure everything explicitly; nothing from the developer's shell may leak in.
for _name in list(os.environ):
    if _name.startswith(("DATABASE_URL", "OLLAMA_", "EMBEDDING_", "MEMORY_", "BACKFILL_")):
        del os.environ[_name]

# Generated tests are reproducible (a CI failure is the same failure on a laptop) and have no
# per-example deadline (a loaded 2-core CI machine is not a finding); `make soak` draws fresh
# random inputs with settings of its own.
hypothesis_settings.register_profile("navi-memory", derandomize=True, deadline=None)
hypothesis_settings.load_profile("navi-memory")

_SERVER: dbtools.EmbeddedServer | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _SERVER
    _SERVER = dbtools.EmbeddedServer()
    # pytest-postgresql reads these for postgresql_noproc: the embedded server's socket.
    config.option.postgresql_host = _SERVER.socket_dir
    config.option.postgresql_port = _SERVER.port
    config.option.postgresql_user = dbtools.PG_USER


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SERVER is not None:
        _SERVER.stop()


def _migrate_template(*, trgm: bool) -> Any:
    def load(host: str, port: int, user: str, dbname: str, **_: Any) -> None:
        if trgm:
            with psycopg.connect(host=host, port=port, user=user, dbname=dbname) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        dbtools.upgrade(dbtools.socket_url(host, dbname, user))

    return load


postgresql_plain_proc = factories.postgresql_noproc(
    dbname="navi_tmpl_plain", load=[_migrate_template(trgm=False)]
)
postgresql_trgm_proc = factories.postgresql_noproc(
    dbname="navi_tmpl_trgm", load=[_migrate_template(trgm=True)]
)
postgresql_plain = factories.postgresql("postgresql_plain_proc")
postgresql_trgm = factories.postgresql("postgresql_trgm_proc")


@pytest.fixture(scope="session")
def pg_server() -> dbtools.EmbeddedServer:
    assert _SERVER is not None
    return _SERVER


@pytest.fixture
def db_url(postgresql_plain: psycopg.Connection[Any], pg_server: dbtools.EmbeddedServer) -> str:
    """A fresh database at head, without pg_trgm (cloned from the migrated template)."""
    return pg_server.url(postgresql_plain.info.dbname)


@pytest.fixture
def trgm_db_url(postgresql_trgm: psycopg.Connection[Any], pg_server: dbtools.EmbeddedServer) -> str:
    """A fresh database at head, with pg_trgm installed and its indexes made."""
    return pg_server.url(postgresql_trgm.info.dbname)


@pytest.fixture
def scratch_db(pg_server: dbtools.EmbeddedServer) -> Iterator[str]:
    """An empty database (no schema, no extensions): for migration tests. Yields its name."""
    name = pg_server.create_database()
    try:
        yield name
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="session")
def fake_ollama_server() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
def fake_ollama(fake_ollama_server: FakeOllama) -> FakeOllama:
    """The fake Ollama, reset to healthy with nothing scripted."""
    fake_ollama_server.reset()
    return fake_ollama_server


def make_settings(url: str, fake: FakeOllama, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "ollama_host": fake.url,
        "embedding_ollama_host": "",
        # Calls to the fake must succeed on a loaded machine too (a 2 s timeout missed there
        # also paused the embedder for EMBEDDING_PAUSE_SECONDS, the rest of the test); a test
        # of a stalled model sets the short timeout it waits out.
        "embedding_timeout_seconds": 10.0,
        "memory_llm_timeout_seconds": 10.0,
        "backfill_pause_seconds": 0.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


@pytest.fixture
def settings(db_url: str, fake_ollama: FakeOllama) -> Settings:
    return make_settings(db_url, fake_ollama)


@pytest.fixture
async def memory(settings: Settings) -> AsyncIterator[Memory]:
    async with open_memory(settings) as opened:
        yield opened


@pytest.fixture
async def trgm_memory(trgm_db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    async with open_memory(make_settings(trgm_db_url, fake_ollama)) as opened:
        yield opened


@pytest.fixture
async def quiet_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory without background indexers: nothing but the test holds a connection or waits
    on a lock, so the pools' counts and the lock waits are the test's own."""
    settings = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, fact_index_in_background=False
    )
    async with open_memory(settings) as opened:
        yield opened


@pytest.fixture
async def busy_memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    """A Memory whose pool allows many concurrent connections on its own database."""
    settings = make_settings(db_url, fake_ollama, db_pool_size=30, db_max_overflow=10)
    async with open_memory(settings) as opened:
        yield opened
