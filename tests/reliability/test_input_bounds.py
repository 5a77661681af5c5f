"""Every integer, flag and collection parameter of the public API checked at the edge: a value
the column or the call cannot take is an InvalidInputError (InvalidTypeError for a wrong type)
before any SQL runs, never a bare TypeError nor PostgreSQL's out-of-range error, and it changes
no row. The boundary values themselves are accepted."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from navi_memory import (
    InvalidInputError,
    InvalidTypeError,
    Memory,
    NaviMemoryError,
    NotFoundError,
    open_memory,
)
from tests.reliability.snapshot import changed_tables, table_contents
from tests.reliability.world import World, build_world, chunk_draft

INT32_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1

Call = Callable[[Memory, World], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Case:
    call: Call
    error: type[NaviMemoryError]


def seq_draft(start: int, end: int) -> Any:
    return chunk_draft("a chunk with odd seqs").model_copy(
        update={"start_seq": start, "end_seq": end}
    )


REFUSED: dict[str, Any] = {
    "add_chunks(5)": Case(
        lambda m, w: m.store.add_chunks(5, w.me, w.my_session),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "add_chunks(None)": Case(
        lambda m, w: m.store.add_chunks(None, w.me, w.my_session),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "add_chunks(object())": Case(
        lambda m, w: m.store.add_chunks(object(), w.me, w.my_session),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "add_chunks(start_seq=2**31)": Case(
        lambda m, w: m.store.add_chunks([seq_draft(2**31, 2**31)], w.me, w.my_session),
        InvalidInputError,
    ),
    "add_chunks(end_seq=2**31)": Case(
        lambda m, w: m.store.add_chunks([seq_draft(1, 2**31)], w.me, w.my_session),
        InvalidInputError,
    ),
    "add_chunks(start_seq=-1)": Case(
        lambda m, w: m.store.add_chunks([seq_draft(-1, 1)], w.me, w.my_session),
        InvalidInputError,
    ),
    "add_chunks(require_session='yes')": Case(
        lambda m, w: m.store.add_chunks(
            [chunk_draft("x")],
            w.me,
            w.my_session,
            require_session="yes",  # type: ignore[arg-type]
        ),
        InvalidTypeError,
    ),
    "get_all_facts(limit=10**30)": Case(
        lambda m, w: m.store.get_all_facts(w.me, limit=10**30), InvalidInputError
    ),
    "get_all_facts(limit=2**63)": Case(
        lambda m, w: m.store.get_all_facts(w.me, limit=2**63), InvalidInputError
    ),
    "get_all_facts(offset=10**30)": Case(
        lambda m, w: m.store.get_all_facts(w.me, offset=10**30), InvalidInputError
    ),
    "get_all_facts(include_merged='no')": Case(
        lambda m, w: m.store.get_all_facts(w.me, include_merged="no"),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "get_all_facts(all_users='no')": Case(
        lambda m, w: m.store.get_all_facts(w.me, all_users="no"),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "get_all_facts(sort_by=bytearray)": Case(
        lambda m, w: m.store.get_all_facts(w.me, sort_by=bytearray(b"key")),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "fact_count(include_merged=1)": Case(
        lambda m, w: m.store.fact_count(w.me, include_merged=1),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "unmerge_fact(2**63)": Case(lambda m, w: m.store.unmerge_fact(2**63), InvalidInputError),
    "get_fact(2**63)": Case(lambda m, w: m.store.get_fact(2**63), InvalidInputError),
    "backfill_embeddings(pause_seconds='1')": Case(
        lambda m, w: m.store.backfill_embeddings(pause_seconds="1"),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "backfill_embeddings(pause_seconds=inf)": Case(
        lambda m, w: m.store.backfill_embeddings(pause_seconds=math.inf), InvalidInputError
    ),
    "backfill_embeddings(pause_seconds=nan)": Case(
        lambda m, w: m.store.backfill_embeddings(pause_seconds=math.nan), InvalidInputError
    ),
    "backfill_embeddings(progress=5)": Case(
        lambda m, w: m.store.backfill_embeddings(progress=5),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "index_pending_chunks(max_batches='2')": Case(
        lambda m, w: m.store.index_pending_chunks("2"),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "index_dropped_history(settled_for=5)": Case(
        lambda m, w: m.sessions.index_dropped_history(settled_for=5),  # type: ignore[arg-type]
        InvalidTypeError,
    ),
    "compress(keep_last=2**31)": Case(
        lambda m, w: m.sessions.compress(w.my_session, keep_last=2**31, user_id=w.me),
        InvalidInputError,
    ),
    # Checked already; kept here so the audit stays whole.
    "search_facts(limit=10**30)": Case(
        lambda m, w: m.store.search_facts("x", w.me, limit=10**30), InvalidInputError
    ),
    "search_chunks(limit=True)": Case(
        lambda m, w: m.store.search_chunks("x", w.me, limit=True), InvalidTypeError
    ),
    "kv.search_values(limit=10**30)": Case(
        lambda m, w: m.kv.search_values(w.me, "notes", ["x"], limit=10**30), InvalidInputError
    ),
    "kv.search_values(terms='x')": Case(
        lambda m, w: m.kv.search_values(w.me, "notes", "x"), InvalidTypeError
    ),
    "backfill_embeddings(batch_size=10**30)": Case(
        lambda m, w: m.store.backfill_embeddings(10**30), InvalidInputError
    ),
    "upsert_fact(confidence=10**30)": Case(
        lambda m, w: m.store.upsert_fact("c", "k", "v", confidence=10**30, user_id=w.me),
        InvalidInputError,
    ),
    "upsert_fact(expires_days=nan)": Case(
        lambda m, w: m.store.upsert_fact("c", "k", "v", expires_days=math.nan, user_id=w.me),
        InvalidInputError,
    ),
    "upsert_fact(dedupe='yes')": Case(
        lambda m, w: m.store.upsert_fact("c", "k", "v", dedupe="yes", user_id=w.me),  # type: ignore[arg-type]
        InvalidInputError,
    ),
    "compress(keep_last=-1)": Case(
        lambda m, w: m.sessions.compress(w.my_session, keep_last=-1, user_id=w.me),
        InvalidInputError,
    ),
}


@pytest.mark.parametrize("case", list(REFUSED.values()), ids=list(REFUSED))
async def test_a_value_out_of_bounds_is_refused_at_the_edge_and_changes_nothing(
    shared: tuple[Memory, World], case: Case
) -> None:
    """The call raises the named navi_memory error (not a bare TypeError, not a database error)
    and leaves every row as it was."""
    memory, world = shared
    before = await table_contents(memory.engine)
    with pytest.raises(case.error):
        await case.call(memory, world)
    after = await table_contents(memory.engine)
    assert after == before, changed_tables(before, after)


async def test_the_boundary_values_themselves_are_accepted(calm_memory: Memory) -> None:
    """int32's and bigint's largest values (and seq 0) pass the edge: the bounds are the
    columns', not tighter."""
    world = await build_world(calm_memory)
    store = calm_memory.store
    assert await store.add_chunks([seq_draft(0, INT32_MAX)], world.me, world.my_session) == 1
    everything = await store.get_all_facts(world.me)
    assert everything and await store.get_all_facts(world.me, limit=BIGINT_MAX) == everything
    assert await store.get_all_facts(world.me, offset=BIGINT_MAX) == []
    with pytest.raises(NotFoundError):
        await store.unmerge_fact(BIGINT_MAX)
    result = await calm_memory.sessions.compress(
        world.my_session, keep_last=INT32_MAX, user_id=world.me
    )
    assert result.demoted == 0


async def test_a_chunk_ending_at_the_largest_seq_does_not_break_the_history_repair(
    calm_memory: Memory,
) -> None:
    """One chunk ending at seq 2**31-1 (a valid int32) must not make index_dropped_history fail
    for every user."""
    world = await build_world(calm_memory)
    await calm_memory.store.add_chunks([seq_draft(0, INT32_MAX)], world.me, world.my_session)
    assert await calm_memory.sessions.index_dropped_history(settled_for=timedelta(0)) == 0


async def test_open_memory_refuses_settings_that_are_not_settings() -> None:
    """open_memory("postgresql://...") is an InvalidTypeError saying to pass Settings, not an
    AttributeError from deep inside."""
    with pytest.raises(InvalidTypeError):
        async with open_memory("postgresql://localhost/x"):  # type: ignore[arg-type]
            pass
