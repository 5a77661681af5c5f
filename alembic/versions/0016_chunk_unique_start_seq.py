"""A chunk is unique by where it starts as well as by its text: repeated words are indexed.

Chunks were unique on (user_id, session_id, content_hash). A later compression whose demoted
messages render to the text of an earlier chunk ("User: yes" / "Assistant: ok") wrote no
chunk (ON CONFLICT DO NOTHING): its messages lay in no chunk's start_seq..end_seq, breaking
"a demoted message is never in no chunk", and index_dropped_history found them on every run,
embedded them again and wrote nothing. The key is now (user_id, session_id, start_seq,
content_hash): indexing the same demoted range twice is still a no-op (same start, same text),
while the same text at another place in the session is a chunk of its own. user_id still
leads the key (Citus).

Downgrade deletes, of chunks of one session with equal text, all but the oldest (their index
and queue rows with them), then restores the old key: the messages of the deleted chunks
are then in no chunk again, as the old code left them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "uq_memory_chunks_user_id_session_id_content_hash"
_NEW = "uq_memory_chunks_user_id_session_id_start_seq_content_hash"


def upgrade() -> None:
    op.execute(
        f"ALTER TABLE memory_chunks ADD CONSTRAINT {_NEW} "
        "UNIQUE (user_id, session_id, start_seq, content_hash)"
    )
    op.execute(f"ALTER TABLE memory_chunks DROP CONSTRAINT {_OLD}")


def downgrade() -> None:
    # The text queue has no foreign key (0006): its rows of the deleted chunks go first.
    op.execute(
        """
        WITH repeated AS (
            DELETE FROM memory_chunks c USING memory_chunks d
            WHERE d.user_id = c.user_id AND d.session_id = c.session_id
              AND d.content_hash = c.content_hash AND d.id < c.id
            RETURNING c.id
        )
        DELETE FROM memory_chunk_text_queue q USING repeated r WHERE q.chunk_id = r.id
        """
    )
    op.execute(
        f"ALTER TABLE memory_chunks ADD CONSTRAINT {_OLD} "
        "UNIQUE (user_id, session_id, content_hash)"
    )
    op.execute(f"ALTER TABLE memory_chunks DROP CONSTRAINT {_NEW}")
