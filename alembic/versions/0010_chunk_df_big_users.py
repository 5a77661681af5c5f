"""Document frequencies are kept only for users big enough to be pruned.

Pruning (0008) serves users of 1,000 chunks or more (CHUNK_BM25_PRUNE_FROM): a smaller user's
BM25 list reads every chunk holding a query word anyway, and counts the frequencies over them.
Yet every indexed chunk paid for its lexemes' rows in ``memory_chunk_lexeme_df`` — most of them
new to the user (identifiers, numbers, paths), so an insertion into a btree far larger than
the cache: the text indexer's slowest part (docs/benchmarks.md, "What the document-frequency
table costs the indexer"). Now:

- ``memory_chunk_text_stats.df_kept``: the user's frequencies are kept. It turns true, once,
  when the user's indexed chunks reach ``navi_chunk_df_from()`` (1,000: a SQL function, so an
  operator can move it with ``CREATE OR REPLACE``); their frequencies are then counted from all
  their chunks in that statement, and kept in step from then on. It never turns false.
- the two df triggers go; the statistics triggers keep the frequencies too, *after* they update
  the user's statistics row. That row's lock orders every writer of one user (an indexer adding,
  a delete removing) around the moment the frequencies start: whoever comes second sees what
  the first committed, so no chunk is counted twice or missed.

Search prunes a user only when their frequencies are kept, and otherwise counts them over the
user's chunks (the same integers): the pruned statement stays exact for every user.

The upgrade marks the users of 1,000 chunks or more and deletes the other users' rows.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DF_FROM = 1_000
"""navi_memory.constants.CHUNK_BM25_PRUNE_FROM when this revision was written."""

_STATS_ADDED = """
    INSERT INTO memory_chunk_text_stats AS s (user_id, chunks, lexemes)
    SELECT user_id, count(*), sum(lexemes) FROM added GROUP BY user_id ORDER BY user_id
    ON CONFLICT (user_id) DO UPDATE
        SET chunks = s.chunks + EXCLUDED.chunks, lexemes = s.lexemes + EXCLUDED.lexemes;
"""
"""0006's statistics upsert (the users in user order: their rows' locks order two writers)."""

_STATS_REMOVED = """
    UPDATE memory_chunk_text_stats s
    SET chunks = s.chunks - r.chunks, lexemes = s.lexemes - r.lexemes
    FROM (SELECT user_id, count(*) AS chunks, sum(lexemes) AS lexemes
          FROM removed GROUP BY user_id) r
    WHERE s.user_id = r.user_id;
"""
"""0006's statistics update: an UPDATE, never an upsert: a user's deletion removes their row by
its own cascade, and the cascade through their chunks must not bring it back."""

_ADDED = (
    """
CREATE OR REPLACE FUNCTION navi_chunk_text_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The users' statistics rows first: their locks order two writers of one user."""
    + _STATS_ADDED
    + """    -- Users whose frequencies were kept before this statement: its chunks' lexemes.
    INSERT INTO memory_chunk_lexeme_df AS d (user_id, lexeme, df)
    SELECT a.user_id, l, count(*)
    FROM added a JOIN memory_chunk_text_stats s ON s.user_id = a.user_id AND s.df_kept,
         unnest(tsvector_to_array(a.tsv)) l
    GROUP BY a.user_id, l ORDER BY a.user_id, l
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = d.df + EXCLUDED.df;
    -- Users this statement takes to navi_chunk_df_from() chunks: all their chunks' lexemes
    -- (this statement's included), counted once; from now on kept as above.
    WITH grown AS (
        UPDATE memory_chunk_text_stats s SET df_kept = true
        WHERE s.user_id IN (SELECT user_id FROM added) AND NOT s.df_kept
          AND s.chunks >= navi_chunk_df_from()
        RETURNING s.user_id
    )
    INSERT INTO memory_chunk_lexeme_df (user_id, lexeme, df)
    SELECT t.user_id, l, count(*)
    FROM memory_chunk_terms t JOIN grown g ON g.user_id = t.user_id,
         unnest(tsvector_to_array(t.tsv)) l
    GROUP BY t.user_id, l ORDER BY t.user_id, l
    -- A full count: it replaces rows left over (df_kept set false by hand, a partial restore).
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = EXCLUDED.df;
    RETURN NULL;
END $$
"""
)

_DF_REMOVED = """
    UPDATE memory_chunk_lexeme_df d SET df = d.df - r.df
    FROM (SELECT t.user_id, l AS lexeme, count(*) AS df
          FROM removed t, unnest(tsvector_to_array(t.tsv)) l
          GROUP BY t.user_id, l) r
    WHERE d.user_id = r.user_id AND d.lexeme = r.lexeme;
    DELETE FROM memory_chunk_lexeme_df d
    USING (SELECT DISTINCT t.user_id, l AS lexeme
           FROM removed t, unnest(tsvector_to_array(t.tsv)) l) r
    WHERE d.user_id = r.user_id AND d.lexeme = r.lexeme AND d.df <= 0;
"""
"""The frequencies of the removed chunks' lexemes taken away, and rows at 0 deleted: two
statements, as one may not update a row and delete it too. A trigger body's part, here and in
0008's removal function that the downgrade brings back."""

# The statistics first (their row's lock orders this delete against an indexer counting the
# user's frequencies), then the frequencies: only kept users have rows (and a deleted user's go
# to 0, so they are deleted).
_REMOVED = (
    """
CREATE OR REPLACE FUNCTION navi_chunk_text_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN"""
    + _STATS_REMOVED
    + _DF_REMOVED
    + """    RETURN NULL;
END $$
"""
)


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memory_chunk_text_stats ADD COLUMN df_kept boolean NOT NULL DEFAULT false"
    )
    op.execute(
        "CREATE FUNCTION navi_chunk_df_from() RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE "
        f"AS 'SELECT {DF_FROM}'"
    )
    op.execute("DROP TRIGGER memory_chunk_terms_df_added ON memory_chunk_terms")
    op.execute("DROP TRIGGER memory_chunk_terms_df_removed ON memory_chunk_terms")
    op.execute("DROP FUNCTION navi_chunk_lexeme_df_added()")
    op.execute("DROP FUNCTION navi_chunk_lexeme_df_removed()")
    op.execute(
        "UPDATE memory_chunk_text_stats SET df_kept = true WHERE chunks >= navi_chunk_df_from()"
    )
    op.execute(
        "DELETE FROM memory_chunk_lexeme_df d WHERE NOT EXISTS (SELECT 1 FROM"
        " memory_chunk_text_stats s WHERE s.user_id = d.user_id AND s.df_kept)"
    )
    op.execute(_ADDED)
    op.execute(_REMOVED)
    op.execute("ANALYZE memory_chunk_text_stats, memory_chunk_lexeme_df")


def downgrade() -> None:
    # 0006's statistics functions, 0008's df triggers, and every user's frequencies again.
    for name, body in (("added", _STATS_ADDED), ("removed", _STATS_REMOVED)):
        op.execute(
            f"CREATE OR REPLACE FUNCTION navi_chunk_text_stats_{name}() RETURNS trigger"
            f" LANGUAGE plpgsql AS $$ BEGIN{body} RETURN NULL; END $$"
        )
    op.execute(
        """
        CREATE FUNCTION navi_chunk_lexeme_df_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_chunk_lexeme_df AS d (user_id, lexeme, df)
            SELECT a.user_id, l, count(*)
            FROM added a, unnest(tsvector_to_array(a.tsv)) l
            GROUP BY a.user_id, l ORDER BY a.user_id, l
            ON CONFLICT (user_id, lexeme) DO UPDATE SET df = d.df + EXCLUDED.df;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE FUNCTION navi_chunk_lexeme_df_removed() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN" + _DF_REMOVED + " RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER memory_chunk_terms_df_added AFTER INSERT ON memory_chunk_terms "
        "REFERENCING NEW TABLE AS added FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_lexeme_df_added()"
    )
    op.execute(
        "CREATE TRIGGER memory_chunk_terms_df_removed AFTER DELETE ON memory_chunk_terms "
        "REFERENCING OLD TABLE AS removed FOR EACH STATEMENT "
        "EXECUTE FUNCTION navi_chunk_lexeme_df_removed()"
    )
    op.execute("TRUNCATE memory_chunk_lexeme_df")
    op.execute(
        "INSERT INTO memory_chunk_lexeme_df (user_id, lexeme, df) "
        "SELECT t.user_id, l, count(*) FROM memory_chunk_terms t, "
        "unnest(tsvector_to_array(t.tsv)) l GROUP BY t.user_id, l"
    )
    op.execute("ALTER TABLE memory_chunk_text_stats DROP COLUMN df_kept")
    op.execute("DROP FUNCTION navi_chunk_df_from()")
