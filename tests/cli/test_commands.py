"""The operator's commands through the console script, against real PostgreSQL: output parsed
back, exit codes, and errors as one line."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, get_args

import psycopg
from sqlalchemy import make_url

from navi_memory import Memory, request_context
from navi_memory.cli.facts import SortColumn
from navi_memory.constants import PERMISSION_READ_ALL
from navi_memory.db import SCHEMA_HEAD
from navi_memory.repositories.facts import FACT_SORT_COLUMNS
from navi_memory.testing import FakeOllama
from tests import dbtools
from tests.cli.conftest import Navi
from tests.integration.factories import new_user

MARKUP = re.compile(r"``|:param|:class:|\[/?(bold|dim|cyan|red|green|blue)\]|\x1b\[")


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_help_version_and_usage_errors_without_a_database(navi: Navi) -> None:
    """--help renders without markup, --version prints the version, and a usage error or a bad
    setting is exit 2 with one line that names the problem, never a traceback."""
    helps = {}
    for args in (["--help"], ["facts", "list", "--help"], ["migrate", "--help"]):
        shown = navi(*args)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("Usage: navi-memory") == 1
        assert not MARKUP.search(shown.stdout), shown.stdout
        helps[args[0]] = shown.stdout
    assert "--include-merged" in helps["facts"] and "--to" in helps["migrate"]
    assert "Exit codes" in helps["--help"]

    assert re.fullmatch(r"navi-memory \d+\.\d+\.\d+\S*", navi("--version").stdout.strip())

    neither = navi("facts", "list")
    assert neither.returncode == 2
    assert "--user" in one_line(neither.stderr) and neither.stdout == ""

    unknown = navi("facts", "show", "abc")
    assert unknown.returncode == 2
    assert "'ID'" in one_line(unknown.stderr) and unknown.stdout == ""

    bare = navi("facts")
    assert bare.returncode == 2 and bare.stdout.count("Usage: navi-memory facts") == 1

    bad = navi("facts", "list", "--all-users", env={"DB_POOL_SIZE": "abc"})
    assert bad.returncode == 2
    line = one_line(bad.stderr)
    assert "DB_POOL_SIZE" in line and "abc" in line and "Traceback" not in bad.stderr


def test_a_missing_database_is_named_as_missing(
    navi: Navi, pg_server: dbtools.EmbeddedServer
) -> None:
    """DATABASE_URL naming a database the server lacks says so (exit 2), for a command and for
    migrate alike; it is not reported as an unreachable server."""
    env = {"DATABASE_URL": pg_server.url("no_such_db_here")}
    for args in (["facts", "list", "--all-users"], ["migrate"]):
        done = navi(*args, env=env)
        assert done.returncode == 2, done.stderr
        line = one_line(done.stderr)
        assert "'no_such_db_here' does not exist" in line and "cannot reach" not in line


def test_database_url_options_work_or_are_refused_in_one_line_without_secrets(
    navi: Navi, db_url: str
) -> None:
    """libpq options in DATABASE_URL reach the connection for a command, migrate and doctor; an
    option asyncpg cannot take, a bad port or a key=value DSN is one line (exit 2); a password
    in any form is never printed."""
    good = db_url + "&sslmode=disable&application_name=cli-test&password=topsecret"
    for args in (["stats"], ["migrate"], ["doctor", "--no-models"]):
        done = navi(*args, env={"DATABASE_URL": good})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "topsecret" not in done.stdout + done.stderr
    assert "password=***" in navi("doctor", "--no-models", env={"DATABASE_URL": good}).stdout

    for url, named in (
        (db_url + "&keepalives=1&password=topsecret", "keepalives"),
        ("postgresql://u:topsecret@127.0.0.1:abc/db", "port"),
        ("host=h port=5432 password=topsecret", "postgresql://user:password@host"),
        ("postgresql://u:top@secret@127.0.0.1/db", "%40"),
    ):
        for args in (["stats"], ["migrate"]):
            done = navi(*args, env={"DATABASE_URL": url})
            assert done.returncode == 2, (url, done.stdout, done.stderr)
            line = one_line(done.stderr)
            assert named in line and "secret" not in line and "Traceback" not in line
        doctor = navi("doctor", "--no-models", env={"DATABASE_URL": url})
        assert doctor.returncode == 1 and named in doctor.stdout
        assert "secret" not in doctor.stdout + doctor.stderr


def test_a_database_a_newer_release_migrated_says_upgrade_navi_memory_everywhere(
    navi: Navi, db_url: str, pg_server: dbtools.EmbeddedServer
) -> None:
    """A rollback meets a newer schema: a command, migrate and doctor all name the cause."""
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    env = {"DATABASE_URL": db_url}
    for args in (["stats"], ["migrate"]):
        done = navi(*args, env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        line = one_line(done.stderr)
        assert "newer navi-memory (revision 9999)" in line and "upgrade navi-memory" in line
    doctor = navi("doctor", "--no-models", env=env)
    assert doctor.returncode == 1 and "upgrade navi-memory" in doctor.stdout


async def test_facts_and_summary_commands_over_two_users(
    navi: Navi, memory: Memory, fake_ollama: FakeOllama
) -> None:
    """facts list/show/unmerge/forget and summary set/show act across users as an admin, and
    their --json output parses back to what the library holds."""
    sam, kim = await new_user(memory, "Sam"), await new_user(memory, "Kim")
    store = memory.store
    await store.upsert_fact("preferences", "language", "English", user_id=sam)
    merged_into = await store.upsert_fact(
        "preferences", "preferred_language", "Dutch", user_id=sam, dedupe=True
    )
    await store.upsert_fact("work", "editor", "[bold]neovim[/bold]", user_id=sam)
    await store.upsert_fact("work", "editor", "emacs", user_id=kim)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        hidden = next(
            f for f in await store.get_all_facts(user_id=sam, include_merged=True) if f.merged_into
        )
    env = {"DATABASE_URL": memory.settings.database_url or ""}

    listed = navi("facts", "list", "--user", str(sam), "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {(r["key"], r["value"]) for r in rows} == {
        ("preferred_language", "Dutch"),
        ("editor", "[bold]neovim[/bold]"),
    }
    assert {r["user_id"] for r in rows} == {str(sam)}

    everyone = navi(
        "facts", "list", "--all-users", "--include-merged", "--sort", "id", "--order", "asc",
        "--json", env=env,
    )  # fmt: skip
    everything = json.loads(everyone.stdout)
    assert [r["id"] for r in everything] == sorted(r["id"] for r in everything)
    assert {r["user_id"] for r in everything} == {str(sam), str(kim)}
    assert hidden.id in {r["id"] for r in everything}

    only_work = json.loads(
        navi("facts", "list", "--all-users", "--category", "work", "--json", env=env).stdout
    )
    assert sorted(r["value"] for r in only_work) == ["[bold]neovim[/bold]", "emacs"]

    table = navi("facts", "list", "--user", str(sam), env=env)
    assert "[bold]neovim[/bold]" in table.stdout  # user text is never read as markup
    assert "preferred_language" in table.stdout

    shown = json.loads(navi("facts", "show", str(merged_into.id), "--json", env=env).stdout)
    assert shown["key"] == "preferred_language" and shown["merged_here"] == [hidden.id]
    assert navi("facts", "show", "999999", env=env).returncode == 1

    unmerged = navi("facts", "unmerge", str(hidden.id), env=env)
    assert unmerged.returncode == 0, unmerged.stderr
    with request_context(permissions=[PERMISSION_READ_ALL]):
        visible = {f.key for f in await store.get_all_facts(user_id=sam)}
    assert {"language", "preferred_language", "editor"} <= visible
    again = navi("facts", "unmerge", str(hidden.id), env=env)
    assert again.returncode == 2 and "not merged" in one_line(again.stderr)

    forgot = navi("facts", "forget", "editor", "--user", str(kim), env=env)
    assert forgot.returncode == 0, forgot.stderr
    assert (
        f"forgot 1 visible fact(s) of user {kim}: #" in forgot.stdout
        and "] editor" in forgot.stdout
    )
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert await store.get_all_facts(user_id=kim) == []
        assert len(await store.get_all_facts(user_id=sam)) == 3  # Sam's editor stays
    assert navi("facts", "forget", "editor", "--user", str(kim), env=env).returncode == 1

    summary = "Sam writes Dutch and uses neovim."
    assert navi("summary", "set", "--user", str(sam), "-", env=env, stdin=summary).returncode == 0
    read = json.loads(navi("summary", "show", "--user", str(sam), "--json", env=env).stdout)
    assert read == {"user_id": str(sam), "summary": summary}
    assert navi("summary", "show", "--user", str(kim), env=env).returncode == 1
    nobody = navi("summary", "set", "--user", str(uuid.uuid4()), "text", env=env)
    assert nobody.returncode == 1 and "does not exist" in one_line(nobody.stderr)


def test_doctor_reports_a_schema_behind_head_and_dead_models_with_their_fixes(
    navi: Navi,
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    fake_ollama: FakeOllama,
) -> None:
    """doctor reports what open_memory would refuse (a schema behind head) and models that do
    not answer, each with the command that fixes it (exit 1); after `migrate` and with the
    models up it is clean (exit 0)."""
    env = {"DATABASE_URL": pg_server.url(scratch_db), "OLLAMA_HOST": fake_ollama.url}
    assert navi("migrate", "--to", "0002", env=env).returncode == 0
    fake_ollama.mode = "fail"
    sick = navi("doctor", "--json", env=env)
    assert sick.returncode == 1, sick.stderr
    report = json.loads(sick.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["schema"]["status"] == "finding"
    assert checks["schema"]["fix"] == "navi-memory migrate"
    assert "0002" in checks["schema"]["detail"]
    assert checks["embedding model"]["status"] == "finding"
    assert checks["chat model"]["status"] == "finding"
    assert fake_ollama.url.removeprefix("http://") in checks["embedding model"]["detail"]
    assert checks["pgvector"]["status"] == "ok"
    assert report["findings"] == sum(c["status"] == "finding" for c in report["checks"])

    migrated = navi("migrate", env=env)
    assert migrated.returncode == 0 and SCHEMA_HEAD in migrated.stdout
    fake_ollama.mode = "ok"
    fake_ollama.default_chat_reply = "OK"
    healthy = navi("doctor", env=env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert f"revision {SCHEMA_HEAD} (head)" in healthy.stdout
    assert "768 dimensions" in healthy.stdout
    assert "pg_trgm" in healthy.stdout and "CREATE EXTENSION pg_trgm" in healthy.stdout
    assert "no chunk waits for the text or vector index" in healthy.stdout
    assert "no fact vector waits for the index" in healthy.stdout


def test_server_commands_start_report_and_stop_the_embedded_server(navi: Navi) -> None:
    """server status/start/stop drive the embedded PostgreSQL of NAVI_MEMORY_DATA_DIR: stop is
    refused while a client is connected, unless --force."""
    before = navi("server", "status")
    assert before.returncode == 1 and "not created yet" in before.stdout
    started = navi("server", "start")
    assert started.returncode == 0, started.stderr
    try:
        status: dict[str, Any] = json.loads(navi("server", "status", "--json").stdout)
        assert status["running"] and status["pid"] > 0
        assert status["url"].startswith("postgresql+asyncpg://postgres@/navi_memory")
        with psycopg.connect(
            host=status["socket_dir"], user="postgres", dbname="navi_memory"
        ) as client:
            refused = navi("server", "stop")
            assert refused.returncode == 1
            assert "client connection" in one_line(refused.stderr)
            assert client.execute("SELECT 1").fetchone() == (1,)
    finally:
        stopped = navi("server", "stop", "--force")
    assert stopped.returncode == 0, stopped.stderr
    after = navi("server", "status")
    assert after.returncode == 1 and "stopped" in after.stdout


def test_the_cli_sort_choices_are_the_library_s() -> None:
    """facts list --sort offers exactly the columns get_all_facts accepts."""
    assert set(get_args(SortColumn)) == set(FACT_SORT_COLUMNS)


async def test_reembed_after_a_model_change_clears_doctor_s_finding(
    navi: Navi, memory: Memory, fake_ollama: FakeOllama
) -> None:
    """After EMBEDDING_MODEL changes, doctor finds the stored vectors made by the old model and
    names `navi-memory reembed`; reembed embeds every row again (exit 0) and doctor is content.
    In text-only mode reembed is refused as a configuration error (exit 2) and says why."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("work", "editor", "neovim", user_id=uid)
    await memory.store.upsert_fact("work", "shell", "fish", user_id=uid)
    env = {
        "DATABASE_URL": memory.settings.database_url or "",
        "OLLAMA_HOST": fake_ollama.url,
        "EMBEDDING_MODEL": "other-embed:768",
    }
    before = json.loads(navi("doctor", "--json", "--no-models", env=env).stdout)
    check = next(c for c in before["checks"] if c["name"] == "stored vectors")
    assert check["status"] == "finding" and check["fix"] == "navi-memory reembed"
    # backfill is refused in the mismatch: exit 2, stdout empty (Rich wrote an empty line).
    mixing = navi("backfill", env=env)
    assert mixing.returncode == 2 and "reembed" in mixing.stderr
    assert mixing.stdout == ""

    refused = navi("reembed", env={**env, "EMBEDDING_MODEL": "none"})
    assert refused.returncode == 2
    assert "text-only mode" in refused.stderr and not refused.stdout.strip()

    done = navi("reembed", env=env)
    assert done.returncode == 0, done.stderr
    assert "reembed: 2 row(s) embedded with other-embed:768" in done.stdout
    # The background indexers take most of the vectors while it runs: the line says so
    # rather than "0 indexed" alone.
    assert "the indexes are up to date" in done.stdout
    after = navi("doctor", "--json", "--no-models", env=env)
    assert after.returncode == 0, after.stdout


async def test_stats_prints_a_users_name_without_its_terminal_control_codes(
    navi: Navi, memory: Memory
) -> None:
    """A user's name is the host application's text: an escape sequence in it must reach the
    operator's terminal as visible text, not clear the screen or retitle the window."""
    sam = await new_user(memory, "Sam\x1b[2J\x1b]0;owned\x07\x9b31m")
    done = navi(
        "stats", "--user", str(sam), env={"DATABASE_URL": memory.settings.database_url or ""}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout
    assert "Sam" in done.stdout and "[2J" in done.stdout
    # The table holds the one user asked for, and says so (not "the largest 1").
    assert "the one asked for:" in done.stdout and "the largest" not in done.stdout


async def test_stats_of_a_user_the_database_does_not_hold_says_so(
    navi: Navi, memory: Memory
) -> None:
    """``stats --user`` with an id no user has: the totals, then that there is no such user,
    not an empty table under "the one asked for" (as if the user held nothing)."""
    await new_user(memory, "Sam")
    nobody = uuid.uuid4()
    done = navi(
        "stats", "--user", str(nobody), env={"DATABASE_URL": memory.settings.database_url or ""}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"1 user(s); no user {nobody} among them." in done.stdout
    assert "the one asked for" not in done.stdout and "facts" in done.stdout
