"""The input family × entry point table of docs/reliability.md, measured: each family's
representatives go into every parameter of its kind, one at a time, the other arguments valid,
acting as the world's user; a cell lists every outcome seen.

``make soak`` checks that the committed table is still what the code does
(test_family_table.py); with NAVI_WRITE_FAMILY_TABLE=1 it rewrites the table instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Final

from navi_memory import (
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    request_context,
)
from tests.reliability.entry_points import BY_NAME, Arguments
from tests.reliability.world import SPARE_KEY, World, chunk_draft

TEXT_FAMILIES: Final[dict[str, tuple[object, ...]]] = {
    "NUL": ("a\x00b",),
    "surrogate": ("a\ud800b",),
    "1 MB": ("x" * 1_000_000,),
    "% _ \\": ("100%_\\",),
    "SQL": ("'; DROP TABLE memory_facts; --",),
    "RTL / ZW / combining": ("\u202eevil\u202c a\u200bb e\u0301",),
    "empty": ("",),
}
ANY_FAMILIES: Final[dict[str, tuple[object, ...]]] = {
    "NaN / inf / huge / negative": (math.nan, math.inf, 10**30, -1),
    "wrong type": (b"bytes",),
    "None": (None,),
}
FAMILIES: Final = (*TEXT_FAMILIES, *ANY_FAMILIES, "foreign id")

VALID: Final[dict[str, Callable[[World], Arguments]]] = {
    "request_context": lambda w: {"user_id": w.me, "session_id": w.my_session},
    "users.ensure": lambda w: {"user_id": w.me, "name": "me"},
    "users.get": lambda w: {"user_id": w.me},
    "users.delete": lambda w: {"user_id": w.me},
    "store.upsert_fact": lambda w: {
        "category": "tools",
        "key": "editor",
        "value": "vim",
        "source": "conversation",
        "confidence": 50,
        "expires_days": 30,
        "source_context": "said so",
        "user_id": w.me,
        "dedupe": True,
        "session_id": w.my_session,
    },
    "store.search_facts": lambda w: {"query": "editor", "user_id": w.me, "limit": 5},
    "store.delete_fact": lambda w: {"key": SPARE_KEY, "category": "tools", "user_id": w.me},
    "store.delete_facts": lambda w: {"key": SPARE_KEY, "category": "tools", "user_id": w.me},
    "store.forget_facts": lambda w: {"key": SPARE_KEY, "category": "tools", "user_id": w.me},
    "store.get_all_facts": lambda w: {
        "user_id": w.me,
        "all_users": False,
        "limit": 10,
        "offset": 0,
        "search": "vim",
        "sort_by": "key",
        "sort_order": "asc",
        "include_merged": True,
    },
    "store.fact_count": lambda w: {"user_id": w.me, "include_merged": False},
    "store.unmerge_fact": lambda w: {"fact_id": w.fact_ids[0]},
    "store.get_fact": lambda w: {"fact_id": w.fact_ids[0]},
    "store.get_merged_facts": lambda w: {"fact_id": w.fact_ids[0]},
    "store.get_summary": lambda w: {"user_id": w.me},
    "store.set_summary": lambda w: {"content": "likes Dutch", "user_id": w.me},
    "store.mark_session_extracted": lambda w: {"session_id": w.my_session, "user_id": w.me},
    "store.get_extracted_at": lambda w: {"session_id": w.my_session, "user_id": w.me},
    "store.backfill_embeddings": lambda w: {"batch_size": 8, "pause_seconds": 0.0},
    "store.add_chunks": lambda w: {
        "chunks": [chunk_draft("a table chunk", 300)],
        "user_id": w.me,
        "session_id": w.my_session,
        "require_session": False,
    },
    "store.add_chunks_for_session": lambda w: {
        "chunks": [chunk_draft("a table chunk", 300)],
        "user_id": w.me,
        "session_id": w.my_session,
    },
    "store.search_chunks": lambda w: {
        "query": "deploy",
        "user_id": w.me,
        "session_id": w.my_session,
        "limit": 5,
    },
    "store.latest_summary_at": lambda w: {"session_id": w.my_session},
    "store.index_pending_chunks": lambda w: {"max_batches": 1},
    "store.pending_chunk_count": lambda w: {},
    "sessions.create": lambda w: {"session_id": None, "user_id": w.me, "title": "a title"},
    "sessions.get": lambda w: {"session_id": w.my_session, "user_id": w.me},
    "sessions.list": lambda w: {"user_id": w.me},
    "sessions.delete": lambda w: {"session_id": w.spare_session, "user_id": w.me},
    "sessions.append": lambda w: {
        "session_id": w.my_session,
        "role": "tool_call",
        "content": "",
        "tool_name": "shell",
        "tool_args": {"cmd": "ls"},
        "user_id": w.me,
    },
    "sessions.context": lambda w: {"session_id": w.my_session, "user_id": w.me},
    "sessions.history": lambda w: {"session_id": w.my_session, "user_id": w.me},
    "sessions.compress": lambda w: {"session_id": w.my_session, "keep_last": 2, "user_id": w.me},
    "sessions.index_dropped_history": lambda w: {"settled_for": timedelta(0)},
    "kv.set": lambda w: {
        "scope": "notes",
        "key": "plan",
        "value": "a plan",
        "session_id": w.my_session,
        "user_id": w.me,
    },
    "kv.get": lambda w: {
        "scope": "notes",
        "key": "plan",
        "session_id": w.my_session,
        "user_id": w.me,
    },
    "kv.delete": lambda w: {"scope": "notes", "key": SPARE_KEY, "user_id": w.me},
    "kv.list": lambda w: {"scope": "notes", "session_id": w.my_session, "user_id": w.me},
    "kv.search_values": lambda w: {
        "user_id": w.me,
        "scope": "notes",
        "terms": ["plan"],
        "limit": 5,
        "session_id": w.my_session,
        "prefer_session_id": w.my_session,
    },
    "store.index_pending_facts": lambda w: {"max_batches": 1},
    "store.pending_fact_count": lambda w: {},
    "search.search": lambda w: {
        "query": "server port",
        "scope": "all",
        "k": 5,
        "user_id": w.me,
        "session_id": w.my_session,
        "current_session_id": w.my_session,
        "summary_at": None,
    },
    "tools.call": lambda w: {
        "name": "memory_search",
        "arguments": {"query": "server port"},
        "context": None,
    },
    "context.build": lambda w: {
        "session_id": w.my_session,
        "incoming": "which port does the server use?",
        "system_prompt": "You are Navi.",
        "user_id": w.me,
    },
    "context.record_shown": lambda w: {"session_id": w.my_session, "hits": [], "user_id": w.me},
    "extractor.process_stale_sessions": lambda w: {"user_id": w.me, "limit": 5},
    "extractor.extract_session": lambda w: {"session_id": w.my_session, "user_id": w.me},
}
"""Valid arguments of every entry point (a value the families replace, one at a time)."""

DESTRUCTIVE_LAST: Final = ("sessions.delete", "users.delete")
"""Run after the others: with None for user_id sessions.delete deletes the acting user's
session (users.delete refuses None)."""

CODES: Final = (
    (InvalidTypeError, "ITE"),
    (InvalidInputError, "IIE"),
    (PermissionDeniedError, "PDE"),
    (NotFoundError, "NFE"),
    (NaviMemoryError, "other navi error"),
)


def _code(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    for kind, code in CODES:
        if isinstance(exc, kind):
            return code
    return f"RAW {type(exc).__name__}"


def _trials(name: str, world: World) -> dict[str, list[tuple[str, object]]]:
    """family → (parameter, value) pairs to try for the entry point ``name``."""
    valid = VALID[name](world)
    trials: dict[str, list[tuple[str, object]]] = {family: [] for family in FAMILIES}
    for param, value in valid.items():
        if isinstance(value, str):
            for family, values in TEXT_FAMILIES.items():
                trials[family] += [(param, v) for v in values]
        for family, values in ANY_FAMILIES.items():
            trials[family] += [(param, v) for v in values]
        if param == "user_id":
            trials["foreign id"].append((param, world.other))
        elif "session_id" in param:
            trials["foreign id"].append((param, world.other_session))
        elif param == "fact_id":
            trials["foreign id"].append((param, world.other_fact_ids[0]))
    return trials


async def measure(memory: Memory, world: World) -> dict[str, dict[str, str]]:
    """entry point → family → the outcomes seen ("—" where the family has no parameter)."""
    names = [n for n in VALID if n not in DESTRUCTIVE_LAST] + list(DESTRUCTIVE_LAST)
    table: dict[str, dict[str, str]] = {}
    for name in names:
        entry = BY_NAME[name]
        row: dict[str, str] = {}
        for family, trials in _trials(name, world).items():
            seen: set[str] = set()
            for param, value in trials:
                arguments = {**VALID[name](world), param: value}
                with request_context(user_id=world.me, session_id=world.my_session):
                    try:
                        await entry.call(memory, arguments)
                    except Exception as exc:
                        seen.add(_code(exc))
                    else:
                        seen.add("ok")
            row[family] = " ".join(sorted(seen)) if seen else "—"
        table[name] = row
    return table


def markdown(table: dict[str, dict[str, str]]) -> str:
    header = "| entry point | " + " | ".join(FAMILIES) + " |"
    rule = "|---" * (len(FAMILIES) + 1) + "|"
    rows = [
        f"| `{name}` | " + " | ".join(row[f] for f in FAMILIES) + " |"
        for name, row in table.items()
    ]
    return "\n".join([header, rule, *rows])
