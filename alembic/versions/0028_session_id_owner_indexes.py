"""Raw chunks and kv entries found by their session id first: whose rows an id holds.

Session ids are unique across users: an id another user keeps raw chunks, sketches or
extraction state under is theirs, even when their application keeps the session outside
``sessions`` (``sessions.create`` and ``mark_session_extracted`` refuse it). ``add_chunks``
checked only the ``sessions`` row: another user's chunks written under such an id were taken,
and the id's owner could then neither mark nor create it. The check needs the rows of one id
whoever wrote them; both tables were indexed by user first, so a probe read the whole
(user_id, session_id, ended_at) index (~1.2 ms at 200k chunks, growing with the table). These
indexes make it two index descents a table, in the function ``navi_session_held_by_others(sid,
uid)`` (chunks, kv entries, extraction state), which add_chunks calls for an id with no
``sessions`` row and ``sessions.create`` / ``mark_session_extracted`` for one they may take.

Built ``CONCURRENTLY`` (writes go on meanwhile; ~2–3 s at 1M chunks here). Downgrade drops
them and the function (add_chunks then refuses only ids with a ``sessions`` row of another user).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_memory_chunks_session_id_user_id": "memory_chunks (session_id, user_id)",
    "ix_kv_store_session_id_user_id": "kv_store (session_id, user_id) WHERE session_id IS NOT NULL",
}


# Two range probes a table, not ``user_id <> uid``: that is no index condition, and would read
# every entry of the id. PL/pgSQL with a generic plan: planned once a connection, not at every
# add_chunks (whose connections force custom plans), and run only for an id with no sessions row.
# Two users' first chunks under one new id at once: each would find no rows of the other's in
# its snapshot, and both be written. So the id's "outside sessions" lock is taken first,
# exclusively, and the probes run after it (VOLATILE: each query a new snapshot, which sees
# what the other committed while this one waited).
HELD_BY_OTHERS_FUNCTION = """
CREATE FUNCTION navi_session_held_by_others(sid text, uid uuid) RETURNS boolean
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
    with op.get_context().autocommit_block():
        for name, target in INDEXES.items():
            # A build that failed half way leaves an invalid index of this name.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"CREATE INDEX CONCURRENTLY {name} ON {target}")
    op.execute(HELD_BY_OTHERS_FUNCTION)


def downgrade() -> None:
    # The indexes first: the autocommit block commits what ran before it, so a function
    # dropped first would be gone while a failed index drop left the version at 0028 (and
    # add_chunks calling a missing function). The function goes with the version stamp.
    with op.get_context().autocommit_block():
        for name in INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    op.execute("DROP FUNCTION IF EXISTS navi_session_held_by_others(text, uuid)")
