"""add_chunks claims its session id as sessions.create does: a create cannot race it.

Session ids are unique across users: ``sessions.create`` refuses an id another user keeps raw
chunks, sketches or extraction state under, checked under an advisory lock on the id. But
add_chunks took no such lock, and its share lock on the ``sessions`` row cannot see a row not
yet committed: a create that had inserted its row and not yet committed let another user's
add_chunks write under the id, which the new owner then held beside a stranger's chunks.

``navi_session_claim(sid)`` takes the id's lock in shared mode (add_chunks calls do not wait
for one another; a create, which takes it exclusively, waits for them, and they for it), then
reads the session's row, share-locked. A function, not a clause of the insert statement:
the statement's snapshot is taken before any lock in it is granted, while a VOLATILE function's
second statement sees what committed meanwhile (as ``navi_fact_upsert`` relies on).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The key is SessionRepository.lock_session_id's: hashtextextended('sessions.id:' || id, 0).
    op.execute(
        """
        CREATE FUNCTION navi_session_claim(sid text) RETURNS TABLE (user_id uuid)
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(hashtextextended('sessions.id:' || sid, 0));
            RETURN QUERY SELECT s.user_id FROM sessions s WHERE s.id = sid FOR SHARE;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS navi_session_claim(text)")
