"""The facts section: 100k facts over 1,000 users, measured through MemoryStore's public calls —
upsert_fact per second (dedupe off and on), search_facts latency without the embedding time,
backfill_embeddings rows per second, the fact indexer's vectors per second — and the plans
PostgreSQL picks for the per-user queries.

Beside the package, in the same run, the same statements on one raw asyncpg connection (the
same server settings, the same binary vector codec): search_facts' captured statement per
query, order rotated, and for upsert_fact with dedupe the one upsert statement with the
parameters the package would bind, calls interleaved with the package's."""

from __future__ import annotations

import logging
import os
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal

import asyncpg
from pgvector import Vector
from sqlalchemy import text

from benchmarks.facts_data import (
    FactSeed,
    FactSet,
    SeededRow,
    build_fact_set,
    camel_spelling,
    new_fact,
)
from benchmarks.harness import (
    BenchContext,
    CapturedStatement,
    Plan,
    Row,
    Sample,
    SectionReport,
    SqlClock,
    Target,
    TimingEmbedder,
    fmt_count,
    fmt_ms,
    fmt_rate,
    percentile,
    timed,
)
from benchmarks.sections import (
    WARMUP_CALLS,
    bench_database,
    latency_rows,
    loader,
    p50_p95,
    raw_connection,
    raw_fetch,
    relation_sizes,
    replay_explained,
    summarize_plan,
    timed_memory,
)
from navi_memory import (
    EMBEDDING_DIM,
    PERMISSION_READ_ALL,
    Memory,
    Settings,
    request_context,
)
from navi_memory.constants import DEFAULT_CONFIDENCE
from navi_memory.db import ensure_trgm_indexes
from navi_memory.llm import embedding_text_for_fact
from navi_memory.repositories.facts import UPSERT, upsert_parameters
from navi_memory.services.facts import FactWrite, key_norm, upsert_statement
from navi_memory.testing import HashedEmbedder, hashed_embedding

__all__ = ["SECTION", "FactsSection"]

DATABASE: Final = "bench_facts"
FACTS: Final = 100_000
USERS: Final = 1_000
HIDDEN_SHARE: Final = 0.02
"""Older spellings hidden behind a visible fact (merged_into), as dedupe leaves them."""
EXPIRING_SHARE: Final = 0.05
"""Facts with an expiry; half of those have passed it."""
LOAD_BATCH: Final = 5_000
UPSERT_CALLS: Final = 2_000
SEARCH_QUERIES: Final = 400
LARGE_USER_QUERIES: Final = 60
GLOBAL_QUERIES: Final = 30
"""search_facts across every user (read_all): an operator's search, slow and rarely run."""
LARGEST_USERS: Final = 10
BACKFILL_ROWS: Final = 10_000
BACKFILL_BATCHES: Final = (64, 8)
SEARCH_P50_TARGET: Final = 0.005
"""The issue's target: search_facts p50 <= 5 ms at 100k facts, embedding excluded."""
RAW_RATIO_TARGET: Final = 1.3
"""Issue 16: package / raw asyncpg p50 for search_facts, in the same run."""
UPSERT_RATE_TARGET: Final = 1_000.0
"""Issue 16: upsert_fact with dedupe, one caller, calls per second (embedding excluded)."""
REINDEX_ROWS: Final = 5_000
"""Facts queued again (their index copy replaced) to time the fact indexer."""
PER_USER_BTREE: Final = "uq_memory_facts_user_id_category_key"

UpsertKind = Literal["new key", "other spelling", "new value", "same value"]
UPSERT_MIX: Final[tuple[tuple[UpsertKind, int], ...]] = (
    ("new key", 35),
    ("other spelling", 10),
    ("new value", 40),
    ("same value", 15),
)
QueryKind = Literal["meaning", "identifier"]
_WORD = re.compile(r"[^\W_]+")


class FactsSection:
    name = "facts"
    title = "Facts: upsert_fact, search_facts, backfill_embeddings"
    supports_large = False

    async def run(self, ctx: BenchContext) -> SectionReport:
        started = time.perf_counter()
        report = SectionReport(name=self.name, title=self.title)
        load_before = os.getloadavg()
        rng = random.Random(ctx.seed)
        sizes = Sizes.scaled(ctx.scale)

        async with bench_database(ctx, DATABASE, "facts") as url:
            await self._run(ctx, url, report, rng, sizes)
        report.seconds = time.perf_counter() - started
        load_after = os.getloadavg()
        report.setup.append(
            "Machine load (1/5/15-minute load averages, all processes of the machine): "
            f"{'/'.join(f'{x:.2f}' for x in load_before)} at the start, "
            f"{'/'.join(f'{x:.2f}' for x in load_after)} at the end."
        )
        return report

    async def _run(
        self, ctx: BenchContext, url: str, report: SectionReport, rng: random.Random, sizes: Sizes
    ) -> None:
        ctx.log(f"facts: generating {sizes.facts:,} facts over {sizes.users:,} users")
        data = build_fact_set(
            rng,
            users=sizes.users,
            facts=sizes.facts,
            hidden_share=HIDDEN_SHARE,
            expiring_share=EXPIRING_SHARE,
        )
        async with loader(ctx, DATABASE) as conn:
            load = await bulk_load(conn, data, ctx)
        held = data.sizes()
        report.setup += [
            f"{fmt_count(len(data.rows))} rows in memory_facts: {fmt_count(sizes.facts)} visible "
            f"facts over {fmt_count(sizes.users)} users (log-normal sizes: min {held[0]}, median "
            f"{held[len(held) // 2]}, max {held[-1]} facts), plus "
            f"{fmt_count(len(data.rows) - sizes.facts)} older spellings hidden behind them; "
            f"{EXPIRING_SHARE:.0%} carry an expiry, half of them passed.",
            f"Bulk load (binary COPY with memory_facts' triggers off, keys' canonical forms and "
            f"hashed embeddings computed on the way, every vector copied into "
            f"memory_fact_vectors): {load.copy_seconds:.1f} s; VACUUM ANALYZE: "
            f"{load.analyze_seconds:.1f} s.",
        ]

        # The fact indexer runs when a measurement asks (index_pending_facts), so that one
        # caller's figures are that caller's; upserts_with_the_indexer turns it on.
        settings = Settings(
            _env_file=None,
            database_url=url,
            backfill_pause_seconds=0,
            fact_index_in_background=False,
        )
        embedder = TimingEmbedder(HashedEmbedder())
        async with timed_memory(settings, embedder) as (memory, clock):
            report.setup.append(
                f"navi-memory: hnsw_ef_search {settings.hnsw_ef_search}, "
                "fact searches on the engine with plan_cache_mode force_generic_plan, the rest "
                "on the one with force_custom_plan (db.py); one caller, calls one after "
                "another; embedder: HashedEmbedder (in-process) behind a timing wrapper; the "
                "fact indexer drained between measurements (in the background only where "
                "said). Raw asyncpg: one connection with the fact-search engine's server "
                "settings and its binary vector codec (upserts: the other's)."
            )
            report.setup.append(await relation_sizes(memory, SIZE_PARTS))
            raw = await raw_connection(ctx, DATABASE, settings, cached_plans=True)
            try:
                bench = FactsBench(memory, clock, embedder, data, report, ctx, rng, sizes, raw)
                await bench.plans()
                await bench.search()
                await bench.search_with_trgm()
                await bench.upserts()
                await bench.upserts_without_fsync(settings)
                await bench.upserts_with_the_indexer(settings)
                await bench.reindex()
                await bench.backfill()
            finally:
                await raw.close()
        # After the pool is closed every backend has flushed its statistics.
        report.setup.append(await update_statistics(ctx))


SECTION = FactsSection()


@dataclass(frozen=True, slots=True)
class Sizes:
    facts: int
    users: int
    upserts: int
    queries: int
    backfill_rows: int

    @classmethod
    def scaled(cls, scale: float) -> Sizes:
        return cls(
            facts=max(2_000, round(FACTS * scale)),
            users=max(20, round(USERS * scale)),
            upserts=max(100, round(UPSERT_CALLS * scale)),
            queries=max(100, round(SEARCH_QUERIES * scale)),
            backfill_rows=max(500, round(BACKFILL_ROWS * scale)),
        )


class FactsBench:
    """The measurements, in the order run() calls them, on one loaded database."""

    def __init__(
        self,
        memory: Memory,
        clock: SqlClock,
        embedder: TimingEmbedder,
        data: FactSet,
        report: SectionReport,
        ctx: BenchContext,
        rng: random.Random,
        sizes: Sizes,
        raw: asyncpg.Connection,
    ) -> None:
        self.memory = memory
        self.raw = raw
        self.clock = clock
        self.embedder = embedder
        self.data = data
        self.report = report
        self.ctx = ctx
        self.rng = rng
        self.sizes = sizes
        self.by_size = sorted(data.users, key=lambda uid: len(data.visible[uid]))
        self.workload = make_queries(rng, data, data.users, sizes.queries + WARMUP_CALLS)

    def _label(self, uid: uuid.UUID, what: str) -> str:
        return f"{what} ({len(self.data.visible[uid])} facts)"

    async def plans(self) -> None:
        """EXPLAIN ANALYZE of the vector query for a small, a median and the largest user."""
        self.ctx.log("facts: EXPLAIN ANALYZE of the search queries")
        picks = (
            ("smallest user", self.by_size[0]),
            ("median user", self.by_size[len(self.by_size) // 2]),
            ("largest user", self.by_size[-1]),
        )
        for what, uid in picks:
            query = meaning_query(self.rng, self.data.visible[uid])
            self.report.plans += await explain_search(
                self.memory, self.clock, uid, query, self._label(uid, what)
            )
        # A global read (read_all, no user): an exact scan of memory_fact_vectors (0020).
        uid = picks[1][1]
        query = meaning_query(self.rng, self.data.visible[uid])
        with request_context(permissions=[PERMISSION_READ_ALL]):
            self.report.plans += await explain_search(
                self.memory, self.clock, None, query, "every user's facts (read_all)"
            )
        mid = self.by_size[len(self.by_size) // 2]
        query = identifier_query(self.rng, self.data.visible[mid]) or "nothing"
        self.report.plans += await explain_search(
            self.memory, self.clock, mid, query, self._label(mid, "median user"), vector=False
        )

    async def search(self) -> None:
        ctx, data = self.ctx, self.data
        ctx.log(f"facts: search_facts x {self.sizes.queries} (+{WARMUP_CALLS} warm-up)")
        searched = await self._searches(self.workload)
        self.report.rows += search_rows(searched, "search_facts", detail_hits=True)
        await self.search_beside_raw()
        await self.search_every_user()

        largest = self.by_size[-LARGEST_USERS:]
        big = await self._searches(
            make_queries(self.rng, data, largest, LARGE_USER_QUERIES + WARMUP_CALLS)
        )
        held = [len(data.visible[uid]) for uid in largest]
        self.report.rows += search_rows(
            big,
            f"search_facts, the {LARGEST_USERS} largest users ({min(held)}-{max(held)} facts)",
            overall_only=True,
        )
        p50 = percentile([s.without_embedding for _, s, _ in searched], 50)
        self.report.targets.append(
            Target(
                name=(
                    f"search_facts p50, {fmt_count(self.sizes.facts)} facts, embedding excluded "
                    "(default schema)"
                ),
                goal=f"<= {fmt_ms(SEARCH_P50_TARGET)} ms",
                measured=f"{fmt_ms(p50)} ms",
                met=p50 <= SEARCH_P50_TARGET,
            )
        )

    async def search_every_user(self) -> None:
        """search_facts across every user's facts (read_all, no user): an operator's search,
        the one path that read the fact vectors' HNSW graph before revision 0020."""
        queries = self.workload[: GLOBAL_QUERIES + WARMUP_CALLS]
        self.ctx.log(f"facts: search_facts across every user x {GLOBAL_QUERIES}")
        times: list[float] = []
        with request_context(permissions=[PERMISSION_READ_ALL]):
            for index, query in enumerate(queries):
                _, sample = await timed(
                    self.memory.store.search_facts(query.text), self.embedder, self.clock
                )
                if index >= WARMUP_CALLS:
                    times.append(sample.without_embedding)
        self.report.rows.append(
            p50_p95(
                "search_facts across every user (read_all, no user)",
                times,
                f"{len(times)} of the queries above, embedding excluded",
            )
        )

    async def search_beside_raw(self) -> None:
        """Each query through the package and its captured statement on raw asyncpg, one after
        the other, which first alternating; the package's time is the whole call, embedding
        excluded, the raw one the fetch alone."""
        queries = self.workload[WARMUP_CALLS:]
        self.ctx.log(f"facts: search_facts beside raw asyncpg x {len(queries)}")
        statements: list[CapturedStatement] = []
        for query in queries:  # the statement each query sends (and a warm-up of both)
            async with self.clock.capture() as sent:
                await self.memory.store.search_facts(query.text, user_id=query.user_id)
            (statement,) = sent
            statements.append(statement)
            await raw_fetch(self.raw, statement)
        package: list[float] = []
        raw: list[float] = []
        for index, (query, statement) in enumerate(zip(queries, statements, strict=True)):
            raw_first = index % 2 == 1
            if raw_first:
                raw.append(await raw_fetch(self.raw, statement))
            _, sample = await timed(
                self.memory.store.search_facts(query.text, user_id=query.user_id),
                self.embedder,
                self.clock,
            )
            package.append(sample.without_embedding)
            if not raw_first:
                raw.append(await raw_fetch(self.raw, statement))
        ratio = percentile(package, 50) / percentile(raw, 50)
        self.report.rows += [
            p50_p95(
                "search_facts beside raw: package",
                package,
                f"{len(package)} queries, the whole call, embedding excluded",
            ),
            p50_p95(
                "  the same statement on raw asyncpg",
                raw,
                "fetch only; same server settings, binary vector codec",
            ),
            Row("  package / raw p50", f"{ratio:.2f}", "x", "same run, order alternating"),
        ]
        self.report.targets.append(
            Target(
                name="search_facts package / raw asyncpg p50, same run",
                goal=f"<= {RAW_RATIO_TARGET:.1f}x",
                measured=(
                    f"{fmt_ms(percentile(package, 50))} / {fmt_ms(percentile(raw, 50))} ms "
                    f"= {ratio:.2f}x"
                ),
                met=ratio <= RAW_RATIO_TARGET,
            )
        )

    async def search_with_trgm(self) -> None:
        """The same queries with pg_trgm installed (its GIN indexes may serve the ILIKE pass);
        dropped again afterwards, so the writes run on the default schema."""
        self.ctx.log("facts: installing pg_trgm and its indexes, searching again")
        engine = self.memory.engine
        async with engine.begin() as conn:
            await conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
        started = time.perf_counter()
        created = await ensure_trgm_indexes(engine)
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE memory_facts"))
        self.report.setup.append(
            f"pg_trgm run: {len(created)} trigram GIN indexes built in "
            f"{time.perf_counter() - started:.1f} s, then the same queries again; pg_trgm is "
            "dropped afterwards, so the writes run on the default schema."
        )
        mid = self.by_size[len(self.by_size) // 2]
        query = identifier_query(self.rng, self.data.visible[mid]) or "nothing"
        self.report.plans += await explain_search(
            self.memory,
            self.clock,
            mid,
            query,
            self._label(mid, "median user") + ", pg_trgm installed",
            vector=False,
        )
        searched = await self._searches(self.workload)
        self.report.rows += search_rows(searched, "search_facts, pg_trgm installed")
        async with engine.begin() as conn:
            await conn.execute(text("DROP EXTENSION pg_trgm CASCADE"))

    async def upserts(self) -> None:
        count = self.sizes.upserts + WARMUP_CALLS
        self.ctx.log(f"facts: upsert_fact x {count}, dedupe=False")
        ops = make_upserts(self.rng, self.data, count)
        off = await run_upserts(self.memory, self.embedder, self.clock, ops, dedupe=False)
        await self.memory.store.index_pending_facts()
        self.ctx.log(f"facts: upsert_fact x {count}, dedupe=True, beside raw asyncpg")
        # One stream of writes, every other one sent raw: both see the same data.
        ops = make_upserts(self.rng, self.data, 2 * count)
        on, beside = await run_upserts_beside_raw(
            self.memory, self.embedder, self.clock, self.raw, ops
        )
        await self.memory.store.index_pending_facts()
        self.report.rows += upsert_rows({False: off, True: on})
        self.report.rows += beside.rows()
        self.report.targets.append(
            Target(
                name="upsert_fact with dedupe, one caller, embedding excluded",
                goal=f">= {UPSERT_RATE_TARGET:,.0f} calls/s",
                measured=(
                    f"{fmt_rate(beside.package_rate)} calls/s (the same statement on raw "
                    f"asyncpg: {fmt_rate(beside.raw_rate)}/s)"
                ),
                met=beside.package_rate >= UPSERT_RATE_TARGET,
            )
        )

    async def upserts_without_fsync(self, settings: Settings) -> None:
        """upsert_fact with dedupe through a second Memory opened with DB_SYNCHRONOUS_COMMIT=off,
        then the same statement on raw asyncpg with synchronous_commit off: how much of a call
        is the commit's WAL flush, and what the opt-in setting buys the package."""
        count = self.sizes.upserts + WARMUP_CALLS
        self.ctx.log(f"facts: upsert_fact x {count}, dedupe=True, DB_SYNCHRONOUS_COMMIT=off")
        ops = make_upserts(self.rng, self.data, count)
        off = settings.model_copy(update={"db_synchronous_commit": "off"})
        embedder = TimingEmbedder(HashedEmbedder())
        async with timed_memory(off, embedder) as (memory, clock):
            done, _ = await run_upserts(memory, embedder, clock, ops, dedupe=True)
        package = [sample.without_embedding for _, sample in done]
        package_rate = len(package) / sum(package)
        self.report.rows.append(
            Row(
                "upsert_fact, dedupe on, DB_SYNCHRONOUS_COMMIT=off",
                fmt_rate(package_rate),
                "calls/s",
                f"{len(package)} calls, embedding excluded; p50 "
                f"{fmt_ms(percentile(package, 50))} ms, p95 {fmt_ms(percentile(package, 95))} "
                "ms: the opt-in setting (docs/config.md), commits not waiting for the flush",
            )
        )
        self.report.targets.append(
            Target(
                name="upsert_fact with dedupe, one caller, DB_SYNCHRONOUS_COMMIT=off (opt-in)",
                goal=f">= {UPSERT_RATE_TARGET:,.0f} calls/s",
                measured=f"{fmt_rate(package_rate)} calls/s",
                met=package_rate >= UPSERT_RATE_TARGET,
            )
        )
        count = self.sizes.upserts // 2 + WARMUP_CALLS
        ops = make_upserts(self.rng, self.data, count)
        compiled = UPSERT.compile(dialect=self.memory.engine.dialect)
        names = list(compiled.positiontup or ())
        conn = await raw_connection(self.ctx, DATABASE, settings, synchronous_commit=False)
        times: list[float] = []
        try:
            for index, op in enumerate(ops):
                params = upsert_parameters(upsert_statement(raw_write(op), dedupe=True))
                args = [params[name] for name in names]
                started = time.perf_counter()
                await conn.fetchrow(compiled.string, *args)
                if index >= WARMUP_CALLS:
                    times.append(time.perf_counter() - started)
        finally:
            await conn.close()
        await self.memory.store.index_pending_facts()
        self.report.rows.append(
            Row(
                "  the same statement, raw, synchronous_commit off",
                fmt_rate(len(times) / sum(times)),
                "calls/s",
                f"{len(times)} calls; p50 {fmt_ms(percentile(times, 50))} ms: what is left "
                "without the commit's WAL flush",
            )
        )

    async def upserts_with_the_indexer(self, settings: Settings) -> None:
        """upsert_fact with dedupe again, with the background fact indexer on (the default):
        what one caller sustains while the index keeps up, and the backlog it leaves."""
        count = self.sizes.upserts + WARMUP_CALLS
        self.ctx.log(f"facts: upsert_fact x {count}, dedupe=True, background indexer on")
        ops = make_upserts(self.rng, self.data, count)
        background = settings.model_copy(update={"fact_index_in_background": True})
        embedder = TimingEmbedder(HashedEmbedder())
        async with timed_memory(background, embedder) as (memory, clock):
            indexer = memory.store._fact_indexer
            batches = indexer.batches_run
            (done, outcomes) = await run_upserts(memory, embedder, clock, ops, dedupe=True)
            batches = indexer.batches_run - batches
            backlog = await memory.store.pending_fact_count()
            started = time.perf_counter()
            await memory.store.index_pending_facts()
            drained = time.perf_counter() - started
        times = [sample.without_embedding for _, sample in done]
        rate = len(times) / sum(times)
        self.report.rows += [
            Row(
                "upsert_fact, dedupe on, background indexer on",
                fmt_rate(rate),
                "calls/s",
                f"{len(times)} calls, embedding excluded; p50 {fmt_ms(percentile(times, 50))} "
                f"ms, p95 {fmt_ms(percentile(times, 95))} ms; the indexer's statements share "
                f"the engine, so no SQL split here; the indexer ran {batches:,} batches "
                f"meanwhile ({len(times) / max(1, batches):.1f} calls a batch)",
            ),
            Row(
                "  fact index backlog at the end",
                fmt_count(backlog),
                "facts",
                f"drained {drained:.2f} s later; outcomes: "
                + ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())),
            ),
        ]

    async def reindex(self) -> None:
        """The fact indexer's rate: REINDEX_ROWS random facts queued again, then drained (each
        index copy replaced, batches of 64, each a transaction; no graph since revision 0020)."""
        store = self.memory.store
        await store.index_pending_facts()
        async with self.memory.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO memory_fact_vector_queue (fact_id, user_id) "
                    "SELECT id, user_id FROM memory_facts WHERE embedding IS NOT NULL "
                    "ORDER BY random() LIMIT :n ON CONFLICT (fact_id) DO NOTHING"
                ),
                {"n": REINDEX_ROWS},
            )
        queued = await store.pending_fact_count()
        self.ctx.log(f"facts: the fact indexer moves {queued:,} queued vectors")
        started = time.perf_counter()
        moved = await store.index_pending_facts()
        seconds = time.perf_counter() - started
        self.report.rows.append(
            Row(
                "fact indexer",
                fmt_rate(moved / seconds),
                "vectors/s",
                f"{fmt_count(moved)} queued facts moved into memory_fact_vectors (no graph, "
                f"{fmt_count(self.sizes.facts)} facts) in {seconds:.1f} s, batches of "
                f"{self.memory.settings.fact_index_batch_size}, one transaction each",
            )
        )

    async def backfill(self) -> None:
        done: list[tuple[int, int, Sample]] = []
        for batch in BACKFILL_BATCHES:
            self.ctx.log(
                f"facts: backfill_embeddings of {self.sizes.backfill_rows:,} rows, "
                f"batch_size={batch}"
            )
            await self.memory.store.index_pending_facts()
            await null_embeddings(self.memory, self.rng, self.sizes.backfill_rows)
            filled, sample = await timed(
                self.memory.store.backfill_embeddings(batch, pause_seconds=0),
                self.embedder,
                self.clock,
            )
            done.append((batch, filled, sample))
        self.report.rows += backfill_rows_of(done)
        await self.memory.store.index_pending_facts()

    async def _searches(
        self, queries: Sequence[Query]
    ) -> list[tuple[Query, Sample, SearchOutcome]]:
        results: list[tuple[Query, Sample, SearchOutcome]] = []
        for index, query in enumerate(queries):
            hits, sample = await timed(
                self.memory.store.search_facts(query.text, user_id=query.user_id),
                self.embedder,
                self.clock,
            )
            if index >= WARMUP_CALLS:
                vector = sum(1 for hit in hits if hit.via == "vector")
                results.append((query, sample, SearchOutcome(vector, len(hits) - vector)))
        return results


# --- loading ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadTimes:
    copy_seconds: float
    analyze_seconds: float


FACT_COLUMNS: Final = (
    "id",
    "user_id",
    "category",
    "key",
    "key_norm",
    "value",
    "embedding",
    "source",
    "confidence",
    "expires_at",
    "last_verified_at",
    "source_context",
    "merged_into",
    "created_at",
    "updated_at",
)


def _records(rows: Iterable[SeededRow]) -> list[tuple[object, ...]]:
    records: list[tuple[object, ...]] = []
    for row in rows:
        fact = row.fact
        embedded = embedding_text_for_fact(fact.category, fact.key, fact.value)
        records.append(
            (
                row.id,
                row.user_id,
                fact.category,
                fact.key,
                key_norm(fact.key),
                fact.value,
                Vector(hashed_embedding(embedded)),
                row.source,
                row.confidence,
                row.expires_at,
                row.updated_at,
                None,
                row.merged_into,
                row.updated_at - timedelta(days=row.id % 30),
                row.updated_at,
            )
        )
    return records


async def bulk_load(conn: asyncpg.Connection, data: FactSet, ctx: BenchContext) -> LoadTimes:
    """Users, then facts by binary COPY with memory_facts' triggers off (their vectors go into
    memory_fact_vectors in one INSERT … SELECT, not through the queue). Keys get their
    canonical forms, as upsert_fact writes them."""
    started = time.perf_counter()
    async with conn.transaction():
        await conn.execute("ALTER TABLE memory_facts DISABLE TRIGGER USER")
        await conn.copy_records_to_table(
            "navi_users",
            records=[(uid, f"bench user {i}") for i, uid in enumerate(data.users)],
            columns=["id", "name"],
        )
        for start in range(0, len(data.rows), LOAD_BATCH):
            await conn.copy_records_to_table(
                "memory_facts",
                records=_records(data.rows[start : start + LOAD_BATCH]),
                columns=list(FACT_COLUMNS),
            )
            if (start // LOAD_BATCH) % 5 == 4:
                ctx.log(f"facts: loaded {start + LOAD_BATCH:,} rows")
        await conn.execute(
            "INSERT INTO memory_fact_vectors (fact_id, user_id, embedding) "
            f"SELECT id, user_id, CAST(l2_normalize(embedding) AS halfvec({EMBEDDING_DIM})) "
            "FROM memory_facts WHERE embedding IS NOT NULL"
        )
        await conn.execute("ALTER TABLE memory_facts ENABLE TRIGGER USER")
        await conn.execute(
            "SELECT setval(pg_get_serial_sequence('memory_facts', 'id'), max(id)) FROM memory_facts"
        )
    copied = time.perf_counter()
    await conn.execute("VACUUM (ANALYZE) navi_users, memory_facts, memory_fact_vectors")
    return LoadTimes(copied - started, time.perf_counter() - copied)


SIZE_PARTS: Final = (
    ("table", "pg_relation_size('memory_facts')"),
    (
        "TOAST (the vectors)",
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'memory_facts'",
    ),
    ("memory_fact_vectors", "pg_relation_size('memory_fact_vectors')"),
    ("per-user btree", f"pg_relation_size('{PER_USER_BTREE}')"),
)
"""What relation_sizes reports for this section."""


async def update_statistics(ctx: BenchContext) -> str:
    """How many updates of memory_facts were HOT (no new index entry)."""
    conn = await ctx.server.connect(DATABASE)
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'memory_facts'"
        )
    finally:
        await conn.close()
    updated, hot = (int(row[0]), int(row[1])) if row else (0, 0)
    return (
        f"Row updates of memory_facts over the whole run: {fmt_count(updated)}, of which HOT "
        f"{fmt_count(hot)} (fillfactor 90, and no HNSW index on the table: a re-verification "
        "or a new value adds no index entry unless an indexed column changes)."
    )


# --- search -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    kind: QueryKind
    user_id: uuid.UUID
    text: str


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    vector_hits: int
    text_hits: int


def meaning_query(rng: random.Random, facts: Sequence[FactSeed]) -> str:
    """The words of one of the user's facts, shuffled, one dropped: what the hashed embedder can
    call "the same meaning" (it knows shared words, not synonyms)."""
    fact = rng.choice(facts)
    words = _WORD.findall(f"{fact.key} {fact.value}")
    if len(words) > 3:
        words.pop(rng.randrange(len(words)))
    rng.shuffle(words)
    return " ".join(words)


def identifier_query(rng: random.Random, facts: Sequence[FactSeed]) -> str | None:
    """An exact identifier the user holds (a host, address, ticket, flight), if any."""
    found = [fact.identifier for fact in facts if fact.identifier]
    return rng.choice(found) if found else None


def make_queries(
    rng: random.Random, data: FactSet, users: Sequence[uuid.UUID], count: int
) -> list[Query]:
    """Random users; 60% queries by meaning, 40% by an exact identifier of theirs."""
    queries: list[Query] = []
    while len(queries) < count:
        uid = rng.choice(users)
        identifier = identifier_query(rng, data.visible[uid]) if rng.random() < 0.4 else None
        if identifier is not None:
            queries.append(Query("identifier", uid, identifier))
        else:
            queries.append(Query("meaning", uid, meaning_query(rng, data.visible[uid])))
    return queries


def search_rows(
    results: Sequence[tuple[Query, Sample, SearchOutcome]],
    label: str,
    *,
    detail_hits: bool = False,
    overall_only: bool = False,
) -> list[Row]:
    rows = latency_rows(label, [sample for _, sample, _ in results])
    if overall_only:
        return rows
    for kind in ("meaning", "identifier"):
        picked = [(s, o) for q, s, o in results if q.kind == kind]
        if not picked:
            continue
        kind_times = [s.without_embedding for s, _ in picked]
        detail = f"{len(picked)} queries"
        if detail_hits:
            with_vector = sum(1 for _, o in picked if o.vector_hits)
            hits = sum(o.vector_hits + o.text_hits for _, o in picked) / len(picked)
            detail += (
                f"; {with_vector / len(picked):.0%} with a vector hit, {hits:.1f} hits per query"
            )
        rows.append(p50_p95(f"  {kind} queries", kind_times, detail))
    return rows


# --- upsert -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Upsert:
    kind: UpsertKind
    user_id: uuid.UUID
    category: str
    key: str
    value: str


def make_upserts(rng: random.Random, data: FactSet, count: int) -> list[Upsert]:
    """Writes on random users: new keys, other spellings of a key they hold, new values for
    held keys, and the same value again (a re-verification). Keeps ``data`` up to date."""
    kinds, weights = zip(*UPSERT_MIX, strict=True)
    ops: list[Upsert] = []
    while len(ops) < count:
        uid = rng.choice(data.users)
        facts = data.visible[uid]
        kind: UpsertKind = rng.choices(kinds, weights)[0]
        if kind == "new key":
            fact = new_fact(rng, data.taken[uid])
            facts.append(fact)
            ops.append(Upsert(kind, uid, fact.category, fact.key, fact.value))
            continue
        index = rng.randrange(len(facts))
        held = facts[index]
        if kind == "other spelling":
            spelled = camel_spelling(held.key)
            if spelled == held.key or (held.category, spelled) in data.taken[uid]:
                continue
            data.taken[uid].add((held.category, spelled))
            ops.append(Upsert(kind, uid, held.category, spelled, new_fact(rng, set()).value))
            continue
        value = held.value
        if kind == "new value":
            value = new_fact(rng, set()).value
            facts[index] = FactSeed(held.category, held.key, value, held.identifier)
        ops.append(Upsert(kind, uid, held.category, held.key, value))
    return ops


class OutcomeCounter(logging.Handler):
    """Counts MemoryStore's ``memory.fact_<outcome>`` debug events: what each upsert did."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.outcomes: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("memory.fact_"):
            self.outcomes[message.removeprefix("memory.fact_")] += 1


async def run_upserts(
    memory: Memory,
    embedder: TimingEmbedder,
    clock: SqlClock,
    ops: Sequence[Upsert],
    *,
    dedupe: bool,
) -> tuple[list[tuple[UpsertKind, Sample]], Counter[str]]:
    """The writes one after another; the samples and outcomes after the warm-up calls."""
    results: list[tuple[UpsertKind, Sample]] = []
    logger = logging.getLogger("navi_memory.facades.store")
    counter = OutcomeCounter()
    level = logger.level
    try:
        for index, op in enumerate(ops):
            if index == WARMUP_CALLS:
                logger.addHandler(counter)
                logger.setLevel(logging.DEBUG)
            _, sample = await timed(
                memory.store.upsert_fact(
                    op.category, op.key, op.value, user_id=op.user_id, dedupe=dedupe
                ),
                embedder,
                clock,
            )
            if index >= WARMUP_CALLS:
                results.append((op.kind, sample))
    finally:
        logger.removeHandler(counter)
        logger.setLevel(level)
    return results, counter.outcomes


@dataclass(slots=True)
class BesideRaw:
    """upsert_fact with dedupe beside the same statement on raw asyncpg."""

    package: list[float]
    """Each package call, embedding excluded (s)."""
    raw: list[float]
    """Each raw call: the fetch alone (s)."""
    statements: int
    """Statements the package's calls sent."""
    raw_actions: Counter[str]

    @property
    def package_rate(self) -> float:
        return len(self.package) / sum(self.package)

    @property
    def raw_rate(self) -> float:
        return len(self.raw) / sum(self.raw)

    def rows(self) -> list[Row]:
        ratio = percentile(self.package, 50) / percentile(self.raw, 50)
        return [
            Row(
                "upsert_fact with dedupe beside raw: package",
                fmt_rate(self.package_rate),
                "calls/s",
                f"{len(self.package)} calls, embedding excluded; p50 "
                f"{fmt_ms(percentile(self.package, 50))} ms, p95 "
                f"{fmt_ms(percentile(self.package, 95))} ms; "
                f"{self.statements / len(self.package):.2f} statements a call",
            ),
            Row(
                "  the same statement on raw asyncpg",
                fmt_rate(self.raw_rate),
                "calls/s",
                f"{len(self.raw)} calls, interleaved; p50 {fmt_ms(percentile(self.raw, 50))} "
                f"ms, p95 {fmt_ms(percentile(self.raw, 95))} ms; did: "
                + ", ".join(f"{n} {action}" for action, n in sorted(self.raw_actions.items())),
            ),
            Row("  package / raw p50", f"{ratio:.2f}", "x", "same run"),
        ]


async def run_upserts_beside_raw(
    memory: Memory,
    embedder: TimingEmbedder,
    clock: SqlClock,
    raw: asyncpg.Connection,
    ops: Sequence[Upsert],
) -> tuple[tuple[list[tuple[UpsertKind, Sample]], Counter[str]], BesideRaw]:
    """``ops`` alternately through upsert_fact(dedupe=True) and as the package's upsert statement
    on ``raw`` (its SQL compiled by the engine's dialect, its parameters as the package binds
    them; the vector made before the clock starts). Warm-up calls are left out of both."""
    compiled = UPSERT.compile(dialect=memory.engine.dialect)
    names = list(compiled.positiontup or ())
    package_ops, raw_ops = ops[0::2], ops[1::2]
    results: list[tuple[UpsertKind, Sample]] = []
    outcomes: Counter[str] = Counter()
    beside = BesideRaw([], [], 0, Counter())
    counter = OutcomeCounter()
    logger = logging.getLogger("navi_memory.facades.store")
    level = logger.level
    try:
        for index, (mine, theirs) in enumerate(zip(package_ops, raw_ops, strict=False)):
            measured = index >= WARMUP_CALLS
            if index == WARMUP_CALLS:
                logger.addHandler(counter)
                logger.setLevel(logging.DEBUG)
            statements = clock.statements
            _, sample = await timed(
                memory.store.upsert_fact(
                    mine.category, mine.key, mine.value, user_id=mine.user_id, dedupe=True
                ),
                embedder,
                clock,
            )
            params = upsert_parameters(upsert_statement(raw_write(theirs), dedupe=True))
            args = [params[name] for name in names]
            started = time.perf_counter()
            row = await raw.fetchrow(compiled.string, *args)
            elapsed = time.perf_counter() - started
            if measured:
                results.append((mine.kind, sample))
                beside.package.append(sample.without_embedding)
                beside.statements += clock.statements - statements
                beside.raw.append(elapsed)
                assert row is not None
                beside.raw_actions[row["action"] or "nothing (retry)"] += 1
    finally:
        logger.removeHandler(counter)
        logger.setLevel(level)
    outcomes.update(counter.outcomes)
    return (results, outcomes), beside


def raw_write(op: Upsert) -> FactWrite:
    """The FactWrite upsert_fact(dedupe=True) makes of ``op``, its vector included."""
    return FactWrite(
        user_id=op.user_id,
        category=op.category,
        key=op.key,
        value=op.value,
        source="conversation",
        confidence=DEFAULT_CONFIDENCE,
        expires_days=None,
        source_context=None,
        embedding=hashed_embedding(embedding_text_for_fact(op.category, op.key, op.value)),
    )


def upsert_rows(
    results: dict[bool, tuple[list[tuple[UpsertKind, Sample]], Counter[str]]],
) -> list[Row]:
    rows: list[Row] = []
    rates: dict[bool, float] = {}
    for dedupe, (done, outcomes) in results.items():
        samples = [sample for _, sample in done]
        times = [s.without_embedding for s in samples]
        wall = sum(s.total for s in samples)
        rates[dedupe] = len(samples) / sum(times)
        mix = Counter(kind for kind, _ in done)
        rows.append(
            Row(
                f"upsert_fact, dedupe {'on' if dedupe else 'off'}",
                fmt_rate(rates[dedupe]),
                "calls/s",
                f"{len(samples)} calls, embedding excluded ({fmt_rate(len(samples) / wall)}/s "
                f"with it); p50 {fmt_ms(percentile(times, 50))} ms, p95 "
                f"{fmt_ms(percentile(times, 95))} ms; SQL p50 "
                f"{fmt_ms(percentile([s.sql for s in samples], 50))} ms",
            )
        )
        rows.append(
            Row(
                "  calls -> outcomes",
                "",
                "",
                ", ".join(f"{mix[kind]} {kind}" for kind, _ in UPSERT_MIX)
                + " -> "
                + ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())),
            )
        )
    if False in rates and True in rates:
        rows.append(
            Row("  dedupe on / off", f"{rates[True] / rates[False]:.2f}", "x", "calls/s ratio")
        )
    return rows


# --- backfill ---------------------------------------------------------------------------------


async def null_embeddings(memory: Memory, rng: random.Random, count: int) -> None:
    """Forget the vectors of ``count`` random visible facts, as if written while the model was
    down; the next backfill fills exactly these."""
    async with memory.engine.begin() as conn:
        ids = (
            (
                await conn.execute(
                    text(
                        "SELECT id FROM memory_facts "
                        "WHERE merged_into IS NULL AND embedding IS NOT NULL"
                    )
                )
            )
            .scalars()
            .all()
        )
        chosen = rng.sample(list(ids), min(count, len(ids)))
        await conn.execute(
            text("UPDATE memory_facts SET embedding = NULL WHERE id = ANY(:ids)"), {"ids": chosen}
        )
    async with memory.engine.begin() as conn:
        await conn.execute(text("ANALYZE memory_facts"))


def backfill_rows_of(backfills: Sequence[tuple[int, int, Sample]]) -> list[Row]:
    rows: list[Row] = []
    rates: dict[int, float] = {}
    for batch, filled, sample in backfills:
        rates[batch] = filled / sample.without_embedding
        rows.append(
            Row(
                f"backfill_embeddings, batch {batch}",
                fmt_rate(rates[batch]),
                "rows/s",
                f"{fmt_count(filled)} rows in {sample.total:.1f} s, pause 0, embedding excluded "
                f"({fmt_rate(filled / sample.total)}/s with it); SQL {sample.sql:.1f} s",
            )
        )
    if len(rates) == 2:
        first, second = rates
        rows.append(
            Row(
                f"  batch {first} / batch {second}",
                f"{rates[first] / rates[second]:.2f}",
                "x",
                "rows/s ratio",
            )
        )
    return rows


# --- plans ------------------------------------------------------------------------------------


async def explain_search(
    memory: Memory,
    clock: SqlClock,
    uid: uuid.UUID | None,
    query: str,
    label: str,
    *,
    vector: bool = True,
) -> list[Plan]:
    """EXPLAIN (ANALYZE, BUFFERS, SERIALIZE) of search_facts' vector query (or its text query)
    for one user (None: every user, under the caller's request context), replayed exactly as
    the package sent it, in a rolled-back transaction."""
    async with clock.capture() as statements:
        await memory.store.search_facts(query, user_id=uid)
    marker = "<=>" if vector else "ILIKE"
    plans = await replay_explained(
        memory,
        statements,
        lambda sql: sql.lstrip().upper().startswith(("SELECT", "WITH")) and marker in sql.upper(),
    )
    what = "vector query" if vector else "text query"
    return [Plan(f"{what}, {label}: {query!r}", summarize_plan(p), p) for p in plans[:1]]
