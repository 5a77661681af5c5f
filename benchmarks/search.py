"""The unified-search section: 100k raw chunks and 100k facts over the same 1,000 users (plus
their sessions, summaries and scratchpad sketches), measured through ``memory.search`` beside
``search_facts`` and ``search_chunks`` called one after the other for the same query.

Embedding is excluded: a lookup embedder answers vectors made beforehand. Two kinds of query:
made from one of the user's chunks (its vector lies near that chunk; the facts are found by
text) and made from one of the user's facts (a hashed vector of its words; the chunks are
found by text) — so each call does a vector pass in one store and a text pass in the other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import chunks as chunks_section
from benchmarks import facts as facts_section
from benchmarks.chunks_data import UserPlan, plan_users
from benchmarks.facts_data import FactSet, build_fact_set
from benchmarks.harness import (
    BenchContext,
    BenchServer,
    CapturedStatement,
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
    raw_connection,
    timed_memory,
)
from navi_memory import Memory, Settings
from navi_memory.constants import (
    CHUNK_BM25_B,
    CHUNK_BM25_K1,
    CHUNK_GRAPH_FROM,
    SEARCH_K_DEFAULT,
    SEARCH_K_MAX,
    SKETCH_SCOPE,
)
from navi_memory.repositories.chunks import ChunkSearchRepository
from navi_memory.services.search import plan_search
from navi_memory.testing import hashed_embedding
from navi_memory.text.freshness import ExcerptWords

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
CALLERS: Final = 8
"""Concurrent callers of the throughput series (issue #16: 8)."""
CONCURRENT_QUERIES: Final = 800
RECALL_USERS: Final = 10
"""Users drawn from each size bucket for the recall series (fewer where the bucket has fewer)."""
RECALL_QUERIES_PER_USER: Final = 4
RECALL_K: Final = 10
RECALL_BUCKETS: Final = (
    (1, 99),
    (100, 999),
    (1_000, CHUNK_GRAPH_FROM - 1),
    (CHUNK_GRAPH_FROM, 4_999),
    (5_000, 14_999),
    (15_000, 10**9),
)
"""User sizes (chunks) of the recall series: the exact side below CHUNK_GRAPH_FROM, the graph
from there."""

# Issue #16's bars for unified search at 1M chunks (reported as targets in the large mode).
LARGE_P50: Final = 0.005
LARGE_P95: Final = 0.015
LARGE_RATE: Final = 400.0
RAW_RATIO: Final = 1.3
RECALL_TARGET: Final = 0.98

QueryKind = Literal["chunk", "fact"]


@dataclass(frozen=True, slots=True)
class Sizes:
    chunks: int
    facts: int
    users: int
    largest: int
    queries: int

    @classmethod
    def of(cls, ctx: BenchContext) -> Sizes:
        """100k chunks and 100k facts over 1,000 users; ``--large``: issue #16's 1M chunks and
        200k facts over 10,000 users (the chunks section's large set, largest user 40k)."""
        if ctx.large:
            base = cls(1_000_000, 200_000, 10_000, 40_000, QUERIES)
        else:
            base = cls(CHUNKS, FACTS, USERS, LARGEST, QUERIES)
        scale = ctx.scale
        return cls(
            chunks=max(2_000, round(base.chunks * scale)),
            facts=max(2_000, round(base.facts * scale)),
            users=max(20, round(base.users * scale)),
            largest=max(100, round(base.largest * scale)),
            queries=max(60, round(base.queries * scale)),
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
    supports_large = True

    async def run(self, ctx: BenchContext) -> SectionReport:
        started = time.perf_counter()
        report = SectionReport(
            name=self.name, title=self.title + (" at 1M chunks" if ctx.large else "")
        )
        rng = random.Random(ctx.seed)
        sizes = Sizes.of(ctx)
        tag = "search-large" if ctx.large else "search"
        async with bench_database(ctx, DATABASE, tag) as url:
            await self._run(ctx, url, report, rng, sizes, tag)
        report.seconds = time.perf_counter() - started
        return report

    async def _run(
        self,
        ctx: BenchContext,
        url: str,
        report: SectionReport,
        rng: random.Random,
        sizes: Sizes,
        tag: str,
    ) -> None:
        plans = plan_users(rng, users=sizes.users, chunks=sizes.chunks, largest=sizes.largest)
        facts = same_users(
            build_fact_set(
                rng, users=sizes.users, facts=sizes.facts, hidden_share=0.02, expiring_share=0.05
            ),
            plans,
        )
        async with loader(ctx, DATABASE) as conn:
            load = await chunks_section.bulk_load(conn, plans, ctx, tag)
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
            "sessions' summary boundaries) on one connection, the facts (10, for the "
            "freshness marks) then the sketches on another, the two concurrently; one caller; "
            f"embedding excluded (a lookup embedder), {WARMUP_CALLS} warm-up queries left out; "
            "the list runs twice and the figures are the second pass's (the first touches the "
            "users' pages for the first time since the load).",
            f"DB_POOL_SIZE={CALLERS}: the custom-plans engine's pool holds {CALLERS} "
            f"connections, the cached-plans engine's {2 * CALLERS} (a known-small user's "
            "search reads both its lanes there), warmed with five calls a caller before the "
            "8-caller run, as the raw side's connections are.",
        ]
        settings = Settings(
            _env_file=None,
            database_url=url,
            backfill_pause_seconds=0,
            chunk_index_in_background=False,
            # A unified search takes two connections: pools of CALLERS (twice that on the
            # cached-plans engine) keep the concurrent callers on open connections, as the raw
            # side's are. At the default 5
            # every connection past the fifth is opened and closed again per call (a server
            # backend started each time); the flow rows count what was opened.
            db_pool_size=CALLERS,
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
            vector_timings: list[Timing] = []
            for path in ("vector", "text"):
                ctx.log(f"search: {len(queries)} queries x 3 calls, {path} path")
                lookup.failing = path == "text"
                try:
                    with quiet_embedding_failures():
                        # Twice: the first pass is the first touch of the users' pages since
                        # the load (at 1M the first of the three calls paid it, 30x the rest);
                        # the figures are the second pass's.
                        cold = await measure(memory, embedder, clock, queries)
                        timings = await measure(memory, embedder, clock, queries)
                finally:
                    lookup.failing = False
                report.rows += timing_rows(timings, path)
                report.rows.append(
                    Row(
                        "  first pass (first touch of the users' pages): the three calls' p50",
                        " / ".join(
                            fmt_ms(percentile(values, 50))
                            for values in (
                                [t.facts for t in cold],
                                [t.chunks for t in cold],
                                [t.unified for t in cold],
                            )
                        ),
                        "ms",
                        "search_facts / search_chunks / memory.search, in that order, so "
                        "search_facts and search_chunks pay the cold pages",
                    )
                )
                if path == "vector":
                    report.targets.append(target(timings))
                    vector_timings = timings
            ctx.log(f"{tag}: {len(queries)} queries beside the same statements on raw asyncpg")
            lanes = LaneCapture({"custom": memory.engine, "cached": memory.cached_plans_engine})
            try:
                beside = await beside_raw(ctx, settings, memory, embedder, clock, lanes, queries)
                report.rows += beside.rows()
                report.rows += await same_query_again(memory, embedder, clock, queries)
                ctx.log(f"{tag}: recall-shaped searches, turn after turn")
                report.rows += await recall_turns(memory, embedder, clock, lookup, rng)
                ctx.log(f"{tag}: {CONCURRENT_QUERIES} queries, {CALLERS} callers, package and raw")
                many = [queries[i % len(queries)] for i in range(CONCURRENT_QUERIES)]
                rng.shuffle(many)
                flows = await throughput(ctx, settings, memory, lanes, many)
                report.rows += [flow.row() for flow in flows]
            finally:
                lanes.close()
            ctx.log(f"{tag}: vector recall@{RECALL_K} against exact, by user size")
            recall = await recall_by_size(memory, lookup, rng, plans, load.ids)
            report.rows += [r.row() for r in recall]
            if ctx.large or ctx.scale < 1:
                report.targets += large_targets(vector_timings, beside, flows[0], recall)
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
    # The load's dirty pages on disk before anything is timed (see chunks.bulk_load).
    await conn.execute("CHECKPOINT")
    return int(await conn.fetchval("SELECT count(*) FROM sessions") or 0)


async def measure(
    memory: Memory, embedder: TimingEmbedder, clock: SqlClock, queries: Sequence[Query]
) -> list[Timing]:
    """Each query as search_facts then search_chunks, then as one unified search; the first
    WARMUP_CALLS queries are left out. The excerpts' kept words are forgotten first (see
    forget_excerpt_words)."""
    forget_excerpt_words(memory)
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
        Row(
            "  per query: memory.search / the slower of the two alone, median",
            f"{percentile([t.unified / max(t.facts, t.chunks) for t in timings], 50):.2f}",
            "x",
            "each query's three calls made back to back, so load drifts less between them",
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


# --- beside raw asyncpg, and 8 callers ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lane:
    """What one of unified search's connections sent, in order, and which engine it came from
    ("custom": custom plans forced; "cached": plans cached)."""

    engine: str
    statements: tuple[CapturedStatement, ...]


class LaneCapture:
    """Records the statements memory.search sends on both of its engines, grouped by the
    connection (lane) that sent them, so that the same lanes can be replayed on raw asyncpg.

    Statements through SQLAlchemy are seen by its events; those sent straight to the driver
    (repositories.statements.fetch_rows) by asyncpg's query logger, one per pooled connection
    (added at checkout, once), which reports one loop turn after the statement: ``capture``
    waits that turn before it closes. A lane is the asyncpg connection either way."""

    def __init__(self, engines: Mapping[str, AsyncEngine]) -> None:
        self._captured: dict[int, tuple[str, list[CapturedStatement]]] | None = None
        self._listeners: list[tuple[Any, str, Callable[..., None]]] = []
        self._loggers: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = (
            weakref.WeakKeyDictionary()
        )
        for name, engine in engines.items():
            for target, event_name, listener in (
                (engine.sync_engine, "before_cursor_execute", self._listener(name)),
                (engine.sync_engine.pool, "checkout", self._watcher(name)),
            ):
                event.listen(target, event_name, listener)
                self._listeners.append((target, event_name, listener))

    def _record(self, name: str, driver: Any, statement: CapturedStatement) -> None:
        if self._captured is not None:
            lane = self._captured.setdefault(id(driver), (name, []))
            lane[1].append(statement)

    def _listener(self, name: str) -> Callable[..., None]:
        def before(
            conn: Connection, _cursor: Any, statement: str, parameters: Any, *_: Any
        ) -> None:
            driver = conn.connection.driver_connection
            self._record(name, driver, CapturedStatement(statement, parameters))

        return before

    def _watcher(self, name: str) -> Callable[..., None]:
        def checkout(dbapi_connection: Any, *_: Any) -> None:
            driver = getattr(dbapi_connection, "driver_connection", None)
            if driver is None or driver in self._loggers:
                return

            def logged(record: Any) -> None:
                if record.args:  # not the BEGIN/COMMIT and pings (SQLAlchemy's events skip them)
                    self._record(name, driver, CapturedStatement(record.query, record.args))

            self._loggers[driver] = logged
            driver.add_query_logger(logged)

        return checkout

    @asynccontextmanager
    async def capture(self) -> AsyncIterator[list[Lane]]:
        """The lanes of the calls made inside the block (fill the list when it ends)."""
        captured: dict[int, tuple[str, list[CapturedStatement]]] = {}
        lanes: list[Lane] = []
        self._captured = captured
        try:
            yield lanes
            await asyncio.sleep(0)  # the query loggers report one loop turn later
        finally:
            self._captured = None
            lanes.extend(Lane(name, tuple(sent)) for name, sent in captured.values())

    def close(self) -> None:
        for target, event_name, listener in self._listeners:
            event.remove(target, event_name, listener)


class RawLanes:
    """One caller's raw asyncpg connections, one per lane, each started like the engine its
    lane came from (raw_connection): replays a call's lanes concurrently, as the package runs
    them, and times the whole."""

    def __init__(self, ctx: BenchContext, settings: Settings) -> None:
        self._ctx = ctx
        self._settings = settings
        self._conns: dict[tuple[int, str], asyncpg.Connection] = {}

    async def _conn(self, position: int, engine: str) -> asyncpg.Connection:
        key = (position, engine)
        if key not in self._conns:
            self._conns[key] = await raw_connection(
                self._ctx, DATABASE, self._settings, cached_plans=engine == "cached"
            )
        return self._conns[key]

    async def run(self, lanes: Sequence[Lane]) -> float:
        conns = [await self._conn(i, lane.engine) for i, lane in enumerate(lanes)]
        started = time.perf_counter()
        await asyncio.gather(
            *(_fetch_all(conn, lane) for conn, lane in zip(conns, lanes, strict=True))
        )
        return time.perf_counter() - started

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()


async def _fetch_all(conn: asyncpg.Connection, lane: Lane) -> None:
    for statement in lane.statements:
        await conn.fetch(statement.sql, *statement.parameters)


@dataclass(frozen=True, slots=True)
class Beside:
    package: list[float]
    raw: list[float]
    statements: float
    """Statements a call sent, on average (every lane)."""
    kept: str
    """How often the measured calls found an excerpt's words kept (kept_words)."""

    @property
    def ratio(self) -> float:
        return percentile(self.package, 50) / percentile(self.raw, 50)

    def rows(self) -> list[Row]:
        def pair(values: Sequence[float]) -> str:
            return f"{fmt_ms(percentile(values, 50))} / {fmt_ms(percentile(values, 95))}"

        return [
            Row(
                "memory.search beside raw asyncpg, vector path: package p50 / p95",
                pair(self.package),
                "ms",
                f"{len(self.package)} queries, one caller, the whole call, embedding excluded",
            ),
            Row(
                "  the same statements on raw asyncpg, p50 / p95",
                pair(self.raw),
                "ms",
                f"{self.statements:.1f} statements a call as captured, each lane on its own "
                "connection (started like its engine's), the lanes concurrently; fetch only",
            ),
            Row("  package / raw p50", f"{self.ratio:.2f}", "x", "same run, order alternating"),
            Row(
                "  excerpts' words found kept (package)",
                self.kept,
                "",
                "forgotten before the measured calls (the capture pass ran the same queries): "
                "only what the list's own queries share",
            ),
        ]


async def beside_raw(
    ctx: BenchContext,
    settings: Settings,
    memory: Memory,
    embedder: TimingEmbedder,
    clock: SqlClock,
    capture: LaneCapture,
    queries: Sequence[Query],
) -> Beside:
    """Each query (vector path) through memory.search and its captured lanes on raw asyncpg,
    one after the other, which first alternating."""
    queries = queries[WARMUP_CALLS:]
    raw = RawLanes(ctx, settings)
    try:
        captured: list[list[Lane]] = []
        for query in queries:  # what each query sends (and a warm-up of both sides)
            async with capture.capture() as lanes:
                await unified(memory, query)
            captured.append(lanes)
            await raw.run(lanes)
        known = forget_excerpt_words(memory)
        package: list[float] = []
        raw_times: list[float] = []
        for index, (query, lanes) in enumerate(zip(queries, captured, strict=True)):
            raw_first = index % 2 == 1
            if raw_first:
                raw_times.append(await raw.run(lanes))
            _, sample = await timed(unified(memory, query), embedder, clock)
            package.append(sample.without_embedding)
            if not raw_first:
                raw_times.append(await raw.run(lanes))
    finally:
        await raw.close()
    sent = sum(len(lane.statements) for lanes in captured for lane in lanes)
    return Beside(package, raw_times, sent / max(1, len(captured)), kept_words(known))


def forget_excerpt_words(memory: Memory) -> ExcerptWords:
    """Unified search keeps the content words of the excerpts it marks (ExcerptWords): a call
    that repeats an earlier one (every measured list here follows a pass over the same
    queries) would find all of them kept. Forgotten before each measured list, so only what
    the list's own queries share is found."""
    known: ExcerptWords = memory.search._service.excerpt_words
    known.clear()
    return known


def kept_words(known: ExcerptWords) -> str:
    looked = known.hits + known.misses
    share = known.hits / looked if looked else 0.0
    return f"{share:.0%} of {looked:,}"


async def same_query_again(
    memory: Memory, embedder: TimingEmbedder, clock: SqlClock, queries: Sequence[Query]
) -> list[Row]:
    """Each query three times in a row: once to warm everything up, then with the excerpts'
    words forgotten (ExcerptWords cleared: found in the text or tokenized, as for an excerpt
    never marked before), then with them kept, as recall's search of the current session finds
    them turn after turn (an excerpt's words are kept from its second marking). Only the
    kept words differ between the last two calls."""
    known = memory.search._service.excerpt_words
    forgotten: list[float] = []
    kept: list[float] = []
    hits = looked = 0
    for query in queries[WARMUP_CALLS:]:
        await unified(memory, query)  # seen once: its excerpts' words not kept yet
        known.clear()
        _, sample = await timed(unified(memory, query), embedder, clock)
        forgotten.append(sample.without_embedding)
        await unified(memory, query)  # the second marking keeps them
        before = (known.hits, known.misses)
        _, sample = await timed(unified(memory, query), embedder, clock)
        kept.append(sample.without_embedding)
        hits += known.hits - before[0]
        looked += known.hits + known.misses - sum(before)
    return [
        Row(
            "memory.search, excerpts' words forgotten / kept: p50",
            f"{fmt_ms(percentile(forgotten, 50))} / {fmt_ms(percentile(kept, 50))}",
            "ms",
            f"{len(forgotten)} queries, each run warm, then with the words forgotten, then kept "
            f"(recall's next turn reading the same excerpts): {hits:,} of {looked:,} excerpts "
            "found kept in the last calls",
        )
    ]


RECALL_SESSIONS: Final = 20
"""Sessions the recall-shaped turns run in: those of at least RECALL_SESSION_CHUNKS chunks."""
RECALL_SESSION_CHUNKS: Final = 12
RECALL_TURNS: Final = 8


async def recall_turns(
    memory: Memory,
    embedder: TimingEmbedder,
    clock: SqlClock,
    lookup: chunks_section.LookupEmbedder,
    rng: random.Random,
) -> list[Row]:
    """Recall's search, turn after turn: every model call of a session searches that session's
    raw history (scope raw, as many hits as search gives: ContextBuilder asks for SEARCH_K_MAX
    plus its ledger) and marks every excerpt it finds. RECALL_TURNS queries in each of
    RECALL_SESSIONS sessions, each three words of one of the session's chunks; every turn runs
    twice, back to back, which first alternating: with the excerpts' words the session's
    earlier turns kept, and with none kept (a fresh ExcerptWords). The first turn of each
    session is left out of both."""
    async with memory.engine.connect() as conn:
        sessions = (
            await conn.execute(
                text(
                    "SELECT user_id, session_id, array_agg(content ORDER BY id) AS contents"
                    " FROM memory_chunks GROUP BY user_id, session_id"
                    " HAVING count(*) >= :least ORDER BY md5(session_id) LIMIT :sessions"
                ),
                {"least": RECALL_SESSION_CHUNKS, "sessions": RECALL_SESSIONS},
            )
        ).all()
    turns: list[tuple[uuid.UUID, str, list[str]]] = []
    for uid, sid, contents in sessions:
        queries = []
        for _ in range(RECALL_TURNS):
            words = [w for w in rng.choice(contents).split() if w.isalpha() and len(w) > 4]
            query = " ".join(rng.sample(words, min(3, len(words))))
            lookup.vectors.setdefault(query, hashed_embedding(query))
            queries.append(query)
        turns.append((uid, sid, queries))
    service = memory.search._service
    original = service.excerpt_words
    known = ExcerptWords()
    measured: dict[bool, list[float]] = {True: [], False: []}
    returned = found = looked_up = 0
    try:
        for uid, sid, queries in turns:
            known.clear()
            for turn, query in enumerate(queries):
                for keep in (True, False) if turn % 2 else (False, True):
                    service.excerpt_words = known if keep else ExcerptWords()
                    before = (known.hits, known.misses)
                    hits, sample = await timed(
                        memory.search.search(
                            query,
                            "raw",
                            SEARCH_K_MAX,
                            session_id=sid,
                            current_session_id=sid,
                            user_id=uid,
                        ),
                        embedder,
                        clock,
                    )
                    if not turn:
                        continue
                    measured[keep].append(sample.without_embedding)
                    if keep:
                        returned += len(hits)
                        found += known.hits - before[0]
                        looked_up += known.hits + known.misses - sum(before)
    finally:
        service.excerpt_words = original
    kept, forgotten = measured[True], measured[False]
    return [
        Row(
            "recall-shaped search (scope raw, k 20, one session), excerpts' words kept / "
            "forgotten: p50",
            f"{fmt_ms(percentile(kept, 50))} / {fmt_ms(percentile(forgotten, 50))}",
            "ms",
            f"{len(turns)} sessions of {RECALL_SESSION_CHUNKS}+ chunks, turns 2-{RECALL_TURNS} "
            f"of each, each turn twice back to back ({len(kept)} calls a side), "
            f"{returned / max(1, len(kept)):.1f} excerpts a call; words found kept for "
            f"{found:,} of the {looked_up:,} excerpts marked with a newer fact to compare",
        )
    ]


def unified(memory: Memory, query: Query) -> Awaitable[list[Any]]:
    return memory.search.search(query.text, "all", SEARCH_K_DEFAULT, user_id=query.user_id)


@dataclass(frozen=True, slots=True)
class Flow:
    """``callers`` concurrent callers through one series of calls."""

    how: str
    callers: int
    seconds: float
    latencies: list[float]
    opened: int | None = None
    """Connections the package's pools opened during the flow (None: not counted)."""
    client_cpu: float | None = None
    """CPU seconds this process used during the flow (the callers, the driver, the package)."""
    server_cpu: float | None = None
    """CPU seconds the server's processes used during the flow (None: not measurable here)."""
    kept: str | None = None
    """How often the flow found an excerpt's words kept (kept_words; None: not counted)."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def row(self) -> Row:
        calls = len(self.latencies)
        cpu = ""
        if self.client_cpu is not None and self.server_cpu is not None:
            cpu = (
                f"; CPU a search: client {fmt_ms(self.client_cpu / calls)} ms, server "
                f"{fmt_ms(self.server_cpu / calls)} ms"
            )
        return Row(
            f"{self.how}, {self.callers} concurrent callers: searches/s (p50 / p95 ms)",
            f"{self.rate:,.0f} ({fmt_ms(percentile(self.latencies, 50))} / "
            f"{fmt_ms(percentile(self.latencies, 95))})",
            "",
            f"{calls} calls, vector path; client and server share the 2 cores"
            + ("" if self.opened is None else f"; {self.opened} connections opened meanwhile")
            + cpu
            + ("" if self.kept is None else f"; excerpts' words found kept: {self.kept}"),
        )


async def throughput(
    ctx: BenchContext,
    settings: Settings,
    memory: Memory,
    capture: LaneCapture,
    queries: Sequence[Query],
) -> list[Flow]:
    """The same calls by CALLERS callers at once through memory.search (the lookup embedder,
    which answers from a dict, inside the timing), then their captured lanes on raw asyncpg
    (each caller its own connections)."""
    captured: list[list[Lane]] = []
    for query in queries:
        async with capture.capture() as lanes:
            await unified(memory, query)
        captured.append(lanes)

    async def package(index: int) -> float:
        started = time.perf_counter()
        await unified(memory, queries[index])
        return time.perf_counter() - started

    opened = 0

    def on_connect(*_: Any) -> None:
        nonlocal opened
        opened += 1

    # Warmed as the raw side is (five calls a caller): the pools grown to what eight callers
    # hold, each connection past its first plans. Until 2026-12-06 the package was measured
    # with cold pools (14 connections opened during the run), the raw side warm.
    await _callers("warm-up", min(len(queries), 5 * CALLERS), lambda _: package)
    known = forget_excerpt_words(memory)  # the capture pass ran the same queries
    pools = [engine.sync_engine.pool for engine in (memory.engine, memory.cached_plans_engine)]
    for pool in pools:
        event.listen(pool, "connect", on_connect)
    try:
        package_flow = await _callers("memory.search", len(queries), lambda _: package, ctx.server)
    finally:
        for pool in pools:
            event.remove(pool, "connect", on_connect)
    package_flow = dataclasses.replace(package_flow, opened=opened, kept=kept_words(known))
    raws = [RawLanes(ctx, settings) for _ in range(CALLERS)]
    try:
        for caller, raw in enumerate(raws):  # open each caller's connections (and warm them)
            for lanes in captured[caller :: len(raws)][:5]:
                await raw.run(lanes)

        def on_raw(caller: int) -> Callable[[int], Awaitable[float]]:
            return lambda index: raws[caller].run(captured[index])

        raw_flow = await _callers(
            "the same statements on raw asyncpg", len(queries), on_raw, ctx.server
        )
    finally:
        for raw in raws:
            await raw.close()
    return [package_flow, raw_flow]


async def _callers(
    how: str,
    count: int,
    call_of: Callable[[int], Callable[[int], Awaitable[float]]],
    server: BenchServer | None = None,
) -> Flow:
    """Calls 0..count-1 shared out to CALLERS tasks as each becomes free; with ``server``, the
    CPU this process and the server's processes used meanwhile."""
    latencies: list[float] = []
    next_index = iter(range(count))

    async def caller(number: int) -> None:
        call = call_of(number)
        for index in next_index:
            latencies.append(await call(index))

    server_before = server.cpu_seconds() if server is not None else None
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(caller(n) for n in range(CALLERS)))
    seconds = time.perf_counter() - started
    client = time.process_time() - client_before
    server_after = server.cpu_seconds() if server is not None else None
    used = (
        server_after - server_before
        if server_before is not None and server_after is not None
        else None
    )
    return Flow(how, CALLERS, seconds, latencies, client_cpu=client, server_cpu=used)


# --- recall -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recall:
    low: int
    high: int
    users: int
    queries: int
    found: int
    expected: int
    in_graph: int
    """Of the users drawn, how many have their vectors in the HNSW graph."""

    @property
    def recall(self) -> float:
        return self.found / max(1, self.expected)

    @property
    def span(self) -> str:
        if self.high >= 10**9:
            return f"users with {self.low:,}+ chunks"
        return f"users with {self.low:,}–{self.high:,} chunks"

    def row(self) -> Row:
        return Row(
            f"vector recall@{RECALL_K} against exact, {self.span}",
            f"{self.recall:.3f}",
            "",
            f"{self.queries} queries over {self.users} users ({self.in_graph} in the HNSW "
            f"graph); {self.found:,} of {self.expected:,}",
        )


async def recall_by_size(
    memory: Memory,
    lookup: chunks_section.LookupEmbedder,
    rng: random.Random,
    plans: Sequence[UserPlan],
    ids: Sequence[Sequence[int]],
) -> list[Recall]:
    """For users drawn from each size bucket, queries made from their chunks: the nearest
    RECALL_K of the package's own statement (the vector list search_chunks and memory.search
    fuse, before the distance cut-off) against an exact scan of the user's vectors of record
    (memory_chunks.embedding, no vector index there)."""
    exact_sql = text(
        "SELECT id FROM memory_chunks WHERE user_id = :uid AND embedding IS NOT NULL "
        "ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"
    )
    results: list[Recall] = []
    for low, high in RECALL_BUCKETS:
        members = [u for u, plan in enumerate(plans) if low <= plan.size <= high]
        if not members:
            continue
        picked = rng.sample(members, min(RECALL_USERS, len(members)))
        users = [u for u in picked for _ in range(RECALL_QUERIES_PER_USER)]
        queries = await chunks_section.make_queries(memory, lookup, rng, plans, ids, users)
        found = expected = 0
        async with memory.engine.connect() as conn:
            repo = ChunkSearchRepository(session=conn)
            graph = await conn.execute(
                text(
                    "SELECT count(DISTINCT user_id) FROM memory_chunk_vectors "
                    "WHERE in_graph AND user_id = ANY(:uids)"
                ),
                {"uids": [plans[u].user_id for u in picked]},
            )
            in_graph = int(graph.scalar_one())
            for query in queries:
                vector = lookup.vectors[query.text]
                terms = plan_search(query.text, "raw", RECALL_K).terms
                nearest, _ = await repo.search_ranked(
                    query.user_id, None, vector, terms, RECALL_K, k1=CHUNK_BM25_K1, b=CHUNK_BM25_B
                )
                exact = await conn.execute(
                    exact_sql, {"uid": query.user_id, "q": str(vector), "k": RECALL_K}
                )
                want = {int(row[0]) for row in exact}
                expected += len(want)
                found += len(want & {int(row["id"]) for row in nearest})
            await conn.rollback()
        results.append(Recall(low, high, len(picked), len(queries), found, expected, in_graph))
    return results


def large_targets(
    timings: Sequence[Timing], beside: Beside, flow: Flow, recall: Sequence[Recall]
) -> list[Target]:
    """Issue #16's bars for unified search at 1M chunks (shown for the large and quick runs)."""
    unified_times = [t.unified for t in timings]
    p50, p95 = percentile(unified_times, 50), percentile(unified_times, 95)
    worst = min(recall, key=lambda r: r.recall)
    return [
        Target(
            name="memory.search p50 / p95, one caller, vector path, embedding excluded",
            goal=f"<= {fmt_ms(LARGE_P50)} / {fmt_ms(LARGE_P95)} ms",
            measured=f"{fmt_ms(p50)} / {fmt_ms(p95)} ms",
            met=p50 <= LARGE_P50 and p95 <= LARGE_P95,
        ),
        Target(
            name=f"memory.search with {flow.callers} concurrent callers",
            goal=f">= {LARGE_RATE:,.0f} searches/s",
            measured=f"{flow.rate:,.0f} searches/s",
            met=flow.rate >= LARGE_RATE,
        ),
        Target(
            name="memory.search package / raw asyncpg p50, same run",
            goal=f"<= {RAW_RATIO:.1f}x",
            measured=(
                f"{fmt_ms(percentile(beside.package, 50))} / "
                f"{fmt_ms(percentile(beside.raw, 50))} ms = {beside.ratio:.2f}x"
            ),
            met=beside.ratio <= RAW_RATIO,
        ),
        Target(
            name=f"vector recall@{RECALL_K} against exact, every user size",
            goal=f">= {RECALL_TARGET}",
            measured=f"lowest {worst.recall:.3f} ({worst.span})",
            met=worst.recall >= RECALL_TARGET,
        ),
    ]
