"""session_memory_state.failed_at: a session the extractor failed on waits behind the others.

A sweep takes stale sessions longest idle first, and a failed extraction (a reply with no
usable JSON, the chat model down) leaves the session unmarked so the next sweep retries it.
With ``process_stale_sessions(limit=N)``, N sessions the model always fails on were taken
first by every sweep, and no other session was ever extracted. ``failed_at`` (nullable
timestamptz, NULL for every existing row) records the last failed attempt; a sweep takes the
sessions never failed first, longest idle first, then the failed ones, the longest-failed
first; a successful extraction clears it.

Downgrade drops the column (the record of failed attempts is lost; sweeps go back to idle
order).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: a catalog change, no table rewrite.
    op.add_column(
        "session_memory_state", sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("session_memory_state", "failed_at")
