"""DATABASE_URL's libpq options reach the connections (or are refused by name), and no form of
password in it is ever shown."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import text

from navi_memory import ConfigError, NaviMemoryError, StorageError, open_memory
from navi_memory.db import connect_options, to_async_url
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.integration.factories import new_user

SSL_REQUEST = 80877103


@dataclass
class SilentServer:
    """A TCP listener standing in for a PostgreSQL without SSL: it records the first packet
    of each client, answers an SSLRequest with 'N' (no SSL), and otherwise says nothing."""

    port: int = 0
    first_packets: list[str] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length, code = struct.unpack("!ii", await reader.readexactly(8))
            if length == 8 and code == SSL_REQUEST:
                self.first_packets.append("ssl request")
                writer.write(b"N")
                await writer.drain()
            else:
                self.first_packets.append("startup")
            await reader.read()  # wait for the client to give up
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def silent_server() -> AsyncIterator[SilentServer]:
    fake = SilentServer()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        yield fake
    finally:
        server.close()


def with_options(url: str, options: str) -> str:
    return url + ("&" if "?" in url else "?") + options


async def test_application_name_and_options_reach_every_connection(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    url = with_options(db_url, "application_name=worker-7&options=-c%20work_mem%3D7MB")
    settings = make_settings(url, fake_ollama)
    async with open_memory(settings) as memory, memory.engine.connect() as conn:
        name = (await conn.execute(text("SHOW application_name"))).scalar()
        work_mem = (await conn.execute(text("SHOW work_mem"))).scalar()
        plans = (await conn.execute(text("SHOW plan_cache_mode"))).scalar()
    assert (name, work_mem, plans) == ("worker-7", "7MB", "force_custom_plan")


@pytest.mark.parametrize(
    "options",
    ["sslmode=disable", "ssl=disable", "sslmode=prefer", "target_session_attrs=read-write"],
)
async def test_libpq_options_a_server_without_ssl_accepts_connect(
    db_url: str, fake_ollama: FakeOllama, options: str
) -> None:
    async with open_memory(make_settings(with_options(db_url, options), fake_ollama)) as memory:
        assert memory.capabilities.vector


async def test_a_statement_cache_of_0_reaches_sqlalchemys_dialect(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """prepared_statement_cache_size=0 (PgBouncer in transaction mode) reaches SQLAlchemy's
    asyncpg dialect, and the package works with it."""
    url = with_options(db_url, "prepared_statement_cache_size=0")
    async with open_memory(make_settings(url, fake_ollama)) as memory:
        uid = await new_user(memory)
        await memory.store.upsert_fact("notes", "pooler", "pgbouncer", user_id=uid)
        assert [f.value for f in await memory.store.search_facts("pgbouncer", user_id=uid)] == [
            "pgbouncer"
        ]
        async with memory.engine.connect() as conn:
            adapted = (await conn.get_raw_connection()).dbapi_connection
            # SQLAlchemy's adapter keeps no statement cache at 0 (its default is an LRU of 100).
            assert adapted is not None
            assert getattr(adapted, "_prepared_statement_cache", "missing") is None


async def test_target_session_attrs_reaches_the_driver(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    url = with_options(db_url, "target_session_attrs=standby")
    with pytest.raises(StorageError, match="standby"):
        async with open_memory(make_settings(url, fake_ollama)):
            pass


@pytest.mark.parametrize(
    ("sslmode", "first_packet"),
    [("disable", "startup"), ("prefer", "ssl request"), ("require", "ssl request")],
)
async def test_sslmode_decides_whether_the_client_asks_for_ssl(
    silent_server: SilentServer, fake_ollama: FakeOllama, sslmode: str, first_packet: str
) -> None:
    url = f"postgresql://u:pwsecret@127.0.0.1:{silent_server.port}/db?sslmode={sslmode}"
    settings = make_settings(url, fake_ollama, db_connect_timeout_seconds=1)
    with pytest.raises(StorageError) as caught:
        async with open_memory(settings):
            pass
    assert silent_server.first_packets[0] == first_packet
    assert "pwsecret" not in str(caught.value)
    if sslmode == "require":
        assert "SSL" in str(caught.value)


async def test_connect_timeout_in_the_url_wins_over_the_setting(
    silent_server: SilentServer, fake_ollama: FakeOllama
) -> None:
    url = (
        f"postgresql://u@127.0.0.1:{silent_server.port}/db"
        "?sslmode=disable&connect_timeout=1&password=qsecret"
    )
    settings = make_settings(url, fake_ollama, db_connect_timeout_seconds=60)
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        async with open_memory(settings):
            pass
    assert time.monotonic() - started < 15
    assert "qsecret" not in str(caught.value)
    assert "password=***" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@127.0.0.1:abc/db",
        "postgresql://u:pw@127.0.0.1/db?keepalives=1",
        "host=h port=5432 password=kvsecret",
    ],
)
async def test_a_bad_database_url_is_a_config_error_before_any_connection(
    fake_ollama: FakeOllama, url: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        async with open_memory(make_settings(url, fake_ollama)):
            pass
    assert "kvsecret" not in str(caught.value)
    assert isinstance(caught.value, NaviMemoryError)


def test_migrate_takes_the_same_options(db_url: str) -> None:
    """`navi-memory migrate` and `alembic upgrade` build their own engine (env.py)."""
    from navi_memory.migrations import upgrade

    url = with_options(db_url, "sslmode=disable&connect_timeout=5&application_name=migrator")
    upgrade(url=url)  # at head already: a no-op that connects


async def test_migrate_gives_up_after_the_connect_timeout_setting(
    silent_server: SilentServer, fake_ollama: FakeOllama
) -> None:
    """A server that accepts connections and never answers: the migration gives up after
    DB_CONNECT_TIMEOUT_SECONDS, as every other connection does (it waited asyncpg's own 60 s)."""
    from navi_memory.migrations import upgrade

    url = f"postgresql://u:msecret@127.0.0.1:{silent_server.port}/db?sslmode=disable"
    settings = make_settings(url, fake_ollama, db_connect_timeout_seconds=1)
    started = time.monotonic()
    with pytest.raises(NaviMemoryError) as caught:
        await asyncio.to_thread(upgrade, settings)
    assert time.monotonic() - started < 15
    assert "msecret" not in str(caught.value)


def socket_port(socket_dir: str) -> str:
    """The port of the server listening in ``socket_dir`` (its socket's name ends with it)."""
    return next(Path(socket_dir).glob(".s.PGSQL.*")).suffix.lstrip(".")


async def test_several_hosts_are_tried_in_turn(db_url: str, fake_ollama: FakeOllama) -> None:
    """?host=h1:p1&host=h2:p2 (docs/config.md): a first host that refuses, then the server."""
    base, _, query = db_url.partition("?")
    socket_dir = dict(part.split("=", 1) for part in query.split("&"))["host"]
    port = socket_port(socket_dir)
    url = f"{base}?host=127.0.0.1:1&host={socket_dir}:{port}&target_session_attrs=primary"
    async with open_memory(make_settings(url, fake_ollama)) as memory, memory.engine.connect() as c:
        assert (await c.execute(text("SELECT 1"))).scalar() == 1


async def test_libpqs_socket_directory_in_the_host_part_reaches_the_socket(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """postgresql://user@%2Frun%2Fpostgresql/db, libpq's way of naming a socket directory in
    the host part, went to DNS as the host "%2Frun%2Fpostgresql"."""
    from urllib.parse import quote

    base, _, query = db_url.partition("?")
    socket_dir = dict(part.split("=", 1) for part in query.split("&"))["host"]
    user, _, database = base.removeprefix("postgresql+asyncpg://").partition("@/")
    url = f"postgresql://{user}@{quote(socket_dir, safe='')}/{database}"
    assert (
        to_async_url(url)
        == f"postgresql+asyncpg://{user}@/{database}?host={quote(socket_dir, safe='')}"
    )
    async with open_memory(make_settings(url, fake_ollama)) as memory, memory.engine.connect() as c:
        assert (await c.execute(text("SELECT 1"))).scalar() == 1
    with pytest.raises(ConfigError, match="keep one"):
        to_async_url(f"{url}?host=/elsewhere")


def test_libpqs_comma_hosts_are_refused_with_the_form_that_works() -> None:
    with pytest.raises(ConfigError, match=r"host=h1:5432&host=h2:5432") as caught:
        connect_options("postgresql://u:pwsecret@db1:5432,db2:5432/navi")
    assert "pwsecret" not in str(caught.value)


def test_migrate_given_its_url_does_not_read_the_other_settings(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """upgrade(url=...) takes DB_CONNECT_TIMEOUT_SECONDS from the environment: a malformed
    setting of another kind there is not the migration's to refuse (it once raised pydantic's
    ValidationError)."""
    from navi_memory.migrations import upgrade

    monkeypatch.setenv("CHUNK_MAX_CHARS", "200000")  # beyond its bound
    upgrade(url=db_url)  # at head already: a no-op that connects
