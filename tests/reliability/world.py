"""The data a reliability test acts on: two users with sessions, messages, facts, chunks and
sketches, so every generated call has real rows to hit, miss or (wrongly) leak."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from navi_memory import Memory
from navi_memory.schemas import ChunkDraft

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SPARE_KEY = "spare_key"


def chunk_draft(content: str, seq: int = 1, breadcrumbs: list[str] | None = None) -> ChunkDraft:
    """A valid chunk of ``content`` covering seqs ``seq``..``seq + 1``."""
    return ChunkDraft(
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        start_seq=seq,
        end_seq=seq + 1,
        started_at=T0 + timedelta(minutes=seq),
        ended_at=T0 + timedelta(minutes=seq + 1),
        breadcrumbs=breadcrumbs or [],
    )


@dataclass(frozen=True, slots=True)
class World:
    """``me`` acts; ``other`` is the foreign tenant whose rows must never show or change."""

    me: uuid.UUID
    other: uuid.UUID
    my_session: str
    other_session: str
    fact_ids: tuple[int, ...]
    """Every fact row, visible and hidden, of both users."""
    other_fact_ids: tuple[int, ...]
    spare_user: uuid.UUID
    """Destructive calls aim here (and at spare_session, SPARE_KEY), so the rows above stay."""
    spare_session: str

    def session_owner(self, session_id: object) -> uuid.UUID | None:
        owners = {self.my_session: self.me, self.other_session: self.other}
        owners[self.spare_session] = self.me
        return owners.get(session_id) if isinstance(session_id, str) else None


async def build_world(memory: Memory) -> World:
    """Two users, each with a session of a few messages (some compressed into chunks), facts
    with one merge, a summary, extraction state and sketches."""
    me, other = uuid.uuid4(), uuid.uuid4()
    fact_ids: list[int] = []
    sessions: list[str] = []
    for uid, name in ((me, "me"), (other, "other")):
        await memory.users.ensure(uid, name)
        sid = f"{name}-{uid.hex[:8]}"
        sessions.append(sid)
        await memory.sessions.create(sid, user_id=uid, title=f"{name}'s session")
        for i in range(6):
            await memory.sessions.append(
                sid,
                "user" if i % 2 == 0 else "assistant",
                f"{name} message {i} port 80{i}",
                user_id=uid,
            )
        await memory.sessions.compress(sid, keep_last=2, user_id=uid)
        old = await memory.store.upsert_fact("preferences", "language", "English", user_id=uid)
        new = await memory.store.upsert_fact(
            "preferences", "preferred_language", "Dutch", user_id=uid, dedupe=True
        )
        editor = await memory.store.upsert_fact("tools", "editor", f"{name}'s vim", user_id=uid)
        fact_ids += [old.id, new.id, editor.id]
        await memory.store.set_summary(f"{name} likes Dutch", user_id=uid)
        await memory.store.mark_session_extracted(sid, user_id=uid)
        await memory.store.add_chunks(
            [chunk_draft(f"{name} talked about deploy 8099", 100)], user_id=uid, session_id=sid
        )
        await memory.kv.set("scratchpad", "plan", f"{name} plan", session_id=sid, user_id=uid)
        await memory.kv.set("notes", "global", f"{name} note", user_id=uid)
        await memory.kv.set("notes", SPARE_KEY, "disposable", user_id=uid)
        await memory.store.upsert_fact("tools", SPARE_KEY, "disposable", user_id=uid)
    spare_user = uuid.uuid4()
    await memory.users.ensure(spare_user, "spare")
    spare_session = (await memory.sessions.create(f"spare-{me.hex[:8]}", user_id=me)).id
    return World(
        me=me,
        other=other,
        my_session=sessions[0],
        other_session=sessions[1],
        fact_ids=tuple(fact_ids),
        other_fact_ids=tuple(fact_ids[3:]),
        spare_user=spare_user,
        spare_session=spare_session,
    )
