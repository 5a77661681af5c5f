"""pg_trgm GIN indexes for the ILIKE search on facts, only where pg_trgm is installed.

The package never creates pg_trgm (it may need a superuser); when a DBA installs it later,
``open_memory()`` creates these same indexes at start-up (navi_memory.db.ensure_trgm_indexes).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("category", "key", "value")


def upgrade() -> None:
    # Decided by the server, not by Python, so `navi-memory migrate --sql` writes a script that
    # does the right thing wherever it is run.
    creates = "\n".join(
        f"        CREATE INDEX IF NOT EXISTS ix_memory_facts_{column}_trgm "
        f"ON memory_facts USING gin ({column} gin_trgm_ops);"
        for column in _COLUMNS
    )
    op.execute(
        "DO $$\nBEGIN\n"
        "    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN\n"
        f"{creates}\n"
        "    END IF;\nEND\n$$"
    )


def downgrade() -> None:
    for column in _COLUMNS:
        op.execute(f"DROP INDEX IF EXISTS ix_memory_facts_{column}_trgm")
