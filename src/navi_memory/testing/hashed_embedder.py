"""An in-process ``Embedder`` on ``hashed_embedding``: the fake server's vectors without HTTP.

For benchmarks that must not measure HTTP, and unit tests that need vectors but no server.
"""

from __future__ import annotations

from collections.abc import Sequence

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import EmbeddingError
from navi_memory.testing.hashing import hashed_embedding

__all__ = ["HashedEmbedder"]


class HashedEmbedder:
    """An ``Embedder`` answering ``hashed_embedding(text, dim)``, the same vectors as FakeOllama.

    Task prefixes make no difference (``hashed_embedding`` strips them), so none are added.
    Set ``failing = True`` to make every call raise ``EmbeddingError``, as a model that is down.
    """

    def __init__(self, dim: int = EMBEDDING_DIM) -> None:
        self.dim = dim
        self.failing = False
        self.calls = 0
        """How many embed calls were made (a failing call counts too)."""
        self.texts_embedded = 0

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One hashed vector per text."""
        self._count(len(texts))
        return [hashed_embedding(text, self.dim) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        """The hashed vector of ``text``."""
        self._count(1)
        return hashed_embedding(text, self.dim)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _count(self, texts: int) -> None:
        self.calls += 1
        if self.failing:
            raise EmbeddingError("HashedEmbedder is switched to fail (failing = True)")
        self.texts_embedded += texts
