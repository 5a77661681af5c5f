"""A complete agent turn on navi-memory: build the prompt, let the model call the memory tools,
keep the conversation in the session, compress when the context grows (docs/memory.md).

Against a local Ollama with a model that calls tools (the memory's own settings from the
environment, see docs/config.md):

    python examples/agent_loop.py qwen3:8b
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import uuid
from typing import Any

from navi_memory import (
    MEMORY_USAGE_GUIDELINES,
    ChatTurn,
    Memory,
    OllamaChatModel,
    Settings,
    ToolCall,
    ToolChatModel,
    ToolContext,
    open_memory,
    request_context,
)
from navi_memory.constants import MESSAGE_MAX_CHARS

SYSTEM_PROMPT = "You are a helpful assistant with a long-term memory.\n\n" + MEMORY_USAGE_GUIDELINES
MAX_TOOL_ROUNDS = 5
COMPRESS_AT = 40
"""Compress the session once its context holds more messages than this."""


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A surrogate code point alone: a JSON "\\ud800" escape decodes to one; UTF-8 cannot hold it."""
ARGS_KEPT_CHARS = 1000
"""Of tool-call arguments too long to store, the session keeps this much of their JSON text."""


def storable(value: Any) -> Any:
    """A model's output as the session can hold it: junk that text and jsonb columns refuse
    (sessions.append raises InvalidInputError) cleaned, in nested arguments and their names
    too, as the package cleans its own models' summaries and extractions: NUL bytes dropped,
    lone surrogates replaced by U+FFFD, numbers that are not finite kept as text."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value.replace("\x00", ""))
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def storable_text(text: str) -> str:
    """The assistant's text as a session message holds it: storable(), cut to
    MESSAGE_MAX_CHARS with a note saying so."""
    text = storable(text)
    if len(text) <= MESSAGE_MAX_CHARS:
        return text
    note = f" [… cut: {len(text):,} characters, over the limit of {MESSAGE_MAX_CHARS:,}]"
    return text[: MESSAGE_MAX_CHARS - len(note)] + note


def storable_args(arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as a session row holds them: storable(), or, when their JSON
    text is over MESSAGE_MAX_CHARS, a placeholder saying they were cut, with the start of it."""
    args: dict[str, Any] = storable(arguments)
    dumped = json.dumps(args, ensure_ascii=False)  # as sessions.append measures them
    if len(dumped) <= MESSAGE_MAX_CHARS:
        return args
    return {
        "cut": f"arguments of {len(dumped):,} characters as JSON, over the limit of "
        f"{MESSAGE_MAX_CHARS:,}, cut to their first {ARGS_KEPT_CHARS:,}",
        "text": dumped[:ARGS_KEPT_CHARS],
    }


def storable_call(call: ToolCall) -> ToolCall:
    """A tool call as the conversation sent back to the model holds it: storable() name,
    arguments and id."""
    return ToolCall(storable(call.name), storable(call.arguments), storable(call.id))


def arguments_object(arguments: dict[str, Any] | str) -> dict[str, Any]:
    """A tool call's arguments as the object a session stores: a dict as it is, the JSON text
    of an object (a custom OpenAI-style model's) parsed, anything else kept under "text"."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"text": arguments}


async def agent_turn(
    memory: Memory,
    model: ToolChatModel,
    session_id: str,
    user_text: str,
    *,
    compress_at: int = COMPRESS_AT,
) -> str:
    """One turn for the current user (request_context): the assistant's answer to user_text."""
    messages = await memory.context.build(session_id, user_text, system_prompt=SYSTEM_PROMPT)
    await memory.sessions.append(session_id, "user", user_text)
    tools, context = memory.tools.specs(), ToolContext(session_id=session_id)
    offered = {spec["function"]["name"] for spec in tools}
    reply = None
    for _ in range(MAX_TOOL_ROUNDS):
        reply = await model.chat(messages, tools=tools)
        # The turn goes back to the model cleaned as the session's copy is: a lone surrogate
        # cannot be sent (the request is UTF-8), and the model needs only what it said.
        resent = [storable_call(call) for call in reply.tool_calls]
        messages.append(ChatTurn("assistant", storable(reply.text), tool_calls=tuple(resent)))
        if reply.text:
            await memory.sessions.append(session_id, "assistant", storable_text(reply.text))
        for call, sent in zip(reply.tool_calls, resent, strict=True):
            # The call as the model made it goes to the tools, which answer junk (an unknown
            # tool, arguments that are not JSON, NUL bytes, lone surrogates, arguments too long)
            # with an error text the model reads; the session keeps a copy it can store.
            result = storable_text(await memory.tools.call(call.name, call.arguments, context))
            name = call.name if call.name in offered else "unknown_tool"
            args = arguments_object(call.arguments)
            await memory.sessions.append(
                session_id, "tool_call", tool_name=name, tool_args=storable_args(args)
            )
            await memory.sessions.append(session_id, "tool", result, tool_name=name)
            messages.append(ChatTurn.tool_result(sent, result))
        if not reply.tool_calls:
            break
    if len(await memory.sessions.context(session_id)) > compress_at:
        await memory.sessions.compress(session_id)
    return reply.text if reply is not None else ""


async def main(model_name: str) -> None:
    settings = Settings()
    model = OllamaChatModel(
        settings.ollama_host, model_name, timeout=300, num_ctx=settings.memory_llm_num_ctx
    )
    user_id = uuid.UUID(int=1)
    async with open_memory(settings) as memory:
        await memory.users.ensure(user_id, "You")
        with request_context(user_id=user_id):
            session = await memory.sessions.create(title="agent loop example")
            while (line := await asyncio.to_thread(input, "you> ")).strip() not in {"", "quit"}:
                answer = await agent_turn(memory, model, session.id, line)
                print("assistant>", storable(answer))  # a terminal takes no lone surrogate
    await model.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "qwen3:8b"))
