"""A complete agent turn on navi-memory: build the prompt, let the model call the memory tools,
keep the conversation in the session, compress when the context grows (docs/memory.md).

Against a local Ollama with a model that calls tools (the memory's own settings from the
environment, see docs/config.md):

    python examples/agent_loop.py qwen3:8b
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from navi_memory import (
    MEMORY_USAGE_GUIDELINES,
    ChatTurn,
    Memory,
    OllamaChatModel,
    Settings,
    ToolChatModel,
    ToolContext,
    open_memory,
    request_context,
)

SYSTEM_PROMPT = "You are a helpful assistant with a long-term memory.\n\n" + MEMORY_USAGE_GUIDELINES
MAX_TOOL_ROUNDS = 5
COMPRESS_AT = 40
"""Compress the session once its context holds more messages than this."""


def storable(value: Any) -> Any:
    """A model's output as the session can hold it: NUL bytes, junk that text and jsonb
    columns refuse (sessions.append raises InvalidInputError), dropped, in nested arguments
    too, as the package drops them from its own models' summaries and extractions."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


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
        messages.append(reply.as_turn())
        if reply.text:
            await memory.sessions.append(session_id, "assistant", storable(reply.text))
        for call in reply.tool_calls:
            # The call as the model made it goes to the tools, which answer junk (an unknown
            # tool, arguments that are not JSON, NUL bytes) with an error text the model reads;
            # the session keeps a copy it can store.
            result = await memory.tools.call(call.name, call.arguments, context)
            name = call.name if call.name in offered else "unknown_tool"
            args = arguments_object(call.arguments)
            await memory.sessions.append(
                session_id, "tool_call", tool_name=name, tool_args=storable(args)
            )
            await memory.sessions.append(session_id, "tool", result, tool_name=name)
            messages.append(ChatTurn.tool_result(call, result))
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
                print("assistant>", await agent_turn(memory, model, session.id, line))
    await model.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "qwen3:8b"))
