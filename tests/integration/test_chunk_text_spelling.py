"""The BM25 text path reads chunks as it reads queries: in Unicode NFC, a one-letter name
with "#" or "++" ("C#", "C++") as a word of its own, not the bare letter (revision 0023), and
a number with thousands separators as one lexeme without them (revision 0035)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from navi_memory import Memory, open_memory
from navi_memory.testing import FakeOllama, ScriptedChatModel
from navi_memory.text.terms import query_terms
from tests.conftest import make_settings
from tests.integration.factories import chunk_draft as draft
from tests.integration.factories import new_user, scalar

COMPOSED = "Z\u00fcrich"
DECOMPOSED = "Zu\u0308rich"


async def test_a_chunk_stored_decomposed_is_found_by_either_form_before_and_after_indexing(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """A tool result naming a macOS file ("Zu\\u0308rich-itinerary.pdf", NFD), compressed into a
    chunk: "Zürich" typed either way finds it, queued and indexed (the reviewer's repro)."""
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    chat = ScriptedChatModel(["The user looked for their itinerary.\nKEYS: NONE"])
    async with open_memory(settings, embedder=False, chat_model=chat) as memory:
        uid = await new_user(memory)
        sessions, store = memory.sessions, memory.store
        await sessions.create("s1", user_id=uid)
        await sessions.append("s1", "user", "Where is my travel plan?", user_id=uid)
        await sessions.append("s1", "tool_call", tool_name="ls", tool_args={}, user_id=uid)
        await sessions.append(
            "s1", "tool", f"{DECOMPOSED}-itinerary.pdf", tool_name="ls", user_id=uid
        )
        await sessions.append("s1", "assistant", "It is in your downloads.", user_id=uid)
        await sessions.append("s1", "user", "Thanks.", user_id=uid)
        result = await sessions.compress("s1", keep_last=1, user_id=uid)
        assert result.chunks_written == 1
        stored = await scalar(memory, "SELECT content FROM memory_chunks")
        assert isinstance(stored, str) and DECOMPOSED in stored  # kept verbatim, decomposed

        found: dict[str, list[str]] = {}
        for stage in ("queued", "indexed"):
            if stage == "indexed":
                await store.index_pending_chunks()
                assert await scalar(memory, "SELECT count(*) FROM memory_chunk_terms") == 1
            for query in (COMPOSED, DECOMPOSED, f"{COMPOSED} itinerary"):
                hits = await store.search_chunks(query, user_id=uid)
                found[f"{stage} {query!a}"] = [h.content for h in hits]
                assert hits and hits[0].terms_hit == len(query.split()), (stage, ascii(query))
    assert all(contents == [stored] for contents in found.values()), found


@pytest.mark.parametrize(
    ("query", "wanted", "terms"),
    [
        ("C#", "User: the service is written in C# on .NET 8", 1),
        ("C++", "User: the engine is written in C++ with templates", 1),
        ("F# or g++", "User: scripts in F#, built with g++ -O2", 2),
    ],
)
async def test_a_one_letter_name_with_symbols_is_not_the_bare_letter(
    db_url: str, fake_ollama: FakeOllama, query: str, wanted: str, terms: int
) -> None:
    """ "C#" finds the C# chunk, first, and no chunk holding only a "C" ("20 °C", "C:\\"), nor
    the C++ one, counts it as hit; before and after indexing (the reviewer's repro)."""
    contents = [
        "User: the service is written in C# on .NET 8",
        "User: the engine is written in C++ with templates",
        "User: scripts in F#, built with g++ -O2",
        "User: it is 20 °C outside in the city today",
        "User: installed under C:\\Program Files\\App and in /srv/g",
    ]
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        # The others are newer: recency cannot put the wanted chunk first.
        chunks = [draft(c, 10 if c == wanted else i) for i, c in enumerate(contents)]
        await memory.store.add_chunks(chunks, user_id=uid, session_id="s1")
        for stage in ("queued", "indexed"):
            if stage == "indexed":
                await memory.store.index_pending_chunks()
                assert await scalar(memory, "SELECT count(*) FROM memory_chunk_terms") == 5
            hits = await memory.store.search_chunks(query, user_id=uid)
            assert hits and hits[0].content == wanted, (stage, [h.content for h in hits])
            assert hits[0].terms_hit == terms
            assert all(not h.terms_hit for h in hits[1:]), (stage, hits)
            assert all(h.content == wanted for h in hits), (stage, [h.content for h in hits])


async def test_leading_dot_names_and_a_letter_alone_are_found_as_before(
    db_url: str, fake_ollama: FakeOllama
) -> None:
    """What the spelling leaves alone: ".env" finds a path holding it (and "env" too, the
    lexeme it shares), and "i++" in code is a name like "g++", not the "i" beside it."""
    contents = [
        "Tool result (cat): /app/.env holds DATABASE_URL",
        "User: i think the drive is C:\\ on the old laptop",
        "Assistant: for (i = 0; i < n; i++) total += i;",
    ]
    settings = make_settings(db_url, fake_ollama, chunk_index_in_background=False)
    async with open_memory(settings, embedder=False) as memory:
        uid = await new_user(memory)
        await memory.store.add_chunks(
            [draft(c, i) for i, c in enumerate(contents)], user_id=uid, session_id="s1"
        )
        await memory.store.index_pending_chunks()
        for query, wanted in ((".env", 0), ("env", 0), ("i++", 2)):
            hits = await memory.store.search_chunks(query, user_id=uid)
            assert hits and hits[0].content == contents[wanted], (query, hits)
            assert hits[0].terms_hit == len(query.split()), query


@pytest.mark.parametrize("model", ["up", "down", "none"])
@pytest.mark.parametrize("stage", ["queued", "indexed"])
async def test_an_amount_with_thousands_separators_is_one_word(
    db_url: str, fake_ollama: FakeOllama, model: str, stage: str
) -> None:
    """ "$1,234.50" was the lexemes 1 and 234.50: a newer, shorter chunk saying "$1 and 234.50"
    held both, hit the amount and ranked first (the reviewer's repro). The amount is one word
    now (revision 0035): only the chunk holding it is found by its text, first, and it is
    found by "1234.50" too; a list of numbers is still its numbers."""
    settings = make_settings(
        db_url,
        fake_ollama,
        chunk_index_in_background=False,
        **({"embedding_model": "none"} if model == "none" else {}),
    )
    fake_ollama.mode = "fail" if model == "down" else "ok"
    async with open_memory(settings) as memory:
        uid = await new_user(memory)
        invoice = "User: the invoice total was $1,234.50 last month"
        apart = "User: paid $1 and 234.50 euros"
        ports = "User: open ports 8080,8081"
        order = "User: order #4,321 shipped, @2,500 a unit"  # "#", "@": no part of a term
        await memory.store.add_chunks(
            [draft(invoice, 1), draft(apart, 3), draft(ports, 5), draft(order, 7)],
            user_id=uid,
            session_id="s",
        )
        if stage == "indexed":
            await memory.store.index_pending_chunks()
            assert await scalar(memory, "SELECT count(*) FROM memory_chunk_text_queue") == 0
        for query in ("$1,234.50", "1234.50", "the 1,234.50 invoice"):
            hits = await memory.search.search(query, "raw", user_id=uid)
            assert hits and hits[0].text == invoice, (query, [h.text for h in hits])
            assert [h.terms_hit for h in hits if h.text == apart] in ([], [0]), query
        text = await memory.store.search_chunks("$1,234.50", user_id=uid)
        if model != "up":  # no vector lane: the text list alone
            assert [h.content for h in text] == [invoice]
        for query in ("#4,321", "4321", "2,500"):
            hits = await memory.search.search(query, "raw", user_id=uid)
            assert hits[0].text == order and hits[0].terms_hit == 1, query
        for query in ("8081", "8080,8081"):
            hits = await memory.search.search(query, "raw", user_id=uid)
            assert hits[0].text == ports and hits[0].terms_hit >= 1, query


NUMBERISH = st.lists(
    st.sampled_from(
        ["1", "12", "234", "5678", ",", ",", ".", "$", " ", "x", "/", "#", "@", ":", "_", "("]
    ),
    min_size=1,
    max_size=10,
).map("".join)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=NUMBERISH)
async def test_a_text_holds_every_lexeme_of_each_of_its_own_query_terms(
    memory: Memory, body: str
) -> None:
    """The query's terms (text.terms, Python) and the chunks' lexemes (navi_text_spelling,
    SQL) draw a number's bounds alike: a chunk holding a text is a hit of each of that text's
    terms — digits, commas and dots in any order (revision 0035's step mirrors
    _COMMA_NUMBER; a mismatch would leave a chunk unfound by its own words). Signs are left
    out: the parser reads "1+12" as 1 and +12, the query as 1 and 12 (a known gap)."""
    for term in query_terms(body):
        missing = await scalar(
            memory,
            "SELECT array(SELECT unnest(navi_term_lexemes(:term))"
            " EXCEPT SELECT unnest(tsvector_to_array(navi_text_tsv(:body))))",
            term=term,
            body=body,
        )
        assert missing == [], (body, term)
