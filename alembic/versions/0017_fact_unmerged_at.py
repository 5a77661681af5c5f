"""memory_facts.unmerged_at, and navi_fact_upsert keeps separated rows apart and stores only
the vector of the row's own key.

- An unmerge lasted only until the next dedupe write: the extractor writes with dedupe, and
  the function's ``spellings`` hid every visible row of the same canonical key again, so the
  user's "these are two facts" was undone by the next extraction (spec: "the older row is
  hidden rather than deleted, so the merge can be undone"). ``unmerge_fact`` now sets
  ``unmerged_at`` (nullable timestamptz, NULL for every existing row), and a dedupe never
  merges such a row again: it is left out of ``spellings``, and when it is the row written,
  it hides no other spelling.
- A value written under a hidden spelling goes to the row that spelling was merged into, but
  the vector stored with it embedded the caller's key (``p / language: French``), not that
  row's (``p / preferred_language: French``; docs/memory.md, "A fact"). The function now
  stores p_embedding only on a row holding p_key itself; on the survivor a new value leaves
  the vector NULL (and the same value does not give it one), and upsert_fact embeds the
  survivor's own text and sets it (backfill would too).

The function keeps its arguments and result (CREATE OR REPLACE). Downgrade restores the
0007 function and drops the column (the record of separated rows is lost).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_FACT_COLUMNS = (
    "f.id, f.user_id, f.category, f.key, f.value, f.source, f.confidence, f.expires_at, "
    "f.last_verified_at, f.source_context, f.merged_into, f.created_at, f.updated_at, "
    "f.session_id, f.embedding IS NOT NULL AS has_embedding"
)
_NEW_EXPIRY = "now() + make_interval(secs => p_expires_seconds)"
_OF_CATEGORY = "f.user_id = p_user_id AND f.category = p_category"
_OF_KEY = f"{_OF_CATEGORY} AND f.key = p_key"

UPSERT_FUNCTION = f"""
CREATE OR REPLACE FUNCTION navi_fact_upsert(
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
    -- own_key: the row holds the key written, not a spelling hidden behind it; only then is
    -- p_embedding (of p_key's text) its vector. apart: the user separated it (unmerge_fact).
    SELECT f.id, f.value = p_value AS same,
           coalesce(f.expires_at <= now(), false) AS expired,
           f.embedding IS NULL AS vectorless,
           f.key = p_key AS own_key,
           f.unmerged_at IS NOT NULL AS apart
    FROM memory_facts f
    WHERE f.id = coalesce((SELECT id FROM exact), (SELECT id FROM behind))
),
spellings AS MATERIALIZED (
    -- A row the user separated is never merged again by a dedupe: neither hidden, nor
    -- hiding the other spellings when it is the one written.
    SELECT f.id FROM memory_facts f
    WHERE p_dedupe AND {_OF_CATEGORY} AND f.merged_into IS NULL AND f.key_norm = p_key_norm
      AND f.unmerged_at IS NULL
      AND f.id IS DISTINCT FROM (SELECT id FROM target)
      AND NOT coalesce((SELECT t.apart FROM target t), false)
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
    SET value = p_value, embedding = CASE WHEN t.own_key THEN p_embedding END,
        source = p_source,
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
    WHERE f.id = t.id AND go.ok AND t.same
      AND NOT (t.vectorless AND p_embedding IS NOT NULL AND t.own_key)
    RETURNING 'verify'::text AS action, {_FACT_COLUMNS}
),
completed AS (
    -- The same value, and at last a vector for a fact that had none.
    UPDATE memory_facts f
    SET last_verified_at = now(), embedding = p_embedding,
        expires_at = CASE WHEN t.expired THEN {_NEW_EXPIRY} ELSE f.expires_at END
    FROM target t, go
    WHERE f.id = t.id AND go.ok AND t.same AND t.vectorless AND p_embedding IS NOT NULL
      AND t.own_key
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


def _function_of_0007() -> str:
    """0007's function text, as CREATE OR REPLACE."""
    path = Path(__file__).with_name("0007_fact_vector_index.py")
    spec = importlib.util.spec_from_file_location("navi_revision_0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.UPSERT_FUNCTION
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    op.execute("ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS unmerged_at timestamptz")
    op.execute(UPSERT_FUNCTION)


def downgrade() -> None:
    op.execute(_function_of_0007())
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS unmerged_at")
