"""A chunk's vector is kept in its row (STORAGE MAIN), not in TOAST: the indexer reads it faster.

pgvector declares ``vector`` with STORAGE EXTERNAL: a 768-dimension vector (3 KB) is larger than
PostgreSQL's 2 KB TOAST target, so every ``memory_chunks`` row kept its vector out of line, and
each read of it — the chunk indexer's, once per chunk; an exact search of queued chunks — is a
TOAST index lookup and a second heap fetch. With STORAGE MAIN the vector stays in the row (a
row of ~3 KB fits a page), and the chunk's text, compressed, goes to TOAST instead, which the
searches read for their few result rows only. At 1M chunks, alternating in one run (three
rounds each), two indexer lanes moved 1,043-1,090 chunks/s with the vector in the row against
752-906 out of it; add_chunks was unchanged within the run's spread, and each write logged
more WAL (22-30 kB a chunk against 15-18 kB). docs/benchmarks.md has the figures.

A catalog change, instant: rows written from now on keep their vector in the row; existing rows
move only when rewritten (``VACUUM FULL memory_chunks``, optional, an exclusive lock).

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
    op.execute("ALTER TABLE memory_chunks ALTER COLUMN embedding SET STORAGE MAIN")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_chunks ALTER COLUMN embedding SET STORAGE EXTERNAL")
