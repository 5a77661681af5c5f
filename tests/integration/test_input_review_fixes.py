"""Input a review found escaping as raw errors or misread: kv entry names too long for their
index on import, a malformed ToolContext, and the memory tool's category normalization."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from navi_memory import (
    PERMISSION_READ_ALL,
    ConfigError,
    InvalidInputError,
    InvalidTypeError,
    Memory,
    ToolContext,
    open_memory,
    request_context,
)
from navi_memory.constants import KV_ENTRY_NAME_MAX_BYTES
from navi_memory.testing import FakeOllama
from navi_memory.tools.memory import ForgetFact, SaveFact, parse_memory_arguments
from navi_memory.validation import check_kv_entry_name
from tests.conftest import make_settings
from tests.integration.factories import execute, new_user, scalar

WIDE_FIRST, WIDE_LAST = 0x20000, 0x2A6D0  # CJK Extension B: four bytes each in UTF-8


def wide(count: int, rng: random.Random) -> str:
    """``count`` random four-byte characters (random, so PostgreSQL cannot compress them
    below the btree row limit)."""
    return "".join(chr(rng.randrange(WIDE_FIRST, WIDE_LAST)) for _ in range(count))


def admin() -> request_context:
    return request_context(permissions=[PERMISSION_READ_ALL])


def dumped(records: list[Any]) -> list[dict[str, Any]]:
    return [record.model_dump(mode="json") for record in records]


async def kv_rows(memory: Memory) -> int:
    return int(str(await scalar(memory, "SELECT count(*) FROM kv_store")))


# --- 1. kv entry names on import ----------------------------------------------------------------


def test_the_entry_name_check_counts_scope_session_id_and_key_in_utf8_bytes() -> None:
    """check_kv_entry_name refuses names over KV_ENTRY_NAME_MAX_BYTES, saying how many bytes."""
    check_kv_entry_name("s", None, "k" * (KV_ENTRY_NAME_MAX_BYTES - 1))
    with pytest.raises(InvalidInputError, match=r"take 2,601 bytes.*the limit is 2,600"):
        check_kv_entry_name("s", "ii", "\u00e9" * ((KV_ENTRY_NAME_MAX_BYTES - 1) // 2))


async def test_an_import_refuses_a_kv_entry_whose_name_cannot_fit_its_index(
    memory: Memory,
) -> None:
    """A kv record whose scope, session id and key take more bytes than the index row holds is
    an InvalidInputError naming the record, not a StorageError; nothing is written."""
    rng = random.Random(1)
    uid = await new_user(memory)
    sid = wide(190, rng)
    with request_context(user_id=uid):
        await memory.sessions.create(sid)
        await memory.kv.set("notes", "k", "v", session_id=sid)
    with admin():
        records = dumped(await memory.admin.export_user(uid))
        number = next(n for n, r in enumerate(records, 1) if r["type"] == "kv")
        records[number - 1] |= {"scope": wide(100, rng), "key": wide(500, rng)}
        target = uuid.uuid4()
        with pytest.raises(
            InvalidInputError,
            match=rf"^record {number} \(kv\): scope, session id and key take 3,160 bytes .*"
            r"the limit is 2,600",
        ):
            await memory.admin.import_user(records, user_id=target)
        assert await memory.users.get(target) is None


async def test_an_import_refuses_a_kv_entry_the_session_prefix_lengthens_past_its_index(
    memory: Memory,
) -> None:
    """An entry that fits as exported but not once ``session_prefix`` lengthens its session id
    is refused naming the record and the prefix; nothing is written."""
    rng = random.Random(2)
    uid = await new_user(memory)
    sid = wide(50, rng)  # 400 + 2,000 + 200 bytes: exactly the limit
    with request_context(user_id=uid):
        await memory.sessions.create(sid)
        await memory.kv.set(wide(100, rng), wide(500, rng), "v", session_id=sid)
    with admin():
        records = await memory.admin.export_user(uid)
        number = next(n for n, r in enumerate(records, 1) if r.type == "kv")
        target = uuid.uuid4()
        kv_before = await kv_rows(memory)
        with pytest.raises(
            InvalidInputError,
            match=rf"^record {number} \(kv\): with the session prefix .*take 2,840 bytes",
        ):
            await memory.admin.import_user(records, user_id=target, session_prefix=wide(60, rng))
        assert await memory.users.get(target) is None
        assert await kv_rows(memory) == kv_before


# --- 2. a malformed ToolContext ---------------------------------------------------------------


async def test_a_context_that_is_not_a_tool_context_is_the_tools_error_text(
    memory: Memory,
) -> None:
    """A dict given as the context is answered as tool-error text naming the type, both by the
    tool and by the dispatcher, instead of an AttributeError or "failed unexpectedly"."""
    uid = await new_user(memory)
    bad: Any = {"user_id": str(uid)}
    expected = "memory error: context must be a navi_memory.ToolContext, got dict"
    assert await memory.tools.memory.call({"action": "list"}, bad) == expected
    assert await memory.tools.call("memory", {"action": "list"}, bad) == expected


@pytest.mark.parametrize(
    ("permissions", "got"),
    [(5, "int"), (PERMISSION_READ_ALL, "str"), (b"navi.memory.read_all", "bytes")],
)
async def test_permissions_that_are_not_a_collection_of_names_are_the_tools_error_text(
    memory: Memory, permissions: Any, got: str
) -> None:
    """ToolContext(permissions=5) or a single name given as text is an InvalidTypeError the
    dispatcher answers as the tool's error text; nothing is written."""
    uid = await new_user(memory)
    ctx = ToolContext(user_id=uid, permissions=permissions)
    save = {"action": "save", "category": "c", "key": "k", "value": "v"}
    answer = await memory.tools.call("memory", save, ctx)
    assert answer.startswith("memory error: permissions must be an iterable of permission names")
    assert answer.endswith(f"got {got}")
    assert await memory.store.get_all_facts(user_id=uid) == []


async def test_a_permission_that_is_not_text_is_the_tools_error_text(memory: Memory) -> None:
    """A permission set holding a non-text item is named, not stored."""
    uid = await new_user(memory)
    ctx = ToolContext(user_id=uid, permissions=frozenset({5}))  # type: ignore[arg-type]
    answer = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert answer == "memory error: permission must be a str, got int"


@pytest.mark.parametrize(
    ("session_id", "message"), [(7, "session_id must be a str"), ("  ", "must not be empty")]
)
async def test_a_tool_context_session_id_is_checked_as_every_session_id(
    memory: Memory, session_id: Any, message: str
) -> None:
    """A session id of the wrong type or blank is the tool's error text."""
    uid = await new_user(memory)
    ctx = ToolContext(user_id=uid, session_id=session_id)
    answer = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert answer.startswith("memory error: ") and message in answer


# --- 3. the category's length is what the model sent ------------------------------------------


def test_a_category_lowering_lengthens_is_refused_naming_the_length_sent() -> None:
    """ "İ" lowers to two characters: 100 of them are refused saying 100 were sent, not 200."""
    with pytest.raises(
        InvalidInputError, match=r"category is 100 characters long as sent, 200 once lower-cased"
    ):
        parse_memory_arguments(
            {"action": "save", "category": "\u0130" * 100, "key": "k", "value": "v"}
        )


async def test_the_tool_answers_a_category_lowering_lengthens_with_what_was_sent(
    memory: Memory,
) -> None:
    """Through the dispatcher the same refusal is the tool's error text; nothing is written."""
    uid = await new_user(memory)
    save = {"action": "save", "category": "\u0130" * 100, "key": "k", "value": "v"}
    answer = await memory.tools.call("memory", save, ToolContext(user_id=uid))
    assert answer.startswith("memory error: category is 100 characters long as sent")
    assert "the limit is 100" in answer
    assert await memory.store.get_all_facts(user_id=uid) == []


# --- 4. categories in one Unicode form --------------------------------------------------------


def test_save_and_forget_take_category_and_key_in_nfc() -> None:
    """A decomposed "café" is parsed as the composed one, category and key alike."""
    request = parse_memory_arguments(
        {"action": "save", "category": "Cafe\u0301", "key": "cafe\u0301 ", "value": "v"}
    )
    assert isinstance(request, SaveFact)
    assert (request.category, request.key) == ("caf\u00e9", "caf\u00e9")
    forget = parse_memory_arguments({"action": "forget", "key": "k", "category": "CAFE\u0301"})
    assert forget == ForgetFact(key="k", category="caf\u00e9")


async def test_composed_and_decomposed_spellings_are_one_category(memory: Memory) -> None:
    """ "caf\\u00e9" and "cafe\\u0301" look alike: the tool stores them as one category."""
    uid = await new_user(memory)
    ctx = ToolContext(user_id=uid)
    for category, key in (("caf\u00e9", "espresso"), ("cafe\u0301", "latte")):
        answer = await memory.tools.call(
            "memory", {"action": "save", "category": category, "key": key, "value": "yes"}, ctx
        )
        assert answer.startswith("memory: saved"), answer
    with request_context(user_id=uid):
        assert await memory.store.fact_categories() == [("caf\u00e9", 2)]
    answer = await memory.tools.call("memory", {"action": "list"}, ctx)
    assert answer.splitlines()[-1] == "• caf\u00e9: 2"


async def test_a_category_stored_decomposed_is_the_one_the_tool_saves_into_and_forgets_from(
    memory: Memory,
) -> None:
    """A category an application stored decomposed ("Cafe\\u0301") is the tool's "café": a
    save goes into it and a forget in that category finds its facts."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("Cafe\u0301", "espresso", "yes")
    ctx = ToolContext(user_id=uid)
    save = {"action": "save", "category": "caf\u00e9", "key": "latte", "value": "no"}
    assert (await memory.tools.call("memory", save, ctx)).startswith("memory: saved")
    with request_context(user_id=uid):
        assert await memory.store.fact_categories() == [("Cafe\u0301", 2)]
    forget = {"action": "forget", "key": "espresso", "category": "caf\u00e9"}
    answer = await memory.tools.call("memory", forget, ctx)
    assert answer.startswith("memory: forgot 1 fact"), answer
    with request_context(user_id=uid):
        assert [f.key for f in await memory.store.get_all_facts()] == ["latte"]


@pytest.mark.parametrize("sent", ["cafe\u0301", "caf\u00e9"])
@pytest.mark.parametrize("category", [None, "places"])
async def test_the_tool_forgets_a_key_an_application_stored_decomposed(
    memory: Memory, sent: str, category: str | None
) -> None:
    """upsert_fact keeps a key as given; the tool reads keys in NFC. Its forget finds a key
    stored decomposed, whichever form the model types (it reads back what was stored)."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("places", "cafe\u0301", "the blue one")
    forget: dict[str, str] = {"action": "forget", "key": sent}
    if category is not None:
        forget["category"] = category
    answer = await memory.tools.call("memory", forget, ToolContext(user_id=uid))
    assert answer == "memory: forgot 1 fact: [places] cafe\u0301", answer
    with request_context(user_id=uid):
        assert await memory.store.get_all_facts() == []


async def test_text_stored_decomposed_is_found_by_either_form(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """An application may store text decomposed (NFD: a macOS file name, "e" + a combining
    accent); a chat types it composed. The text searches of facts and sketches find it by
    either form (the vector pass aside: text-only here)."""
    composed, decomposed = "Z\u00fcrich cr\u00e8me", "Zu\u0308rich cre\u0300me"
    async with open_memory(make_settings(db_url, fake_ollama), embedder=False) as memory:
        uid = await new_user(memory)
        with request_context(user_id=uid, session_id="s1"):
            await memory.sessions.create("s1")
            await memory.store.upsert_fact("food", "dessert", f"a {decomposed} in the old town")
            await memory.kv.set("scratchpad", "plan", f"visit {decomposed}", session_id="s1")
            for query in (composed, decomposed):
                facts = await memory.store.search_facts(query)
                assert [hit.key for hit in facts] == ["dessert"], query
                listed = await memory.store.get_all_facts(search=query.split()[0])
                assert [fact.key for fact in listed] == ["dessert"], query
                found = await memory.search.search(query, scope="all")
                assert {(hit.source_type, hit.key) for hit in found} == {
                    ("fact", "dessert"),
                    ("sketch", "plan"),
                }, query
                sketches = await memory.kv.search_values(None, "scratchpad", query.split())
                assert [row.key for row in sketches] == ["plan"], query


async def test_forget_of_a_key_whose_decomposed_form_is_too_long_forgets_and_says_so(
    memory: Memory,
) -> None:
    """200 characters composed, 201 decomposed: the decomposed form can be no stored key, and
    must not turn a forget that deleted the fact into an error."""
    key = "caf\u00e9" + "a" * 196
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("places", key, "the blue one")
    answer = await memory.tools.call(
        "memory", {"action": "forget", "key": key}, ToolContext(user_id=uid)
    )
    assert answer.startswith("memory: forgot 1 fact"), answer
    with request_context(user_id=uid):
        assert await memory.store.get_all_facts() == []


async def test_a_users_entries_under_a_session_id_sessions_does_not_hold_are_theirs_to_read(
    memory: Memory,
) -> None:
    """An application keeps its session ids outside ``sessions`` (or an import brought rows of
    one): the user's entries under such an id were found by an unfiltered search and deleted
    by delete(), but get, list and a session-filtered search found nothing. Another user's
    filter on that id still finds nothing of theirs."""
    alice, bob = await new_user(memory), await new_user(memory)
    await execute(
        memory,
        "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
        "VALUES (:u, 'scratchpad', 'ext-1', 'plan', 'ship on friday')",
        u=alice,
    )
    with request_context(user_id=alice):
        assert await memory.kv.get("scratchpad", "plan", session_id="ext-1") == "ship on friday"
        listed = await memory.kv.list("scratchpad", session_id="ext-1")
        assert [entry.key for entry in listed] == ["plan"]
        found = await memory.kv.search_values(None, "scratchpad", ["friday"], session_id="ext-1")
        assert [hit.key for hit in found] == ["plan"]
    with request_context(user_id=bob):
        assert await memory.kv.get("scratchpad", "plan", session_id="ext-1") is None
        assert await memory.kv.list("scratchpad", session_id="ext-1") == []
        assert await memory.kv.search_values(None, "scratchpad", ["friday"]) == []


async def test_a_cleared_scratchpad_section_is_no_search_hit_and_reads_as_empty(
    memory: Memory,
) -> None:
    """ "Empty clears it": a cleared section took one of the k sketch hits in memory_search,
    with no text, and `read` answered a header over nothing."""
    uid = await new_user(memory)
    ctx = ToolContext(user_id=uid, session_id="s1")
    with request_context(user_id=uid):
        await memory.sessions.create("s1")
    for section, text in (("plan", "port 8099"), ("todo", "ship the plan"), ("plan", "")):
        answer = await memory.tools.call(
            "scratchpad", {"action": "write", "section": section, "text": text}, ctx
        )
        assert not answer.startswith("scratchpad error"), answer
    read = await memory.tools.call("scratchpad", {"action": "read", "section": "plan"}, ctx)
    assert read == "scratchpad section 'plan' is empty (cleared)."
    with request_context(user_id=uid, session_id="s1"):
        for query in ("plan", ""):
            hits = await memory.search.search(query, scope="sketches", current_session_id="s1")
            assert [hit.key for hit in hits] == ["todo"], query


# --- a third bad-input review -------------------------------------------------------------------


async def test_record_shown_refuses_what_is_not_a_list_of_hits(memory: Memory) -> None:
    """None, a str or a list of str leaked a TypeError or AttributeError from inside."""
    uid = await new_user(memory)
    sid = (await memory.sessions.create(user_id=uid)).id
    with request_context(user_id=uid):
        for bad in (None, "abc", ["x"], {"hit": 1}):
            with pytest.raises(InvalidTypeError, match="hits must be"):
                await memory.context.record_shown(sid, bad)  # type: ignore[arg-type]
        await memory.context.record_shown(sid, [])


async def test_a_number_of_thousands_of_digits_as_a_tool_argument_is_a_clear_refusal(
    memory: Memory,
) -> None:
    """A host passing a Python dict with a huge int: the refusal's own text raised ValueError
    (Python writes out no int of over 4,300 digits); the model got "failed unexpectedly"."""
    uid = await new_user(memory)
    context = ToolContext(user_id=uid)
    for arguments in (
        {"action": "save", "category": 10**5000, "key": "k", "value": "v"},
        {"action": 10**5000},
    ):
        answer = await memory.tools.call("memory", arguments, context)
        assert answer.startswith("memory error: ") and "digits" in answer, answer
        assert "unexpectedly" not in answer and "the number a number" not in answer
    answer = await memory.tools.call("memory", {"action": "save", "category": 10**5000}, context)
    assert answer.endswith("category must be text, got a number of about 5,001 digits"), answer
    answer = await memory.tools.call("memory", [1, 2], context)  # type: ignore[arg-type]
    assert answer == "memory error: the arguments must be a JSON object, got an array", answer


async def test_open_memory_reads_a_malformed_environment_as_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_POOL_SIZE", "abc")
    with pytest.raises(ConfigError, match="DB_POOL_SIZE='abc'"):
        async with open_memory():
            pass
