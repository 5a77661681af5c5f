"""Running the Alembic revisions from Python: ``navi-memory migrate`` and a host's start-up.

The revisions live in the checkout's top-level ``alembic/``; the wheel carries the same folder as
``navi_memory/_alembic`` (pyproject.toml, force-include), so an installed package migrates itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import re
from collections.abc import Callable
from contextlib import redirect_stdout
from importlib import resources
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext, RevisionStep
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError

from navi_memory.config import Settings
from navi_memory.db import (
    SCHEMA_REVISIONS,
    connection_error,
    newer_schema_error,
    redact_url,
    resolve_database_url,
)
from navi_memory.errors import ConfigError, InvalidInputError, SchemaError, StorageError

__all__ = [
    "MIGRATION_LOCK",
    "alembic_config",
    "current_revision",
    "head_revision",
    "revisions",
    "script_location",
    "upgrade",
]

_PACKAGED: Final = "_alembic"

MIGRATION_LOCK: Final = 0x6E6176696D656D
"""The session-level advisory lock (a bigint key, per database) every migration of a database
holds while it runs (alembic/env.py): a second one waits for it, then finds the work done."""


def script_location() -> Path:
    """The folder holding env.py and versions/: the wheel's copy, else the checkout's."""
    packaged = Path(str(resources.files("navi_memory"))) / _PACKAGED
    if (packaged / "env.py").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "alembic"
    if (checkout / "env.py").is_file():
        return checkout
    raise SchemaError(
        "this installation of navi-memory has no migrations (neither navi_memory/_alembic nor "
        "a checkout's alembic/ folder): reinstall the package from its wheel"
    )


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config for ``url`` (None: the one the settings name, or the embedded server)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def revisions() -> list[str]:
    """Every revision the package ships, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    return ",".join(heads)


def upgrade(
    settings: Settings | None = None,
    *,
    revision: str = "head",
    sql: bool = False,
    url: str | None = None,
) -> str:
    """Bring the database to ``revision`` (default head); returns what Alembic printed (the SQL
    itself with ``sql=True``, which touches no database). Raises SchemaError with one line when
    Alembic refuses (pgvector missing, unknown revision), InvalidInputError for an empty
    ``revision`` or one the database is already past: this only upgrades."""
    if not revision.strip():
        raise InvalidInputError(
            "the revision to migrate to is empty: name one (head, or a revision such as "
            f"{head_revision()})"
        )
    if url is None and not sql:
        settings = settings or Settings()
        url = resolve_database_url(settings)
    elif url is None:
        url = "postgresql+asyncpg://offline/navi_memory"
    cfg = alembic_config(url)
    if settings is not None:
        # DB_CONNECT_TIMEOUT_SECONDS as the engine takes it (a URL's connect_timeout wins);
        # without it env.py reads the environment's settings.
        cfg.attributes["connect_timeout"] = settings.db_connect_timeout_seconds
    action = (
        # No database to be past (--sql), or a range, which Alembic refuses without --sql.
        (lambda: command.upgrade(cfg, revision, sql=sql))
        if sql or ":" in revision
        else (lambda: _upgrade_only(cfg, revision, url))
    )
    try:
        return _run(action, url)
    except SchemaError as exc:
        # Alembic's "Can't locate revision" for the database's own revision, not for --to:
        # a newer release migrated it, and upgrading navi-memory is the fix.
        missing = _UNKNOWN_REVISION.search(str(exc))
        if missing and missing[1] != revision and missing[1] not in SCHEMA_REVISIONS:
            raise newer_schema_error(missing[1], url) from exc
        raise


def current_revision(settings: Settings | None = None, *, url: str | None = None) -> str | None:
    """The revision the database is at (None: no schema yet). Like a migration, it waits for
    one that is running (env.py's lock), so it reads where that one left the database."""
    if url is None:
        url = resolve_database_url(settings or Settings())
    cfg = alembic_config(url)
    if settings is not None:
        cfg.attributes["connect_timeout"] = settings.db_connect_timeout_seconds
    script = ScriptDirectory.from_config(cfg)
    found: list[str] = []

    def read(heads: tuple[str, ...], context: MigrationContext) -> list[RevisionStep]:
        found.extend(heads)
        return []

    def action() -> None:
        with EnvironmentContext(cfg, script, fn=read, dont_mutate=True):
            script.run_env()

    _run(action, url)
    return ",".join(found) or None


def _upgrade_only(cfg: Config, revision: str, url: str) -> None:
    """Alembic's ``upgrade``, refusing a target the database is past: Alembic's own finds no
    step to run then, and would report success at the revision it was asked for. The
    database's revision is read under the migration lock (env.py), so no other migration
    moves it between the check and the steps."""
    script = ScriptDirectory.from_config(cfg)

    def steps(heads: tuple[str, ...], context: MigrationContext) -> list[RevisionStep]:
        # What Alembic's upgrade command runs (it passes the heads tuple too; the private
        # method's ``str`` annotation is narrower than what it takes).
        todo: list[RevisionStep] = script._upgrade_revs(revision, heads)  # type: ignore[arg-type]
        # Nothing to run: at the target, or past it. Past it, a downgrade would have steps;
        # Alembic resolves the target as for a downgrade (a relative one, "head-1" or
        # "0020+1", from the database's heads), which naming its revisions would not.
        if not todo and heads and script._downgrade_revs(revision, heads):  # type: ignore[arg-type]
            current = ",".join(heads)
            raise InvalidInputError(
                f"the database at {redact_url(url)} is at {current}, past {revision}: "
                f"migrate only upgrades; to go back, run `alembic downgrade {revision}` "
                "in a checkout of navi-memory (it drops what the later revisions added)"
            )
        return todo

    with EnvironmentContext(cfg, script, fn=steps, destination_rev=revision):
        script.run_env()


_UNKNOWN_REVISION: Final = re.compile(r"Can't locate revision identified by '([^']+)'")


def _run(action: Callable[[], None], url: str) -> str:
    """Run an Alembic command where env.py may call asyncio.run(): in a worker thread when an
    event loop is running in this one."""
    out = io.StringIO()

    def call() -> None:
        with redirect_stdout(out):
            action()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    try:
        if running:
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(call).result()
        else:
            call()
    except CommandError as exc:
        raise SchemaError(str(exc)) from exc
    except OSError as exc:
        raise connection_error(exc, url) from exc
    except DBAPIError as exc:
        error = connection_error(exc, url)
        if isinstance(error, ConfigError):
            raise error from exc
        first = (str(exc.orig).strip().splitlines() or [""])[0]
        raise StorageError(
            f"the migration failed at {redact_url(url)}: {type(exc.orig).__name__}: {first}"
        ) from exc
    return out.getvalue()
