"""Drop the legacy application's ANN indexes on memory_facts and memory_chunks.

A database that also ran the original application's ``migrate_pgvector.py`` kept that script's
HNSW index on ``memory_facts.embedding`` (and, where it made one, on ``memory_chunks``) under
the script's own name, beside navi-memory's. No navi-memory statement reads such an index:
fact and chunk vectors are searched in ``memory_fact_vectors`` and ``memory_chunk_vectors``
(revisions 0007 and 0009). But every fact write paid its synchronous HNSW insertion — the
cost 0007 took off the write path. Any HNSW or IVFFlat index on those two tables is therefore
not navi-memory's (its own are named ``ix_…`` and live on the vector tables), and goes.

The other indexes the script made (expiry, source+category, trigram) only duplicate
navi-memory's; their names are the script's own, so they are left for the operator
(docs/operations.md, "Adopting a legacy database"). Downgrade recreates nothing: the legacy
application's script makes its index again (IF NOT EXISTS) when it runs.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One DO block, so that `navi-memory migrate --sql` (offline: no database to ask which
# indexes there are) prints the statement that finds and drops them.
_DROP_FOREIGN_ANN_INDEXES = """
DO $drop$
DECLARE
    name text;
BEGIN
    FOR name IN
        SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_am a ON a.oid = c.relam
        WHERE i.indrelid IN (to_regclass('memory_facts'), to_regclass('memory_chunks'))
          AND a.amname IN ('hnsw', 'ivfflat')
        ORDER BY 1
    LOOP
        EXECUTE 'DROP INDEX ' || name;
    END LOOP;
END
$drop$
"""


def upgrade() -> None:
    op.execute(_DROP_FOREIGN_ANN_INDEXES)


def downgrade() -> None:
    pass
