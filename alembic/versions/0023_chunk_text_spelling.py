"""Chunk text is read in Unicode NFC, and a one-letter name with "#" or "++" is a word of its
own ("C#" → ``csharp``, "C++" → ``cplusplus``); the tsvectors made the old way are made again.

Two defects of the BM25 text ranking (0006), found by a review on the real database:

- a chunk stored decomposed (NFD: a macOS file name, "Zu\u0308rich-itinerary.pdf") was found by
  no query, not even its own text: queries are read in NFC (``text.terms.query_terms``), while
  ``navi_text_tsv`` kept the chunk's lexeme decomposed. It now reads the text in NFC too;
- the 'simple' parser drops "#" and "+", so "C#" and "C++" were the lexeme ``c``, which
  "20 °C" and "C:\\Program Files" hold: a C# chunk tied with a °C one, and a query's "C#"
  counted as hit by both. A letter that is a word's start, followed by "#" or "++" at the word's
  end ("C#", "F#", "C++", "g++"; not "C#8", "x_C#", "2C#"; the end as query_terms reads it:
  no word character, "#" or "+" after), is now spelled ``<letter>sharp`` / ``<letter>plusplus``
  before the parser reads it. Only one-letter names: what the parser leaves of a longer name
  ("Notepad++" → ``notepad``) is a word a query for it should still find.

``navi_text_spelling(body)`` does both, in PL/pgSQL so each step runs once on the text, and
only on the text that needs it: NFC only when the text is not ASCII (its octets outnumber its
characters) and not already NFC (``normalize`` costs about 0.2 ms a 2.3 KB text, the check
0.05 ms, the ASCII test a few µs); each name pattern only when the text holds "#" or "++".
``navi_text_tsv`` reads its result, so the chunks' tsvectors (``navi_chunk_tsv``) and the
queries' (``navi_text_tsquery``, the search statements' ``navi_text_tsv(:query)``) change
alike. On a database not encoded in UTF8 PostgreSQL cannot normalise, and the NFC step is left
out.

The stored data made by the old function is brought in line, for the chunks whose text the two
functions read apart only: text not NFC, or a letter before "#" or "++" (a superset; of those,
only the tsvectors that differ are rewritten). Their rows of memory_chunk_terms are deleted and
inserted again, so the statement triggers bring the per-user statistics and document
frequencies in step (0006, 0010); their tsvectors made ahead on the text queue (0013) are made
again. Every other chunk is read once, by the filter, and its tsvector is not made. The
downgrade does the same with the old function.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NFC = """
    -- NFC, where the text is not already: a non-ASCII text has more octets than characters.
    IF octet_length(body) <> length(body) AND body IS NOT NFC NORMALIZED THEN
        body := normalize(body, NFC);
    END IF;"""

_NAMES = r"""
    -- "C#", "F#": a letter starting a word, "#" ending it (no word character, "#" or "+"
    -- after: query_terms' end of a name). Only when the text holds one at all.
    IF strpos(body, '#') > 0 THEN
        body := regexp_replace(body, '\m([A-Za-z])#(?![\w#+])', '\1sharp', 'g');
    END IF;
    IF strpos(body, '++') > 0 THEN
        body := regexp_replace(body, '\m([A-Za-z])\+\+(?![\w#+])', '\1plusplus', 'g');
    END IF;"""

_OLD_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN to_tsvector('simple'::regconfig, translate(body, '_/', '- '))
    """
"""0006's function (0022 wrapped navi_chunk_tsv, not this one)."""

_NEW_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN to_tsvector('simple'::regconfig, translate(navi_text_spelling(body), '_/', '- '))
    """
"""0006's, on the spelling: still inlined into navi_chunk_tsv and the statements."""


def _by_encoding(utf8: str, other: str) -> str:
    """One DO block running ``utf8`` on a UTF8 database and ``other`` on any other: the
    server reads its own encoding, so `navi-memory migrate --sql` (offline: no database to
    ask) prints a script that decides when it runs. Each is one statement."""
    return f"""
    DO $navi0023$
    BEGIN
        IF current_setting('server_encoding') = 'UTF8' THEN
            EXECUTE $utf8${utf8}$utf8$;
        ELSE
            EXECUTE $other${other}$other$;
        END IF;
    END
    $navi0023$
    """


def _spelling(utf8: bool) -> str:
    nfc = _NFC if utf8 else ""
    return f"""
    CREATE FUNCTION navi_text_spelling(body text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
    BEGIN{nfc}{_NAMES}
        RETURN body;
    END $$
    """


def _read_apart(text: str, utf8: bool) -> str:
    """A condition true for every text whose tsvector the two functions may make apart (and,
    cheaply, false for most others): not NFC, or a letter before "#" or "++"."""
    names = (
        f"(strpos({text}, '#') > 0 AND {text} ~ '[A-Za-z]#')"
        f" OR (strpos({text}, '++') > 0 AND {text} ~ '[A-Za-z]\\+\\+')"
    )
    if not utf8:
        return names
    return f"(octet_length({text}) <> length({text}) AND {text} IS NOT NFC NORMALIZED) OR {names}"


def _remade(utf8: bool) -> str:
    text = "c.content || E'\\n' || array_to_string(c.breadcrumbs, E'\\n')"
    return (
        "CREATE TEMPORARY TABLE navi_0023_remade AS"
        " SELECT c.id, navi_chunk_tsv(c.content, c.breadcrumbs) AS tsv FROM memory_chunks c"
        f" WHERE {_read_apart(text, utf8)}"
    )


def _realign() -> None:
    """The stored tsvectors made by the other function made again by navi_chunk_tsv, where
    they differ; memory_chunk_terms' rows deleted and inserted, so that its triggers keep the
    statistics and document frequencies in step."""
    # The filter first, then the tsvector of the rows it keeps only.
    op.execute(_by_encoding(_remade(utf8=True), _remade(utf8=False)))
    op.execute(
        "UPDATE memory_chunk_text_queue q SET tsv = r.tsv FROM navi_0023_remade r"
        " WHERE q.chunk_id = r.id AND q.tsv IS NOT NULL AND q.tsv <> r.tsv"
    )
    op.execute(
        """
        CREATE TEMPORARY TABLE navi_0023_moved AS
        SELECT t.chunk_id, t.user_id, t.session_id, t.ended_at, r.tsv
        FROM memory_chunk_terms t JOIN navi_0023_remade r ON r.id = t.chunk_id
        WHERE t.tsv <> r.tsv
        """
    )
    # Two statements, as the indexer and the deletes write them: the removal trigger takes
    # the old lexemes away, the insert trigger adds the new ones (users in their order).
    op.execute(
        "DELETE FROM memory_chunk_terms t USING navi_0023_moved m WHERE t.chunk_id = m.chunk_id"
    )
    op.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        " SELECT chunk_id, user_id, session_id, ended_at, length(tsv), tsv"
        " FROM navi_0023_moved ORDER BY chunk_id"
    )
    op.execute("DROP TABLE navi_0023_moved")
    op.execute("DROP TABLE navi_0023_remade")


def upgrade() -> None:
    op.execute(_by_encoding(_spelling(utf8=True), _spelling(utf8=False)))
    op.execute(_NEW_TSV)
    _realign()


def downgrade() -> None:
    op.execute(_OLD_TSV)
    op.execute("DROP FUNCTION navi_text_spelling(text)")
    _realign()
