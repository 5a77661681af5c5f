"""The parts of a file name, a host or an e-mail address, and the English stem of a word, are
words of a chunk too: "settings" finds "settings.py", "bob" finds "bob@example.com", "deploy"
finds "deployed"; the tsvectors made the old way are made again.

Two gaps of the BM25 text ranking (0006), found by a review on the real database:

- the 'simple' parser reads "settings.py", "README.md", "node.js", "example.com" and
  "bob@example.com" as one token each (types ``host``, ``file``, ``email``) and makes it one
  lexeme, with no part beside it as it gives a hyphenated word's: a query for "settings" or
  "readme" found nothing, where the spec's ILIKE (and ``CHUNK_TEXT_RANKING=terms``) found them.
  The parts of a compound lexeme — a letter beside a "." or "@": ``settings``, ``py``;
  ``bob``, ``example``, ``com`` — are lexemes beside it. Numbers ("12.5", "v1.2.3") are not
  split. A part counts once per distinct compound, not per occurrence; the parts' text is
  bounded (PARTS_MAX_CHARS, cut at a space), so a chunk of nothing but host names keeps its
  tsvector under PostgreSQL's 1 MB;
- no word matched another form of itself: "deploy" did not find "I deployed the build",
  "meeting with landlord" ranked "the meeting room" above "two meetings with the landlord".
  The English (Snowball) stem of every lexeme of lowercase ASCII letters that is not a search
  stop word, where it differs from the word (``deployed`` → ``deploy``, ``meetings`` →
  ``meet``), is a lexeme beside it, on both sides alike: "meetings" asks for ``meetings`` and
  ``meet``, which "meeting" gives too; only the chunk holding the very word hits the term.
  LoCoMo's dev split, text path: 0.655 / 0.878 / 0.749 → 0.682 / 0.900 / 0.775 (hit@1 / hit@5
  / MRR@10).

Both are made from the tsvector's own lexemes (``navi_text_parts``, ``navi_text_stems``: plain
SQL, still inlined into the statements and evaluated while planning for a query). On the
benchmark's 2.3 KB chunks a tsvector costs ≈ 500 µs against 0023's ≈ 295 (parts alone ≈ 355;
parsing the text again for its compound tokens cost 2.3×), and holds ≈ 20 % more lexemes.

The stored data made by the old function is brought in line as 0023 brought it: every chunk
is made again (nearly every one holds a word with a stem of its own), and of those only the
tsvectors that differ are rewritten, their memory_chunk_terms rows deleted and inserted so
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

# fmt: off
_STOP_WORDS = [
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could",
    "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will",
    "with", "would", "you", "your", "yours",
]
# fmt: on
"""text.terms.STOP_WORDS as this revision wrote them (a revision is a snapshot: the package's
list may change, the stored tsvectors do not). Their stems ("was" → "wa") are not added."""

_STEMS = f"""
    CREATE FUNCTION navi_text_stems(words tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN words || setweight(coalesce(
        to_tsvector('simple'::regconfig, (
            SELECT string_agg(x.stem, ' ')
            FROM (SELECT l, (ts_lexize('english_stem', l))[1] AS stem
                  FROM unnest(tsvector_to_array(words)) l
                  WHERE l ~ '^[a-z]+$'
                    AND l <> ALL (ARRAY[{", ".join(f"'{w}'" for w in _STOP_WORDS)}])) x
            WHERE x.stem <> x.l)),
        ''::tsvector), 'C')
    """
"""``words``, then the English stems of its plain lowercase words, where they differ, of weight
C (the words are D): a stem scores, and only the words decide which query terms a chunk hits
(``terms_hit``; "important" gives the stem import, which must not hit a query for "import")."""

_TERM_LEXEMES = f"""
    CREATE FUNCTION navi_term_lexemes(term text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN (
        SELECT coalesce(array_agg(x.l) FILTER (WHERE NOT x.filler), array_agg(x.l))
        FROM (SELECT l, l = ANY (ARRAY[{", ".join(f"'{w}'" for w in _STOP_WORDS)}])
                        OR l ~ '^[[:alpha:]]$' AS filler
              FROM unnest(tsvector_to_array(navi_text_tsv(term))) l) x)
    """
"""The lexemes a query term asks for: its tsvector's, less the stop words and lone letters a
compound's parts bring ("state-of-the-art": the, of; "me@example.com": me), unless they are
all it has. The search statements' candidates and scores read these."""

_TERMS_TSQUERY = r"""
    CREATE FUNCTION navi_terms_tsquery(terms text[]) RETURNS tsquery
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN (
        SELECT CAST(string_agg(DISTINCT
                   '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
               AS tsquery)
        FROM unnest(terms) t, unnest(navi_term_lexemes(t)) l)
    """
"""Any lexeme of the terms (navi_term_lexemes): the candidates' tsquery. Immutable, so the
planner evaluates it on a statement's terms and weighs the words (0006's navi_text_tsquery,
of the whole query's lexemes, made every chunk holding "and" a candidate of "rock-and-roll")."""

_OLD_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN to_tsvector('simple'::regconfig, translate(navi_text_spelling(body), '_/', '- '))
    """
"""0023's function."""

_NEW_TSV = """
    CREATE OR REPLACE FUNCTION navi_text_tsv(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN navi_text_stems(navi_text_parts(
        to_tsvector('simple'::regconfig, translate(navi_text_spelling(body), '_/', '- '))))
    """
"""0023's, with the compound lexemes' parts and the words' stems."""


def _realign() -> None:
    """The stored tsvectors made by the other function made again by navi_chunk_tsv, where
    they differ (0023's _realign, for every chunk)."""
    op.execute(
        "CREATE TEMPORARY TABLE navi_0024_remade AS"
        " SELECT c.id, navi_chunk_tsv(c.content, c.breadcrumbs) AS tsv FROM memory_chunks c"
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
    op.execute(_STEMS)
    op.execute(_NEW_TSV)
    op.execute(_TERM_LEXEMES)
    op.execute(_TERMS_TSQUERY)
    _realign()


def downgrade() -> None:
    op.execute(_OLD_TSV)
    op.execute("DROP FUNCTION navi_terms_tsquery(text[])")
    op.execute("DROP FUNCTION navi_term_lexemes(text)")
    op.execute("DROP FUNCTION navi_text_stems(tsvector)")
    op.execute("DROP FUNCTION navi_text_parts(tsvector)")
    _realign()
