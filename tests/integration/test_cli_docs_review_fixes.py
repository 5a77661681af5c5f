"""What a new user's walk through the docs found the commands saying wrongly: doctor's pg_trgm
line and its fixes for an empty model, backfill's indexing when the model is down, extract's
summary after a stopped sweep, reembed's refusal, summary set's stdin and migrate's count
(the console script's own tests are tests/cli)."""

from __future__ import annotations

import asyncio
import io
import json
import sys

import pytest
from sqlalchemy import make_url

from navi_memory import Memory, Settings, open_memory
from navi_memory.cli import main
from navi_memory.cli.doctor import Check, _chat_check, _embedding_check, diagnose
from navi_memory.db import SCHEMA_HEAD, SCHEMA_REVISIONS
from navi_memory.testing import FakeOllama
from tests import dbtools
from tests.conftest import make_settings
from tests.integration.extraction_model import ExtractionModel
from tests.integration.factories import execute, new_user, scalar
from tests.integration.test_chunks import draft
from tests.integration.test_extraction import STALE, conversation, extraction_settings


@pytest.fixture
def cli_env(db_url: str, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    """main() in this process, on the test's database and the fake Ollama."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("OLLAMA_HOST", fake_ollama.url)
    monkeypatch.setenv("BACKFILL_PAUSE_SECONDS", "0")
    monkeypatch.setenv("MEMORY_LLM_TIMEOUT_SECONDS", "30")
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture
def model(fake_ollama: FakeOllama) -> ExtractionModel:
    scripted = ExtractionModel()
    fake_ollama.chat_handler = scripted
    return scripted


def _check(checks: list[Check], name: str) -> Check:
    [check] = [check for check in checks if check.name == name]
    return check


async def test_doctor_says_pg_trgm_s_indexes_are_not_made_until_the_next_start(
    db_url: str, pg_server: dbtools.EmbeddedServer, settings: Settings
) -> None:
    """Right after `CREATE EXTENSION pg_trgm` by hand doctor said "(trigram indexes on
    facts)", though they are made only by the next open_memory(): it says so now, and says
    they are there once they are."""
    with pg_server.admin(str(make_url(db_url).database)) as conn:
        conn.execute("CREATE EXTENSION pg_trgm")
    before = _check(await diagnose(settings, check_models=False), "pg_trgm")
    assert before.status == "note"
    assert "created, but its trigram indexes on facts are not made yet" in before.detail
    assert before.fix is not None and "the app's next start" in before.fix

    async with open_memory(settings):
        pass
    after = _check(await diagnose(settings, check_models=False), "pg_trgm")
    assert (after.status, after.fix) == ("ok", None)
    assert "trigram indexes on facts" in after.detail


async def test_doctor_s_fix_for_an_empty_model_says_what_to_set_it_to(
    fake_ollama: FakeOllama,
) -> None:
    """`MEMORY_LLM_MODEL=` gave "fix: MEMORY_LLM_MODEL is empty: set it to a model ...": the
    problem again. The fix names the setting, what to put in it and an example."""
    settings = Settings(
        _env_file=None,
        ollama_host=fake_ollama.url,
        embedding_model="",
        memory_llm_model="",
    )
    chat = await _chat_check(settings)
    embedding = await _embedding_check(settings)
    assert chat.status == embedding.status == "finding"
    assert chat.fix == (
        "set MEMORY_LLM_MODEL to a chat model your Ollama has pulled (`ollama list`), e.g. "
        "llama3.1:8b"
    )
    assert embedding.fix is not None
    assert embedding.fix.startswith("set EMBEDDING_MODEL to a 768-dimensional embedding model")
    assert "is empty" not in chat.fix + embedding.fix


async def test_doctor_reports_no_model_mismatch_for_an_empty_embedding_model(
    memory: Memory, fake_ollama: FakeOllama
) -> None:
    """`EMBEDDING_MODEL=` over stored vectors was also a "stored vectors" finding advising
    `navi-memory reembed` (refused with an empty model): only the model's finding is left."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("notes", "editor", "neovim", user_id=uid)
    assert _check(await diagnose(memory.settings, check_models=False), "stored vectors")
    empty = memory.settings.model_copy(update={"embedding_model": ""})
    checks = await diagnose(empty, check_models=False)
    assert all(c.name != "stored vectors" for c in checks)
    assert (await _embedding_check(empty)).status == "finding"


@pytest.mark.parametrize("setting", ["embedding_model", "memory_llm_model"])
async def test_doctor_without_model_calls_still_reports_an_empty_model_setting(
    memory: Memory, fake_ollama: FakeOllama, setting: str
) -> None:
    """`doctor --no-models` said "all good" with EMBEDDING_MODEL= or MEMORY_LLM_MODEL=, which
    every command opening the database refuses: no model call is needed to say so."""
    empty = memory.settings.model_copy(update={setting: " "})
    checks = await diagnose(empty, check_models=False)
    name = "embedding model" if setting == "embedding_model" else "chat model"
    assert [(c.name, c.status) for c in checks if c.status == "finding"] == [(name, "finding")]
    assert fake_ollama.requests_to("/api/embed") == fake_ollama.requests_to("/api/chat") == []
    assert all(
        c.name not in ("embedding model", "chat model")
        for c in await diagnose(memory.settings, check_models=False)
    )


@pytest.mark.usefixtures("cli_env")
async def test_backfill_with_the_model_down_still_indexes_the_queued_vectors(
    db_url: str,
    fake_ollama: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The embedding step stopping on the model (three failures in a row) ended the command
    before its indexing step: the vectors already queued stayed queued, and doctor's "fact
    queue" finding kept advising backfill. They are indexed now; the exit code is still 1, the
    summary says the embedding step stopped and stderr has the model's error."""
    # Only the command's own indexing step drains the queues (a background drain the failed
    # embedding step kicks may or may not finish before the command closes its Memory).
    monkeypatch.setenv("CHUNK_INDEX_IN_BACKGROUND", "false")
    monkeypatch.setenv("FACT_INDEX_IN_BACKGROUND", "false")
    quiet = make_settings(
        db_url, fake_ollama, chunk_index_in_background=False, fact_index_in_background=False
    )
    async with open_memory(quiet) as memory:
        uid = await new_user(memory)
        for i in range(3):
            await memory.store.upsert_fact("notes", f"n{i}", f"note {i}", user_id=uid)
        await memory.store.add_chunks([draft("User: deploy on fridays")], uid, "s1")
        fake_ollama.mode = "fail"
        for i in range(4):  # written while the model is down: no vector
            await memory.store.upsert_fact("notes", f"late{i}", f"late {i}", user_id=uid)
        assert await memory.store.pending_fact_count() == 3
        assert await memory.store.pending_chunk_count() == 1

        code = await asyncio.to_thread(main, ["backfill"])
        captured = capsys.readouterr()
        assert code == 1
        assert await memory.store.pending_fact_count() == 0
        assert await memory.store.pending_chunk_count() == 0
        assert (
            "the embedding step stopped (the error below; the vectors already queued were "
            "indexed all the same), 1 chunk(s) and 3 fact vector(s) indexed at the end, the rest"
            " while it ran" in captured.out
        )
        # The command's error is its last line (the library's warnings may come before it).
        assert captured.err.splitlines()[-1].startswith(
            "navi-memory: backfill stopped: the embedding model "
        )


async def test_extract_says_how_many_sessions_a_stopped_sweep_left(
    db_url: str,
    fake_ollama: FakeOllama,
    model: ExtractionModel,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After three model failures in a row the sweep stops with 3 of 6 sessions left: the
    summary said "3 stale session(s)", as if there were no more; it says 3 of 6 tried and 3
    left now, and --json adds `sessions_left`."""
    async with open_memory(extraction_settings(db_url, fake_ollama)) as memory:
        uid = await new_user(memory)
        for n in range(6):
            await conversation(memory, uid, f"I use neovim {n}", idle_minutes=STALE + 10 - n)
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("OLLAMA_HOST", fake_ollama.url)
    monkeypatch.setenv("MEMORY_EXTRACT_ON_CREATE", "false")
    monkeypatch.setenv("COLUMNS", "400")
    fake_ollama.mode = "fail"

    assert await asyncio.to_thread(main, ["extract"]) == 1
    said = capsys.readouterr().out
    assert (
        "extract: 3 of 6 stale session(s) tried (the sweep stopped: 3 left for the next run), "
        "0 extracted, 0 skipped, 3 failed;" in said
    )

    assert await asyncio.to_thread(main, ["extract", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions_seen"], report["failures"], report["sessions_left"]) == (3, 3, 3)

    fake_ollama.mode = "ok"
    model.facts = lambda _transcript: "[]"
    assert await asyncio.to_thread(main, ["extract", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions_seen"], report["sessions_left"]) == (6, 0)


@pytest.mark.usefixtures("cli_env")
async def test_reembed_with_the_model_down_says_nothing_was_cleared_and_the_fix(
    memory: Memory, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    """reembed asks the model before it clears anything: down, the error was the connection
    error alone. It says now that nothing was cleared, and how to make the model answer."""
    uid = await new_user(memory)
    await memory.store.upsert_fact("notes", "editor", "neovim", user_id=uid)
    # Vectors made a while ago (a record younger than the run would say it cleared them).
    await execute(
        memory, "UPDATE memory_embedding_model SET recorded_at = now() - interval '1 hour'"
    )
    fake_ollama.mode = "fail"
    assert await asyncio.to_thread(main, ["reembed"]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1
    assert "; nothing was cleared: run Ollama at " in said
    assert "`ollama pull nomic-embed-text:latest` there" in said
    assert said.rstrip().endswith("then run navi-memory reembed again")
    assert await scalar(memory, "SELECT count(*) FROM memory_facts WHERE embedding IS NULL") == 0


@pytest.mark.usefixtures("cli_env")
async def test_summary_set_from_stdin_drops_its_final_line_breaks(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`echo "Prefers Dutch." | navi-memory summary set --user U -` stored the newline echo
    ends with (15 characters; `summary show` printed a blank line after it): dropped, as the
    shell's $(...) drops them; line breaks inside stay."""
    uid = await new_user(memory)
    for given, stored in [
        (b"Prefers Dutch.\n", "Prefers Dutch."),
        (b"Prefers Dutch.\r\n\r\n", "Prefers Dutch."),
        (b"Line one.\n\nLine two.\n", "Line one.\n\nLine two."),
    ]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given), encoding="utf-8"))
        assert await asyncio.to_thread(main, ["summary", "set", "--user", str(uid), "-"]) == 0
        assert f"({len(stored)} characters)" in capsys.readouterr().out
        assert await memory.store.get_summary(user_id=uid) == stored


def test_migrate_says_how_many_revisions_it_applied(
    pg_server: dbtools.EmbeddedServer,
    scratch_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A brand-new database and one at head both said "the database is at head": the first
    run says how many revisions it applied, from where to where."""
    monkeypatch.setenv("DATABASE_URL", pg_server.url(scratch_db))
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"migrate: applied {len(SCHEMA_REVISIONS)} revision(s), (none) -> {SCHEMA_HEAD}; the "
        f"database is at head ({SCHEMA_HEAD})"
    )
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.strip() == f"migrate: the database is at head ({SCHEMA_HEAD})"
