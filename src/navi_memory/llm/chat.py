"""Asking a chat model for text or tool calls: the ``ChatModel`` protocols and the Ollama model.

Turns are system / user / assistant (optionally calling tools) / tool (a tool's result), in the
shape Ollama's ``/api/chat`` takes. A model's failure is a ``ChatModelError``; a malformed message
or tool spec from the caller is an ``InvalidInputError``, raised before any request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    Self,
    TypeAlias,
    cast,
    get_args,
    runtime_checkable,
)

from navi_memory.config import LLM_NUM_CTX_DEFAULT, LLM_NUM_CTX_MAX, LLM_NUM_CTX_MIN
from navi_memory.errors import (
    ChatModelError,
    ChatModelTimeoutError,
    ConfigError,
    InvalidInputError,
    InvalidTypeError,
)
from navi_memory.llm._ollama import (
    ClientOwner,
    check_host,
    describe_failure,
    failure_types,
    is_timeout,
    redact_host,
    shorten,
    type_phrase,
)

if TYPE_CHECKING:
    import ollama

    from navi_memory.config import Settings

__all__ = [
    "ChatMessages",
    "ChatModel",
    "ChatReply",
    "ChatRole",
    "ChatTurn",
    "OllamaChatModel",
    "ToolCall",
    "ToolChatModel",
    "ToolSpec",
    "chat_turns",
    "checked_tool_specs",
    "message_dicts",
    "parse_tool_call",
    "reply_tool_calls",
]

ChatRole: TypeAlias = Literal["system", "user", "assistant", "tool"]
_ROLES: frozenset[str] = frozenset(get_args(ChatRole))

ToolSpec: TypeAlias = Mapping[str, Any]
"""A tool in the function-calling shape Ollama and OpenAI accept::

    {"type": "function",
     "function": {"name": "memory", "description": "...", "parameters": {<JSON schema object>}}}

The ``ollama`` client (0.6) forwards only the schema keywords it models: ``type``,
``description``, ``enum``, ``items``, ``required`` and ``properties`` one level deep; others
(``minimum``, ``additionalProperties``, nested objects' properties) never reach the server, so
the tool must check its arguments itself.
"""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model asks for one tool to be run with these arguments."""

    name: str
    arguments: dict[str, Any] | str
    """The arguments object. Replies from ``OllamaChatModel`` and from the guard always carry a
    dict; a custom model may build a ``ToolCall`` with the JSON text its API returned, and the
    guard parses it (a string that is not a JSON object is a ``ChatModelError``)."""
    id: str | None = None
    """The call's id where the model's API gives one (OpenAI-style); Ollama's client gives none."""


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One message of a conversation sent to the chat model.

    ``tool_calls`` only on an assistant turn (what it asked for); ``tool_name`` and
    ``tool_call_id`` only on a tool turn, whose ``content`` is that tool's result.
    """

    role: ChatRole
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_name: str | None = None
    tool_call_id: str | None = None

    @classmethod
    def tool_result(cls, call: ToolCall, content: str) -> ChatTurn:
        """The tool turn answering ``call`` with ``content`` (the tool's text)."""
        return cls("tool", content, tool_name=call.name, tool_call_id=call.id)


@dataclass(frozen=True, slots=True)
class ChatReply:
    """What the model answered: text, tool calls, or both (never neither)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()

    def as_turn(self) -> ChatTurn:
        """The assistant turn to append to the conversation before the tools' results."""
        return ChatTurn("assistant", self.text, tool_calls=self.tool_calls)


ChatMessages: TypeAlias = Sequence[Mapping[str, Any] | ChatTurn]
"""``ChatTurn``s or dicts in Ollama's message shape, oldest first: ``{"role": ..., "content":
...}``, plus ``"tool_calls": [{"function": {"name": ..., "arguments": {...}}}]`` on an assistant
message and ``"tool_name"`` (and ``"tool_call_id"``) on a tool message."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that answers a conversation with text.

    This is all a custom model must implement to write summaries and extract facts; the agent
    loop's tool calling needs ``ToolChatModel``.
    """

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The assistant's reply to ``messages``; with ``json_format`` the model is asked for JSON.

        The reply is never empty: an empty answer is a ``ChatModelError``.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the model may be used again afterwards."""
        ...


@runtime_checkable
class ToolChatModel(ChatModel, Protocol):
    """A chat model that can also be offered tools, and answer with calls to them."""

    async def chat(
        self,
        messages: ChatMessages,
        *,
        tools: Sequence[ToolSpec] | None = None,
        json_format: bool = False,
    ) -> ChatReply:
        """The model's reply to ``messages`` with ``tools`` on offer: text, tool calls, or both.

        A reply with neither is a ``ChatModelError``, and so is a malformed tool call. A call to a
        tool that was not offered comes back as it is: the tool dispatcher answers it.
        """
        ...


# --- checking what the caller sends -----------------------------------------------------------


def chat_turns(messages: ChatMessages) -> list[ChatTurn]:
    """``messages`` as checked ``ChatTurn``s, tool-call arguments parsed into dicts.

    Raises ``InvalidInputError`` for an empty conversation, an unknown role, content that is not
    text, tool calls anywhere but on an assistant turn, a malformed tool call, and a tool name or
    call id anywhere but on a tool turn: those are the caller's bugs, not the model's failures.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidTypeError(f"messages must be a list of messages, not {type_phrase(messages)}")
    if not messages:
        raise InvalidInputError("a chat needs at least one message")
    return [_turn(index, message) for index, message in enumerate(messages)]


def message_dicts(messages: ChatMessages) -> list[dict[str, Any]]:
    """``messages`` as the dicts Ollama's ``/api/chat`` takes, checked as ``chat_turns`` does.

    Keys beyond role and content appear only when set: ``tool_calls`` (each
    ``{"function": {"name", "arguments"}}``, plus ``"id"`` when known), ``tool_name`` and
    ``tool_call_id``. The ids are for models whose API pairs a result with its call by id: the
    ``ollama`` client drops them, as Ollama pairs them by ``tool_name`` and order.
    """
    return [_turn_dict(turn) for turn in chat_turns(messages)]


def checked_tool_specs(tools: Sequence[ToolSpec] | None) -> list[dict[str, Any]]:
    """``tools`` checked to be function specs with distinct names; ``[]`` for None or none.

    Raises ``InvalidInputError`` naming the first spec that is not a mapping with
    ``"function": {"name": <text>, ...}``, whose ``type`` is not ``"function"``, whose
    ``parameters`` is not a JSON-schema object, or whose name repeats an earlier one's.
    """
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InvalidTypeError(f"tools must be a list of tool specs, not {type_phrase(tools)}")
    names: set[str] = set()
    specs: list[dict[str, Any]] = []
    for index, spec in enumerate(tools):
        where = f"tool spec #{index}"
        if not isinstance(spec, Mapping):
            raise InvalidTypeError(f"{where} is {type_phrase(spec)}, not a mapping")
        if spec.get("type", "function") != "function":
            raise InvalidInputError(f"{where} has type {spec.get('type')!r}; only 'function'")
        function = spec.get("function")
        if not isinstance(function, Mapping):
            raise InvalidInputError(f'{where} has no "function" object')
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"{where} has no function name")
        if name in names:
            raise InvalidInputError(f"{where} repeats the tool name {name!r}")
        names.add(name)
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidInputError(f"{where} ({name}) has a description that is not text")
        _check_parameters(function.get("parameters"), f"{where} ({name})")
        specs.append(dict(spec))
    return specs


def _check_parameters(parameters: object, where: str) -> None:
    if parameters is None:
        return
    if not isinstance(parameters, Mapping):
        raise InvalidInputError(f"{where} has parameters that are not a JSON-schema object")
    if parameters.get("type", "object") != "object":
        raise InvalidInputError(f"{where} has parameters of type {parameters.get('type')!r}")
    properties = parameters.get("properties")
    if properties is not None and not (
        isinstance(properties, Mapping)
        and all(isinstance(value, Mapping) for value in properties.values())
    ):
        raise InvalidInputError(f'{where} has "properties" that are not schemas by name')


def _turn(index: int, message: object) -> ChatTurn:
    where = f"message #{index}"
    role: object
    content: object
    raw_calls: object
    tool_name: object
    call_id: object
    if isinstance(message, ChatTurn):
        role, content = message.role, message.content
        raw_calls, tool_name, call_id = message.tool_calls, message.tool_name, message.tool_call_id
    elif isinstance(message, Mapping):
        role, content = message.get("role", ""), message.get("content")
        content = "" if content is None else content  # an assistant turn of only tool calls
        raw_calls = message.get("tool_calls") or ()
        tool_name, call_id = message.get("tool_name"), message.get("tool_call_id")
    else:
        raise InvalidTypeError(f"{where} is {type_phrase(message)}, not a ChatTurn or a dict")
    if role not in _ROLES:
        raise InvalidInputError(
            f"{where} has role {role!r}; use one of {', '.join(sorted(_ROLES))}"
        )
    if not isinstance(content, str):
        raise InvalidInputError(f"{where} has content of type {type(content).__name__}")
    if raw_calls and role != "assistant":
        raise InvalidInputError(f"{where} has tool calls, but only an assistant turn makes them")
    if isinstance(raw_calls, str | bytes | Mapping) or not isinstance(raw_calls, Sequence):
        raise InvalidInputError(f"{where} has tool_calls that are not a list")
    calls = []
    for number, raw in enumerate(raw_calls):
        try:
            calls.append(parse_tool_call(raw))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}, tool call #{number}: {exc}") from None
    return ChatTurn(
        cast(ChatRole, role),
        content,
        tuple(calls),
        _tool_turn_text(tool_name, "tool_name", role, where),
        _tool_turn_text(call_id, "tool_call_id", role, where),
    )


def _tool_turn_text(value: object, key: str, role: object, where: str) -> str | None:
    if value is None:
        return None
    if role != "tool":
        raise InvalidInputError(f"{where} has {key}, but only a tool turn carries one")
    if not isinstance(value, str):
        raise InvalidInputError(f"{where} has a {key} that is not text")
    return value


def _turn_dict(turn: ChatTurn) -> dict[str, Any]:
    result: dict[str, Any] = {"role": turn.role, "content": turn.content}
    if turn.tool_calls:
        result["tool_calls"] = [_call_dict(call) for call in turn.tool_calls]
    if turn.tool_name is not None:
        result["tool_name"] = turn.tool_name
    if turn.tool_call_id is not None:
        result["tool_call_id"] = turn.tool_call_id
    return result


def _call_dict(call: ToolCall) -> dict[str, Any]:
    result: dict[str, Any] = {"function": {"name": call.name, "arguments": call.arguments}}
    if call.id is not None:
        result["id"] = call.id
    return result


# --- reading tool calls (the caller's history and the model's replies alike) --------------------


def parse_tool_call(raw: object) -> ToolCall:
    """``raw`` as a ``ToolCall`` with its arguments as a dict; else ``InvalidInputError``.

    Takes a ``ToolCall``, Ollama's ``{"function": {"name", "arguments"}}`` (OpenAI's adds ``"id"``
    and ``"type"``), or the flat ``{"name", "arguments", "id"}``. Arguments may be an object or
    the JSON text of one; missing arguments are ``{}``. A missing or empty name is refused.
    """
    name: object
    arguments: object
    call_id: object
    if isinstance(raw, ToolCall):
        name, arguments, call_id = raw.name, raw.arguments, raw.id
    elif isinstance(raw, Mapping):
        function = raw.get("function", raw)
        if not isinstance(function, Mapping):
            raise InvalidInputError(f'"function" is {type_phrase(function)}, not an object')
        name, arguments, call_id = (
            function.get("name"),
            function.get("arguments", {}),
            raw.get("id"),
        )
    else:
        raise InvalidInputError(f"{type_phrase(raw)} is not a tool call")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError("it names no tool")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidInputError(f"{name}: its id is {type_phrase(call_id)}, not text")
    return ToolCall(name, _arguments(name, arguments), call_id)


def _arguments(name: str, arguments: object) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise InvalidInputError(
                f"{name}: its arguments are not JSON ({shorten(str(exc))})"
            ) from None
    if not isinstance(arguments, Mapping):
        raise InvalidInputError(
            f"{name}: its arguments are {type_phrase(arguments)}, not an object"
        )
    if not all(isinstance(key, str) for key in arguments):
        raise InvalidInputError(f"{name}: its arguments have a name that is not text")
    return dict(arguments)


def reply_tool_calls(raw_calls: object, subject: str) -> tuple[ToolCall, ...]:
    """The tool calls of a model's reply, parsed; a malformed one is a ``ChatModelError``.

    Never dropped: a call the loop silently skipped would leave the model waiting for a result.
    """
    if raw_calls is None:
        return ()
    if isinstance(raw_calls, str | bytes | Mapping) or not isinstance(raw_calls, Sequence):
        raise ChatModelError(f"{subject} returned tool calls that are not a list")
    calls = []
    for index, raw in enumerate(raw_calls):
        try:
            calls.append(parse_tool_call(raw))
        except InvalidInputError as exc:
            raise ChatModelError(
                f"{subject} returned a malformed tool call #{index}: {exc}"
            ) from exc
    return tuple(calls)


# --- Ollama ---------------------------------------------------------------------------------


class OllamaChatModel(ClientOwner):
    """A ``ToolChatModel`` on an Ollama server's ``/api/chat`` (not streamed), via ``ollama``.

    The client is created on first use; each call is bounded by ``timeout`` seconds. Tools go
    out through the client's ``tools`` parameter and come back from ``message.tool_calls``.
    Every call asks for a context window of ``num_ctx`` tokens (MEMORY_LLM_NUM_CTX): left to
    Ollama's default, a long prompt loses its head without a word.
    """

    def __init__(
        self,
        host: str,
        model: str,
        *,
        api_key: str = "",
        timeout: float,
        num_ctx: int = LLM_NUM_CTX_DEFAULT,
    ) -> None:
        if not model.strip():
            raise ConfigError("MEMORY_LLM_MODEL is empty: name the chat model to use")
        if not timeout > 0:
            raise ConfigError(f"MEMORY_LLM_TIMEOUT_SECONDS must be positive, got {timeout}")
        if (
            isinstance(num_ctx, bool)
            or not isinstance(num_ctx, int)
            or not LLM_NUM_CTX_MIN <= num_ctx <= LLM_NUM_CTX_MAX
        ):
            raise ConfigError(
                f"MEMORY_LLM_NUM_CTX must be a whole number of tokens from {LLM_NUM_CTX_MIN} "
                f"to {LLM_NUM_CTX_MAX}, got {num_ctx!r}"
            )
        self.host = check_host(host, "OLLAMA_HOST")
        self.model = model
        self.timeout = timeout
        self.num_ctx = num_ctx
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
            num_ctx=settings.memory_llm_num_ctx,
        )

    def __repr__(self) -> str:
        return f"OllamaChatModel(host={redact_host(self.host)!r}, model={self.model!r})"

    async def complete(self, messages: ChatMessages, *, json_format: bool = False) -> str:
        """The model's reply to ``messages``; see ``ChatModel.complete``."""
        reply = await self._ask(message_dicts(messages), [], json_format=json_format)
        if not reply.text.strip():
            raise self._error("returned an empty reply")
        return reply.text

    async def chat(
        self,
        messages: ChatMessages,
        *,
        tools: Sequence[ToolSpec] | None = None,
        json_format: bool = False,
    ) -> ChatReply:
        """The model's reply with ``tools`` on offer; see ``ToolChatModel.chat``."""
        payload, specs = message_dicts(messages), checked_tool_specs(tools)
        reply = await self._ask(payload, specs, json_format=json_format)
        if not reply.text.strip() and not reply.tool_calls:
            raise self._error("returned an empty reply (no text and no tool calls)")
        return reply

    async def _ask(
        self, payload: list[dict[str, Any]], tools: list[dict[str, Any]], *, json_format: bool
    ) -> ChatReply:
        try:
            client = self.client()  # a malformed host fails here: a failure like any other
            # The client's timeout is per network operation; this one bounds the whole call.
            async with asyncio.timeout(self.timeout):
                response = await client.chat(
                    model=self.model,
                    messages=payload,
                    tools=tools or None,
                    stream=False,
                    format="json" if json_format else None,
                    options={"num_ctx": self.num_ctx},
                )
        except failure_types() as exc:
            # The client also checks the reply's tool calls (a name, an arguments object):
            # a malformed one fails validation here, as a reply of the wrong shape.
            raise self._error(describe_failure(exc, self.timeout), timeout=is_timeout(exc)) from exc
        message = response.message
        calls = [call.model_dump() for call in message.tool_calls or ()]
        return ChatReply(message.content or "", reply_tool_calls(calls, self._subject()))

    def _subject(self) -> str:
        return f"chat model {self.model!r} at {redact_host(self.host)}"

    def _error(self, what: str, *, timeout: bool = False) -> ChatModelError:
        error = ChatModelTimeoutError if timeout else ChatModelError
        return error(f"{self._subject()} {what}")
