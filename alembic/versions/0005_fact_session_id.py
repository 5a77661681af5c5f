"""memory_facts.session_id: the session a fact was last written from, for unified search's
provenance (``fact [category] · session s1``).

Nullable and without a foreign key, like memory_chunks.session_id: a session may live outside
the sessions table, and a fact outlives the session it was learned in. Legacy rows stay NULL
(unknown).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable column without a default: a catalog change only, no table rewrite.
    op.add_column("memory_facts", sa.Column("session_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("memory_facts", "session_id")
