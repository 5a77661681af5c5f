"""An import holds its session ids from its check to its commit.

``import_user`` checks that no other user holds any of its session ids, then writes for a while
in one transaction. Another user's first ``add_chunks`` under one of those ids (a session their
application keeps outside ``sessions``) found none of the import's uncommitted rows and went
through, and both users then held the id. Taking each id's lock in the import would need one
lock a session, and a user with thousands of sessions would exhaust the lock table
(``max_locks_per_transaction``). So ids fall in 256 buckets: ``navi_session_bucket_key(sid)``.
An import takes the buckets of its ids exclusively, in order (at most 256 locks), before its
check; ``navi_session_held_by_others`` (every claim of an id that no ``sessions`` row of the
claimer holds: add_chunks, sessions.create, mark_session_extracted) takes the id's bucket
shared first. A claim then waits for an import of an id in its bucket and sees its rows; an
import waits for a claim in flight and sees its rows in its check. The function also reads the
``sessions`` row now: a claim that waited for an import sees the session it wrote.

Downgrade puts back 0028's function and drops the key function.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BUCKET_KEY_FUNCTION = """
CREATE FUNCTION navi_session_bucket_key(sid text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('sessions.bucket:' || (hashtext(sid) & 255), 0)
"""

_CHANGES = (
    # The id's bucket, shared, before the id's own lock.
    (
        "BEGIN\n    PERFORM pg_advisory_xact_lock(",
        "BEGIN\n    PERFORM pg_advisory_xact_lock_shared(navi_session_bucket_key(sid));\n"
        "    PERFORM pg_advisory_xact_lock(",
        1,
    ),
    # Another user's sessions row counts too.
    (
        "    RETURN EXISTS",
        "    RETURN EXISTS (SELECT 1 FROM sessions s WHERE s.id = sid AND s.user_id <> uid)\n"
        "        OR EXISTS",
        1,
    ),
)


def _function_0028() -> str:
    """0028's function text (frozen, like this revision's), as CREATE OR REPLACE."""
    path = Path(__file__).with_name("0028_session_id_owner_indexes.py")
    spec = importlib.util.spec_from_file_location(f"navi_revision_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.HELD_BY_OTHERS_FUNCTION
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def held_by_others_function() -> str:
    """0028's function with the bucket lock and the sessions probe."""
    text: str = _function_0028()
    for old, new, count in _CHANGES:
        if text.count(old) != count:
            raise RuntimeError(f"revision 0029: 0028's function text changed near {old!r}")
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    op.execute(BUCKET_KEY_FUNCTION)
    op.execute(held_by_others_function())


def downgrade() -> None:
    op.execute(_function_0028())
    op.execute("DROP FUNCTION IF EXISTS navi_session_bucket_key(text)")
