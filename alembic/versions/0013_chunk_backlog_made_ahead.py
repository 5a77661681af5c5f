"""A backlog's tsvectors and normalised vectors are made ahead of their index insertions, and
kept on their queue rows.

Until now the text indexer made a chunk's tsvector and inserted it into the GIN index in one
step, about 1.5 ms a 3 KB chunk, and a search made the tsvector of every queued chunk of its
scope on the fly (about 0.27 ms each). During a write burst the queue grows faster than that
step can empty it, and a user the burst writes to holds ~1,250 queued chunks: their searches
took 195-496 ms (docs/benchmarks.md, the 1M burst), nearly all of it making tsvectors.

Making a tsvector is a fifth of the step. So when the indexer finds a backlog (a full batch
of queued chunks without one) it first makes their tsvectors, and stores each on its queue
row (``tsv``); the GIN step later inserts the stored one. A search reads a stored tsvector
(microseconds) and makes only those not made yet. The tsvector is a function of the chunk's
content and breadcrumbs, which never change, so a stored one is the one the search would
make, and scores stay the same to the bit however far either step got.

The same batch copies each of those chunks' vectors, L2-normalised as ``halfvec`` (what
memory_chunk_vectors holds), onto its vector queue row (``embedding``): a search reads a queued
vector from a narrow row of the queue, instead of from memory_chunks' TOAST (a TOAST index probe
and two TOAST pages a vector: at 1M, while the indexers drained only vectors, a backlogged
user's search took 65 ms p50 against 11 ms for other users; ~4 µs a vector at rest), and the
vector step inserts the copy.

``ix_memory_chunk_text_queue_unmade`` (partial: rows without one) finds the rows to make in
id order (a made row's old version stays in it until vacuum; a scan passes it once and marks
it dead). ``toast_tuple_target = 8160``, as on
memory_chunk_terms since 0008: a made tsvector of up to ~8 kB stays in its row, uncompressed,
so neither the search nor the GIN step reads it back from TOAST or decompresses it. The vector
queue needs no such setting: a 1.5 kB copy stays under PostgreSQL's 2 kB TOAST threshold.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory_chunk_text_queue ADD COLUMN tsv tsvector")
    op.execute("ALTER TABLE memory_chunk_text_queue SET (toast_tuple_target = 8160)")
    op.execute("ALTER TABLE memory_chunk_vector_queue ADD COLUMN embedding halfvec(768)")
    op.execute(
        "CREATE INDEX ix_memory_chunk_text_queue_unmade ON memory_chunk_text_queue (chunk_id) "
        "WHERE tsv IS NULL"
    )


def downgrade() -> None:
    # The GIN step makes a missing tsvector itself: dropping the made ones loses no work
    # that cannot be redone.
    op.execute("ALTER TABLE memory_chunk_vector_queue DROP COLUMN embedding")
    op.execute("DROP INDEX ix_memory_chunk_text_queue_unmade")
    op.execute("ALTER TABLE memory_chunk_text_queue RESET (toast_tuple_target)")
    op.execute("ALTER TABLE memory_chunk_text_queue DROP COLUMN tsv")
