"""Bring the legacy shape to the navi-memory schema: pgvector columns, merge pointers, raw history.

Keeps every legacy fact. Exact duplicate keys that the legacy NULL-distinct unique constraint let
through (rows with user_id NULL) are merged, newest visible and the rest hidden behind it with
merged_into, never dropped; an existing merged_into column is repaired (dangling pointers cleared,
chains flattened). Legacy summaries for users that are not in navi_users get a user row; of
several summaries of one user (the legacy table had no key) only the newest is kept — each was
regenerated from all facts, so the older ones are stale copies. A table of the legacy
application's under a name this revision creates (the spec's ``memory_chunks``; ``sessions``…) is
renamed ``<name>_legacy`` with its rows, and a primary key on the legacy summary table is dropped
for the key this revision gives it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Constraint names PostgreSQL gave the legacy tables -> the names the naming convention gives.
_LEGACY_CONSTRAINT_NAMES = [
    ("navi_users", "navi_users_pkey", "pk_navi_users"),
    ("memory_facts", "memory_facts_pkey", "pk_memory_facts"),
    ("memory_facts", "memory_facts_user_id_fkey", "fk_memory_facts_user_id_navi_users"),
    ("session_memory_state", "session_memory_state_pkey", "pk_session_memory_state"),
]


def _rename_constraint(table: str, old: str, new: str) -> None:
    op.execute(
        f"""
        DO $$ BEGIN
            IF EXISTS (SELECT 1 FROM pg_constraint
                       WHERE conname = '{old}' AND conrelid = '{table}'::regclass) THEN
                ALTER TABLE {table} RENAME CONSTRAINT {old} TO {new};
            END IF;
        END $$
        """
    )


_OWN_TABLES = ("sessions", "session_messages", "memory_chunks", "kv_store")
"""The tables this revision creates. One that exists already is the legacy application's (the
spec's storage section has a ``memory_chunks`` of its own): it is set aside, not adopted."""

LEGACY_SUFFIX = "_legacy"

EMBEDDING_768 = """
    DO $$
    DECLARE
        kind oid;
        width integer;
    BEGIN
        SELECT a.atttypid, a.atttypmod INTO kind, width FROM pg_attribute a
        WHERE a.attrelid = 'memory_facts'::regclass AND a.attname = 'embedding'
          AND NOT a.attisdropped;
        IF kind = 'vector'::regtype AND width = 768 THEN
            RETURN;
        ELSIF kind = 'vector'::regtype THEN
            ALTER TABLE memory_facts ALTER COLUMN embedding TYPE vector(768)
                USING CASE WHEN vector_dims(embedding) = 768 THEN embedding::vector(768) END;
        ELSE
            ALTER TABLE memory_facts ALTER COLUMN embedding TYPE vector(768) USING NULL;
        END IF;
        RAISE NOTICE 'memory_facts.embedding was %, now vector(768): vectors of another width '
                     'were cleared (navi-memory backfill makes them again)',
                     format_type(kind, width);
    END $$
"""
"""memory_facts.embedding as vector(768), whatever a legacy database held there."""


def _set_aside(table: str) -> None:
    """Rename an existing ``table`` to ``table_legacy`` with its indexes, the sequences it owns
    and its constraints (each keeps its name through a table rename and would clash with the
    new table's, or push the new one's to a suffixed name): its rows are kept, untouched, and
    the new table takes the name. The schema is the one this revision creates its tables in
    (``current_schema()``), never a table of that name elsewhere on the search path."""
    op.execute(
        f"""
        DO $$
        DECLARE
            here name := current_schema();
            t regclass := to_regclass(format('%I.%I', current_schema(), '{table}'));
            r record;
        BEGIN
            IF t IS NULL THEN
                RETURN;
            END IF;
            FOR r IN SELECT c.relname, c.relkind FROM pg_class c
                     WHERE c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t)
                        OR c.oid IN (SELECT objid FROM pg_depend
                                     WHERE refobjid = t
                                       AND classid = 'pg_class'::regclass
                                       AND deptype IN ('a', 'i'))
                                     AND c.relkind = 'S'
            LOOP
                EXECUTE format('ALTER %s %I.%I RENAME TO %I',
                               CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'INDEX' END,
                               here, r.relname,
                               left(r.relname, 63 - length('{LEGACY_SUFFIX}'))
                               || '{LEGACY_SUFFIX}');
            END LOOP;
            -- Constraints no index stands behind (an index's rename renames its primary key
            -- or unique constraint): check, foreign key and, from PostgreSQL 18, NOT NULL
            -- constraints are named too, and the new table's would take a "1" suffix.
            FOR r IN SELECT conname FROM pg_constraint
                     WHERE conrelid = t AND contype IN ('c', 'f', 'n', 't')
            LOOP
                EXECUTE format('ALTER TABLE %I.%I RENAME CONSTRAINT %I TO %I',
                               here, '{table}', r.conname,
                               left(r.conname, 63 - length('{LEGACY_SUFFIX}'))
                               || '{LEGACY_SUFFIX}');
            END LOOP;
            EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', here, '{table}',
                           '{table}{LEGACY_SUFFIX}');
        END $$
        """
    )


def _put_back(table: str) -> None:
    """Undo _set_aside's table rename (its indexes, sequences and constraints keep the
    suffix)."""
    op.execute(
        f"""
        DO $$ BEGIN
            IF to_regclass(format('%I.%I', current_schema(), '{table}{LEGACY_SUFFIX}'))
                   IS NOT NULL
               AND to_regclass(format('%I.%I', current_schema(), '{table}')) IS NULL THEN
                EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', current_schema(),
                               '{table}{LEGACY_SUFFIX}', '{table}');
            END IF;
        END $$
        """
    )


def _drop_primary_key(table: str) -> None:
    """Drop ``table``'s primary key, whatever its name (a legacy ``memory_summary`` keyed by
    user): this revision gives the table a key of its own, and keeps one row a user itself.
    The table is the one the revision's unqualified statements alter (the search path's)."""
    op.execute(
        f"""
        DO $$
        DECLARE pk name;
        BEGIN
            SELECT conname INTO pk FROM pg_constraint
            WHERE conrelid = '{table}'::regclass AND contype = 'p';
            IF pk IS NOT NULL THEN
                EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', pk);
            END IF;
        END $$
        """
    )


def _stamp_columns_not_null(table: str, *columns: str) -> None:
    for column in columns:
        op.execute(f"UPDATE {table} SET {column} = now() WHERE {column} IS NULL")
        op.execute(
            f"ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT now(), "
            f"ALTER COLUMN {column} SET NOT NULL"
        )


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    for table, old, new in _LEGACY_CONSTRAINT_NAMES:
        _rename_constraint(table, old, new)

    # --- navi_users -----------------------------------------------------------------------
    _stamp_columns_not_null("navi_users", "created_at")

    # --- memory_facts ---------------------------------------------------------------------
    op.execute("ALTER TABLE memory_facts ALTER COLUMN id TYPE bigint")
    op.execute(
        "ALTER SEQUENCE IF EXISTS memory_facts_id_seq AS bigint MAXVALUE 9223372036854775807"
    )
    op.execute(
        """
        ALTER TABLE memory_facts
            ADD COLUMN IF NOT EXISTS embedding vector(768),
            ADD COLUMN IF NOT EXISTS source text,
            ADD COLUMN IF NOT EXISTS confidence integer,
            ADD COLUMN IF NOT EXISTS expires_at timestamptz,
            ADD COLUMN IF NOT EXISTS last_verified_at timestamptz,
            ADD COLUMN IF NOT EXISTS source_context text,
            ADD COLUMN IF NOT EXISTS merged_into bigint
        """
    )
    _stamp_columns_not_null("memory_facts", "created_at", "updated_at")
    # A database that ran the original application's migrate script may hold its embedding
    # column of another width (another model) or of none: made vector(768), keeping the
    # vectors that are 768 wide (the others are another model's: backfill makes them again).
    op.execute(EMBEDDING_768)
    # A database that ran the original application's migrate script already has merged_into,
    # possibly as integer, possibly pointing at rows since deleted, possibly in chains: make every
    # pointer name an existing row at the end of its chain, so it always points at a visible row.
    op.execute("ALTER TABLE memory_facts ALTER COLUMN merged_into TYPE bigint")
    op.execute(
        """
        UPDATE memory_facts AS f SET merged_into = NULL
        WHERE merged_into IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM memory_facts t WHERE t.id = f.merged_into)
        """
    )
    op.execute(
        """
        WITH RECURSIVE chain (id, root, depth) AS (
            SELECT id, merged_into, 1 FROM memory_facts WHERE merged_into IS NOT NULL
            UNION ALL
            SELECT chain.id, t.merged_into, chain.depth + 1
            FROM chain JOIN memory_facts t ON t.id = chain.root
            WHERE t.merged_into IS NOT NULL AND chain.depth < 100
        ),
        roots AS (
            SELECT DISTINCT ON (id) id, root FROM chain ORDER BY id, depth DESC
        )
        UPDATE memory_facts AS f SET merged_into = roots.root
        FROM roots WHERE f.id = roots.id AND f.merged_into IS DISTINCT FROM roots.root
        """
    )
    # A cycle (a -> b -> a) has no visible end: its members, still hidden targets, come back.
    op.execute(
        """
        UPDATE memory_facts SET merged_into = NULL
        WHERE merged_into IS NOT NULL
          AND id IN (SELECT merged_into FROM memory_facts WHERE merged_into IS NOT NULL)
        """
    )
    # Legacy unique constraints go (whatever their name): uniqueness moves to a partial index
    # over visible rows, which is what lets exact legacy duplicates stay, hidden.
    op.execute(
        """
        DO $$ DECLARE c record; BEGIN
            FOR c IN SELECT conname FROM pg_constraint
                     WHERE conrelid = 'memory_facts'::regclass AND contype = 'u' LOOP
                EXECUTE format('ALTER TABLE memory_facts DROP CONSTRAINT %I', c.conname);
            END LOOP;
        END $$
        """
    )
    # The legacy columns may allow NULL (the original application's CREATE TABLE did not say
    # NOT NULL): a fact without a key gets one of its own, without a value the empty text,
    # without a category "general" (where that makes it a duplicate, the merge below keeps
    # the newest visible).
    op.execute("UPDATE memory_facts SET key = 'unnamed_' || id WHERE key IS NULL")
    op.execute("UPDATE memory_facts SET value = '' WHERE value IS NULL")
    op.execute("UPDATE memory_facts SET category = 'general' WHERE category IS NULL")
    op.execute(
        "ALTER TABLE memory_facts ALTER COLUMN category SET NOT NULL, "
        "ALTER COLUMN key SET NOT NULL, ALTER COLUMN value SET NOT NULL"
    )
    op.execute(
        """
        WITH ranked AS (
            SELECT id,
                   first_value(id) OVER (
                       PARTITION BY user_id, category, key
                       ORDER BY updated_at DESC, id DESC
                   ) AS survivor
            FROM memory_facts
            WHERE merged_into IS NULL
        )
        UPDATE memory_facts AS f
        SET merged_into = ranked.survivor
        FROM ranked
        WHERE f.id = ranked.id AND ranked.id <> ranked.survivor
        """
    )
    # Rows that were hidden behind a duplicate just hidden follow it to the survivor.
    op.execute(
        """
        UPDATE memory_facts AS f SET merged_into = t.merged_into
        FROM memory_facts AS t
        WHERE f.merged_into = t.id AND t.merged_into IS NOT NULL
        """
    )
    op.execute(
        """
        ALTER TABLE memory_facts
            ADD CONSTRAINT fk_memory_facts_merged_into_memory_facts
            FOREIGN KEY (merged_into) REFERENCES memory_facts (id) ON DELETE CASCADE
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_facts_user_id_category_key ON memory_facts "
        "(user_id, category, key) NULLS NOT DISTINCT WHERE merged_into IS NULL"
    )
    op.execute(
        "CREATE INDEX ix_memory_facts_embedding_hnsw ON memory_facts "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    op.execute("CREATE INDEX ix_memory_facts_expires_at ON memory_facts (expires_at)")
    op.execute("CREATE INDEX ix_memory_facts_source_category ON memory_facts (source, category)")
    op.execute("CREATE INDEX ix_memory_facts_merged_into ON memory_facts (merged_into)")

    # --- memory_summary -------------------------------------------------------------------
    op.execute(
        """
        INSERT INTO navi_users (id)
        SELECT DISTINCT user_id FROM memory_summary
        WHERE user_id IS NOT NULL
        ON CONFLICT (id) DO NOTHING
        """
    )
    _drop_primary_key("memory_summary")
    op.execute("ALTER TABLE memory_summary ADD COLUMN id bigserial")
    op.execute("ALTER TABLE memory_summary ADD CONSTRAINT pk_memory_summary PRIMARY KEY (id)")
    op.execute("UPDATE memory_summary SET content = '' WHERE content IS NULL")
    op.execute("ALTER TABLE memory_summary ALTER COLUMN content SET NOT NULL")
    _stamp_columns_not_null("memory_summary", "updated_at")
    # The legacy table had no key, so a user could hold several summaries; each is regenerated
    # from all facts, so the newest is the current one and the older ones are superseded copies.
    op.execute(
        """
        DELETE FROM memory_summary AS older
        USING memory_summary AS newer
        WHERE older.user_id IS NOT DISTINCT FROM newer.user_id
          AND (newer.updated_at, newer.id) > (older.updated_at, older.id)
        """
    )
    op.execute(
        """
        ALTER TABLE memory_summary
            ADD CONSTRAINT fk_memory_summary_user_id_navi_users
            FOREIGN KEY (user_id) REFERENCES navi_users (id) ON DELETE CASCADE
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_summary_user_id ON memory_summary (user_id) "
        "NULLS NOT DISTINCT"
    )

    # --- extraction state: its owner, so it is read by that owner only and goes with them ----
    op.execute(
        """
        ALTER TABLE session_memory_state
            ADD COLUMN user_id uuid,
            ADD CONSTRAINT fk_session_memory_state_user_id_navi_users
                FOREIGN KEY (user_id) REFERENCES navi_users (id) ON DELETE CASCADE
        """
    )

    for table in _OWN_TABLES:
        _set_aside(table)

    # --- sessions and their messages ------------------------------------------------------
    op.execute(
        """
        CREATE TABLE sessions (
            id text NOT NULL,
            user_id uuid NOT NULL,
            title text,
            last_active timestamptz DEFAULT now() NOT NULL,
            session_metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
            created_at timestamptz DEFAULT now() NOT NULL,
            updated_at timestamptz DEFAULT now() NOT NULL,
            CONSTRAINT pk_sessions PRIMARY KEY (id),
            CONSTRAINT fk_sessions_user_id_navi_users FOREIGN KEY (user_id)
                REFERENCES navi_users (id) ON DELETE CASCADE
        )
        """
    )
    op.execute("CREATE INDEX ix_sessions_user_id_last_active ON sessions (user_id, last_active)")
    op.execute(
        """
        CREATE TABLE session_messages (
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            session_id text NOT NULL,
            seq integer NOT NULL,
            role text NOT NULL,
            content text DEFAULT '' NOT NULL,
            tool_name text,
            tool_args jsonb,
            kind text DEFAULT 'message' NOT NULL,
            is_context boolean DEFAULT true NOT NULL,
            created_at timestamptz DEFAULT now() NOT NULL,
            CONSTRAINT pk_session_messages PRIMARY KEY (id),
            CONSTRAINT uq_session_messages_session_id_seq UNIQUE (session_id, seq),
            CONSTRAINT fk_session_messages_session_id_sessions FOREIGN KEY (session_id)
                REFERENCES sessions (id) ON DELETE CASCADE
        )
        """
    )

    # --- raw chunks -----------------------------------------------------------------------
    op.execute(
        """
        CREATE TABLE memory_chunks (
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            user_id uuid NOT NULL,
            session_id text NOT NULL,
            content text NOT NULL,
            content_hash text NOT NULL,
            start_seq integer NOT NULL,
            end_seq integer NOT NULL,
            started_at timestamptz NOT NULL,
            ended_at timestamptz NOT NULL,
            breadcrumbs text[] DEFAULT '{}'::text[] NOT NULL,
            embedding vector(768),
            created_at timestamptz DEFAULT now() NOT NULL,
            CONSTRAINT pk_memory_chunks PRIMARY KEY (id),
            CONSTRAINT uq_memory_chunks_user_id_session_id_content_hash
                UNIQUE (user_id, session_id, content_hash),
            CONSTRAINT fk_memory_chunks_user_id_navi_users FOREIGN KEY (user_id)
                REFERENCES navi_users (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_memory_chunks_user_id_session_id_ended_at "
        "ON memory_chunks (user_id, session_id, ended_at DESC)"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunks_content_fts ON memory_chunks "
        "USING gin (to_tsvector('simple'::regconfig, content))"
    )
    op.execute("CREATE INDEX ix_memory_chunks_breadcrumbs ON memory_chunks USING gin (breadcrumbs)")
    op.execute(
        "CREATE INDEX ix_memory_chunks_embedding_hnsw ON memory_chunks "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )

    # --- sketches (key/value) -------------------------------------------------------------
    op.execute(
        """
        CREATE TABLE kv_store (
            id bigint GENERATED BY DEFAULT AS IDENTITY,
            user_id uuid NOT NULL,
            scope text NOT NULL,
            session_id text,
            key text NOT NULL,
            value text NOT NULL,
            created_at timestamptz DEFAULT now() NOT NULL,
            updated_at timestamptz DEFAULT now() NOT NULL,
            CONSTRAINT pk_kv_store PRIMARY KEY (id),
            CONSTRAINT uq_kv_store_user_id_scope_session_id_key
                UNIQUE NULLS NOT DISTINCT (user_id, scope, session_id, key),
            CONSTRAINT fk_kv_store_user_id_navi_users FOREIGN KEY (user_id)
                REFERENCES navi_users (id) ON DELETE CASCADE
        )
        """
    )


def downgrade() -> None:
    """Back to the legacy shape. Hidden rows become visible again; vectors are dropped.

    Raw history, sessions and sketches did not exist in the legacy shape and are dropped with
    their tables; a legacy table the upgrade set aside (``memory_chunks_legacy``…) takes its
    name back. A legacy summary's primary key is not remade.
    """
    op.execute("DROP TABLE IF EXISTS kv_store")
    op.execute("DROP TABLE IF EXISTS memory_chunks")
    op.execute("DROP TABLE IF EXISTS session_messages")
    op.execute("DROP TABLE IF EXISTS sessions")
    for table in _OWN_TABLES:
        _put_back(table)

    op.execute("ALTER TABLE session_memory_state DROP COLUMN IF EXISTS user_id")
    op.execute("DROP INDEX IF EXISTS uq_memory_summary_user_id")
    op.execute(
        "ALTER TABLE memory_summary DROP CONSTRAINT IF EXISTS fk_memory_summary_user_id_navi_users"
    )
    op.execute("ALTER TABLE memory_summary DROP COLUMN IF EXISTS id")
    op.execute("ALTER TABLE memory_summary ALTER COLUMN content DROP NOT NULL")
    op.execute("ALTER TABLE memory_summary ALTER COLUMN updated_at DROP NOT NULL")

    for index in (
        "ix_memory_facts_merged_into",
        "ix_memory_facts_source_category",
        "ix_memory_facts_expires_at",
        "ix_memory_facts_embedding_hnsw",
        "uq_memory_facts_user_id_category_key",
    ):
        op.execute(f"DROP INDEX IF EXISTS {index}")
    op.execute(
        "ALTER TABLE memory_facts "
        "DROP CONSTRAINT IF EXISTS fk_memory_facts_merged_into_memory_facts"
    )
    op.execute(
        """
        ALTER TABLE memory_facts
            DROP COLUMN IF EXISTS merged_into,
            DROP COLUMN IF EXISTS source_context,
            DROP COLUMN IF EXISTS last_verified_at,
            DROP COLUMN IF EXISTS expires_at,
            DROP COLUMN IF EXISTS confidence,
            DROP COLUMN IF EXISTS source,
            DROP COLUMN IF EXISTS embedding
        """
    )
    # NULL-distinct, as the legacy constraint was: the formerly hidden duplicates (user_id NULL)
    # fit under it again.
    op.execute(
        "ALTER TABLE memory_facts ADD CONSTRAINT memory_facts_user_id_category_key_key "
        "UNIQUE (user_id, category, key)"
    )
    op.execute("ALTER TABLE memory_facts ALTER COLUMN created_at DROP NOT NULL")
    op.execute("ALTER TABLE memory_facts ALTER COLUMN updated_at DROP NOT NULL")
    op.execute("ALTER TABLE navi_users ALTER COLUMN created_at DROP NOT NULL")

    for table, old, new in _LEGACY_CONSTRAINT_NAMES:
        _rename_constraint(table, new, old)
    # The vector extension stays: other databases objects may use it, and dropping an
    # extension is the DBA's call.
