"""ExtractionService.ask_facts: the model's reply parsed, a runaway one without stalling the
event loop."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest

from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.extraction import ExtractionService, SessionTranscript
from navi_memory.services.facts import FactService
from navi_memory.testing import ScriptedChatModel

TRANSCRIPT = SessionTranscript(
    session_id="s",
    user_id=uuid.uuid4(),
    last_active=datetime(2026, 12, 1, tzinfo=UTC),
    extracted_at=None,
    idle_seconds=3600.0,
    text="User: I use neovim.",
)


def service(reply: str) -> ExtractionService:
    return ExtractionService(
        chat_model=ScriptedChatModel([reply]), embedding=EmbeddingService(None), facts=FactService()
    )


async def test_a_short_reply_gives_its_facts() -> None:
    reply = json.dumps({"facts": [{"category": "preferences", "key": "editor", "value": "neovim"}]})
    parsed = await service(reply).ask_facts(TRANSCRIPT)
    assert [(f.category, f.key, f.value) for f in parsed.facts] == [
        ("preferences", "editor", "neovim")
    ]


@pytest.mark.slow
async def test_a_runaway_reply_is_parsed_while_the_event_loop_keeps_turning() -> None:
    """2 MB of fact-shaped items (a few hundred ms of parsing): the same facts and count as a
    short reply would give, and meanwhile the loop runs other tasks (on the loop itself it ran
    none until the parse was done)."""
    items = [{"category": "misc", "key": f"k{i}", "value": [1, 2]} for i in range(40_000)]
    reply = json.dumps({"facts": items})
    assert len(reply) > 2_000_000
    ticks = 0
    done = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    beating = asyncio.create_task(heartbeat())
    await asyncio.sleep(0)
    before = ticks
    try:
        parsed = await service(reply).ask_facts(TRANSCRIPT)
        during = ticks - before
    finally:
        done.set()
        await beating
    assert len(parsed.facts) == 100 and parsed.skipped == 39_900
    assert parsed.facts[0].key == "k0" and parsed.facts[0].value == "1, 2"
    assert during >= 5, f"the event loop turned {during} times while the reply was parsed"
