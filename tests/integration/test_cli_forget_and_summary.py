"""`navi-memory facts forget` and `summary show|set` in this process: what they say, and that it
is true (the console script's own tests are tests/cli)."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from navi_memory.cli import main
from tests import dbtools


@pytest.fixture
def cli_env(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    monkeypatch.setenv("COLUMNS", "400")


def _user(pg_server: dbtools.EmbeddedServer, db_url: str) -> uuid.UUID:
    uid = uuid.uuid4()
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
    return uid


def _count(pg_server: dbtools.EmbeddedServer, db_url: str, sql: str, uid: uuid.UUID) -> int:
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        row = conn.execute(sql, (uid,)).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.usefixtures("cli_env")
def test_forget_of_an_expired_fact_says_what_it_deleted_and_succeeds(
    db_url: str, pg_server: dbtools.EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """An expired fact is deleted by `facts forget`, and the summary with it (docs/memory.md):
    the command said "user U has no fact 'ticket'" with exit 1 although both were gone. It
    now says what went (no visible fact, one expired row, the summary) and exits 0."""
    uid = _user(pg_server, db_url)
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, expires_at) "
            "VALUES (%s, 'work', 'ticket', 'JIRA-1', now() - interval '1 day')",
            (uid,),
        )
    assert main(["summary", "set", "--user", str(uid), "Sam writes Dutch."]) == 0
    capsys.readouterr()

    assert main(["facts", "forget", "ticket", "--user", str(uid)]) == 0
    said = capsys.readouterr()
    assert said.err == ""
    assert said.out.strip() == (
        f"forgot 0 visible fact(s) of user {uid}; 1 expired row(s) deleted; "
        "the summary was removed (the next extraction rewrites it)"
    )
    assert (
        _count(pg_server, db_url, "SELECT count(*) FROM memory_facts WHERE user_id = %s", uid) == 0
    )
    assert (
        _count(pg_server, db_url, "SELECT count(*) FROM memory_summary WHERE user_id = %s", uid)
        == 0
    )

    # Nothing left to delete: now, and only now, "no such fact" (exit 1).
    assert main(["facts", "forget", "ticket", "--user", str(uid)]) == 1
    assert f"user {uid} has no fact 'ticket'" in capsys.readouterr().err


@pytest.mark.usefixtures("cli_env")
def test_forget_of_a_visible_fact_names_it_and_the_summary_it_took(
    db_url: str, pg_server: dbtools.EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A visible fact forgotten is named; the summary's removal is said, since it went too."""
    uid = _user(pg_server, db_url)
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        row = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (%s, 'preferences', 'editor', 'helix') RETURNING id",
            (uid,),
        ).fetchone()
        assert row is not None
    assert main(["summary", "set", "--user", str(uid), "Uses helix."]) == 0
    capsys.readouterr()
    assert main(["facts", "forget", "editor", "--user", str(uid)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"forgot 1 visible fact(s) of user {uid}: #{row[0]} [preferences] editor; "
        "the summary was removed (the next extraction rewrites it)"
    )


@pytest.mark.usefixtures("cli_env")
def test_summary_show_never_sends_escape_sequences_to_the_terminal(
    db_url: str, pg_server: dbtools.EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summary is a model's text: `summary show` printed it raw, so an OSC 52 in it wrote
    the operator's clipboard and a CSI cleared the screen. They are shown as escapes now, and
    the summary's own line breaks still break lines."""
    uid = _user(pg_server, db_url)
    hostile = "\x1b]52;c;AAAA\x07\x1b[2Jhello\nsecond line"
    assert main(["summary", "set", "--user", str(uid), hostile]) == 0
    capsys.readouterr()
    assert main(["summary", "show", "--user", str(uid)]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown == "\\x1b]52;c;AAAA\\x07\\x1b[2Jhello\nsecond line\n"


@pytest.mark.usefixtures("cli_env")
def test_summary_set_for_an_unknown_user_says_what_an_operator_can_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The library's message named a Python call (memory.users.ensure) an operator cannot
    make: the CLI says the user does not exist and that the application creates users."""
    uid = uuid.uuid4()
    assert main(["summary", "set", "--user", str(uid), "x"]) == 1
    said = capsys.readouterr().err
    assert said.startswith(f"navi-memory: user {uid} does not exist: users are created by the ")
    assert "ensure" not in said and said.count("\n") == 1


def stdin(data: bytes) -> io.TextIOWrapper:
    """``data`` as stdin reads it under a C locale (bytes that are not UTF-8 kept as surrogates)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


@pytest.mark.usefixtures("cli_env")
def test_summary_set_from_stdin_that_is_not_utf8_says_so(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bytes that are not UTF-8 on stdin (read with surrogateescape, as under a C locale)
    were refused as "a lone surrogate"; the operator is told stdin is not UTF-8 text, and
    nothing is written. UTF-8 stdin still works, its line ends read as text."""
    uid = _user(pg_server, db_url)

    monkeypatch.setattr(sys, "stdin", stdin(b"Sam \xff writes Dutch."))
    assert main(["summary", "set", "--user", str(uid), "-"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("navi-memory: stdin is not UTF-8 text (the byte b'\\xff' at offset 4)")
    assert "surrogate" not in said
    assert main(["summary", "show", "--user", str(uid)]) == 1  # nothing was written
    capsys.readouterr()

    monkeypatch.setattr(sys, "stdin", stdin("Sam écrit\r\nen néerlandais.".encode()))
    assert main(["summary", "set", "--user", str(uid), "-"]) == 0
    capsys.readouterr()
    assert main(["summary", "show", "--user", str(uid)]) == 0
    assert capsys.readouterr().out == "Sam écrit\nen néerlandais.\n"


@pytest.mark.usefixtures("cli_env")
def test_import_from_stdin_that_is_not_utf8_says_so(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`import -` read stdin as the locale decodes it: under a C locale (surrogateescape) bytes
    that are not UTF-8 became lone surrogates, refused later in words about surrogates. It says
    stdin is not UTF-8, imports nothing, and a UTF-8 export on stdin still imports."""
    uid = _user(pg_server, db_url)
    assert main(["summary", "set", "--user", str(uid), "Sam writes Dutch."]) == 0
    capsys.readouterr()
    assert main(["export", "--user", str(uid)]) == 0
    exported = capsys.readouterr().out
    assert '"type"' in exported

    other = str(uuid.uuid4())
    bad = exported.replace("Sam writes Dutch.", "Sam \udcff writes.").encode(
        "utf-8", "surrogateescape"
    )
    monkeypatch.setattr(sys, "stdin", stdin(bad))
    assert main(["import", "--as-user", other, "-"]) == 2
    said = capsys.readouterr().err
    assert "not UTF-8" in said and "surrogate" not in said
    assert said.count("\n") == 1
    assert main(["summary", "show", "--user", other]) == 1  # nothing was imported
    capsys.readouterr()

    monkeypatch.setattr(sys, "stdin", stdin(exported.encode()))
    assert main(["import", "--as-user", other, "-"]) == 0
    capsys.readouterr()
    assert main(["summary", "show", "--user", other]) == 0
    assert capsys.readouterr().out == "Sam writes Dutch.\n"


@pytest.mark.usefixtures("cli_env")
def test_an_export_that_cannot_be_written_whole_leaves_the_previous_file(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """`export --output` truncated its file first and wrote line by line: a full disk midway
    left half an export (the previous backup gone) and exited 2, as if the command line were
    wrong. Now the file it names is replaced only by a whole export; a failed write says why,
    exits 1 and leaves the previous file and no partial one."""
    uid = _user(pg_server, db_url)
    assert main(["summary", "set", "--user", str(uid), "Sam writes Dutch."]) == 0
    output = tmp_path / "backup.jsonl"
    output.write_text("the previous backup\n")
    output.chmod(0o600)
    capsys.readouterr()

    from navi_memory.cli import admin

    real_line = admin.export_line
    written: list[str] = []

    def full_disk_on_the_second_line(*args: Any, **kwargs: Any) -> str:
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(real_line(*args, **kwargs))
        return written[-1]

    monkeypatch.setattr(admin, "export_line", full_disk_on_the_second_line)
    assert main(["export", "--user", str(uid), "--output", str(output)]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1
    assert f"cannot write the export to {output}: No space left on device" in said
    assert output.read_text() == "the previous backup\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]

    monkeypatch.setattr(admin, "export_line", real_line)
    assert main(["export", "--user", str(uid), "--output", str(output)]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert any(r.get("type") == "summary" for r in records)
    assert output.stat().st_mode & 0o777 == 0o600  # the replaced file's permissions kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


@pytest.mark.usefixtures("cli_env")
def test_an_export_through_a_symlink_or_into_a_stream_writes_where_it_points(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The all-or-nothing export replaced `--output latest.jsonl`, a symlink to the day's
    backup, by a regular file (the backup never written), and could not write into a stream
    (`/dev/stdout`, a pipe). A symlink's file is replaced now, the link kept; a FIFO is written
    in place, as a stream."""
    uid = _user(pg_server, db_url)
    assert main(["summary", "set", "--user", str(uid), "Sam writes Dutch."]) == 0
    backups = tmp_path / "backups"
    backups.mkdir()
    day = backups / "2026-12-07.jsonl"
    day.write_text("yesterday's\n")
    latest = tmp_path / "latest.jsonl"
    latest.symlink_to(day)
    capsys.readouterr()
    assert main(["export", "--user", str(uid), "--output", str(latest)]) == 0
    capsys.readouterr()
    assert latest.is_symlink() and latest.resolve() == day.resolve()
    assert '"type":"summary"' in day.read_text()
    assert sorted(p.name for p in backups.iterdir()) == ["2026-12-07.jsonl"]

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    assert main(["export", "--user", str(uid), "--output", str(fifo)]) == 0
    reader.join(30)
    assert '"type":"summary"' in read[0]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
