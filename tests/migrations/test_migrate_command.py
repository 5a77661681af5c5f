"""`navi-memory migrate`: the revisions run from the package, and a server that cannot give
pgvector is refused in one line before anything changes."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url

from navi_memory import InvalidInputError, SchemaError, Settings
from navi_memory.cli import main
from navi_memory.db import SCHEMA_HEAD, SCHEMA_REVISIONS
from navi_memory.migrations import (
    MIGRATION_LOCK,
    head_revision,
    revisions,
    script_location,
    upgrade,
)
from tests import dbtools
from tests.integration.test_open_memory import _stop_embedded


def _public_tables(server: dbtools.EmbeddedServer, db: str) -> set[str]:
    with server.admin(db) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r[0] for r in rows.fetchall()}


def _settings(url: str) -> Settings:
    return Settings(_env_file=None, database_url=url)


def test_the_package_finds_its_revisions_and_their_head_is_the_code_s() -> None:
    """script_location() points at a folder with env.py, and its head is SCHEMA_HEAD."""
    assert (script_location() / "env.py").is_file()
    assert head_revision() == SCHEMA_HEAD
    assert revisions() == list(SCHEMA_REVISIONS)


def test_migrate_command_brings_an_empty_database_to_head(
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The console command migrates the database DATABASE_URL names, and says so."""
    monkeypatch.setenv("DATABASE_URL", pg_server.url(scratch_db))
    assert main(["migrate"]) == 0
    assert "head" in capsys.readouterr().out
    with pg_server.admin(scratch_db) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == (SCHEMA_HEAD,)


def test_migrate_to_a_revision_stops_there(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """--to names the revision to reach; a later call reaches head from there."""
    upgrade(_settings(pg_server.url(scratch_db)), revision="0002")
    with pg_server.admin(scratch_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0002",)
    upgrade(_settings(pg_server.url(scratch_db)))
    with pg_server.admin(scratch_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (SCHEMA_HEAD,)


def test_migrate_to_a_revision_says_the_revision_it_reached(
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The line names the revision the database is at afterwards, not the argument: `+1` from
    0002 reaches 0003, and `heads` is head."""
    monkeypatch.setenv("DATABASE_URL", pg_server.url(scratch_db))
    assert main(["migrate", "--to", "0002"]) == 0
    said = capsys.readouterr().out.strip()
    assert said == "migrate: applied 2 revision(s), (none) -> 0002; the database is at 0002"
    assert main(["migrate", "--to", "+1"]) == 0
    said = capsys.readouterr().out.strip()
    assert said == "migrate: applied 1 revision(s), 0002 -> 0003; the database is at 0003"
    assert main(["migrate", "--to", "heads"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"migrate: applied {len(SCHEMA_REVISIONS) - 3} revision(s), 0003 -> {SCHEMA_HEAD}; "
        f"the database is at head ({SCHEMA_HEAD})"
    )


@pytest.mark.parametrize("to", ["base", "0001", SCHEMA_REVISIONS[-2], "head-1", "0020+1"])
def test_migrate_to_an_older_revision_is_refused_and_changes_nothing(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    to: str,
) -> None:
    """migrate only upgrades: a target behind the database's revision is one line (exit 2)
    naming both and the command that goes back, and the database stays where it was."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    assert main(["migrate", "--to", to]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert f"is at {SCHEMA_HEAD}, past {to}" in err
    assert f"alembic downgrade {to}" in err
    assert captured.out == ""
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == (SCHEMA_HEAD,)


@pytest.mark.parametrize("to", ["head-1", f"{SCHEMA_REVISIONS[-3]}+1"])
def test_migrate_to_a_relative_revision_the_database_is_at_does_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], to: str
) -> None:
    """A relative target (resolved from the database's revision, as Alembic does) that the
    database is at already is reached: exit 0, nothing to run. Resolving it by name said
    "Can't locate revision identified by 'head-1'"."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    dbtools.downgrade(db_url, SCHEMA_REVISIONS[-2])
    assert main(["migrate", "--to", to]) == 0
    assert capsys.readouterr().out.strip() == f"migrate: the database is at {SCHEMA_REVISIONS[-2]}"


def test_upgrade_to_an_older_revision_is_refused(db_url: str) -> None:
    """The same refusal for a host calling upgrade() itself."""
    with pytest.raises(InvalidInputError, match=f"is at {SCHEMA_HEAD}, past 0002"):
        upgrade(_settings(db_url), revision="0002")


@pytest.mark.parametrize("to", ["", "  "])
def test_migrate_to_an_empty_revision_is_refused(
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    to: str,
) -> None:
    """An empty --to is a usage error in one line (exit 2), not a crash."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    assert main(["migrate", "--to", to]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--to" in err and "unexpected" not in err


def test_migrate_sql_prints_the_ddl_and_touches_no_database(
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--sql writes the statements to stdout and leaves the database empty."""
    monkeypatch.setenv("DATABASE_URL", pg_server.url(scratch_db))
    assert main(["migrate", "--sql"]) == 0
    out = capsys.readouterr().out
    assert "CREATE TABLE IF NOT EXISTS memory_facts" in out
    assert "CREATE EXTENSION IF NOT EXISTS vector" in out
    assert _public_tables(pg_server, scratch_db) == set()


def test_an_unknown_revision_is_a_schema_error(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Alembic's refusal comes back as SchemaError, not as Alembic's own exception."""
    with pytest.raises(SchemaError, match="nope"):
        upgrade(_settings(pg_server.url(scratch_db)), revision="nope")


def test_migrate_on_a_database_a_newer_release_migrated_says_to_upgrade_navi_memory(
    db_url: str, pg_server: dbtools.EmbeddedServer
) -> None:
    """A rollback or a rolling deploy: migrate cannot go back, and says why instead of Alembic's
    "Can't locate revision"."""
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    newer = r"newer navi-memory \(revision 9999\).*upgrade navi-memory"
    with pytest.raises(SchemaError, match=newer) as caught:
        upgrade(_settings(db_url))
    assert "Can't locate" not in str(caught.value)


@pytest.fixture
def limited_role(pg_server: dbtools.EmbeddedServer, scratch_db: str) -> Any:
    """A login role that owns the database's public schema but may not create extensions."""
    role = f"limited_{uuid.uuid4().hex[:8]}"
    with pg_server.admin(scratch_db) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT ALL ON DATABASE "{scratch_db}" TO "{role}"')
        conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
    yield role
    with pg_server.admin(scratch_db) as conn:
        conn.execute(f'DROP OWNED BY "{role}"')
    with pg_server.admin() as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_migrate_without_the_right_to_create_vector_changes_nothing(
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    limited_role: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A role that cannot CREATE EXTENSION vector gets one line saying what to do (exit 2), and
    the database is left as it was: no legacy tables, no alembic_version."""
    url = f"postgresql+asyncpg://{limited_role}@/{scratch_db}?host={pg_server.socket_dir}"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "CREATE EXTENSION vector" in err and "nothing was changed" in err
    assert _public_tables(pg_server, scratch_db) == set()
    with psycopg.connect(host=pg_server.socket_dir, user="postgres", dbname=scratch_db) as conn:
        assert not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()


def test_a_second_migration_waits_for_the_one_running_instead_of_failing(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Two processes migrating one database at once (replicas of a deploy, each calling
    upgrade() at start-up): the second waits for the first, then finds the schema at head.
    Without the lock both ran 0001-0002 together and one failed with "constraint
    navi_users_pkey for table navi_users does not exist"."""
    waiting = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "migrate.waiting" in record.getMessage():
                waiting.set()

    seen = Seen()
    logging.getLogger("navi_memory.migrations").addHandler(seen)
    try:
        with pg_server.admin(scratch_db) as first:  # the other migration, holding the lock
            first.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                second = pool.submit(upgrade, _settings(pg_server.url(scratch_db)))
                while not waiting.wait(0.05) and not second.done():
                    pass
                assert not second.done(), "the second migration did not wait for the first"
                assert _public_tables(pg_server, scratch_db) == set()
                first.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
                second.result(timeout=120)
    finally:
        logging.getLogger("navi_memory.migrations").removeHandler(seen)
    with pg_server.admin(scratch_db) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == (SCHEMA_HEAD,)


def _alembic(args: list[str], data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``alembic`` run as a person runs it (the repository's alembic.ini, no DATABASE_URL: the
    embedded default under ``data_dir``). A server it started anyway is stopped."""
    environ = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    environ.update(NAVI_MEMORY_DATA_DIR=str(data_dir), **env)
    try:
        return subprocess.run(
            [sys.executable, "-m", "alembic", "-c", str(dbtools.ROOT / "alembic.ini"), *args],
            env=environ,
            capture_output=True,
            text=True,
            cwd=dbtools.ROOT,
            timeout=120,
        )
    finally:
        if (data_dir / "pgdata" / "postmaster.pid").exists():
            _stop_embedded(data_dir / "pgdata")


def test_alembic_with_a_malformed_setting_fails_in_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    """`alembic upgrade head` (make migrate, make demo) with a bad DB_POOL_SIZE in the
    environment names it in one line, as `navi-memory migrate` does — not pydantic's report in
    a traceback — and starts no embedded server."""
    done = _alembic(["upgrade", "head"], tmp_path, DB_POOL_SIZE="abc")
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "bad setting DB_POOL_SIZE='abc': Input should be a valid integer" in said
    assert "Traceback" not in said and "pydantic" not in said
    assert not (tmp_path / "pgdata").exists()


def test_alembic_sql_writes_the_script_without_starting_the_embedded_server(
    tmp_path: Path,
) -> None:
    """Offline `alembic upgrade head --sql` needs only the dialect: it must not initialise and
    start the embedded server (which then outlived the command)."""
    done = _alembic(["upgrade", "head", "--sql"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "memory_facts" in done.stdout and done.stdout.rstrip().endswith("COMMIT;")
    assert not (tmp_path / "pgdata").exists()
