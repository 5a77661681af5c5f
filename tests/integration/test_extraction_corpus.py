"""The extraction corpus through the whole extractor on PostgreSQL: each user's conversations
become sessions, the fake model gives each its corpus reply, and the facts go through dedupe.
This checks parsing and merging, not a model's judgement."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest

from navi_memory import ExtractionReport, Memory, open_memory
from navi_memory.testing import FakeOllama
from tests.conftest import make_settings
from tests.extraction_corpus import CORPUS_DIR, Conversation, load_corpus
from tests.integration.extraction_model import ExtractionModel
from tests.integration.factories import execute, new_user

CORPUS = load_corpus()
EXPECTED = json.loads((CORPUS_DIR / "expected_memory.json").read_text(encoding="utf-8"))["users"]


@pytest.fixture
async def memory(db_url: str, fake_ollama: FakeOllama) -> AsyncIterator[Memory]:
    settings = make_settings(
        db_url, fake_ollama, memory_extract_on_create=False, memory_llm_timeout_seconds=30
    )
    async with open_memory(settings) as opened:
        yield opened


async def store_conversation(
    memory: Memory, user_id: uuid.UUID, conversation: Conversation, idle_minutes: int
) -> str:
    """The conversation as a session: appended message by message, then demoted messages and
    summaries marked as compression would leave them, then idle for ``idle_minutes``."""
    sid = (await memory.sessions.create(conversation.name, user_id=user_id)).id
    for message in conversation.messages:
        fields: dict[str, Any] = {
            "tool_name": message.get("tool_name"),
            "tool_args": message.get("tool_args"),
        }
        row = await memory.sessions.append(
            sid, message["role"], message.get("content", ""), user_id=user_id, **fields
        )
        if message.get("kind", "message") != "message" or not message.get("is_context", True):
            await execute(
                memory,
                "UPDATE session_messages SET kind = :kind, is_context = :ctx WHERE id = :id",
                kind=message.get("kind", "message"),
                ctx=message.get("is_context", True),
                id=row.id,
            )
    await execute(
        memory,
        "UPDATE sessions SET last_active = now() - make_interval(mins => :m) WHERE id = :id",
        m=idle_minutes,
        id=sid,
    )
    return sid


def reply_for(transcript: str) -> str:
    """The corpus reply of the conversation this transcript renders."""
    matches = [c for c in CORPUS if c.messages[0]["content"][:60] in transcript]
    assert len(matches) == 1, transcript[:200]
    return matches[0].reply


@pytest.mark.slow
async def test_corpus_through_parser_and_dedupe(
    memory: Memory, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every user's memory ends as expected_memory.json says: the visible facts, the merged
    spellings hidden behind them; every reply's unusable items are counted as skipped."""
    model = ExtractionModel(facts=reply_for, summary="What I remember.")
    fake_ollama.chat_handler = model
    by_user: dict[str, list[Conversation]] = defaultdict(list)
    for conversation in CORPUS:
        by_user[conversation.user].append(conversation)

    totals = ExtractionReport()
    for name, conversations in by_user.items():
        uid = await new_user(memory, name)
        # Oldest first: the sweep takes the longest idle session first, in file order.
        for age, conversation in enumerate(reversed(conversations), start=40):
            await store_conversation(memory, uid, conversation, idle_minutes=age)
        report = await memory.extractor.process_stale_sessions(uid)
        totals += report

        expected = EXPECTED[name]
        assert report.sessions_extracted == len(conversations)
        assert report.failures == 0
        assert report.facts_skipped == sum(c.skipped for c in conversations)
        assert report.facts_merged == expected["merged"]
        facts = await memory.store.get_all_facts(uid, include_merged=True)
        by_id = {f.id: f for f in facts}
        visible = {f"{f.category}/{f.key}": f.value for f in facts if f.merged_into is None}
        hidden = {
            f"{f.category}/{f.key}": f"{by_id[f.merged_into].category}/{by_id[f.merged_into].key}"
            for f in facts
            if f.merged_into is not None
        }
        assert visible == expected["visible"], name
        assert hidden == expected["hidden"], name
        summary = await memory.store.get_summary(uid)
        assert summary == ("What I remember." if expected["visible"] else None)

    assert totals.sessions_extracted == len(CORPUS)
    with capsys.disabled():
        visible_total = sum(len(u["visible"]) for u in EXPECTED.values())
        print(
            f"\nextraction corpus on PostgreSQL: {len(CORPUS)} sessions of {len(by_user)} users; "
            f"{totals.facts_written} upserts kept a fact, {totals.facts_merged} merged another "
            f"spelling, {totals.facts_skipped} items skipped; {visible_total} facts visible"
        )
