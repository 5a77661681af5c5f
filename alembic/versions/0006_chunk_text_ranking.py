"""Chunk text is ranked BM25-style, served by an index: search_tsv, its GIN index, and per-user
text statistics.

``memory_chunks.search_tsv`` is a stored generated column, ``navi_chunk_tsv(content,
breadcrumbs)``: the 'simple' lexemes of content and breadcrumbs (lower-cased, no stemming, stop
words kept in the document and dropped from queries), read with "_" as "-" (so
``QUARTZ_RETRY_LIMIT`` is the one lexeme ``quartz-retry-limit`` beside its parts) and "/" as a
space (so ``x.toml`` finds ``/etc/x.toml``, and the path is found by all its segments); hosts,
versions and numbers the parser keeps whole itself. A regular expression for identifiers cost
as much again as the tsvector (about 0.6 ms a 2.8 KB chunk here); translate() costs nothing.
A GIN index on it finds a query's candidates, so a big user's search reads the chunks holding
a query lexeme, not all of the user's chunks.

``memory_chunk_text_stats`` holds per user the number of chunks and the lexemes they hold (the
BM25 N and average length). Statement-level triggers keep it in step with every insert and
delete of memory_chunks, whoever writes them (one upsert per statement, not per chunk).

Adding the column computes it for every existing chunk (a table rewrite: about 0.5 ms a
2.8 KB chunk here).
See docs/raw-history.md, "Raw chunks".

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
    op.execute(
        "ALTER TABLE memory_chunks ADD COLUMN search_tsv tsvector "
        "GENERATED ALWAYS AS (navi_chunk_tsv(content, breadcrumbs)) STORED"
    )
    op.execute("CREATE INDEX ix_memory_chunks_search_tsv ON memory_chunks USING gin (search_tsv)")
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
        "SELECT user_id, count(*), sum(length(search_tsv)) FROM memory_chunks GROUP BY user_id"
    )
    op.execute(
        """
        CREATE FUNCTION navi_chunk_text_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_chunk_text_stats AS s (user_id, chunks, lexemes)
            SELECT user_id, count(*), sum(length(search_tsv)) FROM added GROUP BY user_id
            ON CONFLICT (user_id) DO UPDATE
                SET chunks = s.chunks + EXCLUDED.chunks, lexemes = s.lexemes + EXCLUDED.lexemes;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION navi_chunk_text_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE memory_chunk_text_stats s
            SET chunks = s.chunks - r.chunks, lexemes = s.lexemes - r.lexemes
            FROM (SELECT user_id, count(*) AS chunks, sum(length(search_tsv)) AS lexemes
                  FROM removed GROUP BY user_id) r
            WHERE s.user_id = r.user_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_chunks_text_stats_added AFTER INSERT ON memory_chunks "
        "REFERENCING NEW TABLE AS added FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_text_stats_added()"
    )
    op.execute(
        "CREATE TRIGGER memory_chunks_text_stats_removed AFTER DELETE ON memory_chunks "
        "REFERENCING OLD TABLE AS removed FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_text_stats_removed()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_chunks_text_stats_removed ON memory_chunks")
    op.execute("DROP TRIGGER memory_chunks_text_stats_added ON memory_chunks")
    op.execute("DROP FUNCTION navi_chunk_text_stats_removed()")
    op.execute("DROP FUNCTION navi_chunk_text_stats_added()")
    op.execute("DROP TABLE memory_chunk_text_stats")
    op.execute("DROP INDEX ix_memory_chunks_search_tsv")
    op.execute("ALTER TABLE memory_chunks DROP COLUMN search_tsv")
    op.execute("DROP FUNCTION navi_chunk_tsv(text, text[])")
    op.execute("DROP FUNCTION navi_text_tsquery(text)")
    op.execute("DROP FUNCTION navi_text_tsv(text)")
