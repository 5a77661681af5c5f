"""A chunk's searchable text is read from its first 120,000 characters (and 20,000 of its
breadcrumbs): no chunk stops the text indexer.

PostgreSQL refuses a tsvector over 1 MB ("string is too long for tsvector"). A chunk whose
text makes one — about 950,000 characters of varied words, which compression wrote when
CHUNK_MESSAGE_MAX_CHARS had no upper bound, or a row written by SQL of its own — failed every
batch of the text indexer that held it (so no chunk of any user was indexed after it) and every
search of its user's chunks (which reads a queued chunk's text exactly). The package now makes
no chunk over 100,000 characters (MAX_TEXT_CHARS) nor with over 8,039 characters of
breadcrumbs (MAX_BREADCRUMBS of at most 200); ``navi_chunk_tsv`` reads at most the first
120,000 of the content and 20,000 of the breadcrumbs, whose tsvector stays under 1 MB whatever
the words: the worst measured is ≈ 6 bytes a character (one-character words of three-byte
letters, all distinct), 840 KB for both; 200,000 characters of unique five-letter words, or of
numbers, made ≈ 470 KB. For every chunk the package writes the result is the one 0006's
function gave, so nothing stored is made again.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHUNK_TSV_CHARS = 120_000
BREADCRUMBS_TSV_CHARS = 20_000


def _function(content: str, breadcrumbs: str) -> str:
    return rf"""
        CREATE OR REPLACE FUNCTION navi_chunk_tsv(content text, breadcrumbs text[])
        RETURNS tsvector
        LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
        RETURN navi_text_tsv({content} || E'\n' || {breadcrumbs})
        """


def upgrade() -> None:
    # octet_length first: O(1), where left() counts the characters of every chunk (5 % more
    # time making a tsvector, measured); a text of at most that many bytes has at most that
    # many characters.
    op.execute(
        _function(
            f"CASE WHEN octet_length(content) > {CHUNK_TSV_CHARS} "
            f"THEN left(content, {CHUNK_TSV_CHARS}) ELSE content END",
            f"left(array_to_string(breadcrumbs, E'\\n'), {BREADCRUMBS_TSV_CHARS})",
        )
    )


def downgrade() -> None:
    op.execute(_function("content", "array_to_string(breadcrumbs, E'\\n')"))
