"""Alembic environment: async, URL from navi_memory.Settings, or a connection a caller passes.

``alembic upgrade head`` with DATABASE_URL unset migrates the embedded PostgreSQL that
``open_memory()`` uses. Tests pass ``config.attributes["connection"]`` to migrate their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError
from pydantic import ValidationError
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import async_engine_from_config

from navi_memory.config import Settings, load_settings
from navi_memory.db import connect_options, redact_url, resolve_database_url
from navi_memory.errors import NaviMemoryError
from navi_memory.migrations import MIGRATION_LOCK
from navi_memory.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata
logger = logging.getLogger("navi_memory.migrations")

LOCK_POLL_SECONDS = 0.2


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    # pg_trgm indexes exist only where the DBA installed pg_trgm: not part of the model.
    return not (type_ == "index" and name is not None and name.endswith("_trgm"))


def require_vector(connection: Connection) -> None:
    """Stop before the first revision changes anything when pgvector cannot be had: the legacy
    tables of 0001 would otherwise be committed and 0002 fail on CREATE EXTENSION."""
    outer = connection.begin_nested() if connection.in_transaction() else connection.begin()
    with outer:
        if connection.exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
        ).first():
            return
        where = redact_url(connection.engine.url)
        version = connection.exec_driver_sql("SHOW server_version").scalar_one()
        major = str(version).split(".")[0]
        if not connection.exec_driver_sql(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).first():
            raise CommandError(
                f"pgvector is not installed on the PostgreSQL {version} server at {where}: "
                f"install pgvector >= 0.8 there (Debian/Ubuntu: postgresql-{major}-pgvector) "
                "and run the migration again; nothing was changed"
            )
        try:
            with connection.begin_nested():
                connection.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
        except DBAPIError as exc:
            reason = (str(exc.orig).strip().splitlines() or ["refused"])[0]
            raise CommandError(
                f"cannot create the vector extension in the database at {where} ({reason}): "
                "have a superuser run CREATE EXTENSION vector; in it, then run the migration "
                "again; nothing was changed"
            ) from exc


@contextmanager
def migration_lock(connection: Connection) -> Iterator[None]:
    """One migration of a database at a time: replicas that each migrate at start-up would
    otherwise run the same revisions together, and all but one fail half way.

    A session-level advisory lock, tried in short transactions: a waiter blocked inside
    pg_advisory_lock would hold a snapshot, which the holder's CREATE INDEX CONCURRENTLY
    (0012) waits for, a deadlock. A connection the caller holds in a transaction of its own is
    the caller's business (nothing is committed on it here)."""
    if connection.in_transaction():
        yield
        return
    key = MIGRATION_LOCK
    waited = False
    while not connection.exec_driver_sql(f"SELECT pg_try_advisory_lock({key})").scalar_one():
        if not waited:
            holder = connection.exec_driver_sql(
                "SELECT string_agg(a.pid || coalesce(' (' || nullif(a.application_name, '') "
                "|| ')', ''), ', ') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                f"AND l.classid = {key >> 32} AND l.objid = {key & 0xFFFFFFFF} "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).scalar_one()
            logger.warning(
                "migrate.waiting: another migration of the database at %s is running (server "
                "pid %s); waiting for it to finish",
                redact_url(connection.engine.url),
                holder or "unknown",
                extra={"event": "migrate.waiting"},
            )
            waited = True
        connection.commit()
        time.sleep(LOCK_POLL_SECONDS)
    connection.commit()
    try:
        yield
    finally:
        try:
            if connection.in_transaction():
                connection.rollback()
            connection.exec_driver_sql(f"SELECT pg_advisory_unlock({key})")
            connection.commit()
        except DBAPIError:
            pass  # a lost connection: the server released the lock with its session


def do_run_migrations(connection: Connection) -> None:
    with migration_lock(connection):
        require_vector(connection)
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            include_object=include_object,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()


def connect_timeout() -> float:
    """DB_CONNECT_TIMEOUT_SECONDS: the caller's settings' (navi_memory.migrations.upgrade), else
    the environment's, else its default (asyncpg's own is 60 s). Only that setting is read: a
    migration given its URL must not fail on another setting of the environment."""
    given = config.attributes.get("connect_timeout")
    if given is not None:
        return float(given)
    try:
        return Settings().db_connect_timeout_seconds
    except ValidationError:  # a malformed setting: not this migration's to refuse
        return float(Settings.model_fields["db_connect_timeout_seconds"].default)


async def run_async_migrations(url: str) -> None:
    driver_url, connect_args = connect_options(url)  # libpq options as asyncpg's arguments
    # A server that accepts connections and never answers gives up as the engine's would.
    connect_args.setdefault("timeout", connect_timeout())
    engine = async_engine_from_config(
        {"sqlalchemy.url": driver_url},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
        connect_args=connect_args,
    )
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


OFFLINE_URL = "postgresql+asyncpg://offline/navi_memory"
"""What ``--sql`` generates for when no URL is configured: only the dialect counts, and the
embedded server (the default database) must not be started to write a script."""


def database_url() -> str:
    """The URL to migrate: alembic.ini's ``sqlalchemy.url`` (``navi-memory migrate`` sets it),
    else the settings' (DATABASE_URL, or the embedded server, started if need be). A malformed
    setting, or an embedded server that cannot start, is one line (alembic prints ``FAILED:
    bad setting …``), not a traceback."""
    given = config.get_main_option("sqlalchemy.url")
    if given:
        return given
    try:
        return resolve_database_url(load_settings())
    except NaviMemoryError as exc:  # a bad setting, an embedded server that cannot start
        raise CommandError(str(exc)) from None


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or OFFLINE_URL
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
        return
    asyncio.run(run_async_migrations(database_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
