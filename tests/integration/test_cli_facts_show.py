"""`navi-memory facts show` in this process (the console script's own tests are tests/cli)."""

from __future__ import annotations

import json

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
