"""The fact search's generic plans read what the query needs, not every fact.

search_facts runs on cached generic plans (made once per connection, for no user in
particular). A generic plan once joined the hit ids with a hash over a scan of every fact, every
vector read from TOAST (979d90e: 132 against 14 ms at 20k facts); the hits are now looked up by
an array of ids. These tests run each statement's generic plan with EXPLAIN ANALYZE over a table
where other users hold most facts, and count the rows each scan of memory_facts read."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from navi_memory import EMBEDDING_DIM, PERMISSION_READ_ALL, Memory, request_context
from navi_memory.constants import FACT_MAX_DISTANCE
from navi_memory.repositories.facts import _SEARCH
from navi_memory.repositories.like import contains_pattern
from navi_memory.repositories.statements import _driver_text
from tests.integration.factories import execute, new_user
from tests.integration.test_chunk_small_statement import (
    explain_prepared,
    plan_of,
    raw_connection,
)

OTHERS_FACTS = 3_000
OTHER_USERS = 300
MINE = 6
LIMIT = 5


async def load(memory: Memory) -> tuple[uuid.UUID, list[float]]:
    """A user with MINE facts near one query, OTHER_USERS users with OTHERS_FACTS between them,
    all indexed and analyzed; the user's id and the query's vector."""
    mine = await new_user(memory)
    assert memory.embedder is not None
    query = list(await memory.embedder.embed_query("harbor lantern keeper"))
    for n in range(MINE):
        await memory.store.upsert_fact(
            "notes", f"lantern_{n}", f"harbor lantern keeper {n}", user_id=mine
        )
    # Everyone else's facts in one statement, OTHER_USERS users of ten facts each (a user's
    # share of the table is then small, as it is in production, and so is a generic plan's
    # estimate of it): random directions, far from the query; words the query does not hold.
    await execute(
        memory,
        "INSERT INTO navi_users (id, name)"
        f" SELECT gen_random_uuid(), 'other ' || g FROM generate_series(1, {OTHER_USERS}) g",
    )
    await execute(
        memory,
        "INSERT INTO memory_facts (user_id, category, key, key_norm, value, embedding)"
        " SELECT u.id, 'bulk', 'k' || g, 'k' || g, 'bulk value ' || g,"
        f"        (SELECT CAST(array_agg(random() - 0.5) AS vector({EMBEDDING_DIM}))"
        f"         FROM generate_series(1, {EMBEDDING_DIM}) d WHERE g > 0)"
        " FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM navi_users"
        "       WHERE name LIKE 'other %') u,"
        f"      generate_series(1, {OTHERS_FACTS // OTHER_USERS}) g",
    )
    await memory.store.index_pending_facts()
    await execute(memory, "ANALYZE memory_facts, memory_fact_vectors, memory_fact_vector_queue")
    return mine, query


async def explain(
    memory: Memory, *, by_user: bool, values: dict[str, Any], off: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The nodes of the search statement's generic plan, as it ran on ``values``."""
    found = _driver_text(_SEARCH[by_user, "q" in values], memory.engine.dialect)
    assert found is not None
    conn = await raw_connection(memory, "force_generic_plan")
    try:
        for setting in off:
            await conn.execute(f"SET {setting} = off")
        return plan_of(await explain_prepared(conn, "fact_search", found, values))
    finally:
        await conn.close()


def facts_read(nodes: list[dict[str, Any]]) -> list[int]:
    """Rows each executed scan of memory_facts read (kept and filtered out, every loop)."""
    return [
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in nodes
        if node.get("Relation Name") == "memory_facts" and node.get("Actual Loops", 0)
    ]


def search_values(query: list[float] | None, terms: list[str], **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "limit": LIMIT,
        "patterns": [contains_pattern(t) for t in terms],
        "phrases": [contains_pattern(" ".join(terms))] if terms else [],
        **extra,
    }
    if query is not None:
        values["q"] = "[" + ",".join(str(x) for x in query) + "]"
        values["max_distance"] = FACT_MAX_DISTANCE
    return values


@pytest.mark.parametrize("with_vector", [True, False])
@pytest.mark.parametrize("off", [(), ("enable_seqscan",)])
async def test_a_users_generic_plan_reads_only_that_users_facts(
    memory: Memory, with_vector: bool, off: tuple[str, ...]
) -> None:
    """A user's search, vector and text passes or text alone: every scan of memory_facts reads
    at most the user's own rows, never the others' thousands (and sequential scans priced
    out, as a table of many users would price them, changes nothing)."""
    mine, query = await load(memory)
    values = search_values(query if with_vector else None, ["harbor", "lantern"], uid=str(mine))
    nodes = await explain(memory, by_user=True, values=values, off=off)
    read = facts_read(nodes)
    assert read, "the plan read no facts at all"
    assert max(read) <= MINE * 2, (read, [n.get("Node Type") for n in nodes])
    # The hits themselves: as search_facts returns them.
    hits = await memory.store.search_facts("harbor lantern keeper", user_id=mine)
    assert {h.key for h in hits} == {f"lantern_{n}" for n in range(MINE)}


async def test_everyones_generic_plan_looks_its_hits_up_by_id(memory: Memory) -> None:
    """A global vector search whose nearest facts fill the limit: its vectors are scanned
    exactly (memory_fact_vectors, every row), but memory_facts is only read for the head's
    visibility and the hits, by id — never scanned whole (the text pass does not run: the
    vector pass filled the limit)."""
    mine, query = await load(memory)
    values = search_values(query, ["harbor", "lantern", "keeper"])
    nodes = await explain(memory, by_user=False, values=values)
    read = facts_read(nodes)
    assert read, "the plan read no facts at all"
    assert sum(read) < OTHERS_FACTS // 10, (read, [n.get("Node Type") for n in nodes])
    lookups = [
        node
        for node in nodes
        if node.get("Relation Name") == "memory_facts" and "ANY" in node.get("Index Cond", "")
    ]
    assert lookups, [n.get("Node Type") for n in nodes]
    # What the operator's search returns: the nearest facts, the user's, vector hits only.
    with request_context(permissions=[PERMISSION_READ_ALL]):
        hits = await memory.store.search_facts("harbor lantern keeper", limit=LIMIT)
    assert [h.user_id for h in hits] == [mine] * LIMIT
    assert {h.via for h in hits} == {"vector"}
