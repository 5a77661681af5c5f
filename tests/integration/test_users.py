"""memory.users: ensure, get and delete, and the per-user part of memory.admin.stats."""

from __future__ import annotations

import pytest

from navi_memory import PERMISSION_READ_ALL, Memory, request_context
from navi_memory.errors import InvalidTypeError
from tests.integration.factories import new_user


@pytest.mark.parametrize("call", ["ensure", "delete"])
async def test_a_none_user_id_is_refused_not_taken_as_the_current_user(
    memory: Memory, call: str
) -> None:
    """users.ensure/delete take no default user: a variable that is None by mistake must not
    delete (or create) whoever the request acts for, as users.get already refuses it."""
    sam = await new_user(memory, "sam")
    await memory.store.set_summary("sam's summary", user_id=sam)
    with request_context(user_id=sam), pytest.raises(InvalidTypeError, match="user_id"):
        await getattr(memory.users, call)(None)
    assert await memory.users.get(sam) is not None
    assert await memory.store.get_summary(user_id=sam) == "sam's summary"


async def test_stats_rank_users_by_every_row_they_hold_sketches_included(memory: Memory) -> None:
    """per_user lists the users holding the most rows: sketches (kv entries) are rows too."""
    kim, sam = await new_user(memory, "kim"), await new_user(memory, "sam")
    await memory.kv.set("notes", "only", "one fact's worth", user_id=kim)
    for i in range(5):
        await memory.kv.set("notes", f"k{i}", "v", user_id=sam)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        stats = await memory.admin.stats(users=1)
    assert [u.user_id for u in stats.per_user] == [sam]
