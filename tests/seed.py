"""One user with a bit of everything an export carries: facts with a merge and an expiry, a
summary, a compressed session (chunks with breadcrumbs, a recall ledger), extraction state and
key/value entries. Shared by the library's and the CLI's export/import tests."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from navi_memory import Memory, request_context
from navi_memory.constants import INJECTED_LEDGER_KEY
from navi_memory.testing import FakeOllama

CONVERSATION = [
    ("user", "The API must not use port 8098, the metrics exporter has it."),
    ("assistant", "Then we take port 8099 for the API."),
    ("user", "Put it in /etc/navi/api.toml please."),
    ("assistant", "Done: /etc/navi/api.toml sets listen = 8099."),
    ("user", "And the deploy script?"),
]


async def seed_user(memory: Memory, fake: FakeOllama, uid: uuid.UUID, session_id: str) -> None:
    """Give ``uid`` (created here) facts, a summary, a compressed session and sketches."""
    await memory.users.ensure(uid, "Sam")
    with request_context(user_id=uid):
        store = memory.store
        await store.upsert_fact("preferences", "language", "English", source="user_explicit")
        await store.upsert_fact(
            "preferences", "preferred_language", "Dutch", source="user_explicit", dedupe=True
        )
        await store.upsert_fact(
            "work", "vpn_ticket", "INC-40211", confidence=55, expires_days=30,
            source_context="said on Monday",
        )  # fmt: skip
        await store.set_summary("Sam writes Dutch; the API listens on 8099.")
        await memory.sessions.create(session_id, title="API port")
        await memory.sessions.append(
            session_id, "tool_call", tool_name="write_file", tool_args={"path": "/etc/x"}
        )
        for role, content in CONVERSATION:
            await memory.sessions.append(session_id, role, content)
        fake.chat_replies.append("The API is on 8099.\nKEYS: port 8099, /etc/navi/api.toml")
        compressed = await memory.sessions.compress(session_id, keep_last=1)
        assert compressed.chunks_written >= 1
        await store.mark_session_extracted(session_id)
        await memory.kv.set("scratchpad", "plan", "ship 8099", session_id=session_id)
        await memory.kv.set("prefs", "theme", "dark")
    await memory.store.wait_chunk_indexing()
    # Automatic recall is a later feature: write its ledger as it will, the chunk ids delivered.
    async with memory.engine.begin() as conn:
        ids = list(
            (
                await conn.execute(
                    text("SELECT id FROM memory_chunks WHERE user_id = :u ORDER BY id"),
                    {"u": uid},
                )
            ).scalars()
        )
        await conn.execute(
            text("UPDATE sessions SET session_metadata = CAST(:m AS jsonb) WHERE id = :s"),
            {"m": json.dumps({INJECTED_LEDGER_KEY: ids, "note": "kept"}), "s": session_id},
        )
