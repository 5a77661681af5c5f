"""Turning text into vectors: the ``Embedder`` protocol and its Ollama implementation.

Documents and queries get nomic-embed-text's task prefixes; every failure is an ``EmbeddingError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError
from navi_memory.llm._ollama import (
    ClientOwner,
    check_host,
    describe_failure,
    failure_types,
    redact_host,
)
from navi_memory.llm.vectors import storable_vectors

if TYPE_CHECKING:
    import ollama

    from navi_memory.config import Settings

__all__ = [
    "Embedder",
    "OllamaEmbedder",
    "embedder_from_settings",
    "embedding_model_name",
    "embedding_text_for_fact",
]


@runtime_checkable
class Embedder(Protocol):
    """Something that embeds texts into vectors of ``dim`` floats, for storing and for searching.

    Any ordered sequence of numbers will do as a vector (a list, an ``array``, a numpy row):
    ``GuardedEmbedder`` checks every answer and hands the rest of the package float32 arrays.
    """

    dim: int
    """Length of every vector returned; the ``vector`` columns are ``EMBEDDING_DIM`` wide."""

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """One vector per text, in order, for texts that will be stored (an empty list: ``[]``)."""
        ...

    async def embed_query(self, text: str) -> Sequence[float]:
        """The vector of a search query, to compare against stored document vectors."""
        ...

    async def aclose(self) -> None:
        """Release connections; the embedder may be used again afterwards."""
        ...


def embedding_text_for_fact(category: str, key: str, value: str) -> str:
    """The text embedded for a fact: ``"<category> / <key>: <value>"``.

    For example ``embedding_text_for_fact("preferences", "editor", "neovim")`` gives
    ``"preferences / editor: neovim"``. The category is kept because it disambiguates short keys
    ("work / location" against "home / location"); the text is otherwise left exactly as stored,
    so re-embedding the same fact always yields the same vector. Changing this form means
    re-embedding every stored fact.
    """
    return f"{category} / {key}: {value}"


def embedding_model_name(embedder: object) -> str:
    """The name an embedder gives its model (its ``model`` attribute, inside any guard), else
    its class name: what the stored vectors are recorded as made by (memory_embedding_model).
    An embedder built from the settings is named by EMBEDDING_MODEL instead (open_memory)."""
    inner = getattr(embedder, "inner", None)
    if inner is not None and inner is not embedder:
        return embedding_model_name(inner)
    model = getattr(embedder, "model", None)
    if isinstance(model, str) and model.strip():
        return model.strip()
    return type(embedder).__name__


class OllamaEmbedder(ClientOwner):
    """An ``Embedder`` on an Ollama server's ``/api/embed``, through the ``ollama`` client.

    The client is created on first use, so constructing an embedder opens nothing. Texts are
    sent ``batch_size`` at a time; each call is bounded by ``timeout`` seconds.
    """

    def __init__(
        self,
        host: str,
        model: str,
        *,
        api_key: str = "",
        document_prefix: str,
        query_prefix: str,
        batch_size: int,
        timeout: float,
        dim: int = EMBEDDING_DIM,
    ) -> None:
        if not model.strip():
            raise ConfigError("EMBEDDING_MODEL is empty: name an embedding model, e.g. a 768-d one")
        if batch_size < 1:
            raise ConfigError(f"EMBEDDING_BATCH_SIZE must be at least 1, got {batch_size}")
        if not timeout > 0:
            raise ConfigError(f"EMBEDDING_TIMEOUT_SECONDS must be positive, got {timeout}")
        if dim < 1:
            raise ConfigError(f"embedding dimension must be at least 1, got {dim}")
        self.host = check_host(host, "EMBEDDING_OLLAMA_HOST (or OLLAMA_HOST)")
        self.model = model
        self.document_prefix = document_prefix
        self.query_prefix = query_prefix
        self.batch_size = batch_size
        self.timeout = timeout
        self.dim = dim
        self._api_key = api_key
        self._client: ollama.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The embedder the settings describe: EMBEDDING_OLLAMA_* falling back to OLLAMA_*."""
        return cls(
            settings.embedding_host,
            settings.embedding_model,
            api_key=settings.embedding_api_key,
            document_prefix=settings.embedding_document_prefix,
            query_prefix=settings.embedding_query_prefix,
            batch_size=settings.embedding_batch_size,
            timeout=settings.embedding_timeout_seconds,
        )

    def __repr__(self) -> str:
        return f"OllamaEmbedder(host={redact_host(self.host)!r}, model={self.model!r})"

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``document_prefix + text`` for each text, ``batch_size`` texts per request."""
        inputs = [self.document_prefix + text for text in texts]
        vectors: list[list[float]] = []
        for start in range(0, len(inputs), self.batch_size):
            vectors.extend(await self._embed_batch(inputs[start : start + self.batch_size]))
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        """Embed ``query_prefix + text``."""
        (vector,) = await self._embed_batch([self.query_prefix + text])
        return vector

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        try:
            client = self.client()  # a malformed host fails here: a failure like any other
            # The client's timeout is per network operation; this one bounds the whole call.
            async with asyncio.timeout(self.timeout):
                response = await client.embed(model=self.model, input=batch)
        except failure_types() as exc:
            raise self._error(describe_failure(exc, self.timeout)) from exc
        return self._checked(response.embeddings, len(batch))

    def _checked(self, embeddings: Sequence[Sequence[float]], expected: int) -> list[list[float]]:
        # The shared check (count, dimension, finite float32, not all zero); the values go back
        # as the server sent them, not rounded to float32.
        storable_vectors(embeddings, expected, dim=self.dim, subject=self._subject())
        return [[float(x) for x in embedding] for embedding in embeddings]

    def _subject(self) -> str:
        return f"embedding model {self.model!r} at {redact_host(self.host)}"

    def _error(self, what: str) -> EmbeddingError:
        return EmbeddingError(f"{self._subject()} {what}")


def embedder_from_settings(settings: Settings) -> Embedder:
    """The embedder EMBEDDING_MODEL names: ``local`` or ``local:<directory>`` runs a
    sentence-transformers model in this process (the ``[local]`` extra, navi_memory.llm.local);
    any other name is a model of the Ollama server at EMBEDDING_OLLAMA_HOST (or OLLAMA_HOST)."""
    # Imported here: the local module is only needed, and its extra only checked, when chosen.
    from navi_memory.llm.local import LocalEmbedder, local_model_of

    if local_model_of(settings.embedding_model) is not None:
        return LocalEmbedder.from_settings(settings)
    return OllamaEmbedder.from_settings(settings)
