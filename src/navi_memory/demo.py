"""``make demo``: the embedded default brought up, migrated, and navi-memory shown at work.

It talks to the package's fake Ollama (navi_memory.testing) so it runs on any machine: hashed
word embeddings and one canned summary stand in for the models. Pass ``--ollama`` to use the
OLLAMA_HOST / EMBEDDING_OLLAMA_HOST of your settings instead.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Sequence

from navi_memory.cli.doctor import diagnose, report_lines
from navi_memory.config import Settings
from navi_memory.errors import NaviMemoryError
from navi_memory.memory import Memory, open_memory
from navi_memory.request_context import request_context
from navi_memory.testing import FakeOllama
from navi_memory.text.context import FACTS_BLOCK_HEADER, MEMORY_MESSAGE_HEADER
from navi_memory.text.guidelines import MEMORY_USAGE_GUIDELINES
from navi_memory.text.recall import RECALL_HEADER
from navi_memory.tools import ToolContext

DEMO_USER = uuid.UUID("00000000-0000-4000-8000-00000000d3e0")


DEMO_SESSION = "demo-session"
CONVERSATION = [
    ("user", "The API must not use port 8098, the metrics exporter has it."),
    ("assistant", "Then let's take port 8099 for the API."),
    ("user", "Agreed. Put it in /etc/navi/api.toml please."),
    ("tool_call", "write_file"),
    ("tool", "wrote 3 lines to /etc/navi/api.toml"),
    ("assistant", "Done: /etc/navi/api.toml now sets `listen = 8099`."),
    ("user", "We decided to keep PostgreSQL 18 with pgvector for memory."),
    ("assistant", "Noted: PostgreSQL 18 + pgvector is the decision."),
    ("user", "Now, about the deploy script..."),
]
CANNED_SUMMARY = (
    "The API listens on port 8099 (8098 is taken by the metrics exporter), configured in "
    "/etc/navi/api.toml; memory stays on PostgreSQL 18 with pgvector.\n"
    "KEYS: port 8099, /etc/navi/api.toml, PostgreSQL 18, pgvector"
)


async def run(settings: Settings, fake: FakeOllama | None = None) -> None:
    async with open_memory(settings) as memory:
        models = "the fake Ollama (canned)" if fake is not None else settings.ollama_host
        print(f"== the database   (models: {models}; `navi-memory doctor` checks them too)")
        for line in report_lines(await diagnose(settings, check_models=False)):
            print("  " + line)

        print("\n== a user")
        # A fresh demo user each run: deleting it takes everything it owned along.
        await memory.users.delete(DEMO_USER)
        await memory.users.ensure(DEMO_USER, "Demo User")
        print(f"  {DEMO_USER} created")

        with request_context(user_id=DEMO_USER):
            await show_facts(memory)
        with request_context(user_id=DEMO_USER, session_id=DEMO_SESSION):
            if fake is not None:
                fake.chat_replies.append(CANNED_SUMMARY)
            await show_raw_history(memory)
        with request_context(user_id=DEMO_USER, session_id=SEARCH_SESSION):
            if fake is not None:
                fake.chat_replies.append(SEARCH_SUMMARY)
            await show_search(memory)
        with request_context(user_id=DEMO_USER, session_id=AGENT_SESSION):
            if fake is not None:
                fake.chat_replies.append(AGENT_SUMMARY)
            await show_next_prompt(memory)

        where = (
            settings.navi_memory_data_dir
            if settings.database_url is None
            else "the server at DATABASE_URL"
        )
        print(f"\nThe data lives in {where}; run `make demo` again and it is reattached.")


async def show_facts(memory: Memory) -> None:
    store = memory.store
    print("\n== facts")
    writes = [
        ("preferences", "language", "English", False),
        ("preferences", "editor", "neovim", False),
        ("work", "vpn_ticket", "INC-40211: WireGuard tunnel drops every hour", False),
        ("personal", "favourite_colour", "teal", False),
        # The extractor writes with dedupe=True: another spelling of a held key is merged.
        ("preferences", "preferred_language", "Dutch", True),
    ]
    for category, key, value, dedupe in writes:
        fact = await store.upsert_fact(category, key, value, source="user_explicit", dedupe=dedupe)
        note = " (dedupe)" if dedupe else ""
        print(f"  saved{note:9} [{fact.category}] {fact.key} -> {fact.value}")

    print("\n  every row, hidden ones included:")
    for fact in await store.get_all_facts(include_merged=True, sort_by="id", sort_order="asc"):
        hidden = f"  (hidden behind #{fact.merged_into})" if fact.merged_into else ""
        print(f"    #{fact.id} [{fact.category}] {fact.key} -> {fact.value}{hidden}")

    for query in ("preferred language", "INC-40211"):
        hits = await store.search_facts(query)
        print(f"\n  search_facts({query!r}):")
        for hit in hits:
            how = f"vector, distance {hit.distance:.2f}" if hit.via == "vector" else hit.via
            print(f"    [{hit.category}] {hit.key} -> {hit.value}   ({how})")

    hidden_row = next(
        f for f in await store.get_all_facts(include_merged=True) if f.merged_into is not None
    )
    restored = await store.unmerge_fact(hidden_row.id)
    print(f"\n  unmerge_fact(#{restored.id}) -> visible again:")
    for fact in await store.get_all_facts(search="language"):
        print(f"    #{fact.id} [{fact.category}] {fact.key} -> {fact.value}")


async def show_raw_history(memory: Memory) -> None:
    sessions = memory.sessions
    print("\n== raw history")
    await sessions.create(DEMO_SESSION, title="API port")
    for role, content in CONVERSATION:
        if role == "tool_call":
            await sessions.append(
                DEMO_SESSION, role, tool_name=content, tool_args={"path": "/etc/navi/api.toml"}
            )
        elif role == "tool":
            await sessions.append(DEMO_SESSION, role, content, tool_name="write_file")
        else:
            await sessions.append(DEMO_SESSION, role, content)
    print(f"  {len(CONVERSATION)} messages in session {DEMO_SESSION!r}; compressing, keeping 1")
    result = await sessions.compress(DEMO_SESSION, keep_last=1)
    how = "fallback note" if result.used_fallback else "the chat model's summary"
    print(f"  demoted {result.demoted}, wrote {result.chunks_written} chunk(s), summary by {how}")
    if result.summary is not None:
        print(f"  summary: {result.summary.content}")
    print(f"  breadcrumbs: {', '.join(result.breadcrumbs)}")
    context = await sessions.context(DEMO_SESSION)
    print(f"  context now: {len(context)} message(s), the summary first")

    query = "which port did we pick for the API"
    print(f"\n  search_chunks({query!r}):")
    for hit in await memory.store.search_chunks(query, limit=2):
        how = f"vector, distance {hit.distance:.2f}" if hit.via == "vector" else hit.via
        first_line = hit.content.splitlines()[0]
        print(f"    turns {hit.start_seq}-{hit.end_seq} ({how}): {first_line[:70]}")
    print(f"  latest_summary_at: {await memory.store.latest_summary_at(DEMO_SESSION)}")


SEARCH_SESSION = "demo-port"
SEARCH_SUMMARY = (
    "The user set the server port to 8098; the deploy script comes next.\nKEYS: server_port, 8098"
)


async def show_search(memory: Memory) -> None:
    """The spec's story: a value said, compressed away, then overridden by a newer fact."""
    sessions = memory.sessions
    print("\n== unified search")
    await sessions.create(SEARCH_SESSION, title="server port")
    await sessions.append(SEARCH_SESSION, "user", "The server port is 8098, please remember it.")
    await sessions.append(SEARCH_SESSION, "assistant", "Got it: the server listens on 8098.")
    await sessions.append(SEARCH_SESSION, "user", "Thanks. Next: the deploy script.")
    result = await sessions.compress(SEARCH_SESSION, keep_last=1)
    print(f"  session {SEARCH_SESSION!r} compressed; breadcrumbs: {', '.join(result.breadcrumbs)}")
    await memory.store.upsert_fact("technical", "server_port", "8099", source="user_explicit")
    print("  later: saved [technical] server_port -> 8099")
    print('\n  the memory_search tool, {"query": "server port"}:\n')
    answer = await memory.tools.memory_search.call({"query": "server port"}, ToolContext())
    print("\n".join(f"    {line}" if line else "" for line in answer.splitlines()))


AGENT_SESSION = "demo-agent"
AGENT_CONVERSATION = [
    (
        "user",
        "The deploy script lives in /opt/navi/deploy.sh; it must run as root, from a clean "
        "checkout of main, never from a laptop.",
    ),
    ("assistant", "Understood: /opt/navi/deploy.sh, as root, from a clean checkout of main."),
    ("user", "Let's look at the dashboards tomorrow."),
    ("assistant", "Sure, the dashboards tomorrow."),
]
AGENT_SUMMARY = (
    "The user deploys with a script that runs as root; dashboards are next.\n"
    "KEYS: /opt/navi/deploy.sh, root"
)
HOST_PROMPT = "You are Navi, a helpful assistant.\n\n" + MEMORY_USAGE_GUIDELINES
NEXT_TURN = "Where does the deploy script live again?"


async def show_next_prompt(memory: Memory) -> None:
    """What the context builder hands the model for the next turn, part by part."""
    sessions = memory.sessions
    print("\n== the next turn's prompt (memory.context)")
    await sessions.create(AGENT_SESSION, title="deploys")
    for role, content in AGENT_CONVERSATION:
        await sessions.append(AGENT_SESSION, role, content)
    await sessions.compress(AGENT_SESSION, keep_last=2)
    # The extractor writes the summary from the facts; set by hand here.
    await memory.store.set_summary(
        "Demo User edits in neovim, runs the API on port 8099 and deploys with a root script."
    )
    print(f"  session {AGENT_SESSION!r}: {len(AGENT_CONVERSATION)} messages, compressed keeping 2")
    print(f"  incoming: {NEXT_TURN!r}\n")
    prompt = await memory.context.build_prompt(AGENT_SESSION, NEXT_TURN, system_prompt=HOST_PROMPT)
    for number, message in enumerate(prompt.messages, start=1):
        print(
            f"  [{number}] {message.role} · {_part(message.content, number, len(prompt.messages))}"
        )
        shown = message.content
        if message.content == HOST_PROMPT:
            shown = "You are Navi, a helpful assistant.  (+ MEMORY_USAGE_GUIDELINES)"
        for line in shown.splitlines():
            print(f"        {line}" if line else "")
    ids = ", ".join(str(hit.chunk_id) for hit in prompt.recalled)
    print(
        f"\n  automatic recall: {prompt.recall}; from recall: message "
        f"{_recall_position(prompt.messages)} (raw chunk ids {ids or 'none'}), now in the "
        "session's ledger so the next turn does not repeat them"
    )


def _part(content: str, number: int, total: int) -> str:
    if number == total:
        return "the incoming message"
    if content.startswith(MEMORY_MESSAGE_HEADER):
        return "the memory message (the user's summary)"
    if content.startswith(FACTS_BLOCK_HEADER):
        return "the facts block"
    if content.startswith(RECALL_HEADER):
        return "FROM AUTOMATIC RECALL: dropped history that matches this turn"
    if number == 1:
        return "the host's system prompt"
    return "the session's context"


def _recall_position(messages: Sequence[object]) -> str:
    for number, message in enumerate(messages, start=1):
        if str(getattr(message, "content", "")).startswith(RECALL_HEADER):
            return f"[{number}]"
    return "none"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m navi_memory.demo", description=__doc__)
    parser.add_argument("--ollama", action="store_true", help="use the configured Ollama")
    args = parser.parse_args(argv)
    try:
        if args.ollama:
            asyncio.run(run(Settings()))
        else:
            with FakeOllama() as fake:
                settings = Settings(ollama_host=fake.url, embedding_ollama_host="")
                asyncio.run(run(settings, fake))
    except NaviMemoryError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
