"""memory_embedding_model: which embedding model made the stored vectors.

Vectors of two models are not comparable, and nothing recorded which model made them, so
switching EMBEDDING_MODEL to another 768-dimensional model silently mixed two vector spaces.
One row (``id`` is always 1): the model, recorded by the first vector write after the upgrade
and replaced by ``navi-memory reembed``. Empty on upgrade (which model made the existing
vectors is not known here). A catalog change only, instant. Downgrade drops the table.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_embedding_model",
        sa.Column("id", sa.SmallInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_memory_embedding_model_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_embedding_model")),
    )


def downgrade() -> None:
    op.drop_table("memory_embedding_model")
