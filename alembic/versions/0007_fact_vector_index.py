"""Fact vectors are HNSW-indexed off the write path, and a fact upsert is one statement.

An HNSW insertion of a 768-d vector cost about 9 ms of a fact upsert here (ten times the rest
of it), so memory_facts.embedding loses its HNSW index, as memory_chunks.embedding did in 0004.
The vector of record stays in memory_facts.embedding; an indexer moves it, L2-normalised as
halfvec, into memory_fact_vectors (HNSW) from memory_fact_vector_queue, and search reads the
index and, exactly, the queue. A trigger queues a fact whenever its vector is set or changed,
whoever writes it (upsert_fact, backfill, an import, the application's own SQL), so nothing
with a vector is ever in neither place; a fact re-verified with its vector unchanged queues
nothing. See docs/architecture.md, "Fact vectors are HNSW-indexed off the write path".

For the one-statement upsert with dedupe:

- ``memory_facts.key_norm``: the key's canonical spelling (``text.keys.normalize_key``) as
  ``<rules>:<form>``, where ``<rules>`` names the version of the spelling rules that made it
  (collation "C": the rows of the current rules are one contiguous range of the index). Left
  NULL here and by writers other than upsert_fact; upsert_fact fills a category's missing or
  outdated forms before it compares spellings (services/facts.py).
- ``memory_fact_clocks``: one row per (user, category), bumped by every write of the category
  under its lock; a one-statement upsert compares the version its snapshot saw with the one it
  bumped, and so knows whether a writer committed between its snapshot and its lock.
- ``memory_facts`` gets fillfactor 90 and the clocks 50: room on the page for HOT updates (a
  re-verified fact, a version bump) that add no index entry.

Existing vectors are copied into memory_fact_vectors before its HNSW index is built (one build
is far cheaper than row-by-row insertion).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute('ALTER TABLE memory_facts ADD COLUMN key_norm text COLLATE "C"')
    op.execute(
        "CREATE INDEX ix_memory_facts_user_id_category_key_norm "
        "ON memory_facts (user_id, category, key_norm) WHERE merged_into IS NULL"
    )
    op.execute("ALTER TABLE memory_facts SET (fillfactor = 90)")
    op.execute(
        """
        CREATE TABLE memory_fact_clocks (
            user_id uuid NOT NULL,
            category text NOT NULL,
            version bigint NOT NULL,
            CONSTRAINT pk_memory_fact_clocks PRIMARY KEY (user_id, category),
            CONSTRAINT fk_memory_fact_clocks_user_id_navi_users FOREIGN KEY (user_id)
                REFERENCES navi_users (id) ON DELETE CASCADE
        ) WITH (fillfactor = 50)
        """
    )
    op.execute(
        """
        CREATE TABLE memory_fact_vectors (
            fact_id bigint NOT NULL,
            user_id uuid,
            embedding halfvec(768) NOT NULL,
            CONSTRAINT pk_memory_fact_vectors PRIMARY KEY (fact_id),
            CONSTRAINT fk_memory_fact_vectors_fact_id_memory_facts FOREIGN KEY (fact_id)
                REFERENCES memory_facts (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memory_fact_vector_queue (
            fact_id bigint NOT NULL,
            user_id uuid,
            CONSTRAINT pk_memory_fact_vector_queue PRIMARY KEY (fact_id),
            CONSTRAINT fk_memory_fact_vector_queue_fact_id_memory_facts FOREIGN KEY (fact_id)
                REFERENCES memory_facts (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO memory_fact_vectors (fact_id, user_id, embedding) "
        "SELECT id, user_id, CAST(l2_normalize(embedding) AS halfvec(768)) "
        "FROM memory_facts WHERE embedding IS NOT NULL"
    )
    op.execute("CREATE INDEX ix_memory_fact_vectors_user_id ON memory_fact_vectors (user_id)")
    op.execute(
        "CREATE INDEX ix_memory_fact_vectors_embedding_hnsw ON memory_fact_vectors "
        "USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    op.execute(
        "CREATE INDEX ix_memory_fact_vector_queue_user_id ON memory_fact_vector_queue (user_id)"
    )
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding_hnsw")
    # The queue row is all the index needs to know: the indexer reads the vector of record when
    # it moves the fact, and replaces (or, for a vector gone, drops) what memory_fact_vectors
    # held. Search skips the index entry of a queued fact, so an entry made stale here never
    # counts. AFTER ... FOR EACH ROW: the row's id exists, and one statement can write many.
    op.execute(
        """
        CREATE FUNCTION navi_fact_vector_queue() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_fact_vector_queue (fact_id, user_id)
            VALUES (NEW.id, NEW.user_id)
            ON CONFLICT (fact_id) DO NOTHING;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_facts_vector_inserted AFTER INSERT ON memory_facts "
        "FOR EACH ROW WHEN (NEW.embedding IS NOT NULL) "
        "EXECUTE FUNCTION navi_fact_vector_queue()"
    )
    op.execute(
        "CREATE TRIGGER memory_facts_vector_changed AFTER UPDATE OF embedding ON memory_facts "
        "FOR EACH ROW WHEN (OLD.embedding IS DISTINCT FROM NEW.embedding) "
        "EXECUTE FUNCTION navi_fact_vector_queue()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS memory_facts_vector_changed ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_vector_inserted ON memory_facts")
    op.execute("DROP FUNCTION IF EXISTS navi_fact_vector_queue()")
    op.execute("DROP TABLE IF EXISTS memory_fact_vector_queue")
    op.execute("DROP TABLE IF EXISTS memory_fact_vectors")
    op.execute("DROP TABLE IF EXISTS memory_fact_clocks")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_user_id_category_key_norm")
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS key_norm")
    op.execute("ALTER TABLE memory_facts RESET (fillfactor)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_facts_embedding_hnsw ON memory_facts "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
