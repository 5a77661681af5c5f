"""The entry point table: every public call of navi-memory with a strategy for its arguments.

The bad-input suite runs each row; later issues add rows here (unified search, the tools, the
context builder, the extractor) and the suite covers them with no other change. A row's
arguments strategy takes the World, so valid values name real rows of both tenants.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from navi_memory import Memory, request_context
from navi_memory.schemas import ChunkDraft
from tests.reliability import strategies as s
from tests.reliability.world import SPARE_KEY, World

Arguments = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EntryPoint:
    """One public call: ``call(memory, arguments)`` and how to draw the arguments."""

    name: str
    call: Callable[[Memory, Arguments], Awaitable[object]]
    arguments: Callable[[World], st.SearchStrategy[Arguments]]


def args(
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[Arguments]:
    """Keyword arguments: every required one, any subset of the optional ones (the rest take
    their defaults)."""
    return st.fixed_dictionaries(required, optional=optional or {})


def _user(w: World) -> st.SearchStrategy[Any]:
    return s.user_param(w.me, w.other)


def _session(w: World) -> st.SearchStrategy[Any]:
    return s.session_param(w.my_session, w.other_session, w.spare_session)


def _limit(top: int) -> st.SearchStrategy[Any]:
    return s.int_param(st.integers(min_value=1, max_value=top))


# --- raw chunks: drafts valid, malformed, and wrongly typed -------------------------------------


def _draft_fields() -> st.SearchStrategy[dict[str, Any]]:
    content = s.text_param()
    return st.fixed_dictionaries(
        {
            "content": content,
            "start_seq": s.int_param(st.integers(min_value=0, max_value=50)),
            "end_seq": s.int_param(st.integers(min_value=50, max_value=100)),
            "started_at": s.timestamps(),
            "ended_at": s.timestamps(),
            "breadcrumbs": st.one_of(st.lists(s.text_param(), max_size=3), s.hostile),
            "hash_ok": st.booleans(),
        }
    )


def _as_chunk(fields: dict[str, Any], form: str) -> Any:
    """The fields as a dict, a validated ChunkDraft when that is possible, or a ChunkDraft
    built without validation (hostile values inside a genuine ChunkDraft object)."""
    values = dict(fields)
    hash_ok = values.pop("hash_ok")
    content = values["content"]
    try:
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
    except (AttributeError, UnicodeEncodeError):
        digest = "0" * 64
    values["content_hash"] = digest if hash_ok else "f" * 64
    if form == "dict":
        return values
    if form == "constructed":
        return ChunkDraft.model_construct(**values)
    try:
        return ChunkDraft.model_validate(values)
    except ValueError:
        return ChunkDraft.model_construct(**values)


def _chunks() -> st.SearchStrategy[Any]:
    chunk = st.builds(_as_chunk, _draft_fields(), st.sampled_from(["model", "dict", "constructed"]))
    return st.one_of(
        st.lists(chunk, max_size=3),
        st.lists(st.one_of(chunk, s.hostile), min_size=1, max_size=3),
        s.hostile,
    )


# --- the table ------------------------------------------------------------------------------

_SOURCES = st.one_of(
    st.sampled_from(["conversation", "tool_call", "auto_discovery", "user_explicit"]), s.hostile
)
_SORT_BY = st.one_of(
    st.sampled_from(["id", "category", "key", "value", "confidence", "updated_at"]), s.hostile
)
_ROLES = st.one_of(st.sampled_from(["system", "user", "assistant", "tool_call", "tool"]), s.hostile)
_SCOPES = s.text_param(st.sampled_from(["scratchpad", "notes"]))
_KEYS = s.text_param(st.sampled_from(["plan", "global", SPARE_KEY]))


async def _enter_request_context(_memory: Memory, arguments: Arguments) -> None:
    with request_context(**arguments):
        pass


ENTRY_POINTS: list[EntryPoint] = [
    # --- request_context -------------------------------------------------------------------
    EntryPoint(
        "request_context",
        _enter_request_context,
        lambda w: args(
            {},
            {
                "user_id": st.one_of(_user(w), st.none()),
                "session_id": st.one_of(_session(w), st.none()),
                "permissions": st.one_of(
                    st.lists(st.one_of(st.just("navi.memory.read_all"), s.hostile), max_size=2),
                    s.hostile,
                ),
            },
        ),
    ),
    # --- memory.users ----------------------------------------------------------------------
    EntryPoint(
        "users.ensure",
        lambda m, a: m.users.ensure(**a),
        lambda w: args({"user_id": _user(w)}, {"name": st.one_of(s.text_param(), st.none())}),
    ),
    EntryPoint("users.get", lambda m, a: m.users.get(**a), lambda w: args({"user_id": _user(w)})),
    EntryPoint(
        "users.delete",
        lambda m, a: m.users.delete(**a),
        lambda w: args({"user_id": st.one_of(st.just(w.spare_user), st.uuids(), s.hostile)}),
    ),
    # --- memory.store: facts ---------------------------------------------------------------
    EntryPoint(
        "store.upsert_fact",
        lambda m, a: m.store.upsert_fact(**a),
        lambda w: args(
            {
                "category": s.text_param(st.sampled_from(["preferences", "tools"])),
                "key": s.text_param(st.sampled_from(["language", "preferred_lang", "editor"])),
                "value": s.text_param(),
            },
            {
                "source": _SOURCES,
                "confidence": s.int_param(st.integers(min_value=0, max_value=100)),
                "expires_days": st.one_of(st.floats(min_value=0.01, max_value=36500), s.hostile),
                "source_context": st.one_of(s.text_param(), st.none()),
                "user_id": _user(w),
                "dedupe": s.bool_param(),
                "session_id": st.one_of(st.none(), _session(w)),
            },
        ),
    ),
    EntryPoint(
        "store.search_facts",
        lambda m, a: m.store.search_facts(**a),
        lambda w: args({"query": s.text_param()}, {"user_id": _user(w), "limit": _limit(50)}),
    ),
    EntryPoint(
        "store.delete_fact",
        lambda m, a: m.store.delete_fact(**a),
        lambda w: args(
            {"key": s.text_param(st.just(SPARE_KEY))},
            {"category": st.one_of(s.text_param(), st.none()), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "store.delete_facts",
        lambda m, a: m.store.delete_facts(**a),
        lambda w: args(
            {"key": s.text_param(st.just(SPARE_KEY))},
            {"category": st.one_of(s.text_param(), st.none()), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "store.forget_facts",
        lambda m, a: m.store.forget_facts(**a),
        lambda w: args(
            {"key": s.text_param(st.just(SPARE_KEY))},
            {"category": st.one_of(s.text_param(), st.none()), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "store.get_all_facts",
        lambda m, a: m.store.get_all_facts(**a),
        lambda w: args(
            {},
            {
                "user_id": _user(w),
                "all_users": s.bool_param(),
                "limit": st.one_of(st.none(), s.int_param(st.integers(0, 100))),
                "offset": s.int_param(st.integers(0, 10)),
                "search": st.one_of(s.text_param(), st.none()),
                "sort_by": _SORT_BY,
                "sort_order": st.one_of(st.sampled_from(["asc", "desc", "DESC"]), s.hostile),
                "include_merged": s.bool_param(),
            },
        ),
    ),
    EntryPoint(
        "store.fact_count",
        lambda m, a: m.store.fact_count(**a),
        lambda w: args({}, {"user_id": _user(w), "include_merged": s.bool_param()}),
    ),
    EntryPoint(
        "store.unmerge_fact",
        lambda m, a: m.store.unmerge_fact(**a),
        lambda w: args({"fact_id": st.one_of(st.sampled_from(w.fact_ids), s.hostile)}),
    ),
    EntryPoint(
        "store.get_fact",
        lambda m, a: m.store.get_fact(**a),
        lambda w: args({"fact_id": st.one_of(st.sampled_from(w.fact_ids), s.hostile)}),
    ),
    EntryPoint(
        "store.get_merged_facts",
        lambda m, a: m.store.get_merged_facts(**a),
        lambda w: args({"fact_id": st.one_of(st.sampled_from(w.fact_ids), s.hostile)}),
    ),
    EntryPoint(
        "store.get_summary",
        lambda m, a: m.store.get_summary(**a),
        lambda w: args({}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "store.set_summary",
        lambda m, a: m.store.set_summary(**a),
        lambda w: args({"content": s.text_param()}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "store.mark_session_extracted",
        lambda m, a: m.store.mark_session_extracted(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "store.get_extracted_at",
        lambda m, a: m.store.get_extracted_at(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "store.backfill_embeddings",
        lambda m, a: m.store.backfill_embeddings(**a),
        lambda w: args(
            {},
            {
                "batch_size": s.int_param(st.integers(1, 64)),
                "pause_seconds": st.one_of(st.just(0.0), st.none(), s.hostile),
                "progress": st.one_of(st.none(), st.just(lambda _progress: None), s.hostile),
            },
        ),
    ),
    # --- memory.store: raw chunks ----------------------------------------------------------
    EntryPoint(
        "store.add_chunks",
        lambda m, a: m.store.add_chunks(**a),
        lambda w: args(
            {"chunks": _chunks()},
            {"user_id": _user(w), "session_id": _session(w), "require_session": s.bool_param()},
        ),
    ),
    EntryPoint(
        "store.add_chunks_for_session",
        lambda m, a: m.store.add_chunks_for_session(**a),
        lambda w: args({"chunks": _chunks(), "user_id": _user(w), "session_id": _session(w)}),
    ),
    EntryPoint(
        "store.search_chunks",
        lambda m, a: m.store.search_chunks(**a),
        lambda w: args(
            {"query": s.text_param()},
            {"user_id": _user(w), "session_id": _session(w), "limit": _limit(50)},
        ),
    ),
    EntryPoint(
        "store.latest_summary_at",
        lambda m, a: m.store.latest_summary_at(**a),
        lambda w: args({"session_id": _session(w)}),
    ),
    EntryPoint(
        "store.index_pending_chunks",
        lambda m, a: m.store.index_pending_chunks(**a),
        lambda _w: args({}, {"max_batches": st.one_of(st.none(), st.integers(1, 3), s.hostile)}),
    ),
    EntryPoint(
        "store.pending_chunk_count",
        lambda m, a: m.store.pending_chunk_count(**a),
        lambda _w: args({}),
    ),
    EntryPoint(
        "store.index_pending_facts",
        lambda m, a: m.store.index_pending_facts(**a),
        lambda _w: args({}, {"max_batches": st.one_of(st.none(), st.integers(1, 3), s.hostile)}),
    ),
    EntryPoint(
        "store.pending_fact_count",
        lambda m, a: m.store.pending_fact_count(**a),
        lambda _w: args({}),
    ),
    # --- memory.sessions -------------------------------------------------------------------
    EntryPoint(
        "sessions.create",
        lambda m, a: m.sessions.create(**a),
        lambda w: args(
            {},
            {
                "session_id": st.one_of(st.none(), _session(w)),
                "user_id": _user(w),
                "title": st.one_of(s.text_param(), st.none()),
            },
        ),
    ),
    EntryPoint(
        "sessions.get",
        lambda m, a: m.sessions.get(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "sessions.list",
        lambda m, a: m.sessions.list(**a),
        lambda w: args({}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "sessions.delete",
        lambda m, a: m.sessions.delete(**a),
        lambda w: args(
            {"session_id": st.one_of(st.just(w.spare_session), s.plain_text, s.hostile)},
            {"user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "sessions.append",
        lambda m, a: m.sessions.append(**a),
        lambda w: args(
            {"session_id": _session(w), "role": _ROLES},
            {
                "content": s.text_param(),
                "tool_name": st.one_of(st.none(), s.text_param(st.just("shell"))),
                "tool_args": st.one_of(
                    st.none(),
                    st.dictionaries(s.plain_text, s.json_values(), max_size=3),
                    s.json_values(),
                ),
                "user_id": _user(w),
            },
        ),
    ),
    EntryPoint(
        "sessions.context",
        lambda m, a: m.sessions.context(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "sessions.history",
        lambda m, a: m.sessions.history(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
    EntryPoint(
        "sessions.compress",
        lambda m, a: m.sessions.compress(**a),
        lambda w: args(
            {"session_id": _session(w)},
            {
                "keep_last": st.one_of(st.none(), s.int_param(st.integers(0, 6))),
                "user_id": _user(w),
            },
        ),
    ),
    EntryPoint(
        "sessions.index_dropped_history",
        lambda m, a: m.sessions.index_dropped_history(**a),
        lambda _w: args(
            {},
            {
                "settled_for": st.one_of(
                    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=1)), s.hostile
                )
            },
        ),
    ),
    # --- memory.kv -------------------------------------------------------------------------
    EntryPoint(
        "kv.set",
        lambda m, a: m.kv.set(**a),
        lambda w: args(
            {"scope": _SCOPES, "key": _KEYS, "value": s.text_param()},
            {"session_id": st.one_of(st.none(), _session(w)), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "kv.get",
        lambda m, a: m.kv.get(**a),
        lambda w: args(
            {"scope": _SCOPES, "key": _KEYS},
            {"session_id": st.one_of(st.none(), _session(w)), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "kv.delete",
        lambda m, a: m.kv.delete(**a),
        lambda w: args(
            {"scope": _SCOPES, "key": s.text_param(st.just(SPARE_KEY))},
            {"session_id": st.one_of(st.none(), _session(w)), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "kv.list",
        lambda m, a: m.kv.list(**a),
        lambda w: args(
            {"scope": _SCOPES},
            {"session_id": st.one_of(st.none(), _session(w)), "user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "kv.search_values",
        lambda m, a: m.kv.search_values(**a),
        lambda w: args(
            {
                "user_id": st.one_of(st.none(), _user(w)),
                "scope": _SCOPES,
                "terms": st.one_of(st.lists(s.text_param(), max_size=4), s.hostile),
            },
            {
                "limit": _limit(50),
                "session_id": st.one_of(st.none(), _session(w)),
                "prefer_session_id": st.one_of(st.none(), _session(w)),
            },
        ),
    ),
    # --- memory.search (#11) -----------------------------------------------------------------
    EntryPoint(
        "search.search",
        lambda m, a: m.search.search(**a),
        lambda w: args(
            {"query": s.text_param(st.sampled_from(["server port", "plan", ""]))},
            {
                "scope": st.one_of(
                    st.sampled_from(["all", "facts", "raw", "sketches", "nonsense"]), s.hostile
                ),
                "k": s.int_param(st.integers(min_value=-5, max_value=40)),
                "user_id": _user(w),
                "session_id": st.one_of(st.none(), _session(w)),
                "current_session_id": st.one_of(st.none(), _session(w)),
                "summary_at": st.one_of(st.none(), s.timestamps()),
            },
        ),
    ),
    # --- memory.tools and memory.context (#12) ----------------------------------------------
    EntryPoint(
        "tools.call",
        lambda m, a: m.tools.call(**a),
        lambda w: args(
            {
                "name": s.text_param(st.sampled_from(["memory", "memory_search", "scratchpad"])),
                "arguments": st.one_of(
                    st.dictionaries(
                        st.sampled_from(
                            [
                                "action",
                                "query",
                                "scope",
                                "k",
                                "key",
                                "value",
                                "category",
                                "source",
                                "confidence",
                                "expires_days",
                                "user_id",
                                "note",
                            ]
                        ),
                        st.one_of(s.text_param(), s.json_values()),
                        max_size=5,
                    ),
                    s.text_param(st.just('{"action": "list"}')),
                ),
            },
            {"context": st.one_of(st.none(), _session(w).map(lambda sid: _tool_context(sid)))},
        ),
    ),
    EntryPoint(
        "context.build",
        lambda m, a: m.context.build(**a),
        lambda w: args(
            {
                "session_id": _session(w),
                "incoming": s.text_param(),
                "system_prompt": s.text_param(st.just("You are Navi.")),
            },
            {"user_id": _user(w)},
        ),
    ),
    EntryPoint(
        "context.record_shown",
        lambda m, a: m.context.record_shown(**a),
        lambda w: args(
            {"session_id": _session(w), "hits": st.one_of(st.just([]), s.hostile)},
            {"user_id": _user(w)},
        ),
    ),
    # --- memory.extractor (#13) ---------------------------------------------------------------
    EntryPoint(
        "extractor.process_stale_sessions",
        lambda m, a: m.extractor.process_stale_sessions(**a),
        lambda w: args(
            {},
            {"user_id": _user(w), "limit": st.one_of(st.none(), _limit(5))},
        ),
    ),
    EntryPoint(
        "extractor.extract_session",
        lambda m, a: m.extractor.extract_session(**a),
        lambda w: args({"session_id": _session(w)}, {"user_id": _user(w)}),
    ),
]
"""Every public call of memory.users / store / sessions / kv / search / tools / context /
extractor, and request_context."""


def _tool_context(session_id: Any) -> Any:
    """A ToolContext naming a session (valid, another tenant's, or hostile); built without
    validation, as a host's code could."""
    from navi_memory.tools import ToolContext

    return ToolContext(session_id=session_id)


BY_NAME = {entry.name: entry for entry in ENTRY_POINTS}
