"""The raw-chunks section: 100k chunks over 1,000 users (``--large``: 1M over 10,000), measured
through MemoryStore's public calls — add_chunks chunks per second into the loaded table with all
its indexes, search_chunks latency on the vector and the text path, users sampled uniformly and
by size — and the plans PostgreSQL picks for the per-user queries."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import asyncpg
from pgvector import Vector
from sqlalchemy import text

from benchmarks.chunks_data import (
    ChunkSeed,
    Line,
    UserPlan,
    chunk_text,
    generate_chunks,
    plan_users,
    topic_lines,
    topics_for,
)
from benchmarks.harness import (
    BenchContext,
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
    quiet_embedding_failures,
    raw_connection,
    raw_fetch,
    relation_sizes,
    replay_explained,
    summarize_plan,
    timed_memory,
)
from navi_memory import EMBEDDING_DIM, PERMISSION_READ_ALL, Memory, Settings, request_context
from navi_memory.constants import CHUNK_GRAPH_CANDIDATES, CHUNK_GRAPH_FROM
from navi_memory.errors import EmbeddingError
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.repositories.chunks import _nearest as nearest_sql
from navi_memory.repositories.statements import FetchedRow
from navi_memory.schemas import ChunkDraft
from navi_memory.services.chunks import PruneHints
from navi_memory.text.terms import STOP_WORDS

if TYPE_CHECKING:  # benchmarks.search imports this module
    from benchmarks.search import Lane

__all__ = ["SECTION", "ChunksSection", "LookupEmbedder"]

DATABASE: Final = "bench_chunks"
RAW_RATIO_TARGET: Final = 1.3
"""#16: the package / raw asyncpg p50 of every search call, in the same run."""
GLOBAL_QUERIES: Final = 12
"""Queries of the search across every user (read_all)."""
GRAPH_EF_WIDE: Final = 400
"""The graph crossover also runs the HNSW side at this hnsw.ef_search (the package: 100)."""
TOPIC_POOL: Final = 4096
NOISE_POOL: Final = 8192
SIGMA: Final = 0.8
"""Noise around a topic's centroid in a stored chunk's vector (|noise| / |centroid|)."""
TAU: Final = 0.5
"""Noise around the target chunk's vector in a query's vector."""
WEIGHTED_WARMUP_CALLS: Final = 5
ADD_WARMUP_CALLS: Final = 10
SEARCH_P50_TARGET: Final = 0.010
"""The issue's target: search_chunks vector path p50 <= 10 ms at 1M chunks, embedding excluded."""
ADD_RATE_TARGET: Final = 2_000.0
"""The issue's target: add_chunks >= 2,000 chunks/s into the 100k table, embedding excluded."""
HNSW_INDEX: Final = "ix_memory_chunk_vectors_embedding_hnsw"
INDEXED_TABLES: Final = ("memory_chunks", "memory_chunk_vectors", "memory_chunk_terms")
TEXT_GIN: Final = "ix_memory_chunk_terms_user_id_tsv"
MAINTENANCE_WORK_MEM: Final = "5GB"
"""Enough for the 1M-row halfvec HNSW graph to be built in memory (≈ 2 GiB)."""
CONCURRENT_CALLERS: Final = 8
BURST_RATE: Final = 2_500.0
"""Issue #16's burst: add_chunks at this many chunks/s, for BURST_SECONDS (--large: 2 minutes)."""
BURST_SECONDS: Final = 20.0
BURST_SECONDS_LARGE: Final = 120.0
BURST_CALL: Final = 64
"""Chunks a burst call writes (one user's session); smaller calls do not reach the rate here."""
BURST_WRITERS: Final = 200
"""Users the burst writes to, drawn by size (active users write more)."""
BURST_POOL: Final = 2_000
"""Distinct chunk texts the burst cycles through, each made unique by a marker."""
BURST_DRAIN_LIMIT: Final = 1_800.0
"""Seconds the burst waits for the indexer to drain its backlog before it stops watching."""
BURST_P95_QUIET: Final = 0.015
BURST_P95_BACKLOG: Final = 0.050
"""Issue #16: search p95 during the burst for users with no backlog / with one."""
PER_USER_BTREES: Final = ("ix_memory_chunks_user_id_session_id_ended_at",)
GIN_INDEXES: Final = ("ix_memory_chunks_breadcrumbs",)
SIZE_BUCKETS: Final = ((1, 99), (100, 999), (1_000, 10**9))
_ALPHA = re.compile(r"[a-z]{4,}")


@dataclass(frozen=True, slots=True)
class Sizes:
    chunks: int
    users: int
    largest: int
    queries: int
    """Queries of users picked uniformly (each path)."""
    weighted_queries: int
    """Queries of users picked by size (each path): fewer, the large users' calls are slow."""
    adds: int
    diagnose: bool
    """Also time the writes without the breadcrumbs GIN index."""

    @classmethod
    def of(cls, ctx: BenchContext) -> Sizes:
        if ctx.large:
            # Adds: 12,000 chunks a row (≈ 2,700 calls of 1-8, ≈ 5 s): at 3,000 (1.5 s) one
            # row moved 25 % between runs of the same code on this machine.
            base = cls(1_000_000, 10_000, 40_000, 400, 100, 12_000, False)
        else:
            base = cls(100_000, 1_000, 8_000, 400, 60, 4_000, True)
        s = ctx.scale
        return cls(
            chunks=max(2_000, round(base.chunks * s)),
            users=max(20, round(base.users * s)),
            largest=max(100, round(base.largest * s)),
            queries=max(60, round(base.queries * s)),
            weighted_queries=max(40, round(base.weighted_queries * s)),
            adds=max(200, round(base.adds * s)),
            diagnose=base.diagnose,
        )


class LookupEmbedder:
    """A fake ``Embedder`` that answers vectors made beforehand (on the server, from the data's
    topic centroids and noise) for the texts the benchmark will send; ``failing`` makes every
    call raise ``EmbeddingError``, as a model that is down, so only the text pass runs."""

    def __init__(self) -> None:
        self.dim = EMBEDDING_DIM
        self.vectors: dict[str, list[float]] = {}
        self.failing = False
        self.fallback: Callable[[str], list[float]] | None = None
        """Makes the vector of a text not in ``vectors`` (the burst's, too many to hold)."""

    def _check(self) -> None:
        if self.failing:
            raise EmbeddingError("LookupEmbedder is switched to fail")

    def _vector(self, text: str) -> list[float]:
        found = self.vectors.get(text)
        if found is not None:
            return found
        if self.fallback is None:
            raise KeyError(text)
        return self.fallback(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self._check()
        return [self._vector(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        self._check()
        return self._vector(text)

    async def aclose(self) -> None:
        """Nothing to release."""


def parse_vector(value: str) -> list[float]:
    return [float(x) for x in value[1:-1].split(",")]


class ChunksSection:
    name = "chunks"
    title = "Raw chunks: add_chunks, search_chunks"
    supports_large = True

    async def run(self, ctx: BenchContext) -> SectionReport:
        started = time.perf_counter()
        report = SectionReport(
            name=self.name,
            title=self.title + (" at 1M chunks" if ctx.large else ""),
        )
        rng = random.Random(ctx.seed)
        sizes = Sizes.of(ctx)
        tag = "chunks-large" if ctx.large else "chunks"
        async with bench_database(ctx, DATABASE, tag) as url:
            await self._run(ctx, url, tag, report, rng, sizes)
        report.seconds = time.perf_counter() - started
        return report

    async def _run(
        self,
        ctx: BenchContext,
        url: str,
        tag: str,
        report: SectionReport,
        rng: random.Random,
        sizes: Sizes,
    ) -> None:
        plans = plan_users(rng, users=sizes.users, chunks=sizes.chunks, largest=sizes.largest)
        held = sorted(plan.size for plan in plans)
        async with loader(ctx, DATABASE) as conn:
            load = await bulk_load(conn, plans, ctx, tag)
        report.setup += [
            f"{fmt_count(sizes.chunks)} chunks in memory_chunks over {fmt_count(sizes.users)} "
            f"users (Zipf sizes: min {held[0]}, median {held[len(held) // 2]}, max {held[-1]} "
            f"chunks; the largest 1 % of users hold "
            f"{sum(held[-max(1, len(held) // 100) :]) / sizes.chunks:.0%}), "
            f"{fmt_count(sum(len(p.sessions) for p in plans))} sessions of 1–24 chunks; "
            f"chunks of {load.mean_chars:,.0f} characters on average (1–4 KB of "
            "'User: … / Assistant: …' text), "
            f"{load.mean_crumbs:.1f} breadcrumbs each; users' writes interleaved in the table.",
            f"Vectors: {fmt_count(sum(p.topics for p in plans))} topic centroids (≈ √size/2 per "
            f"user); a chunk's vector is l2_normalize(its topic + noise of norm {SIGMA}), a "
            f"query's is l2_normalize(the target chunk's + noise of norm {TAU}), made on the "
            "server (pgvector arithmetic) from pools of random unit vectors.",
            f"Load (set-up, not measured): generation + COPY into a staging table "
            f"{load.copy_seconds:.0f} s, INSERT … SELECT with the vectors, then of the halfvec "
            f"copies and the tsvectors {load.insert_seconds:.0f}"
            " s, then the indexes built after the load (maintenance_work_mem "
            f"{MAINTENANCE_WORK_MEM}, "
            "max_parallel_maintenance_workers 1): "
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in load.index_seconds)
            + f"; VACUUM ANALYZE and CHECKPOINT {load.analyze_seconds:.0f} s.",
        ]
        # Background indexing off: the indexer is timed on its own (see adds()).
        settings = Settings(
            _env_file=None,
            database_url=url,
            backfill_pause_seconds=0,
            chunk_index_in_background=False,
        )
        lookup = LookupEmbedder()
        embedder = TimingEmbedder(lookup)
        async with timed_memory(settings, embedder) as (memory, clock):
            report.setup.append(
                f"navi-memory: hnsw_ef_search {settings.hnsw_ef_search}, "
                "hnsw.iterative_scan relaxed_order, plan_cache_mode force_custom_plan; "
                "one caller, calls one after another; embedder: a lookup of the "
                "vectors made beforehand, behind the timing wrapper."
            )
            report.setup.append(await relation_sizes(memory, SIZE_PARTS))
            bench = ChunksBench(
                memory, clock, embedder, lookup, plans, load.ids, report, ctx, rng, sizes
            )
            bench.settings = settings
            await bench.explain_plans()
            await bench.search()
            await bench.graph_crossover()
            await bench.adds()
            await bench.burst()


SECTION = ChunksSection()


# --- loading ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadTimes:
    copy_seconds: float
    insert_seconds: float
    index_seconds: list[tuple[str, float]]
    analyze_seconds: float
    mean_chars: float
    mean_crumbs: float
    ids: list[list[int]]
    """Chunk ids per user (index into the plans)."""


STAGE_COLUMNS: Final = (
    "id",
    "user_id",
    "session_id",
    "content",
    "content_hash",
    "start_seq",
    "end_seq",
    "started_at",
    "ended_at",
    "breadcrumbs",
    "topic",
    "n1",
    "n2",
    "n3",
)


def _unit_vectors(rng: random.Random, count: int) -> Iterator[list[float]]:
    for _ in range(count):
        values = [rng.gauss(0.0, 1.0) for _ in range(EMBEDDING_DIM)]
        norm = math.sqrt(sum(v * v for v in values))
        yield [v / norm for v in values]


async def bulk_load(
    conn: asyncpg.Connection, plans: list[UserPlan], ctx: BenchContext, tag: str
) -> LoadTimes:
    """Users; pools of random unit vectors and the topic centroids; the chunks' text by COPY into
    an unlogged staging table; one INSERT … SELECT that adds the vectors, with the secondary
    indexes dropped; then the indexes rebuilt from their own definitions and VACUUM ANALYZE."""
    rng = random.Random(ctx.seed + 1)
    started = time.perf_counter()
    await conn.copy_records_to_table(
        "navi_users",
        records=[(plan.user_id, f"bench user {i}") for i, plan in enumerate(plans)],
        columns=["id", "name"],
    )
    ctx.log(f"{tag}: vector pools")
    await conn.execute(
        "CREATE TABLE bench_pool (id int PRIMARY KEY, v vector(768));"
        "CREATE TABLE bench_noise (id int PRIMARY KEY, v vector(768));"
        "CREATE TABLE bench_topic_parts (id int PRIMARY KEY, a int, b int, c int)"
    )
    await conn.copy_records_to_table(
        "bench_pool",
        records=[(i, Vector(v)) for i, v in enumerate(_unit_vectors(rng, TOPIC_POOL))],
    )
    # A noise vector is the sum of three of these: each a third of a unit vector's length.
    third = 1 / math.sqrt(3)
    await conn.copy_records_to_table(
        "bench_noise",
        records=[
            (i, Vector([x * third for x in v]))
            for i, v in enumerate(_unit_vectors(rng, NOISE_POOL))
        ],
    )
    topics = sum(plan.topics for plan in plans)
    await conn.copy_records_to_table(
        "bench_topic_parts",
        records=[
            (t, rng.randrange(TOPIC_POOL), rng.randrange(TOPIC_POOL), rng.randrange(TOPIC_POOL))
            for t in range(topics)
        ],
    )
    await conn.execute(
        "CREATE TABLE bench_topic AS SELECT t.id, l2_normalize(a.v + b.v + c.v) AS v "
        "FROM bench_topic_parts t JOIN bench_pool a ON a.id = t.a JOIN bench_pool b ON b.id = t.b "
        "JOIN bench_pool c ON c.id = t.c; ALTER TABLE bench_topic ADD PRIMARY KEY (id);"
        "CREATE UNLOGGED TABLE bench_stage (id bigint, user_id uuid, session_id text, "
        "content text, content_hash text, start_seq int, end_seq int, started_at timestamptz, "
        "ended_at timestamptz, breadcrumbs text[], topic int, n1 int, n2 int, n3 int)"
    )
    owner = {plan.user_id: i for i, plan in enumerate(plans)}
    ids: list[list[int]] = [[] for _ in plans]
    chars = crumbs = 0
    total = sum(plan.size for plan in plans)

    def records() -> Iterator[tuple[object, ...]]:
        nonlocal chars, crumbs
        seed: ChunkSeed
        for chunk_id, seed in generate_chunks(plans, ctx.seed, noise_pool=NOISE_POOL):
            ids[owner[seed.user_id]].append(chunk_id)
            chars += len(seed.content)
            crumbs += len(seed.breadcrumbs)
            if chunk_id % 100_000 == 0:
                ctx.log(f"{tag}: generated {chunk_id:,} of {total:,} chunks")
            yield (
                chunk_id,
                seed.user_id,
                seed.session_id,
                seed.content,
                seed.content_hash,
                seed.start_seq,
                seed.end_seq,
                seed.started_at,
                seed.ended_at,
                seed.breadcrumbs,
                seed.topic,
                *seed.noise,
            )

    ctx.log(f"{tag}: generating {total:,} chunks into the staging table")
    await conn.copy_records_to_table("bench_stage", records=records(), columns=list(STAGE_COLUMNS))
    copied = time.perf_counter()
    ctx.log(f"{tag}: INSERT … SELECT into memory_chunks, secondary indexes dropped")
    secondary = await conn.fetch(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i "
        "WHERE i.tablename = ANY($1::text[]) AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
        list(INDEXED_TABLES),
    )
    for index in secondary:
        await conn.execute(f'DROP INDEX "{index["indexname"]}"')
    await conn.execute(
        "INSERT INTO memory_chunks (id, user_id, session_id, content, content_hash, start_seq, "
        "end_seq, started_at, ended_at, breadcrumbs, embedding) "
        "SELECT s.id, s.user_id, s.session_id, s.content, s.content_hash, s.start_seq, "
        "s.end_seq, s.started_at, s.ended_at, s.breadcrumbs, "
        f"l2_normalize(t.v + (a.v + b.v + c.v) * array_fill({SIGMA}::real, "
        f"ARRAY[{EMBEDDING_DIM}])::vector) "
        "FROM bench_stage s JOIN bench_topic t ON t.id = s.topic "
        "JOIN bench_noise a ON a.id = s.n1 JOIN bench_noise b ON b.id = s.n2 "
        "JOIN bench_noise c ON c.id = s.n3"
    )
    # What the package's indexer would have moved there: every vector, normalised, as halfvec,
    # in the graph when its user holds CHUNK_GRAPH_FROM chunks or more, and every chunk's text
    # as its tsvector (the statistics trigger runs once, for all).
    await conn.execute(
        "INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id, embedding, in_graph) "
        "SELECT c.id, c.user_id, c.session_id, "
        f"CAST(l2_normalize(c.embedding) AS halfvec({EMBEDDING_DIM})), s.big "
        f"FROM memory_chunks c JOIN (SELECT user_id, count(*) >= {CHUNK_GRAPH_FROM} AS big "
        "FROM memory_chunks GROUP BY user_id) s ON s.user_id = c.user_id "
        # In arrival order, as the indexer writes them: users' rows interleaved on the pages
        # (an exact scan of a user reads as many pages as in production) and the graph built
        # over them in that order (built user by user, its recall was lower than production's).
        "ORDER BY c.id"
    )
    ctx.log(f"{tag}: INSERT … SELECT into memory_chunk_terms (tsvectors)")
    await conn.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv) "
        "SELECT id, user_id, session_id, ended_at, length(tsv), tsv FROM memory_chunks, "
        # OFFSET 0 keeps the subquery apart: flattened, each tsvector was made twice.
        "LATERAL (SELECT navi_chunk_tsv(content, breadcrumbs) AS tsv OFFSET 0) t"
    )
    await conn.execute(
        "DROP TABLE bench_stage;"
        "SELECT setval(pg_get_serial_sequence('memory_chunks', 'id'), max(id)) FROM memory_chunks"
    )
    inserted = time.perf_counter()
    await conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
    await conn.execute("SET max_parallel_maintenance_workers = 1")
    index_seconds: list[tuple[str, float]] = []
    # The HNSW graph last: the others are quick and show up in the log sooner.
    for index in sorted(secondary, key=lambda i: "hnsw" in i["indexdef"]):
        ctx.log(f"{tag}: building {index['indexname']}")
        t0 = time.perf_counter()
        await conn.execute(index["indexdef"])
        index_seconds.append((index["indexname"], time.perf_counter() - t0))
    await conn.execute("RESET maintenance_work_mem; RESET max_parallel_maintenance_workers")
    built = time.perf_counter()
    ctx.log(f"{tag}: VACUUM ANALYZE")
    await conn.execute(
        "VACUUM (ANALYZE) navi_users, memory_chunks, memory_chunk_vectors, memory_chunk_terms, "
        "memory_chunk_text_stats"
    )
    # The load's dirty pages on disk now: left to the checkpointer, they were written out
    # over the next minutes, beside the first measurements (at 1M, the first add_chunks row
    # ran at half the rate of the same calls a few minutes later, its SQL p95 ten times p50).
    ctx.log(f"{tag}: CHECKPOINT")
    await conn.execute("CHECKPOINT")
    return LoadTimes(
        copied - started,
        inserted - copied,
        index_seconds,
        time.perf_counter() - built,
        chars / max(1, total),
        crumbs / max(1, total),
        ids,
    )


SIZE_PARTS: Final = (
    ("table", "pg_relation_size('memory_chunks')"),
    (
        "TOAST (vectors, long texts)",
        "SELECT pg_total_relation_size(reltoastrelid) FROM pg_class "
        "WHERE relname = 'memory_chunks'",
    ),
    (
        "memory_chunk_vectors (halfvec)",
        f"pg_total_relation_size('memory_chunk_vectors') - pg_relation_size('{HNSW_INDEX}')",
    ),
    ("its HNSW index", f"pg_relation_size('{HNSW_INDEX}')"),
    ("GIN breadcrumbs", "pg_relation_size('ix_memory_chunks_breadcrumbs')"),
    (
        "memory_chunk_terms (tsvectors)",
        f"pg_total_relation_size('memory_chunk_terms') - pg_relation_size('{TEXT_GIN}')",
    ),
    ("its GIN index", f"pg_relation_size('{TEXT_GIN}')"),
    ("btree (user, session, ended_at)", f"pg_relation_size('{PER_USER_BTREES[0]}')"),
)
"""What relation_sizes reports for this section."""


# --- queries ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    user: int
    """Index into the plans."""
    user_id: uuid.UUID
    size: int
    target: int
    """The chunk the query was made from."""
    text: str


@dataclass(frozen=True, slots=True)
class Outcome:
    vector_hits: int
    text_hits: int
    found_target: bool
    vector_ids: frozenset[int]
    hit_ids: tuple[int, ...]


def query_words(rng: random.Random, content: str, breadcrumbs: Sequence[str]) -> str:
    """Two words of the chunk and one identifier of its breadcrumbs (a host, path, ticket,
    version, port), as someone would ask for it later."""
    words = [w for w in dict.fromkeys(_ALPHA.findall(content.lower())) if w not in STOP_WORDS]
    picked = rng.sample(words, min(2, len(words)))
    idents = [c for c in breadcrumbs if " " not in c and len(c) >= 4]
    if idents:
        picked.append(rng.choice(idents))
    rng.shuffle(picked)
    return " ".join(picked)


async def make_queries(
    memory: Memory,
    lookup: LookupEmbedder,
    rng: random.Random,
    plans: Sequence[UserPlan],
    ids: Sequence[Sequence[int]],
    users: Sequence[int],
) -> list[Query]:
    """A query for each of ``users`` (indices into plans), from a random chunk of theirs; its
    vector (near that chunk's) goes into the lookup embedder."""
    targets = [rng.choice(ids[u]) for u in users]
    noise = [[rng.randrange(NOISE_POOL) for _ in targets] for _ in range(3)]
    async with memory.engine.connect() as conn:
        found = {
            row.id: (row.content, row.breadcrumbs)
            for row in await conn.execute(
                text("SELECT id, content, breadcrumbs FROM memory_chunks WHERE id = ANY(:ids)"),
                {"ids": targets},
            )
        }
        vectors = {
            row.ord: row.v
            for row in await conn.execute(
                text(
                    "SELECT x.ord, l2_normalize(m.embedding + (a.v + b.v + c.v) * "
                    f"array_fill({TAU}::real, ARRAY[{EMBEDDING_DIM}])::vector)::text AS v "
                    "FROM unnest(CAST(:ids AS bigint[]), CAST(:a AS int[]), CAST(:b AS int[]), "
                    "CAST(:c AS int[])) WITH ORDINALITY AS x(id, n1, n2, n3, ord) "
                    "JOIN memory_chunks m ON m.id = x.id JOIN bench_noise a ON a.id = x.n1 "
                    "JOIN bench_noise b ON b.id = x.n2 JOIN bench_noise c ON c.id = x.n3"
                ),
                {"ids": targets, "a": noise[0], "b": noise[1], "c": noise[2]},
            )
        }
    queries = []
    for i, (u, target) in enumerate(zip(users, targets, strict=True)):
        content, crumbs = found[target]
        words = query_words(rng, content, crumbs)
        lookup.vectors[words] = parse_vector(vectors[i + 1])
        queries.append(Query(u, plans[u].user_id, plans[u].size, target, words))
    return queries


Searched = tuple[Query, Sample, Outcome]
"""One search_chunks call of a pass: the query, where its time went, what it found."""


def search_rows(
    results: Sequence[Searched], cold: Sequence[Searched], label: str, *, vector: bool
) -> list[Row]:
    """The timed (second, warm) pass's rows as before, each followed by the same figure for
    the first pass over the same queries — ``cold`` — so that a slow bucket shows at once
    whether it is slow every time or only when its pages are first touched."""
    n = len(results)
    hits = sum(o.vector_hits + o.text_hits for _, _, o in results) / max(1, n)
    detail = "; "
    if vector:
        with_vector = sum(1 for _, _, o in results if o.vector_hits) / max(1, n)
        target = sum(1 for _, _, o in results if o.found_target) / max(1, n)
        detail += (
            f"{with_vector:.0%} with a vector hit, {hits:.1f} hits per query, the source chunk "
            f"found in {target:.0%}"
        )
    else:
        some = sum(1 for _, _, o in results if o.text_hits) / max(1, n)
        target = sum(1 for _, _, o in results if o.found_target) / max(1, n)
        detail += (
            f"{some:.0%} with a text hit, {hits:.1f} hits per query, source chunk {target:.0%}"
        )
    rows = latency_rows(label, [s for _, s, _ in results], detail)
    rows.append(cold_row(results, cold))
    for low, high in SIZE_BUCKETS:
        picked = [s.without_embedding for q, s, _ in results if low <= q.size <= high]
        if picked:
            span = f"{low:,}+" if high >= 10**9 else f"{low:,}–{high:,}"
            first = [s.without_embedding for q, s, _ in cold if low <= q.size <= high]
            rows.append(p50_p95(f"  users with {span} chunks", picked, f"{len(picked)} queries"))
            rows.append(
                p50_p95(
                    f"  users with {span} chunks, first touch (cold)",
                    first,
                    "the same queries' first pass",
                )
            )
    return rows


def cold_row(results: Sequence[Searched], cold: Sequence[Searched]) -> Row:
    """p50 / p95 of the first pass, its SQL p50, and how much slower a query ran the first
    time than the second (per query, so the users' mix cancels out); a query whose hits
    differ between the passes is counted, as the two should return the same chunks."""
    ratios = [
        c.without_embedding / w.without_embedding
        for (_, w, _), (_, c, _) in zip(results, cold, strict=True)
        if w.without_embedding > 0
    ]
    changed = sum(
        1
        for (_, _, w), (_, _, c) in zip(results, cold, strict=True)
        if (w.vector_ids, w.text_hits) != (c.vector_ids, c.text_hits)
    )
    times = [s.without_embedding for _, s, _ in cold]
    detail = (
        f"the same {len(cold)} queries, their first pass (after the warm-up calls, before the "
        f"timed pass above); SQL p50 {fmt_ms(percentile([s.sql for _, s, _ in cold], 50))} ms; "
        f"first / second time per query: median {percentile(ratios, 50):.2f}×, "
        f"p95 {percentile(ratios, 95):.2f}×"
    )
    if changed:
        detail += f"; {changed} queries' hits differed between the passes"
    return p50_p95("  first touch (cold)", times, detail)


class AlwaysPlain(PruneHints):
    """Hints that send every user the plain (unpruned) BM25 statement."""

    def prune(self, user_id: uuid.UUID) -> bool:
        return False

    def learn(self, user_id: uuid.UUID, rows: Sequence[FetchedRow]) -> None:
        return None


# --- add_chunks -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddCall:
    user_id: uuid.UUID
    session_id: str
    drafts: list[ChunkDraft]


# --- the measurements -------------------------------------------------------------------------


class ChunksBench:
    def __init__(
        self,
        memory: Memory,
        clock: SqlClock,
        embedder: TimingEmbedder,
        lookup: LookupEmbedder,
        plans: list[UserPlan],
        ids: list[list[int]],
        report: SectionReport,
        ctx: BenchContext,
        rng: random.Random,
        sizes: Sizes,
    ) -> None:
        self.memory = memory
        self.clock = clock
        self.embedder = embedder
        self.lookup = lookup
        self.plans = plans
        self.ids = ids
        self.report = report
        self.ctx = ctx
        self.rng = rng
        self.sizes = sizes
        self.tag = "chunks-large" if ctx.large else "chunks"
        self.by_size = sorted(range(len(plans)), key=lambda u: plans[u].size)
        self.weights = [plan.size for plan in plans]
        self.lines: dict[int, list[tuple[int, tuple[list[Line], list[Line]]]]] = {}
        self.rounds = 0
        self.settings: Settings | None = None
        """The Memory's settings: what the raw connection of ``_beside_raw`` starts with."""

    def log(self, message: str) -> None:
        self.ctx.log(f"{self.tag}: {message}")

    # --- plans ------------------------------------------------------------------------------

    async def explain_plans(self) -> None:
        self.log("EXPLAIN ANALYZE of the search queries")
        picks = (
            ("smallest user", self.by_size[0]),
            ("median user", self.by_size[len(self.by_size) // 2]),
            ("largest user", self.by_size[-1]),
        )
        for text_only in (False, True):
            for what, u in picks if not text_only else picks[1:]:
                (query,) = await make_queries(
                    self.memory, self.lookup, self.rng, self.plans, self.ids, [u]
                )
                label = f"{what} ({self.plans[u].size:,} chunks)"
                self.report.plans.append(await self.explain(query, label, text_only=text_only))

    async def explain(self, query: Query, label: str, *, text_only: bool) -> Plan:
        """EXPLAIN (ANALYZE, BUFFERS, SERIALIZE) of search_chunks' statement for one user,
        replayed exactly as the package sent it (set_config included) in a rolled-back
        transaction, under the package's own engine settings."""
        self.lookup.failing = text_only
        try:
            async with self.clock.capture() as statements:
                with quiet_embedding_failures():
                    await self.memory.store.search_chunks(query.text, user_id=query.user_id)
        finally:
            self.lookup.failing = False
        plans = await replay_explained(
            self.memory,
            statements,
            lambda sql: sql.lstrip().upper().startswith("WITH") and "memory_chunks" in sql,
        )
        what = "text path (embedder down)" if text_only else "vector path"
        plan = plans[0] if plans else "(no statement captured)"
        return Plan(f"{what}, {label}: {query.text!r}", summarize_plan(plan), plan)

    # --- search -----------------------------------------------------------------------------

    async def search(self) -> None:
        """Each sampling's queries, on each path, run twice in a row: the first pass is the
        first search of those users' pages since the load (explain_plans, make_queries or an
        earlier series may have read some), the second runs on what it left in the caches. The
        timed figures are the second pass's, after the warm-up calls as ever; the first pass's
        are reported beside them as "first touch (cold)", so a slow bucket (small users at 1M)
        tells whether it is slow every time or only on a cold cache. The second pass doubles
        the search calls only; query making, recall and the writes are not repeated."""
        self.report.setup.append(
            "search_chunks: every series runs twice over the same queries, the first "
            "(warm-up) calls of each pass left out; the figures are the second pass's, the "
            "'first touch (cold)' rows the first pass's — the text path's first pass comes "
            "after the vector path's two over the same users."
        )
        n = self.sizes.queries + WARMUP_CALLS
        k = self.sizes.weighted_queries + WEIGHTED_WARMUP_CALLS
        users = len(self.plans)
        samplings = (
            ("uniform", [self.rng.randrange(users) for _ in range(n)], WARMUP_CALLS),
            (
                "size-weighted",
                self.rng.choices(range(users), weights=self.weights, k=k),
                WEIGHTED_WARMUP_CALLS,
            ),
        )
        vector_p50: dict[str, float] = {}
        for name, picked, warmup in samplings:
            queries = await make_queries(
                self.memory, self.lookup, self.rng, self.plans, self.ids, picked
            )
            for text_only in (False, True):
                path = "text path" if text_only else "vector path"
                self.log(f"search_chunks x {len(queries)} twice, {path}, users {name}")
                cold = await self._searches(queries, text_only=text_only, warmup=warmup)
                results = await self._searches(queries, text_only=text_only, warmup=warmup)
                self.report.rows += search_rows(
                    results, cold, f"search_chunks, {path}, users {name}", vector=not text_only
                )
                if name == "uniform":
                    self.report.rows += await self._beside_raw(
                        queries[warmup:], text_only=text_only
                    )
                if not text_only:
                    vector_p50[name] = percentile([s.without_embedding for _, s, _ in results], 50)
                    self.report.rows.append(await self._recall(results))
                    if name == "uniform":
                        self.report.rows.append(await self._global(queries[:GLOBAL_QUERIES]))
                else:
                    self.report.rows += await self._unpruned(queries, results, warmup, name)
        if self.ctx.large or self.ctx.scale < 1:
            for name, p50 in vector_p50.items():
                self.report.targets.append(
                    Target(
                        name=(
                            f"search_chunks vector path p50, {fmt_count(self.sizes.chunks)} "
                            f"chunks, users {name}, embedding excluded"
                        ),
                        goal=f"<= {fmt_ms(SEARCH_P50_TARGET)} ms",
                        measured=f"{fmt_ms(p50)} ms",
                        met=p50 <= SEARCH_P50_TARGET,
                    )
                )

    async def _beside_raw(self, queries: Sequence[Query], *, text_only: bool) -> list[Row]:
        """Each query through search_chunks and its captured statement on raw asyncpg, one
        after the other, which first alternating (as the facts section's search_facts beside
        raw): the package's time is the whole call, embedding excluded, the raw one the fetch
        alone, on a plain asyncpg connection started like the engine the statement ran on
        (custom plans forced, or cached for a user known small; the HNSW options, the binary
        vector codec). Each query is sent once before its statement is captured, so that the
        package knows of the user what the timed call will (PruneHints). #16's "package / raw
        asyncpg p50 ≤ 1.3× for every search call", for search_chunks."""
        from benchmarks.search import LaneCapture  # here: that module imports this one

        assert self.settings is not None
        path = "text path" if text_only else "vector path"
        self.log(f"search_chunks beside raw asyncpg x {len(queries)}, {path}")
        raws = {
            "custom": await raw_connection(self.ctx, DATABASE, self.settings),
            "cached": await raw_connection(self.ctx, DATABASE, self.settings, cached_plans=True),
        }
        lanes = LaneCapture(
            {"custom": self.memory.engine, "cached": self.memory.cached_plans_engine}
        )
        self.lookup.failing = text_only

        async def replay(sent: Sequence[Lane]) -> float:
            return sum(
                [await raw_fetch(raws[lane.engine], st) for lane in sent for st in lane.statements]
            )

        try:
            with quiet_embedding_failures():
                captured: list[list[Lane]] = []
                for query in queries:  # the statements each query sends, and a warm-up of both
                    await self.memory.store.search_chunks(query.text, user_id=query.user_id)
                    # Its statement is logged one loop turn later (LaneCapture): not captured.
                    await asyncio.sleep(0)
                    async with lanes.capture() as sent:
                        await self.memory.store.search_chunks(query.text, user_id=query.user_id)
                    captured.append(sent)
                    await replay(sent)
                package: list[float] = []
                replayed: list[float] = []
                for index, (query, sent) in enumerate(zip(queries, captured, strict=True)):
                    raw_first = index % 2 == 1
                    if raw_first:
                        replayed.append(await replay(sent))
                    _, sample = await timed(
                        self.memory.store.search_chunks(query.text, user_id=query.user_id),
                        self.embedder,
                        self.clock,
                    )
                    package.append(sample.without_embedding)
                    if not raw_first:
                        replayed.append(await replay(sent))
        finally:
            self.lookup.failing = False
            lanes.close()
            for raw in raws.values():
                await raw.close()
        statements = sum(len(lane.statements) for sent in captured for lane in sent) / len(captured)
        ratio = percentile(package, 50) / percentile(replayed, 50)
        self.report.targets.append(
            Target(
                name=f"search_chunks ({path}, users uniform) package / raw asyncpg p50, same run",
                goal=f"<= {RAW_RATIO_TARGET:.1f}x",
                measured=(
                    f"{fmt_ms(percentile(package, 50))} / {fmt_ms(percentile(replayed, 50))} ms "
                    f"= {ratio:.2f}x"
                ),
                met=ratio <= RAW_RATIO_TARGET,
            )
        )
        return [
            p50_p95(
                f"search_chunks beside raw, {path}: package",
                package,
                f"{len(package)} queries (users uniform), the whole call, embedding excluded",
            ),
            p50_p95(
                "  the same statement on raw asyncpg",
                replayed,
                f"fetch only, {statements:.2f} statements a call; same server settings, binary "
                "vector codec",
            ),
            Row("  package / raw p50", f"{ratio:.2f}", "x", "same run, order alternating"),
        ]

    async def _unpruned(
        self, queries: Sequence[Query], pruned: Sequence[Searched], warmup: int, name: str
    ) -> list[Row]:
        """The text path's queries again with every user sent the plain BM25 statement (the
        one before revision 0008, which reads every chunk holding a query word), twice like
        the rest, beside the pruned figures of the same run: what pruning buys, per user size.
        The hits must be the pruned ones, in the same order; a query whose hits differ is
        counted."""
        service = self.memory.store._chunks
        hints = service.prune_hints
        service.prune_hints = AlwaysPlain()
        try:
            self.log(f"search_chunks x {len(queries)} twice, text path unpruned, users {name}")
            await self._searches(queries, text_only=True, warmup=warmup)
            plain = await self._searches(queries, text_only=True, warmup=warmup)
        finally:
            service.prune_hints = hints
        differ = sum(
            1 for (_, _, a), (_, _, b) in zip(pruned, plain, strict=True) if a.hit_ids != b.hit_ids
        )
        rows = []
        for low, high in ((0, 10**12), *SIZE_BUCKETS):
            was = [s.without_embedding for q, s, _ in plain if low <= q.size <= high]
            now = [s.without_embedding for q, s, _ in pruned if low <= q.size <= high]
            if not was:
                continue
            if low == 0:
                span = "all users"
            elif high >= 10**9:
                span = f"users with {low:,}+ chunks"
            else:
                span = f"users with {low:,}–{high:,} chunks"
            detail = (
                f"{len(was)} queries; pruned / unpruned p50 "
                f"{percentile(now, 50) / percentile(was, 50):.2f}×, p95 "
                f"{percentile(now, 95) / percentile(was, 95):.2f}×"
            )
            if low == 0:
                detail += f"; {differ} queries' hits differ from the pruned ones"
            rows.append(p50_p95(f"  unpruned BM25 statement, {span}", was, detail))
        return rows

    async def _searches(
        self, queries: Sequence[Query], *, text_only: bool, warmup: int
    ) -> list[Searched]:
        """One pass over ``queries``, the first ``warmup`` calls left out of what it returns
        (they open the pool's connections and plan; their users' pages are touched all the
        same)."""
        results = []
        self.lookup.failing = text_only
        try:
            with quiet_embedding_failures():
                for index, query in enumerate(queries):
                    hits, sample = await timed(
                        self.memory.store.search_chunks(query.text, user_id=query.user_id),
                        self.embedder,
                        self.clock,
                    )
                    if index < warmup:
                        continue
                    vector_ids = frozenset(h.id for h in hits if h.via == "vector")
                    outcome = Outcome(
                        len(vector_ids),
                        len(hits) - len(vector_ids),
                        any(h.id == query.target for h in hits),
                        vector_ids,
                        tuple(h.id for h in hits),
                    )
                    results.append((query, sample, outcome))
        finally:
            self.lookup.failing = False
        return results

    async def _global(self, queries: Sequence[Query]) -> Row:
        """The same queries across every user (navi.memory.read_all, no user): the whole HNSW
        graph and, exactly, every row beside it (the users under CHUNK_GRAPH_FROM)."""
        self.log(f"search_chunks x {len(queries)} twice, vector path, every user (read_all)")
        times: list[float] = []
        with request_context(permissions=[PERMISSION_READ_ALL]):
            for _ in range(2):  # the second pass's times
                times = []
                for query in queries:
                    _, sample = await timed(
                        self.memory.store.search_chunks(query.text), self.embedder, self.clock
                    )
                    times.append(sample.without_embedding)
        return p50_p95(
            "  across every user (read_all, no user)",
            times,
            f"{len(queries)} of the queries above, second pass; the graph holds the users of "
            f"{CHUNK_GRAPH_FROM:,} chunks or more, the rest are read exactly",
        )

    async def _recall(self, results: Sequence[Searched]) -> Row:
        """The fused hits the vector list found, against an exact per-user scan (index scans
        off: the per-user btree or a sequential scan), the same 0.45 threshold and limit."""
        found = expected = 0
        async with self.memory.engine.connect() as conn:
            transaction = await conn.begin()
            try:
                await conn.execute(text("SET LOCAL enable_indexscan = off"))
                for query, _, outcome in results:
                    rows = await conn.execute(
                        text(
                            "SELECT id FROM (SELECT id, embedding <=> CAST(:q AS vector) AS d "
                            "FROM memory_chunks WHERE user_id = :uid AND embedding IS NOT NULL "
                            "ORDER BY d LIMIT 8) n WHERE d < 0.45"
                        ),
                        {"q": str(self.lookup.vectors[query.text]), "uid": query.user_id},
                    )
                    exact = {row.id for row in rows}
                    expected += len(exact)
                    found += len(exact & outcome.vector_ids)
            finally:
                await transaction.rollback()
        return Row(
            "  exact nearest chunks among the fused hits",
            f"{found / max(1, expected):.3f}",
            "",
            f"{found:,} of the {expected:,} chunks an exact per-user scan returns under 0.45, "
            "found by the vector list among the call's fused hits: with score fusion text hits "
            "take some of the places, so this is not the index's recall (the recall@10 rows are)",
        )

    # --- the graph's crossover ---------------------------------------------------------------

    async def graph_crossover(self) -> None:
        """One user's nearest 10 by an exact scan of their rows against the HNSW graph, for
        users from a hundred chunks to the largest: where the graph starts to pay. Users below
        CHUNK_GRAPH_FROM are put in the graph for the measurement inside a transaction that is
        rolled back (their rows' HNSW insertions included). Raw SQL on one connection of the
        package's engine (its hnsw settings), 20 queries a user: their own chunks' vectors."""
        sizes = [self.plans[u].size for u in self.by_size]
        picks: list[int] = []
        for want in (100, 300, 1_000, CHUNK_GRAPH_FROM, 2 * CHUNK_GRAPH_FROM, sizes[-1]):
            u = min(self.by_size, key=lambda u: abs(self.plans[u].size - want))
            if u not in picks:
                picks.append(u)
        self.log(f"graph crossover: {len(picks)} users, exact against HNSW")
        graph = (
            "SELECT chunk_id FROM memory_chunk_vectors v WHERE v.in_graph AND v.user_id = :u "
            f"ORDER BY v.embedding <=> CAST(:q AS halfvec({EMBEDDING_DIM})) LIMIT 10"
        )
        distance = f"embedding <=> CAST(:q AS halfvec({EMBEDDING_DIM})) AS d"
        exact = (
            f"SELECT chunk_id FROM (SELECT chunk_id, {distance} FROM memory_chunk_vectors "
            f"WHERE in_graph AND user_id = :u UNION ALL SELECT chunk_id, {distance} "
            "FROM memory_chunk_vectors WHERE NOT in_graph AND user_id = :u) x "
            "ORDER BY d LIMIT 10"
        )
        # What search_chunks runs for the vector list: CHUNK_GRAPH_CANDIDATES from the graph,
        # the rows beside it and the queue, re-sorted by distance.
        package = "SELECT id FROM ({}) n".format(
            nearest_sql("v.user_id = :u", "p.user_id = :u", by_user=False, by_session=False)
        )
        async with self.memory.engine.connect() as conn:
            for u in picks:
                uid, size = self.plans[u].user_id, self.plans[u].size
                transaction = await conn.begin()
                try:
                    moved = (
                        await conn.execute(
                            text(
                                "UPDATE memory_chunk_vectors SET in_graph = true "
                                "WHERE user_id = :u AND NOT in_graph"
                            ),
                            {"u": uid},
                        )
                    ).rowcount
                    queries = (
                        (
                            await conn.execute(
                                text(
                                    "SELECT embedding::text FROM memory_chunk_vectors "
                                    "WHERE user_id = :u ORDER BY chunk_id LIMIT 20"
                                ),
                                {"u": uid},
                            )
                        )
                        .scalars()
                        .all()
                    )
                    # The graph at the package's ef_search and at GRAPH_EF_WIDE.
                    ways = ("exact", "graph", "wide", "package")
                    times: dict[str, list[float]] = {how: [] for how in ways}
                    found = dict.fromkeys(ways, 0)
                    for q in queries:
                        ids: dict[str, set[int]] = {}
                        for how in ways:
                            off = "off" if how in ("graph", "wide") else "on"
                            ef = (
                                GRAPH_EF_WIDE
                                if how == "wide"
                                else self.memory.settings.hnsw_ef_search
                            )
                            await conn.execute(text(f"SET LOCAL enable_sort = {off}"))
                            await conn.execute(text(f"SET LOCAL enable_bitmapscan = {off}"))
                            await conn.execute(text(f"SET LOCAL hnsw.ef_search = {int(ef)}"))
                            t0 = time.perf_counter()
                            sql = {"exact": exact, "package": package}.get(how, graph)
                            rows = await conn.execute(text(sql), {"u": uid, "q": q, "limit": 10})
                            ids[how] = {int(r[0]) for r in rows}
                            times[how].append(time.perf_counter() - t0)
                        for how in ways:
                            found[how] += len(ids["exact"] & ids[how])
                finally:
                    await transaction.rollback()
                expected = max(1, found["exact"])
                self.report.rows.append(
                    Row(
                        f"nearest 10 of a user of {size:,} chunks, exact / HNSW p50",
                        f"{fmt_ms(percentile(times['exact'], 50))} / "
                        f"{fmt_ms(percentile(times['graph'], 50))}",
                        "ms",
                        f"{len(queries)} queries, raw SQL; HNSW recall@10 vs exact "
                        f"{found['graph'] / expected:.3f}; with ef_search {GRAPH_EF_WIDE}: "
                        f"p50 {fmt_ms(percentile(times['wide'], 50))} ms, recall "
                        f"{found['wide'] / expected:.3f}; the package's statement "
                        f"(the graph's {CHUNK_GRAPH_CANDIDATES} nearest re-sorted with the rest): "
                        f"p50 {fmt_ms(percentile(times['package'], 50))} ms, recall "
                        f"{found['package'] / expected:.3f}"
                        + (
                            f"; {moved:,} rows put in the graph for this, rolled back"
                            if moved
                            else f"; in the graph (CHUNK_GRAPH_FROM {CHUNK_GRAPH_FROM:,})"
                        ),
                    )
                )

    # --- add_chunks -------------------------------------------------------------------------

    def _indexers(self, count: int) -> list[ChunkIndexer]:
        """``count`` independent indexers with the run's settings, drained by the caller (as
        indexers in that many processes: each its own connection per batch, each its own
        looks at the grown users)."""
        settings = self.memory.settings
        return [
            ChunkIndexer(
                self.memory.sessionmaker,
                batch_size=settings.chunk_index_batch_size,
                background=False,
                graph_from=settings.chunk_graph_from,
            )
            for _ in range(count)
        ]

    def _lines(self, u: int) -> list[tuple[int, tuple[list[Line], list[Line]]]]:
        if u not in self.lines:
            rng = random.Random(f"{self.ctx.seed}:new:{u}")
            self.lines[u] = [
                (topic.index, topic_lines(rng, topic))
                for topic in topics_for(self.plans[u], self.ctx.seed)
            ]
        return self.lines[u]

    async def _make_calls(self, count: int, batch: Callable[[], int]) -> list[AddCall]:
        """New sessions of users picked by size (active users write more), ``batch()`` chunks
        per call, with their vectors made on the server beforehand for the lookup embedder."""
        self.rounds += 1
        calls: list[AddCall] = []
        topics: list[int] = []
        made = 0
        now = datetime.now(UTC)
        while made < count:
            u = self.rng.choices(range(len(self.plans)), weights=self.weights)[0]
            drafts = []
            seq = 0
            for _ in range(min(batch(), count - made)):
                topic, lines = self.rng.choice(self._lines(u))
                content, messages, crumbs = chunk_text(self.rng, *lines)
                # A marker keeps every new chunk distinct from the loaded ones.
                content += f"\n\nUser: ok, next (round {self.rounds}, chunk {made})"
                drafts.append(
                    ChunkDraft(
                        content=content,
                        content_hash=_sha256(content),
                        start_seq=seq,
                        end_seq=seq + messages,
                        started_at=now,
                        ended_at=now + timedelta(minutes=messages),
                        breadcrumbs=crumbs,
                    )
                )
                topics.append(topic)
                seq += messages + 1
                made += 1
            calls.append(
                AddCall(self.plans[u].user_id, f"bench-new-{self.rounds}-{len(calls)}", drafts)
            )
        noise = [[self.rng.randrange(NOISE_POOL) for _ in topics] for _ in range(3)]
        async with self.memory.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT x.ord, l2_normalize(t.v + (a.v + b.v + c.v) * "
                    f"array_fill({SIGMA}::real, ARRAY[{EMBEDDING_DIM}])::vector)::text AS v "
                    "FROM unnest(CAST(:t AS int[]), CAST(:a AS int[]), CAST(:b AS int[]), "
                    "CAST(:c AS int[])) WITH ORDINALITY AS x(topic, n1, n2, n3, ord) "
                    "JOIN bench_topic t ON t.id = x.topic JOIN bench_noise a ON a.id = x.n1 "
                    "JOIN bench_noise b ON b.id = x.n2 JOIN bench_noise c ON c.id = x.n3"
                ),
                {"t": topics, "a": noise[0], "b": noise[1], "c": noise[2]},
            )
            vectors = {row.ord: parse_vector(row.v) for row in rows}
        i = 1
        for call in calls:
            for draft in call.drafts:
                self.lookup.vectors[draft.content] = vectors[i]
                i += 1
        return calls

    async def _add_round(
        self,
        label: str,
        count: int,
        batch: Callable[[], int],
        *,
        callers: int = 1,
        vectors: bool = True,
        indexers: int = 1,
    ) -> Row:
        """add_chunks calls of ``batch()`` chunks, ``callers`` at a time (each caller its own
        connection, calls one after another), then the indexer timed on the chunks they
        queued (text and vectors). The rate is chunks over the wall time of the calls,
        embedding excluded. ``vectors=False``: the embedder is down, the chunks land without
        vectors and the indexer indexes their text alone."""
        calls = await self._make_calls(count, batch)
        self.log(f"add_chunks: {label}, {count:,} chunks in {len(calls)} calls")
        self.lookup.failing = not vectors
        try:
            with quiet_embedding_failures():
                return await self._add_calls(label, calls, callers, indexers)
        finally:
            self.lookup.failing = False

    async def _add_calls(
        self, label: str, calls: Sequence[AddCall], callers: int, indexers: int = 1
    ) -> Row:
        warmup = min(ADD_WARMUP_CALLS, len(calls) // 5)
        for call in calls[:warmup]:
            await self.memory.store.add_chunks(
                call.drafts, user_id=call.user_id, session_id=call.session_id
            )
        await self.memory.store.index_pending_chunks()
        measured = calls[warmup:]
        done: list[tuple[int, float]] = []
        sql0, embed0 = self.clock.seconds, self.embedder.seconds

        async def caller(mine: Sequence[AddCall]) -> None:
            for call in mine:
                began = time.perf_counter()
                embedded = self.embedder.seconds
                written = await self.memory.store.add_chunks(
                    call.drafts, user_id=call.user_id, session_id=call.session_id
                )
                # The lookup embedder never awaits, so this is this call's embedding time.
                spent = time.perf_counter() - began - (self.embedder.seconds - embedded)
                assert written == len(call.drafts), (written, len(call.drafts))
                done.append((written, spent))

        started = time.perf_counter()
        await asyncio.gather(*(caller(measured[i::callers]) for i in range(callers)))
        wall = time.perf_counter() - started
        chunks = sum(n for n, _ in done)
        seconds = wall - (self.embedder.seconds - embed0)
        sql = self.clock.seconds - sql0  # meaningful with one caller only (one clock)
        per_call = [spent for _, spent in done]
        queued = await self.memory.store.pending_chunk_count()
        started = time.perf_counter()
        # That many indexers, each its own connection, as in that many processes (or the
        # package's CHUNK_INDEX_WORKERS lanes: index_pending_chunks runs the default's two).
        drains = [indexer.drain() for indexer in self._indexers(indexers)]
        indexed = sum(await asyncio.gather(*drains))
        index_seconds = time.perf_counter() - started
        assert indexed == queued == chunks, (indexed, queued, chunks)
        self.last_rate = chunks / seconds
        indent = "  " if label.startswith(" ") else ""
        who = f"{callers} callers at once" if callers > 1 else "one caller"
        what = (
            "text into the GIN index, vectors into the HNSW index"
            if not self.lookup.failing
            else "text into the GIN index; no vectors"
        )
        return Row(
            f"{indent}add_chunks, {label.strip()}",
            fmt_rate(chunks / seconds),
            "chunks/s",
            f"{fmt_count(chunks)} chunks in {len(done)} calls, {who}, embedding excluded; "
            f"per call p50 {fmt_ms(percentile(per_call, 50))} ms, p95 "
            f"{fmt_ms(percentile(per_call, 95))} ms"
            + (f"; SQL {sql / seconds:.0%} of the time" if callers == 1 else "")
            + f". Then {'the indexer' if indexers == 1 else f'{indexers} indexers at once'}"
            f" indexed the {fmt_count(indexed)} queued chunks ({what}) "
            f"at {fmt_rate(indexed / index_seconds)} chunks/s "
            f"(batches of {self.memory.settings.chunk_index_batch_size}); both together: "
            f"{fmt_rate(chunks / (seconds + index_seconds))} chunks/s",
        )

    async def _ddl(self, sql: str) -> float:
        started = time.perf_counter()
        async with self.memory.engine.begin() as conn:
            await conn.execute(text(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'"))
            await conn.execute(text("SET LOCAL max_parallel_maintenance_workers = 1"))
            for statement in sql.split(";"):
                if statement.strip():
                    await conn.execute(text(statement))
        return time.perf_counter() - started

    async def adds(self) -> None:
        n = self.sizes.adds
        rows = self.report.rows

        def small() -> int:
            return self.rng.randint(1, 8)

        def big() -> int:
            return 64

        rows.append(await self._add_round("all indexes, 1–8 chunks a call", n, small))
        rate = self.last_rate
        rows.append(await self._add_round("all indexes, 64 chunks a call", n, big))
        rows.append(
            await self._add_round(
                f"all indexes, 1–8 chunks a call, {CONCURRENT_CALLERS} callers",
                n,
                small,
                callers=CONCURRENT_CALLERS,
            )
        )
        rows.append(
            await self._add_round(
                "all indexes, 1–8 chunks a call, then two indexers at once (CHUNK_INDEX_WORKERS 2)",
                n,
                small,
                indexers=2,
            )
        )
        rows.append(
            await self._add_round(
                "all indexes, 1–8 chunks a call, no vectors (embedder down)",
                n,
                small,
                vectors=False,
            )
        )
        if not self.ctx.large:
            self.report.targets.append(
                Target(
                    name=(
                        f"add_chunks into the {fmt_count(self.sizes.chunks)}-chunk table, all "
                        "indexes, 1–8 chunks a call, one caller, embedding excluded"
                    ),
                    goal=f">= {ADD_RATE_TARGET:,.0f} chunks/s",
                    measured=f"{fmt_rate(rate)} chunks/s",
                    met=rate >= ADD_RATE_TARGET,
                )
            )
        if not self.sizes.diagnose:
            return
        # Diagnosis: what the GIN index on breadcrumbs costs the write path.
        await self._ddl("; ".join(f"DROP INDEX {name}" for name in GIN_INDEXES))
        rows.append(
            await self._add_round("  without the breadcrumbs GIN index, 1–8 a call", n, small)
        )

    # --- a burst of writes ---------------------------------------------------------------------

    async def burst(self) -> None:
        """Issue #16: add_chunks at BURST_RATE chunks/s for two minutes (--large; 20 s at 100k)
        into the loaded set, in calls of BURST_CALL to BURST_WRITERS users drawn by size, while
        CHUNK_INDEX_WORKERS indexers (as the background one and its helpers: each its own
        connection, batches of the setting) drain the queues and one caller searches,
        alternately a user the burst writes to (their chunks wait in the queues: a backlog,
        read exactly) and a user drawn uniformly that it does not. After the burst the
        indexers go on until the queues are empty (at most BURST_DRAIN_LIMIT s) and the
        searches with them."""
        seconds = (BURST_SECONDS_LARGE if self.ctx.large else BURST_SECONDS) * min(
            1.0, 4 * self.ctx.scale
        )
        wanted = min(BURST_WRITERS, len(self.plans) // 2)
        writers: list[int] = []
        for u in self.rng.choices(range(len(self.plans)), weights=self.weights, k=20 * wanted):
            if u not in writers:
                writers.append(u)
            if len(writers) == wanted:
                break
        taken = set(writers)
        quiet = [u for u in range(len(self.plans)) if u not in taken]
        watched = {
            "with a backlog": await make_queries(
                self.memory, self.lookup, self.rng, self.plans, self.ids, writers
            ),
            "without one": await make_queries(
                self.memory,
                self.lookup,
                self.rng,
                self.plans,
                self.ids,
                self.rng.sample(quiet, min(wanted, len(quiet))),
            ),
        }
        pool = [
            d
            for call in await self._make_calls(BURST_POOL, lambda: BURST_CALL)
            for d in call.drafts
        ]
        vectors = [self.lookup.vectors[d.content] for d in pool]
        noise = random.Random(self.ctx.seed)

        def vector_of(content: str) -> list[float]:
            # The pool's vector of this text, a few coordinates moved: no two burst chunks share
            # one (unnormalised is fine: the indexer normalises, cosine ignores length).
            n = int(content.rsplit("(burst ", 1)[1].rstrip(")"))
            v = list(vectors[n % len(pool)])
            for i in noise.sample(range(EMBEDDING_DIM), 8):
                v[i] += noise.gauss(0.0, 0.05)
            return v

        def drafts(first: int) -> list[ChunkDraft]:
            made, seq = [], 0
            for n in range(first, first + BURST_CALL):
                base = pool[n % len(pool)]
                content = f"{base.content}\n\nUser: noted (burst {n})"
                span = base.end_seq - base.start_seq
                made.append(
                    base.model_copy(
                        update={
                            "content": content,
                            "content_hash": _sha256(content),
                            "start_seq": seq,
                            "end_seq": seq + span,
                        }
                    )
                )
                seq += span + 1
            return made

        self.lookup.fallback = vector_of
        # As the background indexer with its helpers: CHUNK_INDEX_WORKERS indexers, each its
        # own connection per batch. Here every lane polls the queues on its own, so all of them
        # run from the first write (the package's helpers start at the first full batch, which
        # a burst makes at once): an upper bound by at most a batch.
        lanes = self.memory.settings.chunk_index_workers
        indexers = self._indexers(lanes)
        with_indexers = f"{lanes} indexer{'s' if lanes > 1 else ''} (CHUNK_INDEX_WORKERS)"
        writing = asyncio.Event()
        writing.set()
        done = asyncio.Event()
        latencies: dict[tuple[str, str], list[float]] = {}
        indexed_during = 0
        text_drained: float | None = None  # when no text was queued any more, after the burst

        async def queues() -> tuple[int, int]:
            """Chunks whose text, and whose vector, wait (the indexer takes text first)."""
            async with self.memory.engine.connect() as conn:
                row = (
                    await conn.execute(
                        text(
                            "SELECT (SELECT count(*) FROM memory_chunk_text_queue),"
                            " (SELECT count(*) FROM memory_chunk_vector_queue)"
                        )
                    )
                ).one()
            return int(row[0]), int(row[1])

        self.log(
            f"burst: add_chunks at {BURST_RATE:,.0f} chunks/s for {seconds:.0f} s, "
            f"{with_indexers}, one caller searching"
        )

        async def write() -> tuple[int, int, float]:
            written = calls = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                wait = started + written / BURST_RATE - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                uid = self.plans[self.rng.choice(writers)].user_id
                written += await self.memory.store.add_chunks(
                    drafts(written), user_id=uid, session_id=f"bench-burst-{calls}"
                )
                calls += 1
            return written, calls, time.perf_counter() - started

        async def lane(indexer: ChunkIndexer) -> None:
            nonlocal indexed_during, text_drained
            while True:
                got = await indexer.drain(max_batches=8)
                if writing.is_set():
                    indexed_during += got
                else:
                    # Another lane may have seen it first, during the await.
                    if text_drained is None and (await queues())[0] == 0 and text_drained is None:
                        text_drained = time.perf_counter()
                    if await indexer.queued() == 0:
                        break
                # drain() counts whole chunks (0 while it indexes text first): whether its
                # last batch found a full batch of work says if it is idle.
                if indexer.caught_up:
                    await asyncio.sleep(0.05)

        async def index() -> None:
            try:
                # A lane's failure cancels the others (and is raised below).
                async with asyncio.TaskGroup() as lanes_running:
                    for indexer in indexers:
                        lanes_running.create_task(lane(indexer))
            finally:
                done.set()  # a failure ends the wait at once, and is raised below

        async def watch() -> None:
            turn = 0
            while not done.is_set():
                phase = "burst"
                if not writing.is_set():
                    phase = "drain, text queued" if text_drained is None else "drain, vectors only"
                for who, queries in watched.items():
                    query = queries[turn % len(queries)]
                    began = time.perf_counter()
                    await self.memory.store.search_chunks(query.text, user_id=query.user_id)
                    latencies.setdefault((phase, who), []).append(time.perf_counter() - began)
                turn += 1
                await asyncio.sleep(0.01)

        indexing = asyncio.create_task(index())
        watching = asyncio.create_task(watch())
        try:
            written, calls, burst_seconds = await write()
            writing.clear()
            backlog = await self.memory.store.pending_chunk_count()
            text_backlog, vector_backlog = await queues()
            drain_started = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(done.wait()), BURST_DRAIN_LIMIT)
            drain_seconds = time.perf_counter() - drain_started
            left = await self.memory.store.pending_chunk_count()
        finally:
            indexing.cancel()
            watching.cancel()
            outcomes = await asyncio.gather(indexing, watching, return_exceptions=True)
            self.lookup.fallback = None
        for outcome in outcomes:  # a failure of either is the run's, not a figure
            if isinstance(outcome, Exception) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome
        drained = "drained" if left == 0 else f"{left:,} still queued when it stopped"
        rows = self.report.rows
        rows.append(
            Row(
                f"burst: add_chunks at {BURST_RATE:,.0f} chunks/s asked, for {burst_seconds:.0f} s",
                fmt_rate(written / burst_seconds),
                "chunks/s",
                f"{fmt_count(written)} chunks in {calls:,} calls of {BURST_CALL} to "
                f"{len(writers)} users drawn by size, embedding a lookup; {with_indexers} and "
                "one searching caller beside it",
            )
        )
        rows.append(
            Row(
                "  backlog when the burst ended / drained in",
                f"{fmt_count(backlog)} / {drain_seconds:.0f} s",
                "chunks / s",
                f"{drained}; the indexers completed {fmt_count(indexed_during)} chunks during the "
                f"burst ({fmt_rate(indexed_during / burst_seconds)}/s) and "
                f"{fmt_count(backlog - left)} after it "
                f"({fmt_rate((backlog - left) / max(drain_seconds, 1e-9))}/s)",
            )
        )
        text_seconds = "not" if text_drained is None else f"{text_drained - drain_started:.0f} s"
        rows.append(
            Row(
                "  of which text / vectors queued; text drained in",
                f"{fmt_count(text_backlog)} / {fmt_count(vector_backlog)}; {text_seconds}",
                "chunks",
                "the indexer takes text first: a queued chunk's text costs a search its "
                "tsvector, a queued vector one distance",
            )
        )
        for (phase, who), times in sorted(latencies.items()):
            rows.append(
                p50_p95(
                    f"  search_chunks during the {phase}, users {who}",
                    times,
                    f"{len(times)} searches, vector path, one caller, embedding a lookup",
                )
            )
        if self.ctx.large or self.ctx.scale < 1:
            for who, bar in (
                ("without one", BURST_P95_QUIET),
                ("with a backlog", BURST_P95_BACKLOG),
            ):
                times = [t for (phase, w), ts in latencies.items() if w == who for t in ts]
                if times:
                    p95 = percentile(times, 95)
                    self.report.targets.append(
                        Target(
                            name=f"search_chunks p95 during the burst and its drain, users {who}",
                            goal=f"<= {fmt_ms(bar)} ms",
                            measured=f"{fmt_ms(p95)} ms",
                            met=p95 <= bar,
                        )
                    )


def _sha256(content: str) -> str:
    import hashlib

    return hashlib.sha256(content.encode("utf-8")).hexdigest()
