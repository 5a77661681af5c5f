"""Small async factories for integration tests."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from navi_memory import Memory


async def new_user(memory: Memory, name: str | None = None) -> uuid.UUID:
    uid = uuid.uuid4()
    await memory.users.ensure(uid, name)
    return uid


async def new_session_row(memory: Memory, user_id: uuid.UUID, session_id: str | None = None) -> str:
    """A sessions row owned by ``user_id`` (the session store of a later layer makes these)."""
    sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
    async with memory.engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO sessions (id, user_id) VALUES (:id, :u)"), {"id": sid, "u": user_id}
        )
    return sid


async def scalar(memory: Memory, sql: str, **params: object) -> object:
    async with memory.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()


async def execute(memory: Memory, sql: str, **params: object) -> None:
    """Run ``sql`` in a transaction of its own."""
    async with memory.engine.begin() as conn:
        await conn.execute(text(sql), params)


async def refuse_inserts(memory: Memory, table: str, refuse: bool = True) -> None:
    """A real failure of every later INSERT into ``table`` (a CHECK no row meets, NOT VALID so
    the rows already there are not checked), or, with ``refuse=False``, its end."""
    if refuse:
        await execute(memory, f"ALTER TABLE {table} ADD CONSTRAINT refuse CHECK (false) NOT VALID")
    else:
        await execute(memory, f"ALTER TABLE {table} DROP CONSTRAINT refuse")
