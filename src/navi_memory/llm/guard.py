"""Guards that make any ``Embedder`` or ``ChatModel`` fail the way the Ollama models do.

A plugged-in model may raise anything, never answer, or answer junk. Through its guard, each of
those is an ``EmbeddingError`` / ``ChatModelError`` naming the model's class, raised within the
configured timeout, so the package degrades as documented whatever model it is given.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import (
    ChatModelError,
    ChatModelTimeoutError,
    ConfigError,
    EmbeddingError,
    EmbeddingTimeoutError,
    NaviMemoryError,
)
from navi_memory.llm._ollama import ClientOwner, reason, type_phrase
from navi_memory.llm.chat import (
    ChatMessages,
    ChatModel,
    ChatReply,
    ToolSpec,
    chat_turns,
    checked_tool_specs,
    reply_tool_calls,
)
from navi_memory.llm.embedder import Embedder, embedding_model_name
from navi_memory.llm.vectors import storable_vector, storable_vectors

if TYPE_CHECKING:
    from navi_memory.config import Settings

__all__ = ["GuardedChatModel", "GuardedEmbedder", "guard_chat_model", "guard_embedder"]

_T = TypeVar("_T")

_EMBEDDING_TIMEOUT_SETTING: Final = "EMBEDDING_TIMEOUT_SECONDS"
_CHAT_TIMEOUT_SETTING: Final = "MEMORY_LLM_TIMEOUT_SECONDS"


class GuardedEmbedder:
    """An ``Embedder`` that answers checked float32 vectors, or raises ``EmbeddingError``.

    Every exception of ``inner`` becomes an ``EmbeddingError`` naming its class (``from`` the
    original); one that is not an ``Exception`` (cancellation, ``KeyboardInterrupt``,
    ``SystemExit``) propagates untouched. Texts go to ``inner`` ``batch_size`` at a time (None:
    all in one call), each call bounded by ``timeout_seconds``: the bound Ollama has per request.
    Answers are checked by ``storable_vectors``: the count, ``EMBEDDING_DIM`` values each, finite
    float32 numbers, not all zero.

    The timer can only interrupt a model that awaits: one that blocks the event loop (a
    synchronous HTTP call inside ``async def``) or swallows cancellation is beyond any guard.
    Wrapping a ``GuardedEmbedder`` guards its inner model once, with the new settings.
    """

    def __init__(
        self, inner: Embedder, *, timeout_seconds: float, batch_size: int | None = None
    ) -> None:
        if isinstance(inner, GuardedEmbedder):
            inner = inner.inner
        if not timeout_seconds > 0:
            raise ConfigError(
                f"{_EMBEDDING_TIMEOUT_SETTING} must be positive, got {timeout_seconds}"
            )
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"EMBEDDING_BATCH_SIZE must be at least 1, got {batch_size}")
        self.inner: Embedder = inner
        self.timeout_seconds = timeout_seconds
        self.batch_size = batch_size
        self.dim = EMBEDDING_DIM
        # The name the model of record and doctor know it by (its ``model``, else its class).
        self._subject = f"embedding model {embedding_model_name(inner)}"
        self._timer = _own_timer(inner, timeout_seconds)

    def __repr__(self) -> str:
        return f"GuardedEmbedder({self.inner!r}, timeout_seconds={self.timeout_seconds:g})"

    async def embed_documents(self, texts: Sequence[str]) -> list[array[float]]:
        """One checked vector per text, in order; ``[]`` without asking ``inner`` for no texts."""
        if not texts:
            return []
        size = self.batch_size or len(texts)
        vectors: list[array[float]] = []
        for start in range(0, len(texts), size):
            batch = texts if size >= len(texts) else texts[start : start + size]
            answer = await self._call(self._documents(batch))
            vectors.extend(storable_vectors(answer, len(batch), subject=self._subject))
        return vectors

    async def embed_query(self, text: str) -> array[float]:
        """The checked vector of a search query."""
        answer = await self._call(lambda: self.inner.embed_query(text))
        return storable_vector(answer, subject=self._subject)

    async def aclose(self) -> None:
        """Close ``inner`` (if it has an ``aclose``)."""
        await _close(self.inner)

    def _documents(self, batch: Sequence[str]) -> Callable[[], Awaitable[object]]:
        return lambda: self.inner.embed_documents(batch)

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await _guarded(
            call,
            timer=self._timer,
            error=EmbeddingError,
            timeout_error=EmbeddingTimeoutError,
            subject=self._subject,
            setting=_EMBEDDING_TIMEOUT_SETTING,
        )


class GuardedChatModel:
    """A ``ToolChatModel`` around any ``ChatModel``: text or tool calls, or ``ChatModelError``.

    Failures as in ``GuardedEmbedder``: every ``Exception`` of ``inner`` becomes a
    ``ChatModelError`` naming its class, a call is bounded by ``timeout_seconds``, and
    cancellation propagates. Junk is refused: a ``complete`` answer that is not text or is blank,
    a ``chat`` answer that is not a ``ChatReply``, has neither text nor tool calls, or holds a
    malformed tool call (a missing name, arguments that are neither an object nor the JSON text
    of one). Tool calls are never dropped; JSON-text arguments come back parsed into dicts.

    The messages and tool specs are checked first (the caller's mistakes are
    ``InvalidInputError``, and no call is made) and handed to ``inner`` as ``ChatTurn``s.

    A model with only ``complete`` still serves ``chat`` without tools (its text becomes the
    reply); offered tools, it is a ``ChatModelError`` before any call: it cannot use them, and
    answering as if none were offered would hide that from the agent loop.
    """

    def __init__(self, inner: ChatModel, *, timeout_seconds: float) -> None:
        if isinstance(inner, GuardedChatModel):
            inner = inner.inner
        if not timeout_seconds > 0:
            raise ConfigError(f"{_CHAT_TIMEOUT_SETTING} must be positive, got {timeout_seconds}")
        self.inner: ChatModel = inner
        self.timeout_seconds = timeout_seconds
        self._subject = f"chat model {type(inner).__name__}"
        self._timer = _own_timer(inner, timeout_seconds)

    def __repr__(self) -> str:
        return f"GuardedChatModel({self.inner!r}, timeout_seconds={self.timeout_seconds:g})"

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The model's non-blank text reply; see ``ChatModel.complete``."""
        turns = chat_turns(messages)
        answer = await self._call(lambda: self.inner.complete(turns, json_format=json_format))
        return self._text(answer)

    async def chat(
        self,
        messages: ChatMessages,
        *,
        tools: Sequence[ToolSpec] | None = None,
        json_format: bool = False,
    ) -> ChatReply:
        """The model's checked reply with ``tools`` on offer; see ``ToolChatModel.chat``."""
        turns, specs = chat_turns(messages), checked_tool_specs(tools)
        chat = getattr(self.inner, "chat", None)
        if not callable(chat):
            if specs:
                raise ChatModelError(
                    f"{self._subject} cannot be offered tools: it has no chat() method "
                    "(implement navi_memory.llm.ToolChatModel)"
                )
            text = await self._call(lambda: self.inner.complete(turns, json_format=json_format))
            return ChatReply(self._text(text))
        answer: object = await self._call(
            lambda: chat(turns, tools=specs or None, json_format=json_format)
        )
        if not isinstance(answer, ChatReply):
            raise self._junk(f"{type_phrase(answer)} instead of a ChatReply")
        if not isinstance(answer.text, str):
            raise self._junk(f"reply text of type {type(answer.text).__name__}")
        text = str.__str__(answer.text)  # a str subclass's own methods never run here
        calls = reply_tool_calls(answer.tool_calls, self._subject)
        if not text.strip() and not calls:
            raise self._junk("an empty reply (no text and no tool calls)")
        return ChatReply(text, calls)

    async def aclose(self) -> None:
        """Close ``inner`` (if it has an ``aclose``)."""
        await _close(self.inner)

    def _text(self, answer: object) -> str:
        if not isinstance(answer, str):
            raise self._junk(f"{type_phrase(answer)} instead of text")
        # A plain str: a host model's str subclass could run code of its own in strip().
        text = str.__str__(answer)
        if not text.strip():
            raise self._junk("an empty reply")
        return text

    def _junk(self, what: str) -> ChatModelError:
        return ChatModelError(f"{self._subject} returned {what}")

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return await _guarded(
            call,
            timer=self._timer,
            error=ChatModelError,
            timeout_error=ChatModelTimeoutError,
            subject=self._subject,
            setting=_CHAT_TIMEOUT_SETTING,
        )


def guard_embedder(embedder: Embedder, settings: Settings) -> GuardedEmbedder:
    """``embedder`` behind a guard with EMBEDDING_TIMEOUT_SECONDS and EMBEDDING_BATCH_SIZE.

    A ``GuardedEmbedder`` comes back as it is.
    """
    if isinstance(embedder, GuardedEmbedder):
        return embedder
    return GuardedEmbedder(
        embedder,
        timeout_seconds=settings.embedding_timeout_seconds,
        batch_size=settings.embedding_batch_size,
    )


def guard_chat_model(chat_model: ChatModel, settings: Settings) -> GuardedChatModel:
    """``chat_model`` behind a guard with MEMORY_LLM_TIMEOUT_SECONDS.

    A ``GuardedChatModel`` comes back as it is.
    """
    if isinstance(chat_model, GuardedChatModel):
        return chat_model
    return GuardedChatModel(chat_model, timeout_seconds=settings.memory_llm_timeout_seconds)


def _own_timer(inner: object, timeout_seconds: float) -> float | None:
    # The Ollama models bound every request themselves: a second timer of the same length would
    # race theirs and replace their message (which names host and model) with a vaguer one.
    return None if isinstance(inner, ClientOwner) else timeout_seconds


async def _guarded(
    call: Callable[[], Awaitable[_T]],
    *,
    timer: float | None,
    error: type[NaviMemoryError],
    timeout_error: type[NaviMemoryError],
    subject: str,
    setting: str,
) -> _T:
    deadline = asyncio.timeout(timer)
    try:
        async with deadline:
            return await call()
    except error:
        raise
    except Exception as exc:  # BaseException-only ones (cancellation, exit) propagate
        if deadline.expired():
            raise timeout_error(f"{subject} did not answer within {timer:g} s ({setting})") from exc
        # The model's own timeout (its HTTP client's) stays a TimeoutError through the guard.
        failed = timeout_error if isinstance(exc, TimeoutError) else error
        raise failed(f"{subject} failed: {type(exc).__name__}: {reason(exc)}") from exc


async def _close(inner: object) -> None:
    close = getattr(inner, "aclose", None)
    if callable(close):
        await close()
