"""The commands that write a lot on stdout (`export`, `facts list --json`, `stats`), when
stdout cannot take it: a full disk is one line and exit 1, never "unexpected … a bug"; a closed
pipe is a quiet 141 (in this process; the console script's exit on a real /dev/full or closed
pipe is tests/cli/test_output_streams.py)."""

from __future__ import annotations

import sys
import uuid

import pytest
from sqlalchemy import make_url

from navi_memory.cli import main
from navi_memory.cli.output import EXIT_PIPE_CLOSED
from tests import dbtools
from tests.streams import ClosedPipe, FullDisk

ARGVS = pytest.mark.parametrize(
    "argv",
    [
        ["export", "--user", "{uid}"],
        ["facts", "list", "--user", "{uid}", "--json"],
        ["stats"],
    ],
    ids=["export", "facts-list-json", "stats"],
)


@pytest.fixture
def one_user(
    db_url: str, pg_server: dbtools.EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> uuid.UUID:
    """A user with one fact, and the CLI's settings pointing at their database."""
    uid = uuid.uuid4()
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (%s, 'preferences', 'editor', 'helix')",
            (uid,),
        )
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    return uid


@ARGVS
def test_a_full_disk_on_stdout_is_reported_in_one_line(
    argv: list[str],
    one_user: uuid.UUID,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`navi-memory export --user U > /dev/full` said "unexpected OSError … a bug in
    navi-memory": now "cannot write the output: No space left on device", exit 1."""
    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main([arg.format(uid=one_user) for arg in argv]) == 1
    assert capsys.readouterr().err == (
        "navi-memory: cannot write the output: No space left on device\n"
    )


@ARGVS
def test_a_closed_pipe_on_stdout_ends_quietly(
    argv: list[str],
    one_user: uuid.UUID,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`navi-memory export --user U | head -1` exited 1 with nothing said (Click's sys.exit(1)
    out of main()): main() now returns 141, with nothing on stderr."""
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main([arg.format(uid=one_user) for arg in argv]) == EXIT_PIPE_CLOSED
    assert capsys.readouterr().err == ""
