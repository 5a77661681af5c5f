"""Chunk text is ranked BM25-style, served by a GIN index kept off the write path:
memory_chunk_terms, its queue, and per-user text statistics.

``navi_chunk_tsv(content, breadcrumbs)`` makes a chunk's searchable text: the 'simple' lexemes
of content and breadcrumbs (lower-cased, no stemming, stop words kept in the document and
dropped from queries), read with "_" as "-" (so ``QUARTZ_RETRY_LIMIT`` is the one lexeme
``quartz-retry-limit`` beside its parts) and "/" as a space (so ``x.toml`` finds
``/etc/x.toml``, and the path is found by all its segments); hosts, versions and numbers the
parser keeps whole itself. A regular expression for identifiers cost as much again as the
tsvector (about 0.6 ms a 2.8 KB chunk here); translate() costs nothing.

The tsvector and its GIN insertion cost about 1.7 ms a 3 KB chunk, five times the rest of a
chunk's write, so neither is on add_chunks' path (the same move 0004 made for HNSW):

- ``memory_chunk_text_queue`` holds the ids of chunks whose text is not indexed yet; add_chunks
  fills it in the statement that writes the chunks (a row a chunk, no foreign key check);
- ``memory_chunk_terms`` holds each indexed chunk's tsvector (with its owner, session, end time
  and length, so ranking never reads memory_chunks for a candidate), GIN-indexed; the chunk
  indexer moves queued chunks into it in batches;
- ``memory_chunk_text_stats`` holds per user the number of indexed chunks and the lexemes they
  hold (the BM25 N and average length). Statement-level triggers on memory_chunk_terms keep it
  in step with every insert and delete (cascades from memory_chunks included), whoever writes.

Search ranks the GIN candidates and, exactly, the user's queued chunks (their tsvectors made on
the fly, their counts added to the statistics), so scores never depend on how far the indexer
got. Existing chunks are indexed here, the GIN index built after the copy (faster than row by
row). See docs/raw-history.md, "Text index".

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # IMMUTABLE holds: 'simple' is pinned by name (array_to_string is only STABLE in the
    # catalogue because of other element types). Why translate(): the parser splits
    # QUARTZ_RETRY_LIMIT at "_" but keeps quartz-retry-limit as one lexeme (beside its parts);
    # and it keeps /etc/x.toml as one lexeme that a query for x.toml would never match.
    op.execute(
        """
        CREATE FUNCTION navi_text_tsv(body text) RETURNS tsvector
        LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
        RETURN to_tsvector('simple'::regconfig, translate(body, '_/', '- '))
        """
    )
    op.execute(
        r"""
        CREATE FUNCTION navi_chunk_tsv(content text, breadcrumbs text[]) RETURNS tsvector
        LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
        RETURN navi_text_tsv(content || E'\n' || array_to_string(breadcrumbs, E'\n'))
        """
    )
    # A query's lexemes OR-ed, each quoted as a tsquery operand (quotes doubled, backslashes
    # escaped). IMMUTABLE, so a custom plan evaluates it while planning and the planner sees
    # the words and their frequency: the per-user btree for a small user, GIN for rare words.
    op.execute(
        r"""
        CREATE FUNCTION navi_text_tsquery(body text) RETURNS tsquery
        LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
        RETURN (SELECT CAST(string_agg(
                    '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
                    AS tsquery)
                FROM unnest(tsvector_to_array(navi_text_tsv(body))) l)
        """
    )
    # No foreign key: its check is a query per row, most of what a queue row costs add_chunks.
    # Session and user deletes remove their chunks' rows first; a row whose chunk went by
    # SQL of its own joins nothing, and the indexer drops it.
    op.execute(
        """
        CREATE TABLE memory_chunk_text_queue (
            chunk_id bigint NOT NULL,
            user_id uuid NOT NULL,
            CONSTRAINT pk_memory_chunk_text_queue PRIMARY KEY (chunk_id)
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_text_queue_user_id ON memory_chunk_text_queue (user_id)"
    )
    op.execute(
        """
        CREATE TABLE memory_chunk_terms (
            chunk_id bigint NOT NULL,
            user_id uuid NOT NULL,
            session_id text NOT NULL,
            ended_at timestamptz NOT NULL,
            lexemes integer NOT NULL,
            tsv tsvector NOT NULL,
            CONSTRAINT pk_memory_chunk_terms PRIMARY KEY (chunk_id),
            CONSTRAINT fk_memory_chunk_terms_chunk_id_memory_chunks FOREIGN KEY (chunk_id)
                REFERENCES memory_chunks (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv) "
        "SELECT id, user_id, session_id, ended_at, length(tsv), tsv "
        "FROM (SELECT id, user_id, session_id, ended_at, "
        "             navi_chunk_tsv(content, breadcrumbs) AS tsv FROM memory_chunks) c"
    )
    op.execute(
        "CREATE INDEX ix_memory_chunk_terms_user_id_session_id "
        "ON memory_chunk_terms (user_id, session_id)"
    )
    # A short pending list (fastupdate's buffer of unmerged entries, 4 MB by default): every
    # search scans all of it, and at 4 MB that cost more than the index saved (the planner
    # then read the whole table instead). Merging 128 kB at a time indexes as fast here.
    op.execute(
        "CREATE INDEX ix_memory_chunk_terms_tsv ON memory_chunk_terms USING gin (tsv) "
        "WITH (gin_pending_list_limit = 128)"
    )
    op.execute(
        """
        CREATE TABLE memory_chunk_text_stats (
            user_id uuid NOT NULL,
            chunks bigint NOT NULL,
            lexemes bigint NOT NULL,
            CONSTRAINT pk_memory_chunk_text_stats PRIMARY KEY (user_id),
            CONSTRAINT fk_memory_chunk_text_stats_user_id_navi_users FOREIGN KEY (user_id)
                REFERENCES navi_users (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "INSERT INTO memory_chunk_text_stats (user_id, chunks, lexemes) "
        "SELECT user_id, count(*), sum(lexemes) FROM memory_chunk_terms GROUP BY user_id"
    )
    # Users in a fixed order: two indexers adding the same users' chunks lock their rows in
    # the same order, so they queue behind each other instead of deadlocking.
    op.execute(
        """
        CREATE FUNCTION navi_chunk_text_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_chunk_text_stats AS s (user_id, chunks, lexemes)
            SELECT user_id, count(*), sum(lexemes) FROM added GROUP BY user_id ORDER BY user_id
            ON CONFLICT (user_id) DO UPDATE
                SET chunks = s.chunks + EXCLUDED.chunks, lexemes = s.lexemes + EXCLUDED.lexemes;
            RETURN NULL;
        END $$
        """
    )
    # An UPDATE, never an upsert: a user's deletion removes their row by its own cascade, and
    # the cascade through their chunks must not bring it back.
    op.execute(
        """
        CREATE FUNCTION navi_chunk_text_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE memory_chunk_text_stats s
            SET chunks = s.chunks - r.chunks, lexemes = s.lexemes - r.lexemes
            FROM (SELECT user_id, count(*) AS chunks, sum(lexemes) AS lexemes
                  FROM removed GROUP BY user_id) r
            WHERE s.user_id = r.user_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_chunk_terms_stats_added AFTER INSERT ON memory_chunk_terms "
        "REFERENCING NEW TABLE AS added FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_text_stats_added()"
    )
    op.execute(
        "CREATE TRIGGER memory_chunk_terms_stats_removed AFTER DELETE ON memory_chunk_terms "
        "REFERENCING OLD TABLE AS removed FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_text_stats_removed()"
    )


def downgrade() -> None:
    op.execute("DROP TABLE memory_chunk_text_stats")
    op.execute("DROP TABLE memory_chunk_terms")
    op.execute("DROP TABLE memory_chunk_text_queue")
    op.execute("DROP FUNCTION navi_chunk_text_stats_removed()")
    op.execute("DROP FUNCTION navi_chunk_text_stats_added()")
    op.execute("DROP FUNCTION navi_chunk_tsv(text, text[])")
    op.execute("DROP FUNCTION navi_text_tsquery(text)")
    op.execute("DROP FUNCTION navi_text_tsv(text)")
