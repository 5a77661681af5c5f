"""memory_summary.facts_digest: which facts the summary was written from.

The extractor rewrote a user's summary only when a visible fact was newer than it, so a fact
deleted (the memory tool's forget, ``delete_fact``, the application's SQL), expired or hidden
never counted as a change: a forgotten fact stayed in the summary that goes into every prompt.
The extractor now stores, with each summary it writes, a digest of the facts it gave the model
(each fact's id, category, key, value and confidence), and counts the summary out of date
whenever the digest of the current facts differs. NULL: a summary of unknown origin
(``set_summary``, an import, rows written before this revision); the next extraction that
finds current facts rewrites it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory_summary ADD COLUMN IF NOT EXISTS facts_digest text")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_summary DROP COLUMN IF EXISTS facts_digest")
