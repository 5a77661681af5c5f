"""Asking a chat model for text: the ``ChatModel`` protocol and its Ollama implementation.

Messages are role/content pairs (system, user, assistant); every failure is a ``ChatModelError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, Self, TypeAlias, get_args, runtime_checkable

from navi_memory.errors import ChatModelError, ConfigError, InvalidInputError
from navi_memory.llm._ollama import (
    ClientOwner,
    check_host,
    describe_failure,
    failure_types,
    redact_host,
)

if TYPE_CHECKING:
    import ollama

    from navi_memory.config import Settings

__all__ = [
    "ChatMessages",
    "ChatModel",
    "ChatRole",
    "ChatTurn",
    "OllamaChatModel",
    "message_dicts",
]

ChatRole: TypeAlias = Literal["system", "user", "assistant"]
_ROLES: frozenset[str] = frozenset(get_args(ChatRole))


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One message of a conversation sent to the chat model."""

    role: ChatRole
    content: str


ChatMessages: TypeAlias = Sequence[Mapping[str, str] | ChatTurn]
"""``ChatTurn``s or ``{"role": ..., "content": ...}`` dicts, oldest first."""


def message_dicts(messages: ChatMessages) -> list[dict[str, str]]:
    """``messages`` as the role/content dicts Ollama takes, checked.

    Raises ``InvalidInputError`` for an empty conversation, an unknown role or non-text content:
    those are the caller's bugs, not the model's failures.
    """
    if not messages:
        raise InvalidInputError("a chat needs at least one message")
    result: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        role: str
        content: object
        if isinstance(message, ChatTurn):
            role, content = message.role, message.content
        else:
            role, content = message.get("role", ""), message.get("content", "")
        if role not in _ROLES:
            raise InvalidInputError(
                f"message #{index} has role {role!r}; use one of {', '.join(sorted(_ROLES))}"
            )
        if not isinstance(content, str):
            raise InvalidInputError(f"message #{index} has content of type {type(content)}")
        result.append({"role": role, "content": content})
    return result


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that answers a conversation with text."""

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The assistant's reply to ``messages``; with ``json_format`` the model is asked for JSON.

        The reply is never empty: an empty answer is a ``ChatModelError``.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the model may be used again afterwards."""
        ...


class OllamaChatModel(ClientOwner):
    """A ``ChatModel`` on an Ollama server's ``/api/chat`` (not streamed), via ``ollama``.

    The client is created on first use; each call is bounded by ``timeout`` seconds.
    """

    def __init__(self, host: str, model: str, *, api_key: str = "", timeout: float) -> None:
        if not model.strip():
            raise ConfigError("MEMORY_LLM_MODEL is empty: name the chat model to use")
        if not timeout > 0:
            raise ConfigError(f"MEMORY_LLM_TIMEOUT_SECONDS must be positive, got {timeout}")
        self.host = check_host(host, "OLLAMA_HOST")
        self.model = model
        self.timeout = timeout
        self._api_key = api_key
        self._client: ollama.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The chat model the settings describe: OLLAMA_HOST, OLLAMA_API_KEY, MEMORY_LLM_*."""
        return cls(
            settings.ollama_host,
            settings.memory_llm_model,
            api_key=settings.ollama_api_key,
            timeout=settings.memory_llm_timeout_seconds,
        )

    def __repr__(self) -> str:
        return f"OllamaChatModel(host={redact_host(self.host)!r}, model={self.model!r})"

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The model's reply to ``messages``; see ``ChatModel.complete``."""
        payload = message_dicts(messages)
        try:
            client = self.client()  # a malformed host fails here: a failure like any other
            # The client's timeout is per network operation; this one bounds the whole call.
            async with asyncio.timeout(self.timeout):
                response = await client.chat(
                    model=self.model,
                    messages=payload,
                    stream=False,
                    format="json" if json_format else None,
                )
        except failure_types() as exc:
            raise self._error(describe_failure(exc, self.timeout)) from exc
        content = response.message.content
        if content is None or not content.strip():
            raise self._error("returned an empty reply")
        return content

    def _error(self, what: str) -> ChatModelError:
        return ChatModelError(f"chat model {self.model!r} at {redact_host(self.host)} {what}")
