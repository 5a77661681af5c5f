"""Turning text into vectors: the ``Embedder`` protocol and its Ollama implementation.

Documents and queries get nomic-embed-text's task prefixes; every failure is an ``EmbeddingError``.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, Self, runtime_checkable

from navi_memory.constants import (
    EMBEDDING_DIM,
    OLLAMA_DEFAULT_NAMESPACE,
    OLLAMA_DEFAULT_REGISTRY,
    OLLAMA_DEFAULT_TAG,
    TEXT_ONLY_EMBEDDING_MODEL,
)
from navi_memory.errors import ConfigError, EmbeddingError, EmbeddingTimeoutError
from navi_memory.llm._ollama import (
    ClientOwner,
    check_host,
    describe_failure,
    failure_types,
    is_timeout,
    redact_host,
)
from navi_memory.llm.vectors import storable_vectors

if TYPE_CHECKING:
    import ollama

    from navi_memory.config import Settings

__all__ = [
    "Embedder",
    "OllamaEmbedder",
    "canonical_model_name",
    "embedder_from_settings",
    "embedding_model_name",
    "embedding_text_for_fact",
    "same_model",
]

_FLAG_VALUES: Final = frozenset((0.0, 1.0))
"""What the ollama client makes of JSON booleans: it turns ``true`` into 1.0 before we see it."""


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


def canonical_model_name(model: str) -> str:
    """The name an embedding model is recorded and compared as (memory_embedding_model): an
    Ollama name as Ollama resolves it (its ``types/model`` name rules) — without a tag, the
    one Ollama gives it (``nomic-embed-text`` is ``nomic-embed-text:latest``); the default
    registry and namespace left out (``registry.ollama.ai/library/x`` and ``library/x`` are
    ``x``); an ``http://`` or ``https://`` in front dropped; ASCII letters lower-cased (Ollama
    compares names so: ``Nomic-Embed-Text`` is the same model). The in-process model as
    ``local`` or ``local:<directory>`` however ``local`` is written and spaced (``Local``,
    ``local: /dir``: ``local_model_of`` runs the same model for them); ``none`` lower-cased.

    Both sides of a comparison go through it: a name recorded in another spelling (before
    this rule) equals its canonical form without any migration."""
    # Imported here, as in embedder_from_settings: the local module only when it is needed.
    from navi_memory.llm.local import LOCAL_MODEL_PREFIX, local_model_of

    name = model.strip()
    if (local := local_model_of(name)) is not None:
        return f"{LOCAL_MODEL_PREFIX}:{local}" if local else LOCAL_MODEL_PREFIX
    if not name or name.lower() == TEXT_ONLY_EMBEDDING_MODEL:
        return name.lower()
    for scheme in ("http://", "https://"):
        if name.lower().startswith(scheme):
            name = name[len(scheme) :]
            break
    name = name.translate(_ASCII_LOWER)
    # A registry host may carry a port (host:11434/ns/model): the tag is in the last segment.
    *path, last = name.split("/")
    if len(path) == 2 and path[0] == OLLAMA_DEFAULT_REGISTRY:
        path = path[1:]
    if len(path) == 1 and path[0] == OLLAMA_DEFAULT_NAMESPACE:
        path = []
    if ":" not in last and "@" not in last:
        last = f"{last}:{OLLAMA_DEFAULT_TAG}"
    return "/".join([*path, last])


_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
"""Ollama folds model names' ASCII letters only (``downcase`` in its types/model)."""


def same_model(recorded: str, configured: str) -> bool:
    """Whether two names are one embedding model: ``nomic-embed-text`` recorded (before names
    were recorded with their tag) is ``nomic-embed-text:latest`` (canonical_model_name)."""
    return recorded == configured or canonical_model_name(recorded) == canonical_model_name(
        configured
    )


def embedding_model_name(embedder: object) -> str:
    """The name an embedder gives its model (its ``model`` attribute, inside any guard; an
    ``OllamaEmbedder``'s as ``canonical_model_name`` spells it), else its class name: what the
    stored vectors are recorded as made by (memory_embedding_model). An embedder built from
    the settings is named by EMBEDDING_MODEL instead (open_memory)."""
    inner = getattr(embedder, "inner", None)
    if inner is not None and inner is not embedder:
        return embedding_model_name(inner)
    model = getattr(embedder, "model", None)
    if isinstance(model, str) and model.strip():
        if isinstance(embedder, OllamaEmbedder):
            return canonical_model_name(model)
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
            raise self._error(describe_failure(exc, self.timeout), timeout=is_timeout(exc)) from exc
        return self._checked(response.embeddings, len(batch))

    def _checked(self, embeddings: Sequence[Sequence[float]], expected: int) -> list[list[float]]:
        # The shared check (count, dimension, finite float32, not all zero); the values go back
        # as the server sent them, not rounded to float32.
        storable_vectors(embeddings, expected, dim=self.dim, subject=self._subject())
        vectors = [[float(x) for x in embedding] for embedding in embeddings]
        for index, vector in enumerate(vectors):
            # The client's pydantic model turned JSON booleans into 1.0 and 0.0 before the
            # shared check's bool test could see them: what is left to see is a vector of
            # nothing but 0s and 1s, which no embedding model answers. Its ends are looked at
            # first: a model's vector fails there, without a pass over every value.
            if (
                vector[0] in _FLAG_VALUES
                and vector[-1] in _FLAG_VALUES
                and _FLAG_VALUES.issuperset(vector)
            ):
                raise self._error(
                    f"returned a vector of booleans (only 0s and 1s) (#{index}), not a model's "
                    "floats: check EMBEDDING_MODEL names an embedding model and the host is an "
                    "Ollama server (or a proxy that passes its answers through)"
                )
        return vectors

    def _subject(self) -> str:
        return f"embedding model {self.model!r} at {redact_host(self.host)}"

    def _error(self, what: str, *, timeout: bool = False) -> EmbeddingError:
        error = EmbeddingTimeoutError if timeout else EmbeddingError
        return error(f"{self._subject()} {what}")


def embedder_from_settings(settings: Settings) -> Embedder:
    """The embedder EMBEDDING_MODEL names: ``local`` or ``local:<directory>`` runs a
    sentence-transformers model in this process (the ``[local]`` extra, navi_memory.llm.local);
    any other name is a model of the Ollama server at EMBEDDING_OLLAMA_HOST (or OLLAMA_HOST)."""
    # Imported here: the local module is only needed, and its extra only checked, when chosen.
    from navi_memory.llm.local import LocalEmbedder, local_model_of

    if local_model_of(settings.embedding_model) is not None:
        return LocalEmbedder.from_settings(settings)
    return OllamaEmbedder.from_settings(settings)
