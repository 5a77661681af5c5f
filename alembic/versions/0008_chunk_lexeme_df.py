"""Per-user document frequency of every lexeme, so a big user's BM25 search reads only the
chunks that can reach the top (exact MaxScore pruning), and chunk tsvectors stored inline.

- ``memory_chunk_lexeme_df (user_id, lexeme, df)``: how many of the user's indexed chunks hold
  each lexeme. Statement-level triggers on memory_chunk_terms keep it in step with every insert
  and delete (cascades from memory_chunks and navi_users included), whoever writes, like
  memory_chunk_text_stats (0006). With it, search knows every query word's idf before it reads
  a chunk, so it knows each word's highest possible contribution; see ``ranked_text_sql``
  (``prune``) and docs/raw-history.md, "Pruning". ``fillfactor = 70``: the indexer's upserts
  raise ``df`` in place, and free room on the page keeps those updates HOT (no index entry).
- ``memory_chunk_terms`` gets ``toast_tuple_target = 8160``: a tsvector up to about 8 kB stays
  in its row instead of going compressed to TOAST, so scoring a candidate reads no TOAST page
  and decompresses nothing (small users' searches 2.6 → 1.6 ms at 1M chunks here). Rows written
  before this revision stay where they are until ``VACUUM FULL memory_chunk_terms`` (optional;
  about a minute a million chunks, under an exclusive lock).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No foreign key: its check is a query per new (user, lexeme), and every row goes with the
    # user's chunks anyway (the delete trigger below removes a row whose df reaches 0).
    op.execute(
        """
        CREATE TABLE memory_chunk_lexeme_df (
            user_id uuid NOT NULL,
            lexeme text NOT NULL,
            df integer NOT NULL,
            CONSTRAINT pk_memory_chunk_lexeme_df PRIMARY KEY (user_id, lexeme)
        ) WITH (fillfactor = 70)
        """
    )
    op.execute(
        "INSERT INTO memory_chunk_lexeme_df (user_id, lexeme, df) "
        "SELECT t.user_id, l, count(*) FROM memory_chunk_terms t, "
        "unnest(tsvector_to_array(t.tsv)) l GROUP BY t.user_id, l"
    )
    # Rows in key order: two indexers adding the same users' lexemes lock them in the same
    # order, so one waits for the other instead of deadlocking.
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
    # Two statements: one statement may not update a row and delete it too. A user whose
    # rows are gone already (their own cascade) updates nothing.
    op.execute(
        """
        CREATE FUNCTION navi_chunk_lexeme_df_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE memory_chunk_lexeme_df d SET df = d.df - r.df
            FROM (SELECT t.user_id, l AS lexeme, count(*) AS df
                  FROM removed t, unnest(tsvector_to_array(t.tsv)) l
                  GROUP BY t.user_id, l) r
            WHERE d.user_id = r.user_id AND d.lexeme = r.lexeme;
            DELETE FROM memory_chunk_lexeme_df d
            USING (SELECT DISTINCT t.user_id, l AS lexeme
                   FROM removed t, unnest(tsvector_to_array(t.tsv)) l) r
            WHERE d.user_id = r.user_id AND d.lexeme = r.lexeme AND d.df <= 0;
            RETURN NULL;
        END $$
        """
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
    op.execute("ALTER TABLE memory_chunk_terms SET (toast_tuple_target = 8160)")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_chunk_terms RESET (toast_tuple_target)")
    op.execute("DROP TRIGGER memory_chunk_terms_df_removed ON memory_chunk_terms")
    op.execute("DROP TRIGGER memory_chunk_terms_df_added ON memory_chunk_terms")
    op.execute("DROP TABLE memory_chunk_lexeme_df")
    op.execute("DROP FUNCTION navi_chunk_lexeme_df_removed()")
    op.execute("DROP FUNCTION navi_chunk_lexeme_df_added()")
