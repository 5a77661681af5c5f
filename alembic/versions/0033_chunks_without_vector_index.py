"""The chunks without a vector are found by an index: backfill's batches and doctor's count.

A chunk is stored without a vector when the embedding model could not be reached, and an
interrupted reembed leaves the rest of the chunks without one. Backfill read them as "id after
the last one, no vector, by id", which walked the primary key and read the heap of every chunk
that has a vector until it found a batch (a whole scan of a 1M-chunk table for a batch of the
last few), and nothing could count them without a scan, so doctor did not report them. A
partial index on ``id`` of the rows ``WHERE embedding IS NULL`` holds only those: empty in a
healthy store, each backfill batch one range read of it, a count an index scan.

Writes: a chunk stored with a vector is not in it (its predicate is checked, nothing is
inserted); the indexer's update of ``in_graph`` was not HOT already (the graph's partial
indexes read it). Built ``CONCURRENTLY`` (writes go on; one read of the table). Downgrade drops
it.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | Sequence[str] | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "ix_memory_chunks_id_without_embedding"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        # A build that failed half way leaves an invalid index of this name.
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY {NAME} ON memory_chunks (id) WHERE embedding IS NULL"
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
