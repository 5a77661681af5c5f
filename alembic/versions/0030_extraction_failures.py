"""Extraction failures counted per session: a session the model cannot answer is retried later
and later, not at every sweep.

A session whose extraction failed for its own sake (a reply with no usable JSON, a row that
cannot be read, a defect meeting its content) was only stamped ``failed_at`` (revision 0025)
and taken after the others: every sweep asked the model about it again — the background sweep
each ``sessions.create`` starts included — and a cron's ``navi-memory extract`` failed at every
run. ``failures`` counts such failures since the last success; sweeps leave the session until
``failed_at`` + 5 min × 2^(failures − 1) (at most a day), or until it has new activity. A model
that is down or times out does not count (the sweep stops for it; the session did nothing).

A column with a constant default: no table rewrite. Downgrade drops it.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0030"
down_revision: str | Sequence[str] | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE session_memory_state ADD COLUMN failures integer NOT NULL DEFAULT 0 "
        "CONSTRAINT ck_session_memory_state_failures CHECK (failures >= 0)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE session_memory_state DROP COLUMN failures")
