"""A Latin word or a number written against Chinese, Japanese, Korean or Thai letters is a word
of its own in the chunk text index ("我用Python写的" holds ``python``); the tsvectors made the
old way are made again.

The 'simple' parser reads a run of letters and digits of any script as one token, so
"我用Python写的", "端口8099", "서버nginx설정" and "ใช้Pythonเขียน" were one lexeme each. Such text
has no space between words, so a Latin word or a number there is glued to the letters around
it: a query in plain ASCII ("Python", "8099", "nginx") takes the BM25 text path, which matches
lexemes, and never found the chunk — nor did recall, which reads the same path. (A query
holding such letters itself is matched by substring, ``text.terms.unspaced``, and found it.)

``navi_text_spelling`` now puts a space between a letter of a script written without spaces
(the ranges of ``text.terms``' unspaced letters, as of this revision) and a character of any
other kind that is not a space, in either order: "我用 Python 写的",
"端口 8099". A run of those scripts' letters stays one lexeme, as before: the substring path
reads it. The step runs only on a text that is not ASCII and holds such a letter (the ASCII
test costs a few µs); it comes after NFC and before the one-letter names, so "用C#写" gives
``csharp``. On a database not encoded in UTF8 the function is left as it is (the ranges are
Unicode code points).

The stored data made by the old function is brought in line as 0023 brought it: a filter reads
every chunk once (content and breadcrumbs not ASCII and holding such a letter) and of those
only the tsvectors that differ are rewritten, their memory_chunk_terms rows deleted and
inserted so that the statement triggers keep the statistics and document frequencies, and their
tsvectors made ahead on the text queue made again. The downgrade does the same with 0023's spelling.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0032"
down_revision: str | Sequence[str] | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNSPACED = (
    "\\u0e00-\\u0eff\\u1000-\\u109f\\u1100-\\u11ff\\u1780-\\u17ff\\u2e80-\\u9fff"
    "\\ua960-\\ua97f\\uac00-\\ud7ff\\uf900-\\ufaff\\U00020000-\\U0003ffff"
)
"""Thai and Lao, Myanmar, Khmer, Hangul jamo, the CJK block run (radicals, punctuation, kana,
ideographs), Hangul syllables, compatibility and supplementary ideographs: text.terms'
_UNSPACED_LETTER as this revision wrote it, in PostgreSQL's regular-expression escapes."""

_OTHER = f"[^{_UNSPACED}[:space:]]"
"""Any other character but a space: a Latin, Cyrillic… letter, a digit, and punctuation too —
"用C#写" must leave "C#" a word of its own for the one-letter names' step (a space beside
punctuation changes no lexeme)."""

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

_NAMES = r"""
    -- "C#", "F#": a letter starting a word, "#" ending it (no word character, "#" or "+"
    -- after: query_terms' end of a name). Only when the text holds one at all.
    IF strpos(body, '#') > 0 THEN
        body := regexp_replace(body, '\m([A-Za-z])#(?![\w#+])', '\1sharp', 'g');
    END IF;
    IF strpos(body, '++') > 0 THEN
        body := regexp_replace(body, '\m([A-Za-z])\+\+(?![\w#+])', '\1plusplus', 'g');
    END IF;"""
"""0023's steps, unchanged (a revision is a snapshot)."""


def _spelling(apart: bool) -> str:
    steps = _NFC + (_APART if apart else "") + _NAMES
    return f"""
    CREATE OR REPLACE FUNCTION navi_text_spelling(body text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
    BEGIN{steps}
        RETURN body;
    END $$
    """


def _on_utf8(statement: str) -> str:
    """``statement`` run on a UTF8 database only: the server reads its own encoding, so
    `navi-memory migrate --sql` (offline) prints a script that decides when it runs."""
    return f"""
    DO $navi0032$
    BEGIN
        IF current_setting('server_encoding') = 'UTF8' THEN
            EXECUTE $utf8${statement}$utf8$;
        END IF;
    END
    $navi0032$
    """


_TEXT = "(c.content || E'\\n' || array_to_string(c.breadcrumbs, E'\\n'))"
"""What navi_chunk_tsv reads of a chunk: its content and its breadcrumbs (a summary's KEYS line
keeps its items verbatim, "Python爬虫", and every chunk of a compression carries them)."""

_READ_APART = (
    f"octet_length({_TEXT}) <> length({_TEXT})"
    f" AND {_TEXT} ~ '[{_UNSPACED}]' AND {_TEXT} ~ '{_OTHER}'"
)
"""True for every chunk whose tsvector the two functions may make apart (a superset: such a
letter and a character of another kind somewhere in its text), false at once for an ASCII
chunk."""


def _realign() -> None:
    """The stored tsvectors made by the other function made again by navi_chunk_tsv, where
    they differ; memory_chunk_terms' rows deleted and inserted, so that its triggers keep the
    statistics and document frequencies in step (0023's _realign, its filter this one's)."""
    op.execute(
        "CREATE TEMPORARY TABLE navi_0032_remade (id bigint PRIMARY KEY, tsv tsvector NOT NULL)"
    )
    op.execute(
        _on_utf8(
            "INSERT INTO navi_0032_remade (id, tsv)"
            " SELECT c.id, navi_chunk_tsv(c.content, c.breadcrumbs) FROM memory_chunks c"
            f" WHERE {_READ_APART}"
        )
    )
    op.execute(
        "UPDATE memory_chunk_text_queue q SET tsv = r.tsv FROM navi_0032_remade r"
        " WHERE q.chunk_id = r.id AND q.tsv IS NOT NULL AND q.tsv <> r.tsv"
    )
    op.execute(
        """
        CREATE TEMPORARY TABLE navi_0032_moved AS
        SELECT t.chunk_id, t.user_id, t.session_id, t.ended_at, r.tsv
        FROM memory_chunk_terms t JOIN navi_0032_remade r ON r.id = t.chunk_id
        WHERE t.tsv <> r.tsv
        """
    )
    # Two statements, as the indexer and the deletes write them: the removal trigger takes
    # the old lexemes away, the insert trigger adds the new ones.
    op.execute(
        "DELETE FROM memory_chunk_terms t USING navi_0032_moved m WHERE t.chunk_id = m.chunk_id"
    )
    op.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
        " SELECT chunk_id, user_id, session_id, ended_at, length(tsv), tsv"
        " FROM navi_0032_moved ORDER BY chunk_id"
    )
    op.execute("DROP TABLE navi_0032_moved")
    op.execute("DROP TABLE navi_0032_remade")


def upgrade() -> None:
    op.execute(_on_utf8(_spelling(apart=True)))
    _realign()


def downgrade() -> None:
    op.execute(_on_utf8(_spelling(apart=False)))
    _realign()
