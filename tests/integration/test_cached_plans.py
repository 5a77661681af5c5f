"""The two engines of a Memory: custom plans for statements whose plan depends on the user (the
raw history's search), cached plans for those whose plan does not (facts, sketches); which
statement runs where, and that a generic plan returns the rows a custom one does."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from navi_memory import Memory
from navi_memory.constants import SKETCH_SCOPE
from navi_memory.repositories.facts import FactSearchRepository
from navi_memory.testing import hashed_embedding
from tests.integration.factories import new_session_row, new_user, statements_on
from tests.integration.test_search import draft


def touching(statements: list[str], table: str) -> list[str]:
    return [s for s in statements if table in s]


async def test_the_main_engine_forces_custom_plans_and_the_other_generic_ones(
    memory: Memory,
) -> None:
    """memory.engine plans every execution for its parameters; cached_plans_engine plans each
    statement once per connection (a generic plan)."""
    async with memory.engine.connect() as conn:
        assert await conn.scalar(text("SHOW plan_cache_mode")) == "force_custom_plan"
    async with memory.cached_plans_engine.connect() as conn:
        assert await conn.scalar(text("SHOW plan_cache_mode")) == "force_generic_plan"
        # The same connection settings otherwise: the HNSW options hold on both.
        assert await conn.scalar(text("SHOW hnsw.iterative_scan")) == "relaxed_order"
    # A unified search of a user known small reads both its lanes on cached plans: that pool
    # keeps twice DB_POOL_SIZE, so eight callers' reads do not churn overflow connections.
    size = memory.settings.db_pool_size
    assert memory.engine.pool.size() == size  # type: ignore[attr-defined]
    assert memory.cached_plans_engine.pool.size() == 2 * size  # type: ignore[attr-defined]


async def test_fact_and_sketch_reads_use_cached_plans_and_the_raw_history_custom_ones(
    memory: Memory,
) -> None:
    """search_facts, and unified search's facts and sketches lane, run on the cached-plans
    engine; the raw history's search (HNSW or the user's btree, by the user's size) on the
    engine that plans for each user — until a search has shown the user small: then the
    small-user statement, whose plan is every small user's, on cached plans too."""
    uid = await new_user(memory)
    sid = await new_session_row(memory, uid)
    await memory.store.upsert_fact("technical", "server_port", "8099", user_id=uid)
    await memory.store.add_chunks(
        [draft("User: the server port is 8098")],
        user_id=uid,
        session_id=sid,
    )
    await memory.kv.set(SKETCH_SCOPE, "port", "server port notes", session_id=sid, user_id=uid)
    async with (
        statements_on(memory.engine) as custom,
        statements_on(memory.cached_plans_engine) as cached,
    ):
        assert [h.key for h in await memory.store.search_facts("server port", user_id=uid)] == [
            "server_port"
        ]
        hits = await memory.search.search("server port", user_id=uid)
        assert [h.source_type for h in hits] == ["fact", "raw", "sketch"]
        assert await memory.store.search_chunks("server port", user_id=uid)
    # The indexers run in the background on the custom-plan engine: the reads are told apart
    # by what only they contain (the fact search's visibility head, the sketch search's
    # terms count, the BM25 query).
    assert len(touching(cached, "head_kept")) == 2  # search_facts, then the facts lane
    assert len(touching(cached, "FROM kv_store k,")) == 1
    # The raw lane (the user not yet known small), then search_chunks (known small now).
    assert len(touching(custom, "navi_terms_tsquery")) == 1
    (small,) = touching(cached, "navi_terms_tsquery")
    assert "OFFSET 0" in small and "OFFSET 0" not in touching(custom, "navi_terms_tsquery")[0]
    assert not touching(custom, "head_kept")
    assert not touching(custom, "FROM kv_store k,")


@pytest.mark.slow  # 4-8 s: make test-slow (CI runs it)
async def test_a_generic_plan_finds_what_a_custom_plan_finds_for_small_and_large_users(
    memory: Memory,
) -> None:
    """The user's fact search with a generic plan (made once, for no user in particular)
    returns exactly the rows of a plan made for each user: a user with 2 facts, one with 60,
    and never the other's."""
    small, large = await new_user(memory), await new_user(memory)
    for n in range(2):
        await memory.store.upsert_fact("notes", f"s{n}", f"harbor lantern {n}", user_id=small)
    for n in range(60):
        await memory.store.upsert_fact("notes", f"l{n}", f"harbor lantern {n}", user_id=large)
    query = "harbor lantern"
    found: dict[str, list[list[tuple[int, float | None, int | None]]]] = {}
    async with memory.cached_plans_engine.connect() as conn:
        repo = FactSearchRepository(session=conn)
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(text(f"SET plan_cache_mode = {mode}"))
            found[mode] = []
            for uid in (small, large, small):
                for vector in (hashed_embedding(query), None):
                    rows = await repo.search(uid, vector, ["harbor", "lantern"], 10, 0.3)
                    assert rows and {r["user_id"] for r in rows} == {uid}
                    found[mode].append(
                        sorted((r["id"], r["distance"], r["terms_hit"]) for r in rows)
                    )
    assert found["force_generic_plan"] == found["force_custom_plan"]
