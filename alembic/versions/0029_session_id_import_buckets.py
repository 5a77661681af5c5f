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

from collections.abc import Sequence

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

HELD_BY_OTHERS_FUNCTION = """
CREATE OR REPLACE FUNCTION navi_session_held_by_others(sid text, uid uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(navi_session_bucket_key(sid));
    PERFORM pg_advisory_xact_lock(hashtextextended('sessions.outside:' || sid, 0));
    RETURN EXISTS (SELECT 1 FROM sessions s WHERE s.id = sid AND s.user_id <> uid)
        OR EXISTS (SELECT 1 FROM memory_chunks c WHERE c.session_id = sid AND c.user_id < uid)
        OR EXISTS (SELECT 1 FROM memory_chunks c WHERE c.session_id = sid AND c.user_id > uid)
        OR EXISTS (SELECT 1 FROM kv_store k WHERE k.session_id = sid AND k.user_id < uid)
        OR EXISTS (SELECT 1 FROM kv_store k WHERE k.session_id = sid AND k.user_id > uid)
        OR EXISTS (SELECT 1 FROM session_memory_state m
                   WHERE m.session_id = sid AND m.user_id <> uid);
END
$$
"""

HELD_BY_OTHERS_0028 = """
CREATE OR REPLACE FUNCTION navi_session_held_by_others(sid text, uid uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('sessions.outside:' || sid, 0));
    RETURN EXISTS (SELECT 1 FROM memory_chunks c WHERE c.session_id = sid AND c.user_id < uid)
        OR EXISTS (SELECT 1 FROM memory_chunks c WHERE c.session_id = sid AND c.user_id > uid)
        OR EXISTS (SELECT 1 FROM kv_store k WHERE k.session_id = sid AND k.user_id < uid)
        OR EXISTS (SELECT 1 FROM kv_store k WHERE k.session_id = sid AND k.user_id > uid)
        OR EXISTS (SELECT 1 FROM session_memory_state m
                   WHERE m.session_id = sid AND m.user_id <> uid);
END
$$
"""


def upgrade() -> None:
    op.execute(BUCKET_KEY_FUNCTION)
    op.execute(HELD_BY_OTHERS_FUNCTION)


def downgrade() -> None:
    op.execute(HELD_BY_OTHERS_0028)
    op.execute("DROP FUNCTION IF EXISTS navi_session_bucket_key(text)")
