"""Automatic extraction on real PostgreSQL with the fake Ollama: stale sessions into facts, the
summary rewritten from the facts, the mark, the claim between processes, the background
trigger of sessions.create, and tenancy."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from navi_memory import (
    PERMISSION_READ_ALL,
    ExtractionReport,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    open_memory,
    request_context,
)
from navi_memory.llm import embedding_text_for_fact
from navi_memory.services.extraction import ExtractionService
from navi_memory.services.facts import FactService
from navi_memory.testing import FakeOllama
from navi_memory.tools import ToolContext
from tests.conftest import make_settings
from tests.integration.extraction_model import ExtractionModel
from tests.integration.factories import delete_user_during, execute, new_user, scalar
from tests.integration.test_backfill import run_cli

STALE = 60
"""Minutes a test session has been idle: past MEMORY_STALE_MINUTES (30)."""


@pytest.fixture
def model(fake_ollama: FakeOllama) -> ExtractionModel:
    scripted = ExtractionModel()
    fake_ollama.chat_handler = scripted
    return scripted


def extraction_settings(db_url: str, fake: FakeOllama, **overrides: Any) -> Any:
    values: dict[str, Any] = {"memory_extract_on_create": False, "memory_llm_timeout_seconds": 30}
    values.update(overrides)
    return make_settings(db_url, fake, **values)


@pytest.fixture
async def memory(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> AsyncIterator[Memory]:
    """A Memory whose sessions.create starts no background extraction: the tests run it."""
    async with open_memory(extraction_settings(db_url, fake_ollama)) as opened:
        yield opened


@pytest.fixture
async def triggering_memory(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> AsyncIterator[Memory]:
    """A Memory with the default MEMORY_EXTRACT_ON_CREATE=true, on the database of ``memory``
    (set a test up through ``memory``: its creates start no sweep that could race the set-up)."""
    settings = extraction_settings(db_url, fake_ollama, memory_extract_on_create=True)
    async with open_memory(settings) as opened:
        yield opened


async def idle(memory: Memory, session_id: str, minutes: float) -> None:
    """Move the session's last activity ``minutes`` into the past (database clock)."""
    await execute(
        memory,
        "UPDATE sessions SET last_active = now() - make_interval(secs => :s) WHERE id = :id",
        s=minutes * 60,
        id=session_id,
    )


async def failed_ago(memory: Memory, session_id: str, minutes: float) -> None:
    """Date the session's last failed extraction ``minutes`` ago: its retry wait passed."""
    await execute(
        memory,
        "UPDATE session_memory_state SET failed_at = now() - make_interval(secs => :s) "
        "WHERE session_id = :id",
        s=minutes * 60,
        id=session_id,
    )


async def conversation(
    memory: Memory,
    user_id: uuid.UUID,
    *texts: str,
    session_id: str | None = None,
    idle_minutes: float = STALE,
) -> str:
    """A session of the user holding ``texts`` as user messages, idle for ``idle_minutes``."""
    sid = (await memory.sessions.create(session_id, user_id=user_id)).id
    for content in texts:
        await memory.sessions.append(sid, "user", content, user_id=user_id)
    await idle(memory, sid, idle_minutes)
    return sid


async def last_active(memory: Memory, session_id: str) -> datetime:
    value = await scalar(memory, "SELECT last_active FROM sessions WHERE id = :id", id=session_id)
    assert isinstance(value, datetime)
    return value


async def visible_facts(memory: Memory, user_id: uuid.UUID) -> dict[tuple[str, str], str]:
    return {(f.category, f.key): f.value for f in await memory.store.get_all_facts(user_id)}


def facts_json(*items: tuple[str, str, str, str]) -> str:
    return json.dumps([{"category": c, "key": k, "value": v, "source": s} for c, k, v, s in items])


def echo_facts(transcript: str) -> str:
    """Facts made from the transcript's own words: `User: fact <key> <value>` lines."""
    pairs = re.findall(r"User: fact (\S+) (\S+)", transcript)
    return facts_json(*(("notes", key, value, "user_explicit") for key, value in pairs))


# --- the loop -----------------------------------------------------------------------------------


async def test_stale_session_yields_facts_with_confidences_a_summary_and_the_mark(
    memory: Memory, model: ExtractionModel
) -> None:
    """A stale session's facts land with the confidence of their source, the summary is
    rewritten from them, and the session is marked at the last activity that was read."""
    uid = await new_user(memory)
    await memory.store.set_summary("old summary", user_id=uid)
    model.facts = facts_json(
        ("preferences", "editor", "neovim", "user_explicit"),
        ("environment", "os", "Ubuntu 24.04", "tool_call"),
        ("environment", "kube_context", "staging", "auto_discovery"),
        ("location", "city", "Lisbon", "conversation"),
        ("pets", "cat", "Pixel", "overheard"),
    )
    model.summary = "Maria uses neovim on Ubuntu 24.04 and lives in Lisbon."
    sid = await conversation(memory, uid, "I use neovim", "My cat is Pixel")
    read_at = await last_active(memory, sid)

    report = await memory.extractor.process_stale_sessions(uid)

    assert report == ExtractionReport(
        sessions_seen=1, sessions_extracted=1, facts_written=5, summaries_written=1
    )
    facts = await memory.store.get_all_facts(uid)
    assert {f.key: (f.source, f.confidence) for f in facts} == {
        "editor": ("user_explicit", 90),
        "os": ("tool_call", 95),
        "kube_context": ("auto_discovery", 95),
        "city": ("conversation", 70),
        "cat": ("conversation", 70),
    }
    assert all(f.has_embedding for f in facts)
    assert await memory.store.get_summary(uid) == model.summary
    assert await memory.store.get_extracted_at(sid, uid) == read_at
    assert "User: I use neovim\nUser: My cat is Pixel" in model.transcripts[0]
    assert "- [preferences] editor: neovim (confidence 90)" in model.summary_inputs[0]

    again = await memory.extractor.process_stale_sessions(uid)
    assert again == ExtractionReport()
    assert model.extraction_calls == 1


async def test_the_extraction_and_summary_calls_ask_for_the_configured_context_window(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """Both model calls of an extraction carry MEMORY_LLM_NUM_CTX as Ollama's num_ctx: the
    prompt with a transcript of up to 12,000 characters outgrows Ollama's default window,
    which cuts the prompt without a word."""
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    settings = extraction_settings(db_url, fake_ollama, memory_llm_num_ctx=12288)
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        await conversation(memory, uid, "I use neovim")
        report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)
    requests = fake_ollama.chat_requests
    assert len(requests) == 2  # the facts, then the summary
    assert [request.get("options") for request in requests] == [{"num_ctx": 12288}] * 2


async def test_fresh_session_is_not_touched(memory: Memory, model: ExtractionModel) -> None:
    """A session idle for less than MEMORY_STALE_MINUTES is not seen, the model not asked."""
    uid = await new_user(memory)
    sid = await conversation(memory, uid, "I use neovim", idle_minutes=29)
    assert await memory.extractor.process_stale_sessions(uid) == ExtractionReport()
    assert model.extraction_calls == 0
    assert await memory.store.get_extracted_at(sid, uid) is None


async def test_session_active_again_after_extraction_is_extracted_again(
    memory: Memory, model: ExtractionModel
) -> None:
    """New messages after the mark make the session stale again once idle; the second
    extraction reads the whole history, the new messages included."""
    uid = await new_user(memory)
    model.facts = echo_facts
    sid = await conversation(memory, uid, "fact editor neovim")
    first = await memory.extractor.process_stale_sessions(uid)
    assert first.sessions_extracted == 1

    await memory.sessions.append(sid, "user", "fact editor helix", user_id=uid)
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_seen == 0  # active
    await idle(memory, sid, 31)
    second = await memory.extractor.process_stale_sessions(uid)

    assert second.sessions_extracted == 1
    assert model.extraction_calls == 2
    assert "fact editor helix" in model.transcripts[1]
    assert await visible_facts(memory, uid) == {("notes", "editor"): "helix"}
    assert await memory.store.get_extracted_at(sid, uid) == await last_active(memory, sid)


async def test_message_appended_during_the_model_call_leaves_the_session_stale(
    memory: Memory, model: ExtractionModel
) -> None:
    """The mark records the activity that was read: a message appended while the model
    answers (the append does not wait) makes the session due again."""
    uid = await new_user(memory)
    model.facts = echo_facts
    sid = await conversation(memory, uid, "fact editor neovim")
    read_at = await last_active(memory, sid)
    model.hold()
    sweep = asyncio.create_task(memory.extractor.process_stale_sessions(uid))
    try:
        assert await asyncio.to_thread(model.entered.wait, 10)
        # Generous bound: a deadlock guard, not a speed goal.
        await asyncio.wait_for(
            memory.sessions.append(sid, "user", "fact shell fish", user_id=uid), timeout=10
        )
    finally:
        model.release()
    report = await sweep

    assert report.sessions_extracted == 1
    assert await memory.store.get_extracted_at(sid, uid) == read_at
    assert await last_active(memory, sid) > read_at
    await idle(memory, sid, 31)
    again = await memory.extractor.process_stale_sessions(uid)
    assert again.sessions_extracted == 1
    assert await visible_facts(memory, uid) == {
        ("notes", "editor"): "neovim",
        ("notes", "shell"): "fish",
    }


async def test_only_sessions_past_the_limit_are_taken_longest_idle_first(
    memory: Memory, model: ExtractionModel
) -> None:
    """``limit`` caps a sweep; the longest idle session goes first."""
    uid = await new_user(memory)
    newer = await conversation(memory, uid, "a", idle_minutes=40)
    older = await conversation(memory, uid, "b", idle_minutes=90)
    report = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert (report.sessions_seen, report.sessions_extracted) == (1, 1)
    assert await memory.store.get_extracted_at(older, uid) is not None
    assert await memory.store.get_extracted_at(newer, uid) is None


async def test_session_without_messages_is_marked_without_asking_the_model(
    memory: Memory, model: ExtractionModel
) -> None:
    """Nothing to read: the session is marked, no model is called, the summary stays."""
    uid = await new_user(memory)
    sid = await conversation(memory, uid)
    report = await memory.extractor.process_stale_sessions(uid)
    assert report == ExtractionReport(sessions_seen=1, sessions_extracted=1)
    assert (model.extraction_calls, model.summary_calls) == (0, 0)
    assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_zero_facts_leave_the_summary_as_it_is(
    memory: Memory, model: ExtractionModel
) -> None:
    """A session that yields no fact marks the session and leaves the summary untouched."""
    uid = await new_user(memory)
    await memory.store.set_summary("old summary", user_id=uid)
    model.facts = '{"facts": []}'
    sid = await conversation(memory, uid, "what is 17 * 23?")
    report = await memory.extractor.process_stale_sessions(uid)
    assert report == ExtractionReport(sessions_seen=1, sessions_extracted=1)
    assert model.summary_calls == 0
    assert await memory.store.get_summary(uid) == "old summary"
    assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_zero_facts_leave_a_summary_of_unknown_origin_beside_existing_facts(
    memory: Memory, model: ExtractionModel
) -> None:
    """The user holds facts (written by the application) and a summary set by hand: a session
    that yields no fact leaves that summary as it is; the next one that yields facts replaces
    it with one written from all the current facts."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("preferences", "editor", "neovim", user_id=uid)
    await memory.store.set_summary("a summary written by hand", user_id=uid)
    model.facts = '{"facts": []}'
    await conversation(memory, uid, "what is 17 * 23?")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 0)
    assert model.summary_calls == 0
    assert await memory.store.get_summary(uid) == "a summary written by hand"

    model.facts = facts_json(("location", "city", "Lisbon", "user_explicit"))
    await conversation(memory, uid, "I live in Lisbon")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)
    assert await memory.store.get_summary(uid) == model.summary
    assert "editor: neovim" in model.summary_inputs[-1]


async def test_unchanged_facts_do_not_rewrite_the_summary(
    memory: Memory, model: ExtractionModel
) -> None:
    """Facts only confirmed (same values again) leave an existing summary as it is."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    await conversation(memory, uid, "I use neovim")
    await conversation(memory, uid, "still neovim")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.facts_written, report.summaries_written) == (2, 2, 1)
    assert model.summary_calls == 1


async def test_an_extracted_fact_records_the_session_it_came_from(
    memory: Memory, model: ExtractionModel
) -> None:
    """The extractor runs with no current session, but it knows the fact's session: it is
    stored as the fact's provenance, and unified search shows it."""
    uid = await new_user(memory)
    model.facts = facts_json(("technical", "server_port", "8099", "user_explicit"))
    sid = await conversation(memory, uid, "the server port is 8099")
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_extracted == 1
    assert await scalar(memory, "SELECT session_id FROM memory_facts") == sid
    with request_context(user_id=uid):
        hits = await memory.search.search("server port", scope="facts")
    assert [hit.session_id for hit in hits] == [sid]


async def test_other_spellings_of_a_key_are_merged(memory: Memory, model: ExtractionModel) -> None:
    """Facts are written with dedupe: `tz` merges the stored `time_zone` (reported as merged)."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("location", "time_zone", "Europe/Berlin", user_id=uid)
    model.facts = facts_json(("location", "tz", "Europe/Lisbon", "user_explicit"))
    await conversation(memory, uid, "I moved, my tz is Europe/Lisbon")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.facts_written, report.facts_merged) == (0, 1)
    assert await visible_facts(memory, uid) == {("location", "tz"): "Europe/Lisbon"}
    hidden = await memory.store.get_all_facts(uid, include_merged=True)
    assert {f.key for f in hidden if f.merged_into is not None} == {"time_zone"}


async def test_an_extraction_that_only_merges_spellings_leaves_no_vector_queued(
    memory: Memory, model: ExtractionModel
) -> None:
    """A merged upsert queues its fact's vector too: the extraction kicks the fact indexer
    for it (it used to kick only for facts written, leaving the vector queued, and the fact
    out of the vector index, until some later write)."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("location", "time_zone", "Europe/Berlin", user_id=uid)
    await memory.store.wait_fact_indexing()
    assert await memory.store.pending_fact_count() == 0
    model.facts = facts_json(("location", "tz", "Europe/Lisbon", "user_explicit"))
    await conversation(memory, uid, "I moved, my tz is Europe/Lisbon")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.facts_written, report.facts_merged) == (0, 1)
    await memory.store.wait_fact_indexing()
    assert await memory.store.pending_fact_count() == 0


async def test_a_category_stored_under_another_case_is_written_into_and_merged(
    memory: Memory, model: ExtractionModel
) -> None:
    """The application's `Preferences` is the extractor's `preferences`: the fact goes into the
    stored spelling and merges `editor` there, instead of sitting beside the stale value; its
    vector is of the text it is stored under."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("Preferences", "editor", "vim", user_id=uid)
    model.facts = facts_json(("preferences", "preferred_editor", "helix", "user_explicit"))
    await conversation(memory, uid, "I use helix now")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.facts_written, report.facts_merged) == (0, 1)
    assert await visible_facts(memory, uid) == {("Preferences", "preferred_editor"): "helix"}
    stored = await scalar(
        memory,
        "SELECT embedding::text FROM memory_facts WHERE key = 'preferred_editor'",
    )
    want = await memory.store._embedding.document(
        embedding_text_for_fact("Preferences", "preferred_editor", "helix")
    )
    assert stored is not None and want is not None
    got = [float(x) for x in str(stored).strip("[]").split(",")]
    assert max(abs(x - y) for x, y in zip(got, want, strict=True)) < 1e-5


async def test_of_several_stored_cases_the_one_holding_the_key_is_written_into(
    memory: Memory, model: ExtractionModel
) -> None:
    """Of `Work` and `WORK`, the fact goes where a spelling of its key is (the smaller one
    here); a key in neither goes to the fullest; a category the user holds in lower case
    already stays as it is."""
    uid = await new_user(memory)
    store = memory.store
    await store.upsert_fact("Work", "employer", "Acme", user_id=uid)
    await store.upsert_fact("Work", "team", "Search", user_id=uid)
    await store.upsert_fact("WORK", "job_title", "Engineer", user_id=uid)
    await store.upsert_fact("location", "city", "Lisbon", user_id=uid)
    await store.upsert_fact("Location", "country", "Portugal", user_id=uid)
    model.facts = facts_json(
        ("work", "JobTitle", "Staff engineer", "user_explicit"),
        ("work", "office", "Porto", "user_explicit"),
        ("location", "city", "Porto", "user_explicit"),
    )
    await conversation(memory, uid, "I am a staff engineer in the Porto office now")
    await memory.extractor.process_stale_sessions(uid)
    assert await visible_facts(memory, uid) == {
        ("Work", "employer"): "Acme",
        ("Work", "team"): "Search",
        ("Work", "office"): "Porto",
        ("WORK", "JobTitle"): "Staff engineer",
        ("location", "city"): "Porto",
        ("Location", "country"): "Portugal",
    }


@pytest.mark.parametrize("spelling", ["editor", "Editor"])
async def test_a_value_the_reply_returns_to_after_another_is_the_one_kept(
    memory: Memory, model: ExtractionModel, spelling: str
) -> None:
    """A reply that gives a key a value, then another, then the first again (the key itself or
    another spelling of it in between) leaves the last value stored, as three writes in that
    order do: the third item is no mere repeat of the first, since the second changed the fact
    in between."""
    uid = await new_user(memory)
    model.facts = facts_json(
        ("preferences", "editor", "neovim", "user_explicit"),
        ("preferences", spelling, "helix", "user_explicit"),
        ("preferences", "editor", "neovim", "user_explicit"),
    )
    await conversation(memory, uid, "I tried helix, but I am back to neovim")
    report = await memory.extractor.process_stale_sessions(uid)
    assert list((await visible_facts(memory, uid)).values()) == ["neovim"]
    assert report.facts_written + report.facts_merged == 3


async def test_an_extraction_keeps_a_separated_spelling_apart_and_embeds_the_survivors_key(
    memory: Memory, model: ExtractionModel
) -> None:
    """The extractor writes with dedupe: a spelling the user separated (unmerge_fact) stays
    visible when the extractor confirms the other spelling, and a value the extractor writes
    under a spelling still hidden gets the vector of the row it lands on."""
    uid = await new_user(memory)
    store = memory.store
    old = await store.upsert_fact("location", "time_zone", "Europe/Berlin", user_id=uid)
    await store.upsert_fact("location", "tz", "Europe/Lisbon", user_id=uid, dedupe=True)
    await store.upsert_fact("p", "language", "English", user_id=uid)
    lang = await store.upsert_fact("p", "preferred_language", "Dutch", user_id=uid, dedupe=True)
    with request_context(user_id=uid):
        await store.unmerge_fact(old.id)
    model.facts = facts_json(
        ("location", "tz", "Europe/Lisbon", "user_explicit"),
        ("p", "language", "French", "user_explicit"),
    )
    await conversation(memory, uid, "tz Europe/Lisbon, and I speak French now")
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_extracted == 1
    assert await visible_facts(memory, uid) == {
        ("location", "time_zone"): "Europe/Berlin",
        ("location", "tz"): "Europe/Lisbon",
        ("p", "preferred_language"): "French",
    }
    stored = await scalar(
        memory, "SELECT embedding::text FROM memory_facts WHERE id = :i", i=lang.id
    )
    want = await store._embedding.document(
        embedding_text_for_fact("p", "preferred_language", "French")
    )
    assert stored is not None and want is not None
    got = [float(x) for x in str(stored).strip("[]").split(",")]
    assert max(abs(x - y) for x, y in zip(got, want, strict=True)) < 1e-5


async def extracted_with_summary(
    memory: Memory, model: ExtractionModel, uid: uuid.UUID, *facts: tuple[str, str, str, str]
) -> None:
    """A first session giving ``facts``, extracted, and the summary the model wrote of them."""
    model.facts = facts_json(*facts)
    model.summary = "Summary of: " + ", ".join(value for _, _, value, _ in facts)
    await conversation(memory, uid, "about me")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)


async def test_a_forgotten_fact_leaves_the_summary_at_once_and_the_next_one_omits_it(
    memory: Memory, model: ExtractionModel
) -> None:
    """The summary rides in every prompt: forgetting a fact (the memory tool, delete_fact)
    drops it at once, and the next extraction writes it again from the facts left, even when
    that session only confirms a fact."""
    uid = await new_user(memory)
    await extracted_with_summary(
        memory,
        model,
        uid,
        ("preferences", "editor", "neovim", "user_explicit"),
        ("personal", "home_address", "12 Elm St", "user_explicit"),
    )
    assert "Elm" in (await memory.store.get_summary(uid) or "")
    assert await memory.store.delete_fact("home_address", user_id=uid) == 1
    assert await memory.store.get_summary(uid) is None

    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    model.summary = "Uses neovim."
    await conversation(memory, uid, "still on neovim")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)
    assert await memory.store.get_summary(uid) == "Uses neovim."
    assert "home_address" not in model.summary_inputs[-1]


async def test_a_fact_gone_by_expiry_or_the_applications_sql_makes_the_summary_out_of_date(
    memory: Memory, model: ExtractionModel
) -> None:
    """Any change of the set of current facts makes the summary out of date, not only a newer
    fact: one expiring, or deleted by the application's own SQL; the next extraction rewrites
    it, even from a session that gives no fact."""
    uid = await new_user(memory)
    await extracted_with_summary(
        memory,
        model,
        uid,
        ("preferences", "editor", "neovim", "user_explicit"),
        ("plans", "trip", "Rome in May", "user_explicit"),
        ("personal", "home_address", "12 Elm St", "user_explicit"),
    )
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 second' WHERE key = 'trip'",
    )
    await execute(memory, "DELETE FROM memory_facts WHERE key = 'home_address'")
    model.facts = "[]"
    model.summary = "Uses neovim."
    await conversation(memory, uid, "what is 17 * 23?")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)
    assert await memory.store.get_summary(uid) == "Uses neovim."
    assert "trip" not in model.summary_inputs[-1]
    assert "home_address" not in model.summary_inputs[-1]

    # Nothing changed since: no model call.
    await conversation(memory, uid, "and 18 * 23?")
    again = await memory.extractor.process_stale_sessions(uid)
    assert (again.sessions_extracted, again.summaries_written) == (1, 0)
    assert model.summary_calls == 2


async def test_a_summary_of_facts_all_gone_is_cleared(
    memory: Memory, model: ExtractionModel
) -> None:
    """When no current fact is left, a summary written from facts is removed, not kept."""
    uid = await new_user(memory)
    await extracted_with_summary(
        memory, model, uid, ("plans", "trip", "Rome in May", "user_explicit")
    )
    await execute(memory, "UPDATE memory_facts SET expires_at = now() - interval '1 second'")
    model.facts = "[]"
    await conversation(memory, uid, "hello")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.summaries_written) == (1, 1)
    assert await memory.store.get_summary(uid) is None
    assert model.summary_calls == 1


@pytest.mark.parametrize(
    ("reply", "written", "skipped"),
    [
        ('Here:\n```json\n[{"category": "a", "key": "k", "value": "v"}]\n```\nDone.', 1, 0),
        ('Sure! {"facts": [{"category": "a", "key": "k", "value": 8080}]} hope it helps', 1, 0),
        ('{"category": "a", "key": "k", "value": "v", "confidence": 0.9}', 1, 0),
        ('[{"category": "a", "key": "k", "value": "v"}, {"category": "a", "key": "j", "va', 1, 1),
        (
            '["a string", {"key": 5, "value": "x"}, {"key": "k", "value": {"x": 1}}, '
            '{"key": "k2", "value": "ok"}]',
            1,
            3,
        ),
        ("[]", 0, 0),
    ],
    ids=["fence-prose", "wrapper-number", "single-object", "partial", "wrong-types", "empty"],
)
async def test_junk_reply_shapes_are_handled_and_counted(
    memory: Memory, model: ExtractionModel, reply: str, written: int, skipped: int
) -> None:
    """Each reply shape real models produce is read; unusable items are counted, the session
    still extracted and marked."""
    uid = await new_user(memory)
    model.facts = reply
    sid = await conversation(memory, uid, "hello")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.failures) == (1, 0)
    assert (report.facts_written, report.facts_skipped) == (written, skipped)
    assert len(await memory.store.get_all_facts(uid)) == written
    assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_reply_without_json_is_a_failure_that_is_retried(
    memory: Memory, model: ExtractionModel
) -> None:
    """A reply with no JSON at all leaves the session unmarked; a run after its retry wait
    (5 minutes after a first failure) retries it."""
    uid = await new_user(memory)
    model.facts = "I could not find any facts, sorry."
    sid = await conversation(memory, uid, "hello")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.failures) == (0, 1)
    assert await memory.store.get_extracted_at(sid, uid) is None
    model.facts = "[]"
    await failed_ago(memory, sid, 6)
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_extracted == 1


@pytest.mark.parametrize(
    "reply",
    [
        '{"facts": [{"category": "preferences", "key": "edi',
        '[{"category": "work", "key": "employer", "value": "Acme"',
    ],
)
async def test_a_reply_cut_off_before_its_first_fact_is_a_failure_that_is_retried(
    memory: Memory, model: ExtractionModel, reply: str
) -> None:
    """A reply the model could not finish before its first complete fact (its output limit)
    is no answer: the session is left unmarked, and a run after its retry wait extracts its
    facts. It was once marked as extracted with nothing written, its facts lost for good."""
    uid = await new_user(memory)
    model.facts = reply
    sid = await conversation(memory, uid, "I work at Acme")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.failures) == (0, 1)
    assert await memory.store.get_extracted_at(sid, uid) is None
    model.facts = facts_json(("work", "employer", "Acme", "user_explicit"))
    await failed_ago(memory, sid, 6)
    again = await memory.extractor.process_stale_sessions(uid)
    assert (again.sessions_extracted, again.facts_written) == (1, 1)
    assert await visible_facts(memory, uid) == {("work", "employer"): "Acme"}


async def test_a_reply_with_an_integer_too_long_for_python_is_extracted_as_text(
    memory: Memory, model: ExtractionModel
) -> None:
    """A 5,000-digit number in the reply (Python's int() refuses it with a plain ValueError)
    used to escape the parser and stop the whole sweep; it is now the fact's text."""
    uid = await new_user(memory)
    digits = "9" * 5000
    model.facts = f'[{{"category": "work", "key": "employee_id", "value": {digits}}}]'
    await conversation(memory, uid, "my employee id is long")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.failures) == (1, 0)
    assert await visible_facts(memory, uid) == {("work", "employee_id"): digits}


async def test_an_unexpected_error_in_one_session_fails_it_and_the_sweep_goes_on(
    memory: Memory, model: ExtractionModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect meeting one session's reply or rows is that session's failure (logged with
    its traceback, the session left for the next run), never the sweep's."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    first = await conversation(memory, uid, "poisoned", idle_minutes=90)
    second = await conversation(memory, uid, "I use neovim", idle_minutes=60)
    original = ExtractionService.ask_facts
    calls: list[str] = []

    async def ask_facts(self: ExtractionService, transcript: Any) -> Any:
        calls.append(transcript.session_id)
        if transcript.session_id == first:
            raise RuntimeError("a defect")
        return await original(self, transcript)

    monkeypatch.setattr(ExtractionService, "ask_facts", ask_facts)
    report = await memory.extractor.process_stale_sessions(uid)
    assert calls == [first, second]
    assert (report.sessions_extracted, report.failures) == (1, 1)
    assert await memory.store.get_extracted_at(first, uid) is None
    assert await memory.store.get_extracted_at(second, uid) is not None
    assert await visible_facts(memory, uid) == {("preferences", "editor"): "neovim"}


async def test_model_down_leaves_the_session_unmarked_and_the_summary_untouched(
    memory: Memory, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """The chat model failing: counted, session unmarked, nothing written; retried later."""
    uid = await new_user(memory)
    await memory.store.set_summary("old summary", user_id=uid)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sid = await conversation(memory, uid, "I use neovim")
    fake_ollama.mode = "fail"
    report = await memory.extractor.process_stale_sessions(uid)
    assert report == ExtractionReport(sessions_seen=1, failures=1)
    assert await memory.store.get_extracted_at(sid, uid) is None
    assert await memory.store.get_summary(uid) == "old summary"
    assert await memory.store.get_all_facts(uid) == []

    fake_ollama.mode = "ok"
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_extracted == 1
    assert await memory.store.get_summary(uid) == model.summary


async def test_summary_failure_keeps_the_facts_and_the_old_summary_and_no_mark(
    memory: Memory, model: ExtractionModel
) -> None:
    """The model failing at the summary: facts stay, the old summary stays, the session is
    unmarked; the rerun writes no fact twice."""
    uid = await new_user(memory)
    await memory.store.set_summary("old summary", user_id=uid)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    model.summary = ""  # an empty reply is a ChatModelError
    sid = await conversation(memory, uid, "I use neovim")
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.failures, report.facts_written, report.sessions_extracted) == (1, 1, 0)
    assert await memory.store.get_summary(uid) == "old summary"
    assert await memory.store.get_extracted_at(sid, uid) is None

    model.summary = "Uses neovim."
    rerun = await memory.extractor.process_stale_sessions(uid)
    assert rerun.sessions_extracted == 1
    assert await memory.store.fact_count(uid, include_merged=True) == 1
    assert await memory.store.get_summary(uid) == "Uses neovim."


async def test_session_deleted_during_the_model_call_gets_no_facts(
    memory: Memory, model: ExtractionModel
) -> None:
    """A conversation the user deleted while the model read it is not turned into facts."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sid = await conversation(memory, uid, "I use neovim")
    model.hold()
    sweep = asyncio.create_task(memory.extractor.process_stale_sessions(uid))
    try:
        assert await asyncio.to_thread(model.entered.wait, 10)
        assert await memory.sessions.delete(sid, user_id=uid)
    finally:
        model.release()
    report = await sweep
    assert (report.sessions_seen, report.sessions_skipped, report.failures) == (1, 1, 0)
    assert await memory.store.get_all_facts(uid) == []
    assert await scalar(memory, "SELECT count(*) FROM session_memory_state") == 0


async def test_session_deleted_during_the_summary_call_is_not_marked(
    memory: Memory, model: ExtractionModel
) -> None:
    """A session deleted while the model writes the summary is skipped, not marked: no
    extraction state is left behind for an id that no longer exists (or a later session that
    reuses it)."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sid = await conversation(memory, uid, "I use neovim")
    model.hold("summary")
    sweep = asyncio.create_task(memory.extractor.process_stale_sessions(uid))
    try:
        assert await asyncio.to_thread(model.entered.wait, 10)
        assert await memory.sessions.delete(sid, user_id=uid)
    finally:
        model.release()
    report = await sweep
    assert (report.sessions_extracted, report.sessions_skipped, report.failures) == (0, 1, 0)
    assert report.facts_written == 1  # written before the delete: the user's, not the session's
    assert await scalar(memory, "SELECT count(*) FROM session_memory_state") == 0
    assert await memory.store.get_extracted_at(sid, uid) is None


@pytest.mark.parametrize("step", ["facts", "summary"])
async def test_deleting_the_user_during_an_extractions_write_waits_for_it_without_deadlock(
    memory: Memory, model: ExtractionModel, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """users.delete while an extraction's write transaction (the facts', or the summary and
    mark's) holds its locks: the delete waits for it and returns True. Both take the user row
    before the session row; the extraction used to take the session first and then need the
    user row for its foreign key, while the delete held it and waited for the session: a
    deadlock, raised from users.delete."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sid = await conversation(memory, uid, "I use neovim")
    # A state row from an earlier extraction, as a session extracted before has.
    await memory.store.mark_session_extracted(sid, uid, at=datetime.now(UTC) - timedelta(days=1))
    service = memory.extractor._sweep._service
    # A step inside the write's transaction, after its locks are taken.
    owner, name = (
        (service, "_stored_categories") if step == "facts" else (service.facts, "lock_summary")
    )
    original = getattr(owner, name)
    paused, resume = asyncio.Event(), asyncio.Event()

    async def pausing(*args: Any) -> Any:
        paused.set()
        await resume.wait()
        return await original(*args)

    monkeypatch.setattr(owner, name, pausing)
    sweep = memory.extractor.process_stale_sessions(uid)
    report, deleted = await delete_user_during(memory, uid, sweep, paused, resume)
    assert deleted is True
    assert report.failures == 0
    assert report.sessions_extracted + report.sessions_skipped == 1
    assert await scalar(memory, "SELECT count(*) FROM sessions WHERE id = :id", id=sid) == 0
    assert await scalar(memory, "SELECT count(*) FROM session_memory_state") == 0
    assert await memory.store.fact_count(uid, include_merged=True) == 0


def summary_of_keys(prompt: str) -> str:
    """A summary naming the keys of the facts it was written from."""
    return "Summary of: " + ", ".join(sorted(re.findall(r"\] (\w+):", prompt)))


async def test_two_extractions_of_one_user_at_once_leave_a_summary_of_every_fact(
    memory: Memory, model: ExtractionModel
) -> None:
    """Extraction A reads the facts for its summary, B writes a new fact and its summary of
    both while A's model still writes: A's summary, of facts no longer current, must not
    replace B's (it used to, and nothing rewrote it until another fact changed)."""
    uid = await new_user(memory)
    model.facts = echo_facts
    model.summary = summary_of_keys
    first = await conversation(memory, uid, "fact editor neovim")
    second = await conversation(memory, uid, "fact shell zsh")
    model.hold("summary", once=True)
    slow = asyncio.create_task(memory.extractor.extract_session(first, user_id=uid))
    try:
        assert await asyncio.to_thread(model.entered.wait, 10)
        fast = await memory.extractor.extract_session(second, user_id=uid)
        assert fast.summaries_written == 1
        assert await memory.store.get_summary(uid) == "Summary of: editor, shell"
    finally:
        model.release()
    late = await slow
    assert (late.sessions_extracted, late.summaries_written) == (1, 0)
    assert await memory.store.get_summary(uid) == "Summary of: editor, shell"
    assert await memory.store.get_extracted_at(first, uid) is not None

    # And it stays: a session only confirming a fact finds the summary current.
    third = await conversation(memory, uid, "fact editor neovim")
    assert (await memory.extractor.extract_session(third, user_id=uid)).summaries_written == 0
    assert model.summary_calls == 2


# --- on demand ----------------------------------------------------------------------------------


async def test_extract_session_extracts_a_fresh_session_once(
    memory: Memory, model: ExtractionModel
) -> None:
    """On demand, a session is extracted however recently it was active; asked again with
    nothing new, it is skipped."""
    uid = await new_user(memory)
    model.facts = echo_facts
    sid = await conversation(memory, uid, "fact editor neovim", idle_minutes=0)
    report = await memory.extractor.extract_session(sid, user_id=uid)
    assert report == ExtractionReport(
        sessions_seen=1, sessions_extracted=1, facts_written=1, summaries_written=1
    )
    again = await memory.extractor.extract_session(sid, user_id=uid)
    assert again == ExtractionReport(sessions_seen=1, sessions_skipped=1)
    assert model.extraction_calls == 1


async def test_extract_session_of_a_missing_session_is_not_found(memory: Memory) -> None:
    """An unknown session id is a NotFoundError."""
    uid = await new_user(memory)
    with pytest.raises(NotFoundError):
        await memory.extractor.extract_session("nope", user_id=uid)


@pytest.mark.parametrize("limit", [0, -1, 10**6, True, "5"])
async def test_bad_limit_is_refused(memory: Memory, limit: Any) -> None:
    """``limit`` must be an int from 1 to 1000."""
    uid = await new_user(memory)
    with pytest.raises(InvalidInputError):
        await memory.extractor.process_stale_sessions(uid, limit=limit)


async def test_progress_is_reported_per_session(memory: Memory, model: ExtractionModel) -> None:
    """The progress callback (sync or async) hears of every session, with the total."""
    uid = await new_user(memory)
    for _ in range(3):
        await conversation(memory, uid, "hello")
    seen: list[tuple[int, int]] = []

    async def progress(step: Any) -> None:
        seen.append((step.done, step.total))

    await memory.extractor.process_stale_sessions(uid, progress=progress)
    assert seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("progress", [5, "print", [print]])
async def test_a_progress_that_is_no_function_is_refused_before_any_work(
    memory: Memory, model: ExtractionModel, progress: Any
) -> None:
    """A progress that cannot be called is an InvalidTypeError before the first session: it
    once failed after the first one, with a bare TypeError that stopped the sweep half way."""
    uid = await new_user(memory)
    sids = [await conversation(memory, uid, "hello") for _ in range(2)]
    with pytest.raises(InvalidTypeError, match="progress must be a function"):
        await memory.extractor.process_stale_sessions(uid, progress=progress)
    assert [await memory.store.get_extracted_at(sid, uid) for sid in sids] == [None, None]
    assert model.extraction_calls == 0


# --- the mark -----------------------------------------------------------------------------------


async def test_mark_session_extracted_records_the_time_given(memory: Memory) -> None:
    """``at=`` is recorded as given; without it the mark is now."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert await memory.store.mark_session_extracted(sid, uid, at=when) == when
    assert await memory.store.get_extracted_at(sid, uid) == when
    now = await memory.store.mark_session_extracted(sid, uid)
    assert now > when


@pytest.mark.parametrize(
    ("at", "error"),
    [
        (datetime(2026, 1, 2), InvalidInputError),
        ("2026-01-02T00:00:00Z", InvalidTypeError),
        (1767312000, InvalidTypeError),
    ],
    ids=["naive", "string", "number"],
)
async def test_mark_refuses_an_at_that_is_not_an_aware_datetime(
    memory: Memory, at: Any, error: type[Exception]
) -> None:
    """A naive datetime or a non-datetime ``at`` is refused before anything is written."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    with pytest.raises(error):
        await memory.store.mark_session_extracted(sid, uid, at=at)
    assert await memory.store.get_extracted_at(sid, uid) is None


@pytest.mark.parametrize(
    ("at", "message"),
    [
        (datetime.now(UTC) + timedelta(days=365), "in the future"),
        (datetime(1, 1, 1, tzinfo=UTC), "before 1970"),
        (datetime(1969, 12, 31, 23, 59, tzinfo=UTC), "before 1970"),
    ],
    ids=["next-year", "year-1", "just-before-1970"],
)
async def test_mark_refuses_an_at_in_the_future_or_before_1970(
    memory: Memory, at: datetime, message: str
) -> None:
    """A mark ahead of the clock would leave the session's later activity unextracted until
    the clock passed it, and year 1 would be stored as -infinity: both are refused, and
    nothing is written."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    with pytest.raises(InvalidInputError, match=message):
        await memory.store.mark_session_extracted(sid, uid, at=at)
    assert await memory.store.get_extracted_at(sid, uid) is None


async def test_mark_takes_an_at_within_the_clock_skew_allowance_and_from_1970(
    memory: Memory,
) -> None:
    """A clock a minute ahead of this one (the database's, another host's) is no error, and
    1970-01-01 itself is the earliest mark taken."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    ahead = datetime.now(UTC) + timedelta(minutes=1)
    assert await memory.store.mark_session_extracted(sid, uid, at=ahead) == ahead
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert await memory.store.mark_session_extracted(sid, uid, at=epoch) == epoch
    assert await memory.store.get_extracted_at(sid, uid) == epoch


# --- two processes ------------------------------------------------------------------------------


async def test_two_runners_with_their_own_engines_extract_each_session_once(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """Two Memories (two engines, as two processes would have) sweeping at once: every
    session is extracted by exactly one of them, and the model asked once per session."""
    settings = extraction_settings(db_url, fake_ollama)

    def slow_facts(transcript: str) -> str:
        time.sleep(0.2)  # in the fake server's thread: both runners are mid-sweep together
        return echo_facts(transcript)

    model.facts = slow_facts
    async with open_memory(settings) as first, open_memory(settings) as second:
        users = [await new_user(first) for _ in range(2)]
        sessions = [
            await conversation(first, uid, f"fact key{i}{j} value{i}{j}")
            for i, uid in enumerate(users)
            for j in range(3)
        ]
        one, two = await asyncio.gather(
            first.extractor.process_stale_sessions(),
            second.extractor.process_stale_sessions(),
        )
        assert one.sessions_extracted + two.sessions_extracted == len(sessions)
        assert one.sessions_extracted and two.sessions_extracted  # they really overlapped
        assert one.failures == two.failures == 0
        assert model.extraction_calls == len(sessions)
        for i, uid in enumerate(users):
            facts = await first.store.get_all_facts(uid, include_merged=True)
            assert sorted(f.key for f in facts) == [f"key{i}{j}" for j in range(3)]
            assert all(f.last_verified_at == f.created_at for f in facts)  # written once
        for sid in sessions:
            assert await scalar(
                first, "SELECT extracted_at FROM session_memory_state WHERE session_id = :s", s=sid
            ) == await last_active(first, sid)


async def test_a_claimed_session_is_skipped_by_another_runner(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """While one runner waits on the model, another skips that session (no lock waits) and
    appends to it go through."""
    settings = extraction_settings(db_url, fake_ollama)
    async with open_memory(settings) as first, open_memory(settings) as second:
        uid = await new_user(first)
        sid = await conversation(first, uid, "hello")
        model.hold()
        slow = asyncio.create_task(first.extractor.process_stale_sessions(uid))
        try:
            assert await asyncio.to_thread(model.entered.wait, 10)
            other = await asyncio.wait_for(second.extractor.process_stale_sessions(uid), timeout=10)
            assert other == ExtractionReport(sessions_seen=1, sessions_skipped=1)
            await asyncio.wait_for(
                second.sessions.append(sid, "user", "more", user_id=uid), timeout=10
            )
        finally:
            model.release()
        assert (await slow).sessions_extracted == 1
        assert model.extraction_calls == 1


async def test_another_users_call_for_a_claimed_session_is_not_found(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """While Bob's extraction holds his session, Alice's extract_session of its id said it was
    skipped ("another extractor holds it"), telling her the id exists and is being worked on,
    and taken first it would have made Bob's own run skip: it is NotFoundError, before any
    claim."""
    settings = extraction_settings(db_url, fake_ollama)
    async with open_memory(settings) as first, open_memory(settings) as second:
        alice, bob = await new_user(first), await new_user(first)
        sid = await conversation(first, bob, "hello")
        model.hold()
        slow = asyncio.create_task(first.extractor.process_stale_sessions(bob))
        try:
            assert await asyncio.to_thread(model.entered.wait, 10)
            with pytest.raises(NotFoundError):
                await asyncio.wait_for(
                    second.extractor.extract_session(sid, user_id=alice), timeout=10
                )
        finally:
            model.release()
        assert (await slow).sessions_extracted == 1


# --- the trigger --------------------------------------------------------------------------------


async def test_create_returns_while_a_slow_extraction_runs(
    memory: Memory, triggering_memory: Memory, model: ExtractionModel
) -> None:
    """sessions.create starts the user's sweep in the background and returns without waiting
    for it; a second create while it runs starts no second sweep for the user."""
    uid = await new_user(memory)
    stale = await conversation(memory, uid, "fact editor neovim")
    memory = triggering_memory
    model.facts = echo_facts
    model.hold()
    try:
        created = await asyncio.wait_for(memory.sessions.create(user_id=uid), timeout=10)
        assert await asyncio.to_thread(model.entered.wait, 10)
        assert await memory.store.get_extracted_at(stale, uid) is None  # still at the model
        await asyncio.wait_for(memory.sessions.create(user_id=uid), timeout=10)
        assert await memory.sessions.get(created.id, user_id=uid) is not None
    finally:
        model.release()
    await memory.extractor.wait_background()
    assert model.extraction_calls == 1
    assert await memory.store.get_extracted_at(stale, uid) is not None
    assert await visible_facts(memory, uid) == {("notes", "editor"): "neovim"}


async def test_closing_the_memory_cancels_a_running_extraction_cleanly(
    db_url: str, fake_ollama: FakeOllama, model: ExtractionModel, caplog: pytest.LogCaptureFixture
) -> None:
    """open_memory's exit cancels and awaits the background sweep: nothing half-written, the
    session unmarked, its claim gone (another Memory extracts it next)."""
    async with open_memory(extraction_settings(db_url, fake_ollama)) as quiet:
        uid = await new_user(quiet)
        stale = await conversation(quiet, uid, "fact editor neovim")
    settings = extraction_settings(db_url, fake_ollama, memory_extract_on_create=True)
    model.facts = echo_facts
    caplog.set_level(logging.WARNING)
    model.hold()
    try:
        async with open_memory(settings) as memory:
            await memory.sessions.create(user_id=uid)
            assert await asyncio.to_thread(model.entered.wait, 10)
            closing = asyncio.get_running_loop().time()
        assert asyncio.get_running_loop().time() - closing < 10  # a hang guard, not a goal
    finally:
        model.release()
    assert not [r for r in caplog.records if "extractor." in r.getMessage()]

    async with open_memory(extraction_settings(db_url, fake_ollama)) as memory:
        assert await memory.store.get_extracted_at(stale, uid) is None
        assert await memory.store.get_all_facts(uid) == []
        report = await memory.extractor.process_stale_sessions(uid)
        assert report.sessions_extracted == 1


async def test_background_sweeps_run_two_at_a_time(
    memory: Memory, triggering_memory: Memory, model: ExtractionModel
) -> None:
    """Three users starting sessions at once: two sweeps reach the model, the third waits for
    a free turn and then runs; none is lost."""
    model.facts = echo_facts
    users = [await new_user(memory) for _ in range(3)]
    stale = [await conversation(memory, uid, f"fact k{i} v{i}") for i, uid in enumerate(users)]
    model.hold()
    try:
        for uid in users:
            await triggering_memory.sessions.create(user_id=uid)
        async with asyncio.timeout(20):  # a deadline, not a count of polls: a loaded machine
            while True:
                if model.extraction_calls >= 2:
                    break
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # room for a third call, were it allowed
        assert model.extraction_calls == 2
    finally:
        model.release()
    await triggering_memory.extractor.wait_background()
    assert model.extraction_calls == 3
    for uid, sid in zip(users, stale, strict=True):
        assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_trigger_off_extracts_nothing_on_create(
    memory: Memory, model: ExtractionModel
) -> None:
    """MEMORY_EXTRACT_ON_CREATE=false: create starts no extraction."""
    uid = await new_user(memory)
    stale = await conversation(memory, uid, "hello")
    await memory.sessions.create(user_id=uid)
    await memory.extractor.wait_background()
    assert model.extraction_calls == 0
    assert await memory.store.get_extracted_at(stale, uid) is None


async def test_failing_background_extraction_never_fails_create(
    memory: Memory,
    triggering_memory: Memory,
    fake_ollama: FakeOllama,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the model down the background sweep fails; create still succeeds, the failure is
    logged."""
    uid = await new_user(memory)
    stale = await conversation(memory, uid, "hello")
    memory = triggering_memory
    fake_ollama.mode = "fail"
    caplog.set_level(logging.WARNING)
    created = await memory.sessions.create(user_id=uid)
    await memory.extractor.wait_background()
    assert created.user_id == uid
    assert await memory.store.get_extracted_at(stale, uid) is None
    assert any("extractor.session_failed" in r.getMessage() for r in caplog.records)


# --- tenancy ------------------------------------------------------------------------------------


async def two_users_with_stale_sessions(memory: Memory) -> tuple[list[uuid.UUID], list[str]]:
    alice, bob = await new_user(memory), await new_user(memory)
    sessions = [
        await conversation(memory, alice, "fact city lisbon"),
        await conversation(memory, bob, "fact city berlin"),
    ]
    return [alice, bob], sessions


async def test_extraction_for_one_user_never_touches_another(
    memory: Memory, model: ExtractionModel
) -> None:
    """A sweep for one user extracts only their sessions and writes only their facts."""
    model.facts = echo_facts
    (alice, bob), (alice_s, bob_s) = await two_users_with_stale_sessions(memory)
    report = await memory.extractor.process_stale_sessions(alice)
    assert report.sessions_extracted == 1
    assert await memory.store.get_extracted_at(alice_s, alice) is not None
    assert await visible_facts(memory, alice) == {("notes", "city"): "lisbon"}
    assert await visible_facts(memory, bob) == {}
    assert await memory.store.get_summary(bob) is None
    assert await memory.store.get_extracted_at(bob_s, bob) is None
    assert all("berlin" not in t for t in model.transcripts)


async def test_operator_sweep_writes_each_users_facts_under_their_own_id(
    memory: Memory, model: ExtractionModel
) -> None:
    """With no current user the sweep takes everyone's sessions, each fact for its owner."""
    model.facts = echo_facts
    (alice, bob), _ = await two_users_with_stale_sessions(memory)
    report = await memory.extractor.process_stale_sessions()
    assert report.sessions_extracted == 2
    assert await visible_facts(memory, alice) == {("notes", "city"): "lisbon"}
    assert await visible_facts(memory, bob) == {("notes", "city"): "berlin"}


async def test_operator_extract_session_acts_for_the_sessions_owner(
    memory: Memory, model: ExtractionModel
) -> None:
    """With no current user and no user_id (an operator's call, as process_stale_sessions
    treats it), extract_session extracts the session for its owner: the facts, the summary
    and the mark are theirs, no one else's. It used to refuse: "no user for this write"."""
    model.facts = echo_facts
    (alice, bob), (alice_s, bob_s) = await two_users_with_stale_sessions(memory)
    report = await memory.extractor.extract_session(bob_s)
    assert (report.sessions_extracted, report.summaries_written, report.failures) == (1, 1, 0)
    assert await visible_facts(memory, bob) == {("notes", "city"): "berlin"}
    assert await memory.store.get_summary(bob) == "A summary."
    assert await memory.store.get_extracted_at(bob_s, bob) is not None
    assert await visible_facts(memory, alice) == {}
    assert await memory.store.get_summary(alice) is None
    assert await memory.store.get_extracted_at(alice_s, alice) is None
    assert len(model.transcripts) == 1
    assert "berlin" in model.transcripts[0]
    assert "lisbon" not in model.transcripts[0]
    with pytest.raises(NotFoundError):
        await memory.extractor.extract_session("no-such-session")


async def test_acting_for_a_user_the_extractor_stays_within_their_sessions(
    memory: Memory, model: ExtractionModel
) -> None:
    """In a request context: no user_id means the current user only; another user's id is
    refused, and another user's session is not found."""
    model.facts = echo_facts
    (alice, bob), (_, bob_s) = await two_users_with_stale_sessions(memory)
    with request_context(user_id=alice):
        assert (await memory.extractor.process_stale_sessions()).sessions_extracted == 1
        with pytest.raises(PermissionDeniedError):
            await memory.extractor.process_stale_sessions(bob)
        with pytest.raises(NotFoundError):
            await memory.extractor.extract_session(bob_s)
    assert await visible_facts(memory, bob) == {}
    assert await memory.store.get_extracted_at(bob_s, bob) is None


async def test_background_trigger_extracts_only_the_creating_users_sessions(
    memory: Memory, triggering_memory: Memory, model: ExtractionModel
) -> None:
    """Creating a session for one user sweeps that user's stale sessions, nobody else's."""
    model.facts = echo_facts
    (alice, bob), (alice_s, bob_s) = await two_users_with_stale_sessions(memory)
    await triggering_memory.sessions.create(user_id=alice)
    await triggering_memory.extractor.wait_background()
    assert await memory.store.get_extracted_at(alice_s, alice) is not None
    assert await memory.store.get_extracted_at(bob_s, bob) is None
    assert await visible_facts(memory, bob) == {}


async def test_a_session_id_another_user_marked_cannot_be_created(memory: Memory) -> None:
    """Sam's application keeps its sessions outside ``sessions`` and marks one; Kim may not
    create a session with that id (session ids are unique across users), so Kim never reads
    Sam's mark nor has a session counted as extracted by it."""
    sam, kim = await new_user(memory), await new_user(memory)
    marked = datetime(2026, 1, 2, tzinfo=UTC)
    with request_context(user_id=sam):
        await memory.store.mark_session_extracted("shared-id", at=marked)
    with request_context(user_id=kim):
        with pytest.raises(InvalidInputError, match="already taken"):
            await memory.sessions.create("shared-id")
        assert await memory.store.get_extracted_at("shared-id") is None
    assert await memory.store.get_extracted_at("shared-id", sam) == marked
    # The owner itself may still create it (its application moving into ``sessions``).
    assert (await memory.sessions.create("shared-id", user_id=sam)).user_id == sam


async def test_another_users_extraction_state_for_a_session_is_never_read_or_overwritten(
    memory: Memory, model: ExtractionModel
) -> None:
    """A state row of Sam's for an id that Kim's session also has (left by the old code, or by
    a mark racing a create): Kim never reads it, and Kim's extraction never writes over it."""
    sam, kim = await new_user(memory), await new_user(memory)
    model.facts = echo_facts
    sid = await conversation(memory, kim, "fact editor neovim")
    future = datetime.now(UTC) + timedelta(days=365)
    await execute(
        memory,
        "INSERT INTO session_memory_state (session_id, user_id, extracted_at) "
        "VALUES (:sid, :sam, :at)",
        sid=sid,
        sam=sam,
        at=future,
    )
    assert await memory.store.get_extracted_at(sid, kim) is None
    assert await memory.store.get_extracted_at(sid, sam) is None  # the session is Kim's
    with pytest.raises(NotFoundError):
        await memory.store.mark_session_extracted(sid, kim)
    await memory.extractor.process_stale_sessions(kim)
    await memory.extractor.extract_session(sid, user_id=kim)
    state = await scalar(
        memory,
        "SELECT user_id::text || ' ' || extracted_at::text FROM session_memory_state "
        "WHERE session_id = :sid",
        sid=sid,
    )
    owner, _, at = str(state).partition(" ")
    assert owner == str(sam)
    assert datetime.fromisoformat(at) == future


# --- the command --------------------------------------------------------------------------------


@pytest.mark.cli  # the console script in subprocesses: make test-cli (CI runs it)
async def test_extract_command_shows_progress_and_reports(
    memory: Memory, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """`navi-memory extract` sweeps with a progress bar; `--json` prints the report; a failed
    session makes it exit 1; `--user` narrows to one user."""
    model.facts = echo_facts
    (alice, bob), _ = await two_users_with_stale_sessions(memory)
    env = {
        "DATABASE_URL": memory.settings.database_url or "",
        "OLLAMA_HOST": fake_ollama.url,
        "MEMORY_LLM_TIMEOUT_SECONDS": "30",
    }
    narrowed = await asyncio.to_thread(run_cli, "extract", "--user", str(alice), "--json", **env)
    assert narrowed.returncode == 0, narrowed.stderr
    assert json.loads(narrowed.stdout)["sessions_extracted"] == 1
    assert await visible_facts(memory, bob) == {}

    await conversation(memory, alice, "fact shell fish")
    fake_ollama.mode = "fail"
    failed = await asyncio.to_thread(run_cli, "extract", **env)
    assert failed.returncode == 1
    assert "1 failed" in failed.stdout or "2 failed" in failed.stdout

    fake_ollama.mode = "ok"
    done = await asyncio.to_thread(run_cli, "extract", **env)
    assert done.returncode == 0, done.stderr
    assert "sessions" in done.stdout and "2/2" in done.stdout
    assert "2 extracted" in done.stdout

    bad = await asyncio.to_thread(run_cli, "extract", "--user", "not-a-uuid", **env)
    assert bad.returncode == 2
    assert "user_id" in bad.stderr
    assert bad.stdout == ""  # refused before the progress bar is drawn


# --- bad input ----------------------------------------------------------------------------------

_HOSTILE_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "a\x00b",
        "\ud800",
        "x" * 1_000_000,
        "%_\\",
        "'; DROP TABLE sessions; --",
        "\u202egnp.exe",
        "e\u0301",
        "\u200b",
    ]
) | st.text(max_size=50)
_HOSTILE = (
    _HOSTILE_TEXT
    | st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.just(uuid.uuid4())
    | st.lists(st.integers(), max_size=3)
)


async def _rows(memory: Memory) -> list[str]:
    """Every row of the tables extraction writes, as text: contents, not counts."""
    rows: list[str] = []
    async with memory.engine.connect() as conn:
        for table in ("memory_facts", "memory_summary", "session_memory_state", "sessions"):
            result = await conn.execute(text(f"SELECT t::text FROM {table} t ORDER BY 1"))
            rows += [f"{table}:{row}" for row in result.scalars()]
    return rows


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(user_id=_HOSTILE, session_id=_HOSTILE, limit=_HOSTILE, at=_HOSTILE)
async def test_extractor_entry_points_refuse_bad_input_with_package_errors(
    memory: Memory, model: ExtractionModel, user_id: Any, session_id: Any, limit: Any, at: Any
) -> None:
    """Generated hostile values for every argument of the extractor's entry points (and the
    mark's ``at``): each call succeeds or raises a navi_memory error, and an error changes no
    row."""

    async def sweep() -> object:
        return await memory.extractor.process_stale_sessions(user_id, limit=limit)

    async def one() -> object:
        return await memory.extractor.extract_session(session_id, user_id=user_id)

    async def mark() -> object:
        return await memory.store.mark_session_extracted(session_id, user_id, at=at)

    for call in (sweep, one, mark):
        before = await _rows(memory)
        try:
            await call()
        except NaviMemoryError:
            assert await _rows(memory) == before


async def test_a_sweep_stops_once_the_chat_model_fails_sessions_in_a_row(
    memory: Memory,
    fake_ollama: FakeOllama,
    model: ExtractionModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The chat model down or stalled: each session waits out the failure (with a stalled
    model MEMORY_LLM_TIMEOUT_SECONDS, 120 s, each: hours for a backlog) and fails the same way.
    After three sessions in a row fail on the model the sweep stops, saying why; the rest are
    left for the next run, like the failed ones."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sessions = [
        await conversation(memory, uid, f"I use neovim {n}", idle_minutes=STALE + 10 - n)
        for n in range(6)
    ]
    fake_ollama.mode = "fail"
    before = len(fake_ollama.chat_requests)
    caplog.set_level(logging.WARNING)
    report = await memory.extractor.process_stale_sessions(uid)
    assert len(fake_ollama.chat_requests) - before == 3
    assert (report.sessions_seen, report.failures, report.sessions_extracted) == (3, 3, 0)
    stopped = [
        r.getMessage() for r in caplog.records if "extractor.sweep_stopped" in r.getMessage()
    ]
    assert len(stopped) == 1 and "3 session(s) left for the next run" in stopped[0]
    assert "answered HTTP 500" in stopped[0]  # the model's failure, named

    fake_ollama.mode = "ok"
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.failures) == (6, 0)
    for sid in sessions:
        assert await memory.store.get_extracted_at(sid, uid) is not None


async def test_a_model_failure_between_successes_does_not_stop_the_sweep(
    memory: Memory, model: ExtractionModel
) -> None:
    """Only failures in a row stop a sweep: one session the model fails on (its transcript,
    say), between others it answers, is counted and the sweep goes on."""
    uid = await new_user(memory)
    replies = iter(["", "[]", "", "[]", "", "[]", "", "[]"])
    model.facts = lambda _transcript: next(replies)
    for n in range(8):
        await conversation(memory, uid, f"hello {n}", idle_minutes=STALE + 10 - n)
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_seen, report.failures, report.sessions_extracted) == (8, 4, 4)


async def test_a_category_stored_in_another_unicode_form_takes_the_extracted_fact(
    memory: Memory, model: ExtractionModel
) -> None:
    """An application stored "café" decomposed (e + combining accent); the model answers it
    composed. The extractor matched stored spellings by case only, so it wrote a second
    "café" beside the first and the stale value stayed visible. It merges into the stored
    spelling now, as the memory tool's save does."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("cafe\u0301", "drink", "espresso", user_id=uid)
    model.facts = facts_json(("caf\u00e9", "drink", "latte", "user_explicit"))
    await conversation(memory, uid, "I drink latte now")
    report = await memory.extractor.process_stale_sessions(uid)
    assert report.facts_written == 1
    assert await visible_facts(memory, uid) == {("cafe\u0301", "drink"): "latte"}


async def test_a_new_category_in_two_unicode_forms_in_one_reply_is_one_category(
    memory: Memory, model: ExtractionModel
) -> None:
    """The user's categories were read before the reply's first draft was written, so a
    second draft spelling the same new category decomposed wrote a twin row of the same key:
    two visible "café/drink" facts. The reply's last word stands, in the first spelling."""
    uid = await new_user(memory)
    model.facts = facts_json(
        ("caf\u00e9", "drink", "espresso", "user_explicit"),
        ("CAFE\u0301", "drink", "latte", "user_explicit"),
    )
    await conversation(memory, uid, "I drink espresso, no, latte")
    await memory.extractor.process_stale_sessions(uid)
    assert await visible_facts(memory, uid) == {("caf\u00e9", "drink"): "latte"}


async def test_an_invisible_category_key_or_value_is_no_fact(
    memory: Memory, model: ExtractionModel
) -> None:
    """A reply whose key, category or value is zero-width characters only was written as
    "[prefs] \u200b: x" and "[\u200b] k: y", then rode in the summary and the prompt. An
    invisible key or value makes the item skipped; an invisible category is no category (the
    default one); upsert_fact refuses them too, saying why."""
    uid = await new_user(memory)
    model.facts = json.dumps(
        [
            {"category": "prefs", "key": "\u200b", "value": "x"},
            {"category": "prefs", "key": "k2", "value": "\u200b\ufeff"},
            {"category": "prefs", "key": "\u00ad\u2060", "value": "z"},
            {"category": "\u200b", "key": "k", "value": "y"},
        ]
    )
    await conversation(memory, uid, "hi")
    report = await memory.extractor.process_stale_sessions(uid)
    assert report.facts_skipped == 3
    facts = await visible_facts(memory, uid)
    assert list(facts.values()) == ["y"]
    ((category, key),) = facts
    assert key == "k" and category.strip() and "\u200b" not in category
    for args in (("\u200b", "k", "v"), ("prefs", "\ufeff ", "v"), ("prefs", "k", "\u00ad")):
        with pytest.raises(InvalidInputError, match="invisible characters alone"):
            await memory.store.upsert_fact(*args, user_id=uid)
    # Text with something to show beside an invisible character is kept as it is.
    fact = await memory.store.upsert_fact("prefs", "zw\u200bj", "caf\u00e9\u200b", user_id=uid)
    assert (fact.key, fact.value) == ("zw\u200bj", "caf\u00e9\u200b")


async def test_a_session_the_model_always_fails_on_does_not_starve_the_others(
    memory: Memory, model: ExtractionModel
) -> None:
    """A failed extraction leaves the session unmarked, and sweeps take the longest idle
    first: with limit=1 a session whose every reply is unusable was taken by every sweep and
    no other session was ever extracted. A failed session now waits behind the others (it is
    still retried), and a success clears the record."""
    uid = await new_user(memory)
    poison = await conversation(memory, uid, "POISON", idle_minutes=120)
    fine = await conversation(memory, uid, "fact editor neovim")
    replies: dict[str, str] = {}

    def reply(transcript: str) -> str:
        return replies.get("poison", "no json here") if "POISON" in transcript else "[]"

    model.facts = reply
    first = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert (first.sessions_seen, first.failures) == (1, 1)
    assert await memory.store.get_extracted_at(poison, uid) is None
    second = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert second.failures == 0
    assert await memory.store.get_extracted_at(fine, uid) is not None
    # Still retried: the only stale session left is the failed one, and it is extracted once
    # the model answers (after its retry wait).
    replies["poison"] = "[]"
    await failed_ago(memory, poison, 6)
    third = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert (third.sessions_seen, third.failures) == (1, 0)
    assert await memory.store.get_extracted_at(poison, uid) is not None
    failed_at = await scalar(
        memory, "SELECT failed_at FROM session_memory_state WHERE session_id = :s", s=poison
    )
    assert failed_at is None


async def test_a_failure_recorded_after_its_session_went_leaves_no_state_row(
    memory: Memory, model: ExtractionModel
) -> None:
    """The failed extraction of a session deleted during the model call wrote a state row for
    the gone id, which then held the id against every other user (sessions.create: "already
    taken"). A failure is recorded only for a session the user still holds."""
    uid, other = await new_user(memory), await new_user(memory)
    sid = await conversation(memory, uid, "hello", session_id="gone-during-the-call")
    model.facts = "no json here"
    model.hold()
    sweep = asyncio.create_task(memory.extractor.process_stale_sessions(uid))
    assert await asyncio.to_thread(model.entered.wait, 10)
    assert await memory.sessions.delete(sid, user_id=uid)
    model.release()
    report = await asyncio.wait_for(sweep, 30)
    assert report.failures == 1
    states = "SELECT count(*) FROM session_memory_state WHERE session_id = :s"
    assert await scalar(memory, states, s=sid) == 0
    assert (await memory.sessions.create(sid, user_id=other)).id == sid


async def told_and_left_out(
    memory: Memory,
    model: ExtractionModel,
    uid: uuid.UUID,
    session_id: str,
    fact: tuple[str, str, str, str],
) -> None:
    """Extract ``session_id`` telling ``fact``: it is left out as an older word (outdated),
    nothing written, and the user holds no visible fact."""
    model.facts = facts_json(fact)
    report = await memory.extractor.extract_session(session_id, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}


async def test_an_older_session_saying_the_same_again_confirms_it_and_is_not_outdated(
    memory: Memory, model: ExtractionModel
) -> None:
    """Sessions extracted out of age order, both telling editor=neovim: the older one's fact
    was counted outdated and its write skipped, though the user changed nothing. The very
    key and value said again is written (a confirmation: last_verified_at moves)."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    old = await conversation(memory, uid, "I use neovim", idle_minutes=120)
    older = await conversation(memory, uid, "neovim, as ever", idle_minutes=150)
    new = await conversation(memory, uid, "still neovim", idle_minutes=60)
    await memory.extractor.extract_session(new, user_id=uid)
    before = (await memory.store.get_all_facts(user_id=uid))[0].last_verified_at
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    after = await memory.store.get_all_facts(user_id=uid)
    assert [(f.key, f.value) for f in after] == [("editor", "neovim")]
    assert after[0].last_verified_at is not None and before is not None
    assert after[0].last_verified_at > before
    # another value, or the same value under another spelling, is still the older word
    model.facts = facts_json(("preferences", "Editor", "neovim", "user_explicit"))
    report = await memory.extractor.extract_session(older, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)


async def test_a_newer_expired_row_of_the_same_value_is_still_the_newer_word(
    memory: Memory, model: ExtractionModel
) -> None:
    """The same value said again is a confirmation, but not over an expired row: written, it
    revived the fact with no expiry, overriding the newer session's time limit."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I use neovim", idle_minutes=120)
    new = (await memory.sessions.create(user_id=uid)).id
    save = {"action": "save", "category": "preferences", "key": "editor", "value": "neovim"}
    await memory.tools.call(
        "memory", save | {"expires_days": 1}, ToolContext(user_id=uid, session_id=new)
    )
    await execute(
        memory,
        "UPDATE memory_facts SET expires_at = now() - interval '1 minute' WHERE user_id = :u",
        u=uid,
    )
    await told_and_left_out(
        memory, model, uid, old, ("preferences", "editor", "neovim", "user_explicit")
    )


async def test_a_forget_by_another_case_naming_no_category_holds_in_every_category(
    memory: Memory, model: ExtractionModel
) -> None:
    """The memory tool's forget of a key stored under another case, naming no category, was
    recorded for the fact's category only: an older session filing it elsewhere brought it
    back."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I use neovim", idle_minutes=120)
    new = (await memory.sessions.create(user_id=uid)).id
    ctx = ToolContext(user_id=uid, session_id=new)
    save = {"action": "save", "category": "preferences", "key": "Editor", "value": "neovim"}
    await memory.tools.call("memory", save, ctx)
    answer = await memory.tools.call("memory", {"action": "forget", "key": "EDITOR"}, ctx)
    assert answer.startswith("memory: forgot 1 fact")
    await told_and_left_out(memory, model, uid, old, ("tools", "editor", "neovim", "user_explicit"))


async def test_a_forget_made_under_other_key_rules_still_holds(
    memory: Memory, model: ExtractionModel
) -> None:
    """A forget's canonical key is of the rules in force when it was made (a version whose
    forms were joined by "_": "home_city"); compared as stored, it stopped matching the
    form of today's rules ("homecity") and an extraction brought the fact back."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I live in Brno", idle_minutes=120)
    await execute(
        memory,
        "INSERT INTO memory_fact_forgotten (user_id, category, key_norm) "
        "VALUES (:u, 'personal', 'home_city'), (:u, '', 'home_city')",
        u=uid,
    )
    await told_and_left_out(
        memory, model, uid, old, ("personal", "home_city", "Brno", "user_explicit")
    )


async def test_an_older_session_never_overwrites_a_value_the_user_saved_since(
    memory: Memory, model: ExtractionModel
) -> None:
    """An extraction upserted every fact the model read, however old the session: a colour the
    user stated on Monday overwrote the one they saved with the memory tool on Tuesday (and
    hid the new key behind the old spelling) when Monday's session was extracted on
    Wednesday. The older word is left out now (facts_outdated), the newer one stands; a
    session active after the save still writes."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "My favourite colour is green", idle_minutes=120)
    new = (await memory.sessions.create(user_id=uid)).id  # Tuesday's chat
    saved = await memory.tools.call(
        "memory",
        {
            "action": "save",
            "category": "preferences",
            "key": "favorite_color",
            "value": "blue",
            "source": "user_explicit",
        },
        ToolContext(user_id=uid, session_id=new),
    )
    assert saved.startswith("memory: saved")
    model.facts = facts_json(("preferences", "favourite_colour", "green", "conversation"))
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.sessions_extracted, report.facts_written, report.facts_outdated) == (1, 0, 1)
    assert await visible_facts(memory, uid) == {("preferences", "favorite_color"): "blue"}
    assert await memory.store.get_extracted_at(old, uid) is not None  # marked all the same

    later = await conversation(memory, uid, "Actually it is red now", idle_minutes=0)
    model.facts = facts_json(("preferences", "favourite_colour", "red", "conversation"))
    report = await memory.extractor.extract_session(later, user_id=uid)
    assert (report.facts_written + report.facts_merged, report.facts_outdated) == (1, 0)
    assert list((await visible_facts(memory, uid)).values()) == ["red"]


async def test_a_forgotten_fact_is_not_brought_back_by_an_older_session(
    memory: Memory, model: ExtractionModel
) -> None:
    """The user said "I live in Brno" (a session), then asked to forget it (the tool's forget
    in another session): the next extraction of the first session wrote it again, and the
    summary told it again. A forget is remembered; a session active before it leaves the fact
    out, one active after it (the user saying it again) writes it."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I live in Brno", idle_minutes=120)
    await memory.store.upsert_fact("personal", "home_city", "Brno", user_id=uid)
    new = (await memory.sessions.create(user_id=uid)).id
    forgot = await memory.tools.call(
        "memory",
        {"action": "forget", "key": "home_city"},
        ToolContext(user_id=uid, session_id=new),
    )
    assert forgot.startswith("memory: forgot 1 fact")
    model.facts = facts_json(("Personal", "home city", "Brno", "user_explicit"))
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}
    assert await memory.store.get_extracted_at(old, uid) is not None

    # Forgotten with no category named, it is forgotten in every category: the model files
    # the same fact under another one from the old session.
    model.facts = facts_json(("location", "home_city", "Brno", "user_explicit"))
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert report.sessions_skipped == 1  # covered already: nothing new since
    await memory.sessions.append(old, "user", "(still Brno)", user_id=uid)
    await idle(memory, old, 30)
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}

    again = await conversation(memory, uid, "I moved back to Brno", idle_minutes=0)
    report = await memory.extractor.extract_session(again, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    assert list((await visible_facts(memory, uid)).values()) == ["Brno"]


async def test_two_stale_sessions_extracted_in_order_leave_the_newer_value(
    memory: Memory, model: ExtractionModel
) -> None:
    """The rule that keeps a newer word reads a fact written by an extraction as of its
    session's activity, not of the extraction: the newer of two stale sessions, extracted
    after the older one, still writes its value over the older session's."""
    uid = await new_user(memory)
    await conversation(memory, uid, "COLOR green", idle_minutes=180)
    await conversation(memory, uid, "COLOR blue", idle_minutes=90)

    def reply(transcript: str) -> str:
        colour = "green" if "COLOR green" in transcript else "blue"
        return facts_json(("preferences", "color", colour, "conversation"))

    model.facts = reply
    report = await memory.extractor.process_stale_sessions(uid)
    assert (report.sessions_extracted, report.facts_outdated) == (2, 0)
    assert await visible_facts(memory, uid) == {("preferences", "color"): "blue"}


async def test_an_applications_own_writes_and_deletes_are_not_a_conversations_word(
    memory: Memory, model: ExtractionModel
) -> None:
    """The newer-word rule is about what the user said in conversations: a fact an application
    wrote outside any session is written over by an extraction (the spec's extractor upserts
    every fact), and its delete_fact outside a session is not remembered against extractions."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I use vim", idle_minutes=120)
    await memory.store.upsert_fact("tools", "editor", "emacs", user_id=uid)
    model.facts = facts_json(("tools", "editor", "vim", "conversation"))
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    assert await visible_facts(memory, uid) == {("tools", "editor"): "vim"}

    other = await conversation(memory, uid, "I use vim, really", idle_minutes=100)
    assert await memory.store.delete_fact("editor", user_id=uid) == 1
    report = await memory.extractor.extract_session(other, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    assert await visible_facts(memory, uid) == {("tools", "editor"): "vim"}
    forgotten = "SELECT count(*) FROM memory_fact_forgotten WHERE user_id = :u"
    assert await scalar(memory, forgotten, u=uid) == 0


async def test_a_value_from_a_deleted_session_does_not_outrank_a_newer_session(
    memory: Memory, model: ExtractionModel
) -> None:
    """A fact written from a session that was deleted since has only its write time, the
    extraction's, not the conversation's: it counted as newer than a later session, whose
    newer value was then left out. It does not count now."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "COLOR green", idle_minutes=180)
    new = await conversation(memory, uid, "COLOR blue", idle_minutes=90)
    model.facts = facts_json(("preferences", "color", "green", "conversation"))
    await memory.extractor.extract_session(old, user_id=uid)
    assert await memory.sessions.delete(old, user_id=uid)
    model.facts = facts_json(("preferences", "color", "blue", "conversation"))
    report = await memory.extractor.extract_session(new, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    assert await visible_facts(memory, uid) == {("preferences", "color"): "blue"}


async def test_a_forget_committed_while_the_extraction_waits_for_the_lock_is_seen(
    memory: Memory, model: ExtractionModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forgets were read once, before the category's lock: a forget committing between
    that read and the lock deleted the row, the check under the lock found nothing, and the
    extraction wrote the fact back. The forget is read under the lock now."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I live in Brno", idle_minutes=120)
    await memory.store.upsert_fact("personal", "home_city", "Brno", user_id=uid)
    new = (await memory.sessions.create(user_id=uid)).id
    original = FactService.lock_category
    forgot: list[str] = []

    async def forget_first(self: FactService, session: Any, user_id: Any, category: str) -> None:
        if not forgot:
            forgot.append(
                await memory.tools.call(
                    "memory",
                    {"action": "forget", "key": "home_city"},
                    ToolContext(user_id=uid, session_id=new),
                )
            )
        await original(self, session, user_id, category)

    monkeypatch.setattr(FactService, "lock_category", forget_first)
    model.facts = facts_json(("personal", "home_city", "Brno", "user_explicit"))
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert forgot[0].startswith("memory: forgot 1 fact")
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}


async def test_a_session_whose_rows_cannot_be_read_goes_behind_the_others(
    memory: Memory, model: ExtractionModel
) -> None:
    """A message row no message can be (an application's SQL) fails its session's extraction
    with a StorageError, and that failure was not recorded (only the database's were meant to
    be left out): the session kept the front of every limited sweep. It goes behind now."""
    uid = await new_user(memory)
    bad = await conversation(memory, uid, "hello", idle_minutes=300)
    await execute(
        memory,
        "INSERT INTO session_messages (session_id, seq, role, tool_name, tool_args) "
        "VALUES (:s, 2, 'tool_call', 't', '[1]'::jsonb)",
        s=bad,
    )
    await idle(memory, bad, 300)
    good = await conversation(memory, uid, "fine", idle_minutes=200)
    first = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert first.failures == 1
    second = await memory.extractor.process_stale_sessions(uid, limit=1)
    assert second.failures == 0
    assert await memory.store.get_extracted_at(good, uid) is not None


async def test_a_forget_travels_with_an_export(memory: Memory, model: ExtractionModel) -> None:
    """An export left the user's forgets out: restored elsewhere, the old session's extraction
    brought the forgotten city back. The forgets are records of the export (``forgotten``) and
    an import writes them."""
    uid = await new_user(memory)
    old = await conversation(memory, uid, "I live in Brno", idle_minutes=120)
    await memory.store.upsert_fact("personal", "home_city", "Brno", user_id=uid)
    new = (await memory.sessions.create(user_id=uid)).id
    await memory.tools.call(
        "memory", {"action": "forget", "key": "home_city"}, ToolContext(user_id=uid, session_id=new)
    )
    with request_context(permissions=[PERMISSION_READ_ALL]):
        records = await memory.admin.export_user(uid)
        forgets = [r for r in records if r.type == "forgotten"]
        assert {(f.category, f.key_norm) for f in forgets} == {
            ("personal", "homecity"),
            ("", "homecity"),
        }
        other = uuid.uuid4()
        result = await memory.admin.import_user(records, user_id=other, session_prefix="x-")
    assert result.rows["forgotten"] == 2
    model.facts = facts_json(("personal", "home_city", "Brno", "user_explicit"))
    report = await memory.extractor.extract_session(f"x-{old}", user_id=other)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, other) == {}


async def at_times(memory: Memory, session_id: str, *minutes_ago: float) -> None:
    """Date the session's messages, in seq order, ``minutes_ago`` each (database clock), and
    its last activity as its last message: a conversation that happened then."""
    for seq, ago in enumerate(minutes_ago, start=1):
        await execute(
            memory,
            "UPDATE session_messages SET created_at = now() - make_interval(secs => :s) "
            "WHERE session_id = :id AND seq = :seq",
            s=ago * 60,
            id=session_id,
            seq=seq,
        )
    await idle(memory, session_id, minutes_ago[-1])


async def forgotten_ago(memory: Memory, user_id: uuid.UUID, minutes: float) -> None:
    await execute(
        memory,
        "UPDATE memory_fact_forgotten SET forgotten_at = now() - make_interval(secs => :s) "
        "WHERE user_id = :u",
        s=minutes * 60,
        u=user_id,
    )


BRNO = ("personal", "home_city", "Brno", "user_explicit")


async def test_a_session_that_only_goes_on_after_a_forget_does_not_bring_the_fact_back(
    memory: Memory, model: ExtractionModel
) -> None:
    """Monday's session said "I live in Brno" (extracted); on Tuesday the user had it
    forgotten in another chat; on Wednesday they wrote "thanks!" in Monday's session. Its
    re-extraction reads the whole history again, and the forget was older than the
    session's last activity: the city came back. A forget (or a change) made after the
    session said the fact now holds unless a later message of the user's says it again."""
    uid = await new_user(memory)
    model.facts = lambda transcript: facts_json(BRNO) if "Brno" in transcript else "[]"
    old = await conversation(memory, uid, "I live in Brno")
    await at_times(memory, old, 4 * 24 * 60)
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert report.facts_written == 1
    new = (await memory.sessions.create(user_id=uid)).id
    forgot = await memory.tools.call(
        "memory", {"action": "forget", "key": "home_city"}, ToolContext(uid, new)
    )
    assert forgot.startswith("memory: forgot 1 fact")
    await forgotten_ago(memory, uid, 3 * 24 * 60)

    await memory.sessions.append(old, "user", "thanks!", user_id=uid)
    await at_times(memory, old, 4 * 24 * 60, 2 * 24 * 60)
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}

    await memory.sessions.append(old, "user", "Actually I still live in brno.", user_id=uid)
    await at_times(memory, old, 4 * 24 * 60, 2 * 24 * 60, 60)
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (1, 0)
    assert await visible_facts(memory, uid) == {("personal", "home_city"): "Brno"}


async def test_a_forget_in_the_session_itself_holds_at_its_next_extraction(
    memory: Memory, model: ExtractionModel
) -> None:
    """The user said "I live in Brno", then, in the same session, asked to forget it (the
    memory tool's forget) and the assistant said "Done": the exchange made the session stale
    again, later than the forget, and its extraction wrote the city back."""
    uid = await new_user(memory)
    model.facts = lambda transcript: facts_json(BRNO) if "Brno" in transcript else "[]"
    sid = await conversation(memory, uid, "I live in Brno")
    await at_times(memory, sid, 240)
    assert (await memory.extractor.extract_session(sid, user_id=uid)).facts_written == 1
    await memory.sessions.append(sid, "user", "Please forget where I live.", user_id=uid)
    forgot = await memory.tools.call(
        "memory", {"action": "forget", "key": "home_city"}, ToolContext(uid, sid)
    )
    assert forgot.startswith("memory: forgot 1 fact")
    await memory.sessions.append(sid, "assistant", "Done, I forgot it.", user_id=uid)
    await forgotten_ago(memory, uid, 120)
    await at_times(memory, sid, 240, 121, 119)
    report = await memory.extractor.extract_session(sid, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {}


async def test_a_value_changed_elsewhere_is_not_rolled_back_when_an_old_session_goes_on(
    memory: Memory, model: ExtractionModel
) -> None:
    """Monday's session said green (extracted); on Tuesday the user saved blue with the memory
    tool in another chat; Monday's session went on with an unrelated message on Wednesday:
    its re-extraction wrote green back over blue. Blue stands now."""
    uid = await new_user(memory)
    green = ("preferences", "favorite_color", "green", "user_explicit")
    model.facts = lambda transcript: facts_json(green) if "green" in transcript else "[]"
    old = await conversation(memory, uid, "My favourite colour is green")
    await at_times(memory, old, 3 * 24 * 60)
    assert (await memory.extractor.extract_session(old, user_id=uid)).facts_written == 1
    new = (await memory.sessions.create(user_id=uid)).id
    save = {"action": "save", "category": "preferences", "key": "favorite_color", "value": "blue"}
    assert (await memory.tools.call("memory", save, ToolContext(uid, new))).startswith(
        "memory: saved"
    )
    await execute(
        memory,
        "UPDATE memory_facts SET updated_at = now() - interval '2 days' WHERE user_id = :u",
        u=uid,
    )
    await memory.sessions.append(new, "user", "make it blue", user_id=uid)
    await at_times(memory, new, 2 * 24 * 60)
    await memory.sessions.append(old, "user", "what's the weather like?", user_id=uid)
    await at_times(memory, old, 3 * 24 * 60, 60)
    report = await memory.extractor.extract_session(old, user_id=uid)
    assert (report.facts_written, report.facts_outdated) == (0, 1)
    assert await visible_facts(memory, uid) == {("preferences", "favorite_color"): "blue"}


async def test_a_session_whose_reply_is_always_unusable_is_retried_later_and_later(
    memory: Memory, model: ExtractionModel
) -> None:
    """A model that answers one session in prose: every sweep asked it again (the background
    sweep of every sessions.create too), and a cron's extract failed at every run. Such a
    failure is counted; sweeps leave the session 5 minutes after the first, 10 after the
    second (doubling, at most a day), and try it at once when it has new activity or when a
    call names it; a success clears the count."""
    uid = await new_user(memory)
    model.facts = "I'm sorry, I can't help with that."
    sid = await conversation(memory, uid, "something the model refuses")
    failures = "SELECT failures FROM session_memory_state WHERE session_id = :s"

    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    assert await scalar(memory, failures, s=sid) == 1
    assert await memory.extractor.process_stale_sessions(uid) == ExtractionReport()
    await failed_ago(memory, sid, 4)
    assert await memory.extractor.process_stale_sessions(uid) == ExtractionReport()
    await failed_ago(memory, sid, 6)
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    assert await scalar(memory, failures, s=sid) == 2
    await failed_ago(memory, sid, 9)
    assert await memory.extractor.process_stale_sessions(uid) == ExtractionReport()
    await failed_ago(memory, sid, 11)
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    await failed_ago(memory, sid, 50 * 24 * 60)
    await execute(
        memory, "UPDATE session_memory_state SET failures = 1000000 WHERE session_id = :s", s=sid
    )
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1  # a day at most
    assert model.extraction_calls == 4

    await failed_ago(memory, sid, 2 * STALE)
    await memory.sessions.append(sid, "user", "one more thing", user_id=uid)
    await idle(memory, sid, STALE)
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1  # new activity
    assert (await memory.extractor.extract_session(sid, user_id=uid)).failures == 1  # named
    assert model.extraction_calls == 6

    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    assert (await memory.extractor.extract_session(sid, user_id=uid)).sessions_extracted == 1
    assert await scalar(memory, failures, s=sid) == 0


async def test_a_model_outage_is_not_counted_against_the_session(
    memory: Memory, fake_ollama: FakeOllama, model: ExtractionModel
) -> None:
    """A model that is down failed the session through no fault of its own: it is tried again
    at the next sweep, not left for minutes."""
    uid = await new_user(memory)
    model.facts = facts_json(("preferences", "editor", "neovim", "user_explicit"))
    sid = await conversation(memory, uid, "I use neovim")
    fake_ollama.mode = "fail"
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    failures = "SELECT failures FROM session_memory_state WHERE session_id = :s"
    assert await scalar(memory, failures, s=sid) == 0
    fake_ollama.mode = "ok"
    assert (await memory.extractor.process_stale_sessions(uid)).sessions_extracted == 1


async def test_a_failure_count_at_its_largest_stays_there(
    memory: Memory, model: ExtractionModel
) -> None:
    """An import may bring a count of int4's largest: the next failure overflowed it, was not
    recorded (failed_at stayed old), and the session was tried at every sweep again."""
    uid = await new_user(memory)
    model.facts = "no json here"
    sid = await conversation(memory, uid, "hello")
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    await execute(
        memory,
        "UPDATE session_memory_state SET failures = 2147483647, failed_at = now() - "
        "interval '2 days' WHERE session_id = :s",
        s=sid,
    )
    assert (await memory.extractor.process_stale_sessions(uid)).failures == 1
    state = "SELECT (failures, failed_at > now() - interval '1 minute') FROM session_memory_state"
    assert await scalar(memory, f"{state} WHERE session_id = :s", s=sid) == (2147483647, True)
    assert await memory.extractor.process_stale_sessions(uid) == ExtractionReport()
