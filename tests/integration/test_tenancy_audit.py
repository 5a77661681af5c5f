"""Tenancy audit: paths across the public API where one user's call touched another user's rows.

Each test names the rule it holds (docs/architecture.md, "Identity and tenancy"): no read
returns another user's rows without ``navi.memory.read_all``; no write creates, changes or
deletes another user's rows, read_all or not; an operation acting for one user leaves the others
alone.
"""

from __future__ import annotations

from navi_memory import Memory
from tests.integration.factories import execute, new_user, scalar

# --- sessions.delete --------------------------------------------------------------------------


async def test_deleting_a_session_leaves_another_users_extraction_mark_under_its_id(
    memory: Memory,
) -> None:
    """A pair docs/memory.md allows (left by older code): Alice's session, and Bob's extraction
    mark under the same id. Nothing of Alice's may write over Bob's row, and deleting her
    session deleted it."""
    alice, bob = await new_user(memory), await new_user(memory)
    sid = (await memory.sessions.create(user_id=alice)).id
    await execute(
        memory,
        "INSERT INTO session_memory_state (session_id, user_id, extracted_at) "
        "VALUES (:s, :u, now())",
        s=sid,
        u=bob,
    )
    assert await memory.sessions.delete(sid, user_id=alice) is True
    owner = await scalar(
        memory, "SELECT user_id FROM session_memory_state WHERE session_id = :s", s=sid
    )
    assert owner == bob
    assert await memory.store.get_extracted_at(sid, user_id=bob) is not None
