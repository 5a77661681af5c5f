"""content_words and mark_freshness: the freshness rule of unified search (docs/memory.md)."""

from __future__ import annotations

import re
import string
import unicodedata
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navi_memory.errors import InvalidInputError
from navi_memory.text.freshness import (
    FIND_WORDS_MAX,
    FRESHNESS_STOP_WORDS,
    SEEN_ONCE_MAX,
    ExcerptWords,
    FactVersion,
    Freshness,
    RawExcerpt,
    _words_in,
    content_words,
    fact_words,
    mark_freshness,
)

ALICE = uuid.UUID(int=1)
BOB = uuid.UUID(int=2)
CHUNK_END = datetime(2026, 11, 6, 18, 41, tzinfo=UTC)
LATER = CHUNK_END + timedelta(days=3)
EARLIER = CHUNK_END - timedelta(days=3)


def excerpt(
    content: str = "User: the API listens on port 8098 for now",
    *,
    breadcrumbs: tuple[str, ...] = ("server_port", "8098"),
    user_id: uuid.UUID = ALICE,
    session_id: str = "s1",
    ended_at: datetime = CHUNK_END,
) -> RawExcerpt:
    return RawExcerpt(
        user_id=user_id,
        session_id=session_id,
        ended_at=ended_at,
        content=content,
        breadcrumbs=breadcrumbs,
    )


def fact(
    key: str = "server_port",
    value: str = "8099",
    *,
    user_id: uuid.UUID | None = ALICE,
    updated_at: datetime = LATER,
) -> FactVersion:
    return FactVersion(user_id=user_id, key=key, value=value, updated_at=updated_at)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("server_port", {"server", "port"}),
        ("serverPort", {"server", "port"}),
        ("HTTPPort", {"http", "port"}),
        ("api-gateway.config/prod", {"api", "gateway", "config", "prod"}),
        ("Port 8098 on the API", {"port", "8098", "api"}),
        ("v1.2.3", {"v1", "2", "3"}),
        ("User: what is it? Assistant: it is x", set()),
        ("", set()),
    ],
)
def test_content_words_split_identifiers_keep_numbers_and_drop_stop_words(
    text: str, words: set[str]
) -> None:
    """Identifiers split on _ - . / and camelCase, lowercased; numbers kept; stop words out."""
    assert content_words(text) == frozenset(words)


def test_content_words_join_several_texts() -> None:
    """Key and value (or content and breadcrumbs) give one set of words."""
    assert content_words("server_port", "8099") == {"server", "port", "8099"}


@given(st.text(max_size=200))
def test_content_words_are_case_folded_alphanumeric_and_never_stop_words(text: str) -> None:
    """Whatever the input: every word is case-folded letters, digits or combining marks, no
    stop word. (Folded, not lower-cased: Unicode folds lowercase Cherokee to its capitals, so
    '0Ꭰ' stays as it is.)"""
    for word in content_words(text):
        assert unicodedata.normalize("NFKC", word.casefold()) == word
        assert all(ch.isalnum() or unicodedata.category(ch).startswith("M") for ch in word)
        assert word not in {"the", "user", "assistant", "is"}


def test_a_newer_fact_sharing_two_words_supersedes_the_excerpt() -> None:
    """server_port=8099 updated after the chunk shares {server, port} with its breadcrumbs."""
    marks = mark_freshness([excerpt()], [fact()], {})
    assert marks == [Freshness(superseded_by="server_port", before_summary=False)]


def test_one_shared_word_does_not_supersede() -> None:
    """A fact sharing only 'port' (one content word) leaves the excerpt unmarked."""
    marks = mark_freshness(
        [excerpt("User: which port?", breadcrumbs=())], [fact("ssh_port", "22")], {}
    )
    assert marks == [Freshness()]


def test_words_shared_only_through_stop_words_and_prefixes_do_not_count() -> None:
    """'the', 'is', 'user', 'assistant' shared with the fact never count as content words."""
    marks = mark_freshness(
        [excerpt("User: what is the plan? Assistant: the plan is", breadcrumbs=())],
        [fact("user_assistant", "the is what")],
        {},
    )
    assert marks == [Freshness()]


def test_an_older_fact_does_not_supersede() -> None:
    """A fact updated before the excerpt ended (or at the same moment) marks nothing."""
    for updated_at in (EARLIER, CHUNK_END):
        marks = mark_freshness([excerpt()], [fact(updated_at=updated_at)], {})
        assert marks == [Freshness()]


def test_a_fact_of_another_user_never_marks_an_excerpt() -> None:
    """In a global read the facts of Bob (and unowned legacy facts) leave Alice's chunk alone."""
    marks = mark_freshness(
        [excerpt(user_id=ALICE)], [fact(user_id=BOB), fact(key="server.port", user_id=None)], {}
    )
    assert marks == [Freshness()]
    bobs = mark_freshness([excerpt(user_id=BOB)], [fact(user_id=BOB)], {})
    assert bobs == [Freshness(superseded_by="server_port")]


def test_the_fact_sharing_most_words_wins_then_the_newest() -> None:
    """Of several newer facts, the one sharing more words names the mark; ties go to the newest."""
    chunk = excerpt("User: the api server port is 8098", breadcrumbs=())
    broad = fact("server_port", "8099")
    narrow = fact("api_server_port", "8099")
    assert mark_freshness([chunk], [broad, narrow], {})[0].superseded_by == "api_server_port"
    older = fact("port_server", "x", updated_at=LATER)
    newer = fact("server_port", "y", updated_at=LATER + timedelta(hours=1))
    assert mark_freshness([chunk], [older, newer], {})[0].superseded_by == "server_port"


def test_an_excerpt_that_ended_before_its_sessions_summary_is_before_summary() -> None:
    """Only the excerpt's own session's boundary counts, and only when it is later."""
    chunks = [
        excerpt(session_id="s1"),
        excerpt(session_id="s2"),
        excerpt(session_id="s3"),
        excerpt(session_id="s4"),
    ]
    boundaries = {"s1": CHUNK_END + timedelta(minutes=1), "s2": CHUNK_END, "s3": None}
    marks = mark_freshness(chunks, [], boundaries)
    assert [m.before_summary for m in marks] == [True, False, False, False]


def test_both_marks_can_hold_and_order_follows_the_excerpts() -> None:
    """An excerpt may be superseded and before the summary; marks come back in input order."""
    chunks = [
        excerpt(session_id="s1"),
        excerpt("User: lunch at noon", breadcrumbs=(), session_id="s2"),
    ]
    marks = mark_freshness(chunks, [fact()], {"s1": LATER})
    assert marks == [Freshness(superseded_by="server_port", before_summary=True), Freshness()]


def test_words_with_combining_marks_stay_whole() -> None:
    """Devanagari (and every script that writes vowels as combining marks) keeps its words:
    they used to fall apart into single letters and vanish, so a Hindi fact never marked."""
    assert content_words("मेरा संपादक विम है") == {"मेरा", "संपादक", "विम", "है"}
    hindi = RawExcerpt(ALICE, "s1", CHUNK_END, "User: मेरा संपादक विम है")
    newer = FactVersion(ALICE, "संपादक", "मेरा संपादक नियोविम", LATER)
    assert mark_freshness([hindi], [newer], {}) == [Freshness(superseded_by="संपादक")]


def test_composed_decomposed_and_compatibility_forms_are_one_word() -> None:
    """An accent typed as a combining mark (NFD, as macOS file names are) and full-width
    letters and digits are the same words as their usual forms."""
    decomposed = unicodedata.normalize("NFD", "Café crème")
    assert content_words(decomposed) == content_words("Café crème") == {"café", "crème"}
    assert content_words("Ｐｏｒｔ ８０９８") == {"port", "8098"}
    raw = RawExcerpt(ALICE, "s1", CHUNK_END, f"User: {decomposed} please")
    newer = FactVersion(ALICE, "favourite_drink", "café crème", LATER)
    assert mark_freshness([raw], [newer], {}) == [Freshness(superseded_by="favourite_drink")]


WORDS = [
    *("server", "Port", "HTTPPort", "serverPort", "ABCdef", "8098", "v2", "api", "K", "s"),
    *("ΣΑΣ", "straße", "İstanbul", "\u212aey", "the", "user", "Assistant"),
    *("हिन्दी", "cafe\u0301", "Ｐｏｒｔ", "ﬁle"),
]
SEPARATORS = [" ", "_", "-", ".", "/", "", "\n", ": "]
texts = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=8).map(
    lambda parts: "".join(word + sep for word, sep in parts)
)


def plain_tokens(text: str) -> list[str]:
    """Runs of letters, digits and combining marks, found one character at a time."""
    marked = "".join(
        ch if (ch.isalnum() or unicodedata.category(ch).startswith("M")) and ch != "_" else " "
        for ch in text
    )
    return marked.split()


def plain_content_words(text: str) -> frozenset[str]:
    """The definition, written plainly: NFKC, seams spaced out, tokens, each folded."""
    seams = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
    words = {
        word
        for token in plain_tokens(seams.sub(" ", unicodedata.normalize("NFKC", text)))
        for word in plain_tokens(unicodedata.normalize("NFKC", token.casefold()))
    }
    return frozenset(
        w for w in words if w not in FRESHNESS_STOP_WORDS and (len(w) > 1 or w.isdigit())
    )


@settings(max_examples=500)
@given(st.one_of(texts, st.text(max_size=80), st.text(alphabet=string.printable, max_size=80)))
def test_content_words_follow_the_plain_definition(text: str) -> None:
    """The fast ASCII path and the general path both give the plain definition's words."""
    assert content_words(text) == plain_content_words(text)


@pytest.mark.slow
@settings(max_examples=500)
@given(st.one_of(texts, st.text(max_size=80)), st.lists(st.one_of(texts, st.text(max_size=12))))
def test_finding_words_in_a_text_equals_tokenizing_it(text: str, others: list[str]) -> None:
    """The fast lookup of fact words in an excerpt gives exactly the shared content words."""
    candidates = set(content_words(*others)) | content_words(text)
    assert _words_in(text, candidates) == candidates & content_words(text)


def reference_marks(excerpts: list[RawExcerpt], facts: list[FactVersion]) -> list[str | None]:
    """The rule written plainly: every excerpt tokenized, every fact compared."""
    marks: list[str | None] = []
    for ex in excerpts:
        words = content_words(ex.content, *ex.breadcrumbs)
        best: tuple[int, datetime, str] | None = None
        for f in facts:
            shared = len(words & content_words(f.key, f.value))
            if f.user_id != ex.user_id or f.updated_at <= ex.ended_at or shared < 2:
                continue
            key = (shared, f.updated_at, f.key)
            if (
                best is None
                or (key[0], key[1]) > (best[0], best[1])
                or ((key[0], key[1]) == (best[0], best[1]) and key[2] < best[2])
            ):
                best = key
        marks.append(None if best is None else best[2])
    return marks


@pytest.mark.slow
@settings(max_examples=300)
@given(
    st.lists(st.tuples(texts, st.lists(texts, max_size=2), st.integers(0, 3)), max_size=4),
    st.lists(st.tuples(texts, texts, st.integers(0, 3), st.booleans()), max_size=5),
)
def test_the_marks_equal_the_rule_written_plainly(
    raw: list[tuple[str, list[str], int]], facts: list[tuple[str, str, int, bool]]
) -> None:
    """The pre-filtered mark_freshness gives exactly the marks of the plain rule."""
    excerpts = [
        excerpt(content, breadcrumbs=tuple(crumbs), ended_at=CHUNK_END + timedelta(days=day))
        for content, crumbs, day in raw
    ]
    versions = [
        fact(key, value, user_id=ALICE if mine else BOB, updated_at=CHUNK_END + timedelta(days=d))
        for key, value, d, mine in facts
    ]
    got = [m.superseded_by for m in mark_freshness(excerpts, versions, {})]
    assert got == reference_marks(excerpts, versions)
    # The facts' words made beforehand (unified search makes them in the facts lane): the
    # same marks.
    prepared = [m.superseded_by for m in mark_freshness(excerpts, fact_words(versions), {})]
    assert prepared == got
    # The excerpts' words kept between calls (unified search keeps them by chunk): the same
    # marks when they are made, and when they are found (a cache of 2: some evicted).
    stored = [replace(e, chunk_id=i) for i, e in enumerate(excerpts)]
    known = ExcerptWords(max_words=8)
    for _ in range(3):
        kept = [m.superseded_by for m in mark_freshness(stored, versions, {}, known=known)]
        assert kept == got


SERVER_PORT = "User: the serverPort is 8098"  # 3 words: server, port, 8098
TEA = "User: tea or coffee"  # 2 words
FRIDAY = "Assistant: deploy on Friday"  # 2 words


def test_excerpt_words_are_kept_from_the_second_marking_by_chunk_and_text() -> None:
    known = ExcerptWords()
    wanted = {"port", "8098", "deploy"}
    for _ in range(3):  # looked up, then tokenized and kept, then found
        assert known.shared(1, SERVER_PORT, wanted) == {"port", "8098"}
    assert (known.hits, known.misses, len(known), known.words) == (1, 2, 1, 3)
    # The same id with another text (a table emptied and filled again): that text's words.
    assert known.shared(1, FRIDAY, wanted) == {"deploy"}
    assert known.shared(1, FRIDAY, wanted) == {"deploy"}
    assert (known.hits, known.misses, len(known), known.words) == (1, 4, 2, 5)
    assert known.shared(1, SERVER_PORT, {"server"}) == {"server"}  # all its words were kept
    assert known.hits == 2


def test_excerpt_words_forget_the_least_recently_used_beyond_their_words() -> None:
    known = ExcerptWords(max_words=5)
    for _ in range(2):
        known.shared(1, SERVER_PORT, {"port"})
        known.shared(2, TEA, {"tea"})
    assert (known.hits, known.misses, known.words) == (0, 4, 5)
    known.shared(1, SERVER_PORT, {"port"})  # found: excerpt 2 is now the least recent
    for _ in range(2):
        known.shared(3, FRIDAY, {"friday"})  # kept: 7 words, so excerpt 2 goes
    assert (len(known), known.words) == (2, 5)
    known.shared(1, SERVER_PORT, {"port"})
    assert known.hits == 2
    known.shared(2, TEA, {"tea"})  # marked once again: remembered, not kept
    assert (known.hits, len(known)) == (2, 2)
    known.clear()
    assert (known.hits, known.misses, len(known), known.words) == (0, 0, 0, 0)


def test_excerpts_marked_once_never_push_out_kept_words() -> None:
    """Many excerpts marked once (other users' searches between two recall turns) are only
    remembered as seen: the words kept stay."""
    known = ExcerptWords(max_words=3)
    for _ in range(2):
        known.shared(1, SERVER_PORT, {"port"})
    for chunk_id in range(100, 100 + SEEN_ONCE_MAX + 10):
        known.shared(chunk_id, TEA, {"tea"})
    known.shared(1, SERVER_PORT, {"port"})
    assert (known.hits, len(known), known.words) == (1, 1, 3)
    # The earliest seen are forgotten beyond SEEN_ONCE_MAX: marked again, still not kept…
    known.shared(100, TEA, {"tea"})
    assert known.words == 3
    # … a later one is remembered: its second marking keeps it (pushing out the older words).
    known.shared(200, TEA, {"tea"})
    assert (len(known), known.words) == (1, 2)


def test_an_excerpt_with_more_words_than_the_bound_is_never_kept() -> None:
    known = ExcerptWords(max_words=2)
    for _ in range(3):
        assert known.shared(1, SERVER_PORT, {"port"}) == {"port"}
    assert (known.hits, len(known), known.words) == (0, 0, 0)


def test_excerpt_words_are_kept_at_once_when_marking_tokenized_the_excerpt() -> None:
    """More fact words than are looked up one by one (or non-ASCII text): the excerpt was
    tokenized for this marking, so its words are kept from the first."""
    many = {f"word{i}" for i in range(FIND_WORDS_MAX + 1)} | {"port"}
    known = ExcerptWords()
    assert known.shared(1, SERVER_PORT, many) == {"port"}
    assert known.shared(1, SERVER_PORT, {"server"}) == {"server"}
    assert known.shared(2, "User: café crème", {"café"}) == {"café"}
    assert known.shared(2, "User: café crème", {"crème"}) == {"crème"}
    assert (known.hits, known.misses) == (2, 2)


def test_excerpt_words_bounded_to_zero_keep_nothing() -> None:
    known = ExcerptWords(max_words=0)
    for _ in range(3):
        assert known.shared(7, SERVER_PORT, {"port", "tea"}) == {"port"}
    assert (known.hits, known.misses, len(known)) == (0, 3, 0)


@pytest.mark.parametrize("max_words", [-1, 1.5, "3", True, None])
def test_excerpt_words_refuse_a_bound_that_is_not_a_count(max_words: object) -> None:
    with pytest.raises(InvalidInputError, match="ExcerptWords max_words must be an int"):
        ExcerptWords(max_words)  # type: ignore[arg-type]


def test_an_excerpt_without_a_chunk_id_is_never_kept() -> None:
    known = ExcerptWords()
    marks = mark_freshness([excerpt()], [fact()], {}, known=known)
    assert marks == [Freshness(superseded_by="server_port")]
    assert (known.hits, known.misses, len(known)) == (0, 0, 0)
