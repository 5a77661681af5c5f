"""Drop the fact vectors' HNSW graph: a global fact search reads them exactly.

Per-user fact search has read a user's vectors exactly since it was measured faster than the
graph (docs/architecture.md, "Fact vectors off the write path, read exactly"), so only a global
(``read_all``) search read ``ix_memory_fact_vectors_embedding_hnsw``. Yet every new or changed
fact vector paid to enter it: ≈ 1.8–3.3 ms of a core a vector at 100k facts, against ≈ 0.7 ms
for the whole upsert — the work that held ``upsert_fact`` under 1,000 calls/s beside the fact
indexer. Without it the fact indexer only copies vectors into ``memory_fact_vectors``, and a
global search scans them exactly (76–90 ms at 100k facts, a scan of every vector;
docs/benchmarks.md, "2026-12-06, evening: the fact graph dropped").

Downgrade builds the graph again, fact writes waiting meanwhile: ≈ 30 s for 100k facts here with
1 GB of maintenance_work_mem, many times longer where the graph does not fit it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_fact_vectors_embedding_hnsw")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX ix_memory_fact_vectors_embedding_hnsw ON memory_fact_vectors "
        "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
