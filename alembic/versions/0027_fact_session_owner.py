"""navi_fact_upsert refuses a session of another user as a fact's provenance.

``upsert_fact(session_id=...)`` (and the memory tool's save, whose ToolContext names the
session) recorded any session id as where the fact was written from: a session of another
user was accepted, and the user's ``memory_search`` then showed that session as the fact's
source. Raw chunks and sketches already refuse it ("no session ... for this user"). The
function now writes nothing when ``sessions`` holds the id under another user, and says so
with the action ``foreign session`` (the caller raises NotFoundError). An id ``sessions``
does not hold (an application's own session ids, an import's) is still recorded as given,
as before. The check is a primary-key probe inside the one statement: no round trip more.

The function keeps its arguments and result (CREATE OR REPLACE); its text is 0017's with the
check added. Downgrade restores 0017's function.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_CHANGES = (
    # A session id that ``sessions`` holds under another user: nothing is written.
    (
        "go AS MATERIALIZED (\n    SELECT NOT EXISTS (SELECT 1 FROM unnormalized) AS ok\n),",
        "foreign_session AS MATERIALIZED (\n"
        "    SELECT EXISTS (SELECT 1 FROM sessions s\n"
        "                   WHERE s.id = p_session_id AND s.user_id <> p_user_id) AS yes\n"
        "),\n"
        "go AS MATERIALIZED (\n"
        "    SELECT NOT EXISTS (SELECT 1 FROM unnormalized)\n"
        "           AND NOT (SELECT yes FROM foreign_session) AS ok\n"
        "),",
    ),
    # ... and the caller is told why.
    (
        "       w.action, w.id,",
        "       coalesce(w.action, CASE WHEN (SELECT yes FROM foreign_session)\n"
        "                               THEN 'foreign session' END),\n"
        "       w.id,",
    ),
)


def _function_of(revision_file: str) -> str:
    """The UPSERT_FUNCTION text of an earlier revision (frozen, like this one)."""
    path = Path(__file__).with_name(revision_file)
    spec = importlib.util.spec_from_file_location(f"navi_revision_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.UPSERT_FUNCTION
    return text


def upsert_function() -> str:
    """0017's function with the session owner's check."""
    text = _function_of("0017_fact_unmerged_at.py")
    for old, new in _CHANGES:
        if text.count(old) != 1:
            raise RuntimeError(f"revision 0027: 0017's function text changed near {old!r}")
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    op.execute(upsert_function())


def downgrade() -> None:
    op.execute(_function_of("0017_fact_unmerged_at.py"))
