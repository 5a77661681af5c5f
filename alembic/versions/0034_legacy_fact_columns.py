"""Facts adopted from a legacy database hold a category, a key and a value, and their
embedding column is vector(768): what 0002 now makes of a legacy database, for one it adopted
before.

Two gaps of 0002's adoption, found by a review on legacy data:

- the original application's ``memory_facts`` may allow NULL in ``category``, ``key`` and
  ``value`` (its CREATE TABLE did not say NOT NULL). 0002 kept such rows and the columns
  nullable, and one such row made every read of its user (listing, search, export) fail on a
  fact without a key. A fact without a key gets ``unnamed_<id>``, without a value the empty
  text, without a category ``general`` — where the user holds a visible ``general`` fact of
  that key already, the row is hidden behind it (``merged_into``, undoable), the rows behind
  it follow; then the three columns are NOT NULL;
- a legacy ``embedding`` column of another width (``vector(1024)``: another model) or none
  (``vector``) was kept as it was: with vectors in it a later revision stopped the migration
  half way, without any every fact write failed at head ("expected 1024 dimensions"). The
  column becomes vector(768), keeping the vectors 768 wide (0002's step, which a database
  still at 0001 now takes there).

Both are no-ops on a database navi-memory created. Downgrade changes nothing: the repaired rows,
the NOT NULL columns and the column type are what 0033's code expects.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | Sequence[str] | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EMBEDDING_768 = """
    DO $$
    DECLARE
        kind oid;
        width integer;
        defs text[];
        def text;
    BEGIN
        SELECT a.atttypid, a.atttypmod INTO kind, width FROM pg_attribute a
        WHERE a.attrelid = 'memory_facts'::regclass AND a.attname = 'embedding'
          AND NOT a.attisdropped;
        IF kind = 'vector'::regtype AND width = 768 THEN
            RETURN;
        END IF;
        -- The fact-vector queue's triggers (0007 on) name the column in their conditions: a
        -- column's type cannot change under them, so they are made again around the change.
        SELECT array_agg(pg_get_triggerdef(t.oid)) INTO defs FROM pg_trigger t
        WHERE t.tgrelid = 'memory_facts'::regclass AND NOT t.tgisinternal;
        FOR def IN SELECT t.tgname FROM pg_trigger t
                   WHERE t.tgrelid = 'memory_facts'::regclass AND NOT t.tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON memory_facts', def);
        END LOOP;
        IF kind = 'vector'::regtype THEN
            ALTER TABLE memory_facts ALTER COLUMN embedding TYPE vector(768)
                USING CASE WHEN vector_dims(embedding) = 768 THEN embedding::vector(768) END;
        ELSE
            ALTER TABLE memory_facts ALTER COLUMN embedding TYPE vector(768) USING NULL;
        END IF;
        FOREACH def IN ARRAY coalesce(defs, ARRAY[]::text[]) LOOP
            EXECUTE def;
        END LOOP;
        RAISE NOTICE 'memory_facts.embedding was %, now vector(768): vectors of another width '
                     'were cleared (navi-memory backfill makes them again)',
                     format_type(kind, width);
    END $$
"""
"""0002's EMBEDDING_768, with the table's triggers made again around the change (0002 runs
before there are any)."""


def upgrade() -> None:
    op.execute("UPDATE memory_facts SET key = 'unnamed_' || id WHERE key IS NULL")
    op.execute("UPDATE memory_facts SET value = '' WHERE value IS NULL")
    # A visible row without a category that would collide with a visible "general" row of its
    # key (the unique index over visible rows) is hidden behind it, and so are its own.
    op.execute(
        """
        UPDATE memory_facts f SET merged_into = g.id
        FROM memory_facts g
        WHERE f.category IS NULL AND f.merged_into IS NULL
          AND g.category = 'general' AND g.merged_into IS NULL
          AND g.user_id IS NOT DISTINCT FROM f.user_id AND g.key = f.key
        """
    )
    op.execute(
        """
        UPDATE memory_facts h SET merged_into = f.merged_into
        FROM memory_facts f
        WHERE h.merged_into = f.id AND f.category IS NULL AND f.merged_into IS NOT NULL
        """
    )
    op.execute("UPDATE memory_facts SET category = 'general' WHERE category IS NULL")
    op.execute(
        "ALTER TABLE memory_facts ALTER COLUMN category SET NOT NULL, "
        "ALTER COLUMN key SET NOT NULL, ALTER COLUMN value SET NOT NULL"
    )
    op.execute(_EMBEDDING_768)


def downgrade() -> None:
    # The repaired rows and the column type stay: 0033's code reads them as they are now (a
    # database navi-memory created had NOT NULL columns and vector(768) from the start).
    pass
