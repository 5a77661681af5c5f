"""Fact vectors are HNSW-indexed off the write path, and a fact upsert is one statement.

An HNSW insertion of a 768-d vector cost about 9 ms of a fact upsert here (ten times the rest
of it), so memory_facts.embedding loses its HNSW index, as memory_chunks.embedding did in 0004.
The vector of record stays in memory_facts.embedding; an indexer moves it, L2-normalised as
halfvec, into memory_fact_vectors (HNSW) from memory_fact_vector_queue, and search reads the
index and, exactly, the queue. A trigger queues a fact whenever its vector is set or changed,
whoever writes it (upsert_fact, backfill, an import, the application's own SQL), so nothing
with a vector is ever in neither place; a fact re-verified with its vector unchanged queues
nothing. See docs/architecture.md, "Fact vectors off the write path, read exactly"
(revision 0020 later dropped the graph this revision builds).

For upsert_fact with dedupe in one round trip:

- ``navi_fact_upsert(...)``: the whole upsert — the category's advisory lock, then the key or
  its hidden spelling, the other spellings, insert / new value / verify / revive, hiding — as a
  SQL function, for two reasons measured here. A VOLATILE function takes a fresh snapshot for
  each statement it runs, so its second statement reads everything committed before the lock
  was granted (one statement alone takes its snapshot before it waits for the lock). And its
  ``SET plan_cache_mode = force_generic_plan`` lets the body keep one cached plan per session,
  where the engine's connections force a custom plan for every statement (right for per-user
  searches): planning this statement cost 0.8 ms of a 1.2 ms call. Every lookup in it is by
  key, so the generic plan is the custom one. The rule is restated in services/facts.py.
- ``memory_facts.key_norm``: the key's canonical spelling (``text.keys.normalize_key``) as
  ``<rules>:<form>``, where ``<rules>`` names the version of the spelling rules that made it
  (collation "C": the rows of the current rules are one contiguous range of the index). Left
  NULL here and by writers other than upsert_fact; the function reports a category's missing
  or outdated forms instead of comparing them, and upsert_fact fills them and calls again.
- A partial index on the hidden rows' (user_id, category, key): a hidden spelling written
  again is found by index, not by reading every hidden row.
- ``memory_facts`` gets fillfactor 90: room on the page for HOT updates (a re-verified fact
  only moves ``last_verified_at``) that add no index entry.

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


UPSERT_ARGUMENTS = (
    "uuid, text, text, text, text, text, vector, text, integer, double precision, text, text, "
    "boolean"
)

_FACT_COLUMNS = (
    "f.id, f.user_id, f.category, f.key, f.value, f.source, f.confidence, f.expires_at, "
    "f.last_verified_at, f.source_context, f.merged_into, f.created_at, f.updated_at, "
    "f.session_id, f.embedding IS NOT NULL AS has_embedding"
)
_NEW_EXPIRY = "now() + make_interval(secs => p_expires_seconds)"
_OF_CATEGORY = "f.user_id = p_user_id AND f.category = p_category"
_OF_KEY = f"{_OF_CATEGORY} AND f.key = p_key"

UPSERT_FUNCTION = f"""
CREATE FUNCTION navi_fact_upsert(
    p_user_id uuid, p_category text, p_key text, p_key_norm text, p_rules text,
    p_value text, p_embedding vector, p_source text, p_confidence integer,
    p_expires_seconds double precision, p_source_context text, p_session_id text,
    p_dedupe boolean
) RETURNS TABLE (
    unnormalized_ids bigint[], unnormalized_keys text[], merged boolean, was_expired boolean,
    action text, id bigint, user_id uuid, category text, key text, value text, source text,
    confidence integer, expires_at timestamptz, last_verified_at timestamptz,
    source_context text, merged_into bigint, created_at timestamptz, updated_at timestamptz,
    session_id text, has_embedding boolean
)
LANGUAGE sql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $fn$
-- Writers of one (user, category) serialise (FactWriteRepository.lock_category takes the
-- same lock); the statement below starts after it is granted, with a snapshot of its own.
SELECT pg_advisory_xact_lock(
    hashtextextended('memory_facts:' || p_user_id::text || ':' || p_category, 0));

WITH unnormalized AS MATERIALIZED (
    -- Visible keys whose canonical form is missing or made by other rules: not compared.
    SELECT f.id, f.key FROM memory_facts f
    WHERE p_dedupe AND {_OF_CATEGORY} AND f.merged_into IS NULL
      AND (f.key_norm IS NULL OR f.key_norm < p_rules || ':' OR f.key_norm >= p_rules || ';')
),
go AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT 1 FROM unnormalized) AS ok
),
exact AS MATERIALIZED (
    SELECT f.id FROM memory_facts f WHERE {_OF_KEY} AND f.merged_into IS NULL
    ORDER BY f.id DESC LIMIT 1
),
behind AS MATERIALIZED (
    -- A hidden spelling written again: the fact it was merged into.
    SELECT f.merged_into AS id FROM memory_facts f
    WHERE {_OF_KEY} AND f.merged_into IS NOT NULL
    ORDER BY f.id DESC LIMIT 1
),
target AS MATERIALIZED (
    SELECT f.id, f.value = p_value AS same,
           coalesce(f.expires_at <= now(), false) AS expired,
           f.embedding IS NULL AS vectorless
    FROM memory_facts f
    WHERE f.id = coalesce((SELECT id FROM exact), (SELECT id FROM behind))
),
spellings AS MATERIALIZED (
    SELECT f.id FROM memory_facts f
    WHERE p_dedupe AND {_OF_CATEGORY} AND f.merged_into IS NULL AND f.key_norm = p_key_norm
      AND f.id IS DISTINCT FROM (SELECT id FROM target)
),
inserted AS (
    INSERT INTO memory_facts AS f (user_id, category, key, key_norm, value, embedding, source,
                                   confidence, expires_at, source_context, last_verified_at,
                                   session_id)
    SELECT p_user_id, p_category, p_key, p_key_norm, p_value, p_embedding, p_source,
           p_confidence, {_NEW_EXPIRY}, p_source_context, now(), p_session_id
    FROM go WHERE go.ok AND NOT EXISTS (SELECT 1 FROM target)
    RETURNING 'insert'::text AS action, {_FACT_COLUMNS}
),
renewed AS (
    UPDATE memory_facts f
    SET value = p_value, embedding = p_embedding, source = p_source,
        confidence = p_confidence, source_context = p_source_context,
        expires_at = {_NEW_EXPIRY}, updated_at = now(), last_verified_at = now(),
        session_id = p_session_id
    FROM target t, go
    WHERE f.id = t.id AND go.ok AND NOT t.same
    RETURNING 'new value'::text AS action, {_FACT_COLUMNS}
),
verified AS (
    -- Neither the vector nor an indexed column changes: a HOT update, no index work.
    UPDATE memory_facts f
    SET last_verified_at = now(),
        expires_at = CASE WHEN t.expired THEN {_NEW_EXPIRY} ELSE f.expires_at END
    FROM target t, go
    WHERE f.id = t.id AND go.ok AND t.same AND NOT (t.vectorless AND p_embedding IS NOT NULL)
    RETURNING 'verify'::text AS action, {_FACT_COLUMNS}
),
completed AS (
    -- The same value, and at last a vector for a fact that had none.
    UPDATE memory_facts f
    SET last_verified_at = now(), embedding = p_embedding,
        expires_at = CASE WHEN t.expired THEN {_NEW_EXPIRY} ELSE f.expires_at END
    FROM target t, go
    WHERE f.id = t.id AND go.ok AND t.same AND t.vectorless AND p_embedding IS NOT NULL
    RETURNING 'vector'::text AS action, {_FACT_COLUMNS}
),
written AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM renewed
    UNION ALL SELECT * FROM verified UNION ALL SELECT * FROM completed
),
hidden AS (
    -- The other spellings go behind the written row, and so do the rows hidden behind them:
    -- merged_into always points at a visible row. (Unreferenced: PostgreSQL runs every
    -- data-modifying WITH query.)
    UPDATE memory_facts f SET merged_into = w.id
    FROM written w
    WHERE f.id = ANY (ARRAY(SELECT id FROM spellings))
       OR f.merged_into = ANY (ARRAY(SELECT id FROM spellings))
)
SELECT ARRAY(SELECT u.id FROM unnormalized u ORDER BY u.id),
       ARRAY(SELECT u.key FROM unnormalized u ORDER BY u.id),
       EXISTS (SELECT 1 FROM spellings),
       coalesce((SELECT t.expired FROM target t), false),
       w.action, w.id, w.user_id, w.category, w.key, w.value, w.source, w.confidence,
       w.expires_at, w.last_verified_at, w.source_context, w.merged_into, w.created_at,
       w.updated_at, w.session_id, w.has_embedding
FROM go LEFT JOIN written w ON TRUE
$fn$
"""


def upgrade() -> None:
    op.execute('ALTER TABLE memory_facts ADD COLUMN key_norm text COLLATE "C"')
    op.execute(
        "CREATE INDEX ix_memory_facts_user_id_category_key_norm "
        "ON memory_facts (user_id, category, key_norm) WHERE merged_into IS NULL"
    )
    op.execute(
        "CREATE INDEX ix_memory_facts_user_id_category_key_hidden "
        "ON memory_facts (user_id, category, key) WHERE merged_into IS NOT NULL"
    )
    op.execute("ALTER TABLE memory_facts SET (fillfactor = 90)")
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
    op.execute(UPSERT_FUNCTION)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS navi_fact_upsert({UPSERT_ARGUMENTS})")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_vector_changed ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_vector_inserted ON memory_facts")
    op.execute("DROP FUNCTION IF EXISTS navi_fact_vector_queue()")
    op.execute("DROP TABLE IF EXISTS memory_fact_vector_queue")
    op.execute("DROP TABLE IF EXISTS memory_fact_vectors")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_user_id_category_key_norm")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_user_id_category_key_hidden")
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS key_norm")
    op.execute("ALTER TABLE memory_facts RESET (fillfactor)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memory_facts_embedding_hnsw ON memory_facts "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
