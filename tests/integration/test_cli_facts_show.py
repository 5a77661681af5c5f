"""`navi-memory facts show` in this process (the console script's own tests are tests/cli)."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import make_url

from navi_memory.cli import main
from tests import dbtools


def test_show_names_the_rows_hidden_behind_a_legacy_unowned_fact(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Adopting a legacy database hides duplicate unowned (user_id NULL) facts behind the
    newest (docs/operations.md, "Adopting a legacy database"); `facts show` of that survivor
    listed nothing hidden behind it, since it looked for them among one user's facts only."""
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        survivor = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (NULL, 'preferences', 'editor', 'neovim') RETURNING id"
        ).fetchone()
        assert survivor is not None
        hidden = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, merged_into) "
            "VALUES (NULL, 'preferences', 'editor', 'vim', %s) RETURNING id",
            (survivor[0],),
        ).fetchone()
        assert hidden is not None
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    assert main(["facts", "show", str(survivor[0]), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["merged_here"] == [hidden[0]]


def test_stored_escape_sequences_never_reach_the_terminal(
    db_url: str,
    pg_server: dbtools.EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fact's text is the application's (or a model's): an ESC sequence in it (a colour, a
    window title, OSC 52 writing the clipboard) is printed as an escape by `facts list`,
    `facts show` and `facts forget`, never sent to the operator's terminal (Rich lets ESC
    through), and a line break cannot forge a line of the output."""
    uid = uuid.uuid4()
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mred\nsource_context  forged"
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        row = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (%s, 'notes', %s, %s) RETURNING id",
            (uid, "k\x1b[2J", hostile),
        ).fetchone()
        assert row is not None
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("EMBEDDING_MODEL", "none")
    monkeypatch.setenv("COLUMNS", "400")
    outputs = []
    for argv in (
        ["facts", "list", "--user", str(uid)],
        ["facts", "show", str(row[0])],
        ["facts", "forget", "k\x1b[2J", "--user", str(uid)],
    ):
        assert main(argv) == 0
        outputs.append(capsys.readouterr().out)
    for output in outputs:
        assert "\x1b" not in output and "\x07" not in output
        assert "\\x1b" in output
    assert "forged" in outputs[1] and "\nsource_context  forged" not in outputs[1]
