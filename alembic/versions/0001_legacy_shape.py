"""The legacy shape: the original application's four tables, as it created them.

Every statement is ``IF NOT EXISTS``, so on a legacy database this revision adopts what is there
and on an empty one it builds the same starting point; 0002 then brings both to the same head.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS navi_users (
            id uuid PRIMARY KEY,
            name text,
            created_at timestamptz DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS memory_facts (
            id serial PRIMARY KEY,
            user_id uuid REFERENCES navi_users(id) ON DELETE CASCADE,
            category text NOT NULL,
            key text NOT NULL,
            value text NOT NULL,
            created_at timestamptz DEFAULT now(),
            updated_at timestamptz DEFAULT now(),
            UNIQUE (user_id, category, key)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS memory_summary (
            user_id uuid,
            content text,
            updated_at timestamptz DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS session_memory_state (
            session_id text PRIMARY KEY,
            extracted_at timestamptz
        )
        """
    )


def downgrade() -> None:
    # CASCADE: an adopted database's other legacy tables (a memory_chunks or sessions of the
    # original application, which 0002 set aside and its downgrade put back) may hold foreign
    # keys to navi_users; those constraints go, their tables and rows stay (not ours to drop).
    op.execute("DROP TABLE IF EXISTS session_memory_state CASCADE")
    op.execute("DROP TABLE IF EXISTS memory_summary CASCADE")
    op.execute("DROP TABLE IF EXISTS memory_facts CASCADE")
    op.execute("DROP TABLE IF EXISTS navi_users CASCADE")
