"""A fact whose vector changes while the fact indexer holds its queue row is queued again.

0007's trigger queued a fact with ``INSERT … ON CONFLICT (fact_id) DO NOTHING``. When the fact
indexer had already picked the fact's queue row (locked, not yet deleted) in a statement that
read the old vector, a write of a new vector found the row, did nothing and committed; the
indexer then stored the old vector, deleted the queue row, and search trusted that stale
index entry until the fact was written again.

Now the trigger's conflict branch updates the queue row (``DO UPDATE``), which takes its row
lock: a write that meets a row an indexer holds waits for that batch, and then (the row
deleted) inserts a new one, so the new vector is indexed by the next batch. A write that meets
an unlocked queue row only rewrites it. The indexer never waits for such a writer (it locks
the fact ``FOR KEY SHARE``, which an update of the vector does not block), so the wait cannot
turn into a deadlock.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _queue_function(conflict: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION navi_fact_vector_queue() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_fact_vector_queue (fact_id, user_id)
            VALUES (NEW.id, NEW.user_id)
            ON CONFLICT (fact_id) {conflict};
            RETURN NULL;
        END
        $$
        """


def upgrade() -> None:
    op.execute(_queue_function("DO UPDATE SET user_id = EXCLUDED.user_id"))


def downgrade() -> None:
    op.execute(_queue_function("DO NOTHING"))
