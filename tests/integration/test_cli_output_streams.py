"""The commands that write a lot on stdout (`export`, `facts list --json`, `stats`), when
stdout cannot take it: one line and exit 1, never "unexpected … a bug" (in this process; the
console script's exit on a real /dev/full is tests/cli/test_output_streams.py)."""

from __future__ import annotations

import errno
import io
import os
import sys
import uuid
from collections.abc import Iterable

import pytest
from sqlalchemy import make_url

from navi_memory.cli import main
from tests import dbtools


class FullDisk(io.StringIO):
    """A stdout on a full disk (`> /dev/full`): every write fails with ENOSPC."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, lines: Iterable[str]) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--user", "{uid}"],
        ["facts", "list", "--user", "{uid}", "--json"],
        ["stats"],
    ],
    ids=["export", "facts-list-json", "stats"],
)
def test_a_full_disk_on_stdout_is_reported_in_one_line(
    argv: list[str],
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`navi-memory export --user U > /dev/full` said "unexpected OSError … a bug in
    navi-memory": now "cannot write the output: No space left on device", exit 1."""
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
    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main([arg.format(uid=uid) for arg in argv]) == 1
    assert capsys.readouterr().err == (
        "navi-memory: cannot write the output: No space left on device\n"
    )
