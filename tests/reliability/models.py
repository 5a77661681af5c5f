"""Custom models that misbehave the ways a plugged-in model can: raise anything, answer junk,
answer the wrong shape, or never answer. navi-memory must treat each like an Ollama failure."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Final, Literal

from navi_memory import EMBEDDING_DIM
from navi_memory.llm import ChatMessages
from navi_memory.testing import hashed_embedding

EmbedderFault = Literal["raises", "none", "junk", "wrong_dim", "nan", "huge", "zero", "hangs"]
ChatFault = Literal["raises", "none", "not_text", "nul_and_surrogates", "hangs"]

EMBEDDER_FAULTS: Final[tuple[EmbedderFault, ...]] = (
    "raises",
    "none",
    "junk",
    "wrong_dim",
    "nan",
    "huge",
    "zero",
    "hangs",
)
CHAT_FAULTS: Final[tuple[ChatFault, ...]] = (
    "raises",
    "none",
    "not_text",
    "nul_and_surrogates",
    "hangs",
)

HANG_SECONDS: Final = 3600.0
""""Never answers": far beyond any timeout the tests configure."""


class BrokenEmbedder:
    """An Embedder whose every call fails the way ``fault`` says (``healthy`` switches it to
    correct hashed vectors, so one model can go down and come back)."""

    def __init__(self, fault: EmbedderFault) -> None:
        self.dim = EMBEDDING_DIM
        self.fault = fault
        self.healthy = False
        self.calls = 0

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.healthy:
            return [hashed_embedding(t, self.dim) for t in texts]
        return [await self._broken() for _ in texts] if self.fault != "none" else None

    async def embed_query(self, text: str) -> Any:
        self.calls += 1
        if self.healthy:
            return hashed_embedding(text, self.dim)
        return await self._broken() if self.fault != "none" else None

    async def aclose(self) -> None:
        """Nothing to release."""

    async def _broken(self) -> Any:
        fault = self.fault
        if fault == "raises":
            raise ConnectionError("embedding server refused the connection")
        if fault == "junk":
            return ["not", "a", "vector"]
        if fault == "wrong_dim":
            return [0.1] * (self.dim // 2)
        if fault == "nan":
            return [math.nan] * self.dim
        if fault == "huge":
            return [1e300] * self.dim
        if fault == "zero":
            return [0.0] * self.dim
        await asyncio.sleep(HANG_SECONDS)
        return [0.1] * self.dim


class BrokenChatModel:
    """A ChatModel whose every answer fails the way ``fault`` says."""

    def __init__(self, fault: ChatFault) -> None:
        self.fault = fault
        self.calls = 0

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> Any:
        self.calls += 1
        fault = self.fault
        if fault == "raises":
            raise RuntimeError("the model crashed")
        if fault == "none":
            return None
        if fault == "not_text":
            return {"summary": "a dict, not text"}
        if fault == "nul_and_surrogates":
            return "Summary with a \x00 NUL and a lone \ud800 surrogate.\nKEYS: a\x00b, \udfff"
        await asyncio.sleep(HANG_SECONDS)
        return "too late"

    async def aclose(self) -> None:
        """Nothing to release."""
