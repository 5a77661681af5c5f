"""The unified-search section: 100k raw chunks and 100k facts over the same 1,000 users (plus
their sessions, summaries and scratchpad sketches), measured through ``memory.search`` beside
``search_facts`` and ``search_chunks`` called one after the other for the same query.

Embedding is excluded: a lookup embedder answers vectors made beforehand. Two kinds of query:
made from one of the user's chunks (its vector lies near that chunk; the facts are found by
text) and made from one of the user's facts (a hashed vector of its words; the chunks are
found by text) — so each call does a vector pass in one store and a text pass in the other.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import asyncpg

from benchmarks import chunks as chunks_section
from benchmarks import facts as facts_section
from benchmarks.chunks_data import UserPlan, plan_users
from benchmarks.facts_data import FactSet, build_fact_set
from benchmarks.harness import (
    BenchContext,
    Row,
    SectionReport,
    SqlClock,
    Target,
    TimingEmbedder,
    fmt_count,
    fmt_ms,
    percentile,
    timed,
)
from benchmarks.sections import (
    WARMUP_CALLS,
    bench_database,
    loader,
    quiet_embedding_failures,
    timed_memory,
)
from navi_memory import Memory, Settings
from navi_memory.constants import SEARCH_K_DEFAULT, SKETCH_SCOPE
from navi_memory.testing import hashed_embedding

__all__ = ["SECTION", "SearchSection"]

DATABASE: Final = "bench_search"
CHUNKS: Final = 100_000
FACTS: Final = 100_000
USERS: Final = 1_000
LARGEST: Final = 8_000
QUERIES: Final = 400
SKETCHES_PER_USER: Final = 5
TARGET_RATIO: Final = 1.2
"""The issue's target: unified p50 <= 1.2 x the slower of search_facts and search_chunks alone."""

QueryKind = Literal["chunk", "fact"]


@dataclass(frozen=True, slots=True)
class Sizes:
    chunks: int
    facts: int
    users: int
    largest: int
    queries: int

    @classmethod
    def scaled(cls, scale: float) -> Sizes:
        return cls(
            chunks=max(2_000, round(CHUNKS * scale)),
            facts=max(2_000, round(FACTS * scale)),
            users=max(20, round(USERS * scale)),
            largest=max(100, round(LARGEST * scale)),
            queries=max(60, round(QUERIES * scale)),
        )


@dataclass(frozen=True, slots=True)
class Query:
    kind: QueryKind
    user_id: uuid.UUID
    text: str


@dataclass(frozen=True, slots=True)
class Timing:
    kind: QueryKind
    facts: float
    chunks: float
    unified: float
    hits: int


class SearchSection:
    name = "search"
    title = "Unified search: memory.search beside search_facts + search_chunks"
    supports_large = False

    async def run(self, ctx: BenchContext) -> SectionReport:
        started = time.perf_counter()
        report = SectionReport(name=self.name, title=self.title)
        rng = random.Random(ctx.seed)
        sizes = Sizes.scaled(ctx.scale)
        async with bench_database(ctx, DATABASE, "search") as url:
            await self._run(ctx, url, report, rng, sizes)
        report.seconds = time.perf_counter() - started
        return report

    async def _run(
        self,
        ctx: BenchContext,
        url: str,
        report: SectionReport,
        rng: random.Random,
        sizes: Sizes,
    ) -> None:
        plans = plan_users(rng, users=sizes.users, chunks=sizes.chunks, largest=sizes.largest)
        facts = same_users(
            build_fact_set(
                rng, users=sizes.users, facts=sizes.facts, hidden_share=0.02, expiring_share=0.05
            ),
            plans,
        )
        async with loader(ctx, DATABASE) as conn:
            load = await chunks_section.bulk_load(conn, plans, ctx, "search")
            await facts_section.bulk_load(conn, facts, ctx)
            sessions = await add_sessions_and_sketches(conn)
        report.setup += [
            f"{fmt_count(sizes.chunks)} chunks and {fmt_count(sizes.facts)} visible facts over "
            f"the same {fmt_count(sizes.users)} users (the chunks and facts sections' data: "
            "Zipf-sized raw history, log-normal fact counts), "
            f"{fmt_count(sessions)} sessions, each with a summary message, and "
            f"{SKETCHES_PER_USER} scratchpad sketches per user.",
            f"{sizes.queries} queries, half made from one of the user's chunks (its vector near "
            "that chunk's; two of its words and an identifier), half from one of the user's "
            "facts (its words, a hashed vector): each call has a vector pass in one store and a "
            "text pass in the other.",
            f"Each query runs as search_facts(limit={SEARCH_K_DEFAULT}) and "
            f"search_chunks(limit={SEARCH_K_DEFAULT}) one after the other, then as "
            f"memory.search(k={SEARCH_K_DEFAULT}, scope='all') — the raw history (with its "
            "sessions' summary boundaries) on one connection, the facts (20, for the "
            "freshness marks) then the sketches on another, the two concurrently; one caller; "
            f"embedding excluded (a lookup embedder), {WARMUP_CALLS} warm-up queries left out.",
        ]
        settings = Settings(
            _env_file=None,
            database_url=url,
            backfill_pause_seconds=0,
            chunk_index_in_background=False,
        )
        lookup = chunks_section.LookupEmbedder()
        embedder = TimingEmbedder(lookup)
        async with timed_memory(settings, embedder) as (memory, clock):
            load_average = os.getloadavg()[0]
            users = [rng.randrange(len(plans)) for _ in range(sizes.queries + WARMUP_CALLS)]
            from_chunks = await chunks_section.make_queries(
                memory, lookup, rng, plans, load.ids, users[::2]
            )
            queries = [Query("chunk", q.user_id, q.text) for q in from_chunks]
            for index in users[1::2]:
                uid = plans[index].user_id
                text = facts_section.meaning_query(rng, facts.visible[uid])
                lookup.vectors[text] = hashed_embedding(text)
                queries.append(Query("fact", uid, text))
            rng.shuffle(queries)
            timings: list[Timing] = []
            for path in ("vector", "text"):
                ctx.log(f"search: {len(queries)} queries x 3 calls, {path} path")
                lookup.failing = path == "text"
                try:
                    with quiet_embedding_failures():
                        timings = await measure(memory, embedder, clock, queries)
                finally:
                    lookup.failing = False
                report.rows += timing_rows(timings, path)
                if path == "vector":
                    report.targets.append(target(timings))
        start_load, end_load = load_average, os.getloadavg()[0]
        report.notes += [
            "The SQL / Python split of the other sections is not given here: unified search's "
            "statements overlap in time, so per-statement clocks do not add up to the call.",
            f"Machine load (1-minute load average, 2 cores) when the calls began: "
            f"{start_load:.1f}, when they ended: {end_load:.1f}. Unified search gains only "
            "while a core is free for its second connection; on a saturated machine it costs "
            "about what the two calls cost one after the other.",
        ]


SECTION = SearchSection()


def same_users(data: FactSet, plans: Sequence[UserPlan]) -> FactSet:
    """The fact set re-owned by the chunk plans' users (the i-th fact user becomes the i-th
    plan's), without users of its own to load: the chunks' load creates them."""
    owner = {old: plan.user_id for old, plan in zip(data.users, plans, strict=True)}
    rows = [dataclasses.replace(row, user_id=owner[row.user_id]) for row in data.rows]
    return FactSet(
        users=[],
        rows=rows,
        visible={owner[uid]: facts for uid, facts in data.visible.items()},
        taken={owner[uid]: keys for uid, keys in data.taken.items()},
    )


async def add_sessions_and_sketches(conn: asyncpg.Connection) -> int:
    """A sessions row for every chunk session, one summary message in each, and a few
    scratchpad sketches per user (the last one bound to one of their sessions)."""
    await conn.execute(
        "INSERT INTO sessions (id, user_id) SELECT DISTINCT session_id, user_id FROM memory_chunks"
    )
    await conn.execute(
        "INSERT INTO session_messages (session_id, seq, role, content, kind, is_context) "
        "SELECT id, 1, 'system', 'Earlier conversation, summarised.', 'summary', true "
        "FROM sessions"
    )
    words = ("deploy", "port", "migration", "review", "release", "backup", "ticket", "budget")
    await conn.execute(
        "INSERT INTO kv_store (user_id, scope, session_id, key, value) "
        "SELECT u.id, $1, CASE WHEN g = $2 THEN (SELECT s.id FROM sessions s "
        "WHERE s.user_id = u.id LIMIT 1) END, 'section ' || g, "
        "'notes on the ' || ($3::text[])[1 + (g + abs(hashtext(u.id::text))) % 8] "
        "FROM navi_users u, generate_series(1, $2) g",
        SKETCH_SCOPE,
        SKETCHES_PER_USER,
        list(words),
    )
    await conn.execute("VACUUM (ANALYZE) sessions, session_messages, kv_store")
    return int(await conn.fetchval("SELECT count(*) FROM sessions") or 0)


async def measure(
    memory: Memory, embedder: TimingEmbedder, clock: SqlClock, queries: Sequence[Query]
) -> list[Timing]:
    """Each query as search_facts then search_chunks, then as one unified search; the first
    WARMUP_CALLS queries are left out."""
    timings: list[Timing] = []
    for index, query in enumerate(queries):
        _, facts = await timed(
            memory.store.search_facts(query.text, user_id=query.user_id, limit=SEARCH_K_DEFAULT),
            embedder,
            clock,
        )
        _, chunks = await timed(
            memory.store.search_chunks(query.text, user_id=query.user_id, limit=SEARCH_K_DEFAULT),
            embedder,
            clock,
        )
        hits, unified = await timed(
            memory.search.search(query.text, "all", SEARCH_K_DEFAULT, user_id=query.user_id),
            embedder,
            clock,
        )
        if index < WARMUP_CALLS:
            continue
        timings.append(
            Timing(
                query.kind,
                facts.without_embedding,
                chunks.without_embedding,
                unified.without_embedding,
                len(hits),
            )
        )
    return timings


def timing_rows(timings: Sequence[Timing], path: str) -> list[Row]:
    def p(values: Sequence[float], q: float) -> str:
        return fmt_ms(percentile(values, q))

    def pair(values: Sequence[float]) -> str:
        return f"{p(values, 50)} / {p(values, 95)}"

    label = "vector path" if path == "vector" else "text path (embedder down)"
    unified = [t.unified for t in timings]
    facts = [t.facts for t in timings]
    chunks = [t.chunks for t in timings]
    both = [t.facts + t.chunks for t in timings]
    hits = sum(t.hits for t in timings) / max(1, len(timings))
    rows = [
        Row(
            f"memory.search, {label}, p50 / p95",
            pair(unified),
            "ms",
            f"{len(timings)} queries, embedding excluded; {hits:.1f} hits per query",
        ),
        Row("  search_facts alone p50 / p95", pair(facts), "ms", ""),
        Row("  search_chunks alone p50 / p95", pair(chunks), "ms", ""),
        Row(
            "  search_facts + search_chunks, one after the other, p50 / p95",
            pair(both),
            "ms",
            "the same two reads without unified search",
        ),
    ]
    for kind in ("chunk", "fact"):
        mine = [t for t in timings if t.kind == kind]
        if mine:
            rows.append(
                Row(
                    f"  queries made from a {kind}: memory.search / facts + chunks, p50",
                    f"{p([t.unified for t in mine], 50)} / "
                    f"{p([t.facts + t.chunks for t in mine], 50)}",
                    "ms",
                    f"{len(mine)} queries",
                )
            )
    return rows


def target(timings: Sequence[Timing]) -> Target:
    unified = percentile([t.unified for t in timings], 50)
    slower = max(
        percentile([t.facts for t in timings], 50), percentile([t.chunks for t in timings], 50)
    )
    ratio = unified / slower
    return Target(
        name="memory.search p50 against the slower of search_facts and search_chunks alone "
        "(vector path, embedding excluded)",
        goal=f"<= {TARGET_RATIO}x",
        measured=f"{fmt_ms(unified)} ms against {fmt_ms(slower)} ms = {ratio:.2f}x",
        met=ratio <= TARGET_RATIO,
    )
