"""Embedding for the write and read paths: the model's vectors checked before they reach a
vector(768) column, and a failing model degraded to "no vector" with one log event.

Never call these inside a transaction: the model may take its time.
"""

from __future__ import annotations

import logging
import math
from array import array
from collections.abc import Sequence

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import EmbeddingError
from navi_memory.llm import Embedder

__all__ = ["EmbeddingService", "storable_vector", "storable_vectors"]

logger = logging.getLogger(__name__)


def storable_vector(vector: Sequence[float]) -> array[float]:
    """The vector as float32 (``array('f')``, what pgvector stores), if a vector(768) column can
    hold it; else EmbeddingError. Any Embedder is checked here, so a custom one that answers
    junk degrades like a failing one."""
    if len(vector) != EMBEDDING_DIM:
        raise EmbeddingError(
            f"the embedder gave a {len(vector)}-dimensional vector; the columns are "
            f"vector({EMBEDDING_DIM})"
        )
    try:
        # float32, as pgvector stores it: converted and type-checked in C; a value beyond
        # float32's range becomes an infinity here.
        values = array("f", vector)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(f"the embedder gave a vector of non-numbers: {exc}") from exc
    # A NaN or an infinity makes the sum non-finite; 768 finite float32 values cannot overflow it.
    if not math.isfinite(sum(values)):
        raise EmbeddingError("the embedder gave a value pgvector cannot store (NaN, inf, huge)")
    return values


def storable_vectors(vectors: Sequence[Sequence[float]], expected: int) -> list[array[float]]:
    if len(vectors) != expected:
        raise EmbeddingError(f"the embedder gave {len(vectors)} vectors for {expected} texts")
    return [storable_vector(vector) for vector in vectors]


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
