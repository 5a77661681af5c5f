"""The chunk graph is built with ef_construction 128 (was 64): the biggest users' recall.

With ``m = 16, ef_construction = 64`` some rows of the HNSW graph are hard to reach: on the
1M-chunk benchmark's graph users (232,874 rows, 39 users of 2,000-40,000 chunks, rows in
arrival order) the package's read — the best 10 of the first 40 the filtered iterative scan
yields — found 0.967 of the exact top 10 (0.947 for users of 10,000-19,999 chunks), and no
query-time setting closes the gap (docs/benchmarks.md, "The graph's recall"). Built with
``ef_construction = 128`` the same graph answered 390 of 390 queries exactly (1.000 at every
user size), at the same query time, the same size (455 MB) and about 1.4 times the insertion
work a row (4.55 against 3.24 ms, measured alternating on the two graphs).

The new graph is built beside the old one (``CREATE INDEX CONCURRENTLY``), the old one dropped
(``DROP INDEX CONCURRENTLY``) and the new one given its name: no step takes a lock that stops
searches or the chunk indexer, so both go on during the upgrade (rows indexed meanwhile are in
both graphs). Run it from a process of its own (``navi-memory migrate``, ``alembic upgrade
head``): a concurrent build waits for every transaction writing the table, and it cannot run
inside a transaction a caller already began. An upgrade stopped half way leaves either an
invalid ``…_new`` index, which the next run drops and builds again, or a valid one, which the
next run keeps. Give the session maintenance_work_mem enough for the graph (about 2 GB a
million graph rows) or the build is many times slower.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_memory_chunk_vectors_embedding_hnsw"
BUILDING = "ix_memory_chunk_vectors_embedding_hnsw_new"


def _rebuild(ef_construction: int) -> None:
    options = f"ef_construction='{ef_construction}'"
    with op.get_context().autocommit_block():
        if not _built(options):
            # An earlier attempt that failed half way leaves an invalid index of this name.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
            op.execute(
                f"CREATE INDEX CONCURRENTLY {BUILDING} ON memory_chunk_vectors "
                "USING hnsw (embedding halfvec_cosine_ops) "
                f"WITH (m = 16, ef_construction = {ef_construction}) WHERE in_graph"
            )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX}")


def _built(options: str) -> bool:
    """The new graph exists already, valid and with these options (a run stopped after its
    build). Offline (``--sql``) nothing is known: build."""
    if op.get_context().as_sql:
        return False
    row = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT i.indisvalid AND pg_get_indexdef(i.indexrelid) LIKE :options "
                "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = :name"
            ),
            {"options": f"%{options}%", "name": BUILDING},
        )
        .first()
    )
    return bool(row and row[0])


def upgrade() -> None:
    _rebuild(128)


def downgrade() -> None:
    _rebuild(64)
