"""memory_fact_forgotten: what a user had forgotten, and when, so an older session's extraction
does not bring it back.

An extraction read a session's transcript and upserted every fact the model found, however
long ago the session was active: a fact the user had asked to forget since (the memory tool's
``forget``, ``delete_fact``) came back from the next extraction of an older session, and the
summary written after it told it again. A forget now records, per (user, category, canonical
key), when it happened; an extraction leaves out a fact the user forgot after the session's
last activity (ExtractionService.write_facts). The category is kept case-folded (NFC, lower),
as the extractor compares categories.

Downgrade drops the table (the record of forgets is lost: older sessions may bring them back).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_fact_forgotten (
            user_id uuid NOT NULL,
            category text NOT NULL,
            key_norm text NOT NULL,
            forgotten_at timestamptz DEFAULT now() NOT NULL,
            CONSTRAINT pk_memory_fact_forgotten PRIMARY KEY (user_id, category, key_norm),
            CONSTRAINT fk_memory_fact_forgotten_user_id_navi_users
                FOREIGN KEY (user_id) REFERENCES navi_users (id) ON DELETE CASCADE
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE memory_fact_forgotten")
