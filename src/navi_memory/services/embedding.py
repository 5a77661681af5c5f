"""Embedding for the write and read paths: the model's vectors checked before they reach a
vector(768) column, and a failing model degraded to "no vector" with one log event.

Never call these inside a transaction: the model may take its time.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Sequence

from navi_memory.errors import EmbeddingError
from navi_memory.llm import Embedder, storable_vector, storable_vectors

__all__ = ["EmbeddingService", "storable_vector", "storable_vectors"]

logger = logging.getLogger(__name__)


class EmbeddingService:
    """The embedder behind the degradation the spec asks for: no vector → text search."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def document(self, text: str) -> list[float] | None:
        vectors = await self.documents([text])
        return None if vectors is None else vectors[0].tolist()

    async def documents(self, texts: Sequence[str]) -> list[array[float]] | None:
        try:
            vectors = await self.embedder.embed_documents(texts)
            return storable_vectors(vectors, len(texts))
        except EmbeddingError as exc:
            _log_failure(exc)
            return None

    async def query(self, text: str) -> array[float] | None:
        try:
            return storable_vector(await self.embedder.embed_query(text))
        except EmbeddingError as exc:
            _log_failure(exc)
            return None


def _log_failure(exc: EmbeddingError) -> None:
    logger.warning("memory.embedding_failed: %s", exc, extra={"event": "memory.embedding_failed"})
