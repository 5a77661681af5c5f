"""The parts of a file name, a host or an e-mail address are words of a chunk too: "settings"
finds "settings.py", "bob" finds "bob@example.com"; the tsvectors made the old way are made again.

The 'simple' parser reads "settings.py", "README.md", "node.js", "example.com" and
"bob@example.com" as one token each (types ``host``, ``file``, ``email``) and makes it one
lexeme, with no part beside it as it gives a hyphenated word's: a query for "settings" or
"readme" found nothing, where the spec's ILIKE (and ``CHUNK_TEXT_RANKING=terms``) found them
(found by a review on the real database). ``navi_text_tsv`` now adds, after the text's own
lexemes, those of its compound lexemes' parts — a lexeme with a letter beside a "." or "@":
``settings``, ``py``; ``bob``, ``example``, ``com`` — on both sides of the match alike: a query
for "settings.py" asks for the whole and its parts, which a chunk holding it holds. Numbers
("12.5", "v1.2.3") are not split. A part's frequency is one per distinct compound, not per
occurrence. The parts' text is bounded (PARTS_MAX_CHARS), so a chunk of nothing but host
names keeps its tsvector under PostgreSQL's 1 MB. Made from the lexemes (``navi_text_parts``,
plain SQL), the tsvector costs 5–15 % more than 0023's on the benchmark's chunks, every one of
which holds a host or a file name; parsing the text again for its compound tokens cost 2.3×.

The stored data made by the old function is brought in line as 0023 brought it: the chunks
whose text may hold such a lexeme (a letter beside a "." or "@": most chunks that end a
sentence with a period) are made again, and of those only
the tsvectors that differ are rewritten, their memory_chunk_terms rows deleted and inserted so
that the statement triggers keep the statistics and document frequencies, and their tsvectors
made ahead on the text queue made again. The downgrade does the same with 0023's function.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PARTS_MAX_CHARS = 20_000
"""At most this many characters of a text's compound lexemes' parts are kept (whole parts
only): past them, in a chunk of more than 20,000 characters of host and file names, a compound
gets no parts, and a query for it finds the chunk by the whole but does not count it hit."""

_COMPOUND = "'[[:alpha:]][.@]|[.@][[:alpha:]]'"
"""A compound lexeme: a letter beside a "." or "@" ("settings.py", "bob@example.com",
"e.g"), not a number ("12.5", "v1.2.3" keep their digits together)."""

_PARTS = f"""
    CREATE FUNCTION navi_text_parts(whole tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN whole || coalesce(
        to_tsvector('simple'::regconfig, (
            -- Cut at a space: a part cut in two would be a word the text does not hold.
            SELECT regexp_replace(left(p.parts, {PARTS_MAX_CHARS} + 1), '\\s*\\S*$', '')
            FROM (SELECT string_agg(translate(l, '.@', '  '), ' ') || ' ' AS parts
                  FROM unnest(tsvector_to_array(whole)) l
                  WHERE (strpos(l, '.') > 0 OR strpos(l, '@') > 0) AND l ~ {_COMPOUND}) p)),
        ''::tsvector)
    """
"""``whole`` (a 'simple' tsvector), then the lexemes of its compound lexemes' parts: from the
lexemes, not the text parsed again (which cost 2.3× the tsvector; this costs ≈ 5–15 %)."""

_OLD_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN to_tsvector('simple'::regconfig, translate(navi_text_spelling(body), '_/', '- '))
    """
"""0023's function."""

_NEW_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN navi_text_parts(
        to_tsvector('simple'::regconfig, translate(navi_text_spelling(body), '_/', '- ')))
    """
"""0023's, with the compound tokens' parts."""


def _realign() -> None:
    """The stored tsvectors made by the other function made again by navi_chunk_tsv, where
    they differ (0023's _realign, for the texts that may hold a compound token)."""
    text = "c.content || E'\\n' || array_to_string(c.breadcrumbs, E'\\n')"
    op.execute(
        "CREATE TEMPORARY TABLE navi_0024_remade AS"
        " SELECT c.id, navi_chunk_tsv(c.content, c.breadcrumbs) AS tsv FROM memory_chunks c"
        f" WHERE {text} ~ {_COMPOUND}"
    )
    op.execute(
        "UPDATE memory_chunk_text_queue q SET tsv = r.tsv FROM navi_0024_remade r"
        " WHERE q.chunk_id = r.id AND q.tsv IS NOT NULL AND q.tsv <> r.tsv"
    )
    op.execute(
        """
        CREATE TEMPORARY TABLE navi_0024_moved AS
        SELECT t.chunk_id, t.user_id, t.session_id, t.ended_at, r.tsv
        FROM memory_chunk_terms t JOIN navi_0024_remade r ON r.id = t.chunk_id
        WHERE t.tsv <> r.tsv
        """
    )
    # As the indexer and the deletes write them: the removal trigger takes the old lexemes
    # away, the insert trigger adds the new ones.
    op.execute(
        "DELETE FROM memory_chunk_terms t USING navi_0024_moved m WHERE t.chunk_id = m.chunk_id"
    )
    op.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        " SELECT chunk_id, user_id, session_id, ended_at, length(tsv), tsv"
        " FROM navi_0024_moved ORDER BY chunk_id"
    )
    op.execute("DROP TABLE navi_0024_moved")
    op.execute("DROP TABLE navi_0024_remade")


def upgrade() -> None:
    op.execute(_PARTS)
    op.execute(_NEW_TSV)
    _realign()


def downgrade() -> None:
    op.execute(_OLD_TSV)
    op.execute("DROP FUNCTION navi_text_parts(tsvector)")
    _realign()
