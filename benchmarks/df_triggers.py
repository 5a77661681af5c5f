"""What keeping a user's document frequencies (memory_chunk_lexeme_df) costs the text indexer.

A throw-away server, migrated to head; ``--base`` chunks (≈ 330 words of a 4,000-word
vocabulary, one word in twenty a unique identifier: ≈ 2.3 KB, like the chunks benchmark's)
over ``--users`` users indexed into memory_chunk_terms with every user's frequencies kept, then
batches of 64 more indexed the way the indexer does it (one INSERT … SELECT of their
tsvectors), with every user kept (what revision 0008 did for everyone, and what a user of
navi_chunk_df_from() chunks or more costs since 0010) and none kept (what a smaller user costs
since 0010) in alternation — ``df_kept`` flipped between batches —, so both sides see the
same table sizes and the same moments of the machine.

    python -m benchmarks.df_triggers                  # 60,000 chunks, 200 users, 60 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import asyncpg

from benchmarks.harness import BenchServer, migrate

BATCH = 64
"""The indexer's batch (CHUNK_INDEX_BATCH_SIZE's default)."""


async def run(base: int, users: int, rounds: int) -> None:
    server = BenchServer()
    try:
        await migrate(await server.create_database("df_triggers"))
        conn = await server.connect("df_triggers")
        try:
            await conn.execute(
                "INSERT INTO navi_users (id) SELECT md5(g::text)::uuid"
                " FROM generate_series(1, $1) g",
                users,
            )
            await conn.execute(
                "INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
                " start_seq, end_seq, started_at, ended_at)"
                " SELECT md5((1 + g % $2)::text)::uuid, 's' || (g % 500), x.c, md5(g::text),"
                "   g, g, now(), now()"
                " FROM generate_series(1, $1) g, LATERAL ("
                "   SELECT string_agg(CASE WHEN random() < 0.05"
                "     THEN 'id_' || md5(random()::text)"
                "     ELSE 'w' || floor(4000 * random() ^ 2)::int END, ' ') AS c"
                "   FROM generate_series(1, 330 + g % 2) w) x",
                base + 2 * BATCH * rounds,
                users,
            )
            # Every user kept from their first chunk on, then nobody newly kept: the rounds
            # flip df_kept themselves.
            await _df_from(conn, 0)
            await conn.execute(_INDEX + " WHERE id <= $1 OFFSET 0) c", base)
            await _df_from(conn, 10**9)
            await conn.execute("DELETE FROM memory_chunk_text_queue")
            await conn.execute("VACUUM ANALYZE")
            rows, size = await conn.fetchrow(
                "SELECT count(*), pg_size_pretty(pg_total_relation_size('memory_chunk_lexeme_df'))"
                " FROM memory_chunk_lexeme_df"
            )
            print(f"{base:,} chunks indexed over {users:,} users")
            print(f"memory_chunk_lexeme_df: {rows:,} rows, {size}")
            print(f"{rounds} rounds: a batch of {BATCH} with every user kept, one with none")
            times: dict[bool, list[float]] = {True: [], False: []}
            next_id = base + 1
            for r in range(rounds):
                for on in (True, False) if r % 2 == 0 else (False, True):
                    await conn.execute("UPDATE memory_chunk_text_stats SET df_kept = $1", on)
                    start = time.perf_counter()
                    await conn.execute(
                        _INDEX + " WHERE id >= $1 AND id < $1 + $2 OFFSET 0) c", next_id, BATCH
                    )
                    times[on].append(time.perf_counter() - start)
                    next_id += BATCH
        finally:
            await conn.close()
    finally:
        server.stop()
    for on in (False, True):
        t = times[on]
        print(
            f"{'kept    ' if on else 'not kept'}: batch p50 {statistics.median(t) * 1e3:.1f} ms,"
            f" {BATCH * len(t) / sum(t):,.0f} chunks/s"
        )
    extra = (statistics.median(times[True]) - statistics.median(times[False])) / BATCH
    print(f"keeping frequencies adds {extra * 1e3:.2f} ms a chunk (p50)")


async def _df_from(conn: asyncpg.Connection, chunks: int) -> None:
    await conn.execute(
        "CREATE OR REPLACE FUNCTION navi_chunk_df_from() RETURNS integer"
        f" LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT {int(chunks)}'"
    )


_INDEX = (
    "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
    " SELECT id, user_id, session_id, ended_at, length(tsv), tsv"
    " FROM (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM memory_chunks"
)
# The subquery's WHERE is the caller's; it ends with "OFFSET 0) c", which keeps the subquery
# apart: flattened, each tsvector was made twice (for lexemes and for tsv).
"""The indexer's text insert, over the chunks the caller's WHERE picks."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=60_000, help="chunks indexed first")
    parser.add_argument("--users", type=int, default=200, help="users owning them")
    parser.add_argument("--rounds", type=int, default=60, help="batches of 64 each way")
    args = parser.parse_args()
    asyncio.run(run(args.base, args.users, args.rounds))


if __name__ == "__main__":
    main()
