"""A number written with thousands separators is one lexeme in the chunk text index, without
them: "$1,234.50" is ``1234.50``, as "1234.50" is; the tsvectors made the old way are made
again.

The 'simple' parser reads "1,234.50" as two numbers, ``1`` and ``234.50``. A query of that
amount is one term (``text.terms``: a number whose commas are its own) whose lexemes a chunk
had to hold, anywhere: "paid $1 and 234.50 euros" held both, counted as hitting the amount,
and, shorter, ranked above the invoice that said "$1,234.50".

``navi_text_spelling`` now drops a comma between digit groups where the run is a number with
thousands separators as ``text.terms._COMMA_NUMBER`` reads one inside a query term: one to
three digits, then groups of exactly three, an optional decimal part, not inside a longer term
(no letter, digit or ``_`` before or after it; a run of ``. - / @ : #`` beside it joins a term
only where a word character is on its other side, a comma only where a digit is; a sign starts
the number where no term holds it). "1,234" and "1,200,000" become "1234" and
"1200000"; "8080,8081", "1,2345", "x1,234", "3.1,234" and a decimal comma ("4,5") stay as
they were. Chunks and queries alike (``navi_text_tsv``), so "1234.50" and "$1,234.50" find
each other. The step runs only on a text holding a digit, a comma and a digit again
(``strpos`` and one regular-expression test), after 0032's step (a number written against Han
letters is first a word of its own) and before the one-letter names.

The stored data made by the old function is brought in line as 0032 brought it: a filter reads
every chunk once (content and breadcrumbs holding a digit, a comma and three digits) and of
those only the tsvectors that differ are rewritten, their memory_chunk_terms rows deleted and
inserted so that the statement triggers keep the statistics and document frequencies, and their
tsvectors made ahead on the text queue made again. The downgrade does the same with 0032's
spelling.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-08
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | Sequence[str] | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNSPACED = (
    "\\u0e00-\\u0eff\\u1000-\\u109f\\u1100-\\u11ff\\u1780-\\u17ff\\u2e80-\\u9fff"
    "\\ua960-\\ua97f\\uac00-\\ud7ff\\uf900-\\ufaff\\U00020000-\\U0003ffff"
)
"""0032's ranges, unchanged (a revision is a snapshot)."""

_OTHER = f"[^{_UNSPACED}[:space:]]"

_NFC = """
    -- NFC, where the text is not already: a non-ASCII text has more octets than characters.
    IF octet_length(body) <> length(body) AND body IS NOT NFC NORMALIZED THEN
        body := normalize(body, NFC);
    END IF;"""

_APART = f"""
    -- A word of another script against letters written without spaces is a word of its own.
    IF octet_length(body) <> length(body) AND body ~ '[{_UNSPACED}]' THEN
        -- One pass, one group (two passes, or a group a branch, cost ~2.5x).
        body := regexp_replace(
            body, '([{_UNSPACED}](?={_OTHER})|{_OTHER}(?=[{_UNSPACED}]))', '\\1 ', 'g');
    END IF;"""

_THOUSANDS = r"""
    -- "1,234.50" is the number 1234.50, one lexeme: a comma goes where the digits before it
    -- start a number (one to three digits, then groups of three) and the digits after it are
    -- groups of three to the number's end (text.terms' _COMMA_NUMBER, inside a query term's
    -- bounds). The comma first, then what is behind it: a lookbehind tried at every
    -- character cost 2x more on a text dense in amounts.
    IF strpos(body, ',') > 0 AND body ~ '[0-9],[0-9]{3}' THEN
        body := regexp_replace(body,
            -- Before the number: the start, a sign that starts a term, or a character no
            -- term holds there (a run of . - / @ : # joins a term only after a word
            -- character, a comma only after a digit: "#1,234", "a,1,234" are the number).
            ',(?<=(?:^|[^[:alnum:]_.\-/@:#,+]|(?:^|[^[:alnum:]_.\-/@:#])[.\-/@:#]+'
            '|(?:^|[^0-9]),|(?:^|[^[:alnum:]_.\-/@:#,+])[-+])[0-9]{1,3}(?:,[0-9]{3})*,)'
            -- After it: the end, or a character no term holds there (. - / @ : # join a
            -- term only before a word character, a comma only before a digit).
            '(?=[0-9]{3}(?:,[0-9]{3})*(?:\.[0-9]+)?'
            '(?:$|[^[:alnum:]_.\-/@:#,]|,(?:$|[^0-9])|[.\-/@:#]+(?:$|[^[:alnum:]_.\-/@:#])))',
            '', 'g');
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
"""0023's steps, unchanged."""


def _spelling(*, utf8: bool, thousands: bool) -> str:
    """The function: on a UTF8 database 0032's steps (NFC, the unspaced scripts' words apart),
    elsewhere 0023's (neither: PostgreSQL cannot normalise, and the ranges are Unicode code
    points); with or without this revision's step, before the one-letter names."""
    steps = (_NFC + _APART if utf8 else "") + (_THOUSANDS if thousands else "") + _NAMES
    return f"""
    CREATE OR REPLACE FUNCTION navi_text_spelling(body text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
    BEGIN{steps}
        RETURN body;
    END $$
    """


def _by_encoding(utf8: str, other: str) -> str:
    """One DO block running ``utf8`` on a UTF8 database and ``other`` on any other: the
    server reads its own encoding, so `navi-memory migrate --sql` (offline) prints a script
    that decides when it runs."""
    return f"""
    DO $navi0035$
    BEGIN
        IF current_setting('server_encoding') = 'UTF8' THEN
            EXECUTE $utf8${utf8}$utf8$;
        ELSE
            EXECUTE $other${other}$other$;
        END IF;
    END
    $navi0035$
    """


_TEXT = "(c.content || E'\\n' || array_to_string(c.breadcrumbs, E'\\n'))"
"""What navi_chunk_tsv reads of a chunk: its content and its breadcrumbs (an amount is one of
them)."""

_READ_APART = f"{_TEXT} ~ '[0-9],[0-9]{{3}}'"
"""True for every chunk whose tsvector the two functions may make apart (a superset)."""


def _realign() -> None:
    """The stored tsvectors made by the other function made again by navi_chunk_tsv, where
    they differ; memory_chunk_terms' rows deleted and inserted, so that its triggers keep the
    statistics and document frequencies in step (0032's _realign, its filter this one's)."""
    op.execute(
        "CREATE TEMPORARY TABLE navi_0035_remade AS"
        " SELECT c.id, navi_chunk_tsv(c.content, c.breadcrumbs) AS tsv FROM memory_chunks c"
        f" WHERE {_READ_APART}"
    )
    op.execute("ALTER TABLE navi_0035_remade ADD PRIMARY KEY (id)")
    op.execute(
        "UPDATE memory_chunk_text_queue q SET tsv = r.tsv FROM navi_0035_remade r"
        " WHERE q.chunk_id = r.id AND q.tsv IS NOT NULL AND q.tsv <> r.tsv"
    )
    op.execute(
        """
        CREATE TEMPORARY TABLE navi_0035_moved AS
        SELECT t.chunk_id, t.user_id, t.session_id, t.ended_at, r.tsv
        FROM memory_chunk_terms t JOIN navi_0035_remade r ON r.id = t.chunk_id
        WHERE t.tsv <> r.tsv
        """
    )
    # Two statements, as the indexer and the deletes write them: the removal trigger takes
    # the old lexemes away, the insert trigger adds the new ones.
    op.execute(
        "DELETE FROM memory_chunk_terms t USING navi_0035_moved m WHERE t.chunk_id = m.chunk_id"
    )
    op.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        " SELECT chunk_id, user_id, session_id, ended_at, length(tsv), tsv"
        " FROM navi_0035_moved ORDER BY chunk_id"
    )
    op.execute("DROP TABLE navi_0035_moved")
    op.execute("DROP TABLE navi_0035_remade")


def upgrade() -> None:
    op.execute(
        _by_encoding(_spelling(utf8=True, thousands=True), _spelling(utf8=False, thousands=True))
    )
    _realign()


def downgrade() -> None:
    op.execute(
        _by_encoding(_spelling(utf8=True, thousands=False), _spelling(utf8=False, thousands=False))
    )
    _realign()
