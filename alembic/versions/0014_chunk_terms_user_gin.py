"""A user's chunks holding a word, found in one GIN index of (user_id, tsv), with btree_gin.

The BM25 statement reads one user's chunks holding a query word. Until now the planner had
two indexes for that: the GIN index of every user's tsvectors and the btree of user ids, and
it ANDed their bitmaps. A word that is common across all users (at 1M chunks, one in 587,112
chunks) made the GIN side read and bitmap that many row pointers, 70-170 ms, for a user who
holds a few hundred of them; the pruned statement asks three times (its two seeds and its
candidates). A GIN index over both columns (btree_gin gives uuid its GIN operator class)
keeps a posting list per user id beside each lexeme's, and a scan intersects them inside the
index, skipping through the long list by the short one. Measured on the 1M bench set (183
size-weighted queries of users with 1,000+ chunks, text path): p95 99-112 -> 39 ms, and 306
-> 51 ms for users of 1,000-1,999 chunks (docs/benchmarks.md).

It replaces ix_memory_chunk_terms_tsv: a multicolumn GIN index serves conditions on any of
its columns, so a search of every user's chunks (``navi.memory.read_all``) uses it by tsv
alone. Same pending-list size as before (0006).

btree_gin ships with PostgreSQL (contrib) and is a trusted extension: the database's owner
may create it, no superuser needed. Where it cannot be created the upgrade stops, changing
nothing, and says so.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        DO $$
        BEGIN
            CREATE EXTENSION IF NOT EXISTS btree_gin;
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION 'navi-memory revision 0014 needs the btree_gin extension (%): '
                'have the database owner or a superuser run CREATE EXTENSION btree_gin; in '
                'this database, then migrate again (it ships with PostgreSQL''s contrib; '
                'on Debian/Ubuntu in the postgresql-NN package); nothing was changed', SQLERRM;
        END
        $$
        """
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_terms_user_id_tsv ON memory_chunk_terms "
        "USING gin (user_id, tsv) WITH (gin_pending_list_limit = 128)"
    )
    op.execute("DROP INDEX ix_memory_chunk_terms_tsv")


def downgrade() -> None:
    # btree_gin stays: other objects may use it, and it costs nothing unused.
    op.execute(
        "CREATE INDEX ix_memory_chunk_terms_tsv ON memory_chunk_terms USING gin (tsv) "
        "WITH (gin_pending_list_limit = 128)"
    )
    op.execute("DROP INDEX ix_memory_chunk_terms_user_id_tsv")
