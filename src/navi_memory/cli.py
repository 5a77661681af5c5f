"""The ``navi-memory`` command: doctor, backfill, migrate and extract, for operators and
``make``.

Exit codes: 0 done, 1 some sessions failed to extract (they are retried next run), 2 a
navi-memory error (message on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from sqlalchemy import text

from navi_memory.config import Settings
from navi_memory.db import redact_url
from navi_memory.errors import NaviMemoryError
from navi_memory.jobs.backfill import BackfillProgress
from navi_memory.jobs.stale_sessions import ExtractionProgress
from navi_memory.memory import Memory, open_memory

__all__ = ["describe", "main"]


async def describe(memory: Memory) -> list[str]:
    """Lines saying what the database is and offers: versions, extensions, tables, revision."""
    caps = memory.capabilities
    async with memory.engine.connect() as conn:
        tables = list(
            (
                await conn.execute(
                    text(
                        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                        "AND tablename <> 'alembic_version' ORDER BY 1"
                    )
                )
            ).scalars()
        )
    where = (
        f"embedded, data in {memory.settings.navi_memory_data_dir / 'pgdata'}"
        if memory.settings.database_url is None
        else redact_url(memory.engine.url)
    )
    trgm = f"pg_trgm {caps.pg_trgm_version}" if caps.pg_trgm else "pg_trgm not installed"
    queued = await memory.store.pending_chunk_count()
    return [
        f"database    {where}",
        f"PostgreSQL  {caps.server_version}",
        f"pgvector    {caps.vector_version}",
        f"pg_trgm     {trgm if caps.pg_trgm else trgm + ' (plain ILIKE fallback)'}",
        f"revision    {caps.revision} (head)",
        f"tables      {', '.join(tables)}",
        f"queued      {queued} chunk vector(s) waiting for the HNSW index"
        + (" (`navi-memory backfill` indexes them)" if queued else ""),
    ]


async def _doctor(settings: Settings) -> int:
    async with open_memory(settings) as memory:
        for line in await describe(memory):
            print(line)
    return 0


def _bar(label: str, done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    bar = "#" * filled + "-" * (width - filled)
    end = "\n" if done >= total else "\r"
    print(f"{label:<14} [{bar}] {done}/{total}", end=end, flush=True)


def _progress_bar(progress: BackfillProgress) -> None:
    _bar(progress.table, progress.done, progress.total)


def _extraction_bar(progress: ExtractionProgress) -> None:
    _bar("sessions", progress.done, progress.total)


async def _backfill(settings: Settings) -> int:
    async with open_memory(settings) as memory:
        recovered = await memory.sessions.index_dropped_history()
        total = await memory.store.backfill_embeddings(
            settings.backfill_batch_size, progress=_progress_bar
        )
        indexed = await memory.store.index_pending_chunks()
    print(
        f"backfill: {recovered} chunk(s) of dropped history recovered, {total} row(s) "
        f"embedded, {indexed} chunk vector(s) indexed"
    )
    return 0


async def _extract(settings: Settings, user: str | None, as_json: bool) -> int:
    async with open_memory(settings) as memory:
        report = await memory.extractor.process_stale_sessions(
            user, progress=None if as_json else _extraction_bar
        )
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        print(
            f"extract: {report.sessions_seen} stale session(s), {report.sessions_extracted} "
            f"extracted, {report.sessions_skipped} skipped, {report.failures} failed; "
            f"{report.facts_written} fact(s) written, {report.facts_merged} merged, "
            f"{report.facts_skipped} unusable item(s) skipped; "
            f"{report.summaries_written} summary(ies) rewritten"
        )
    return 1 if report.failures else 0


def _migrate(settings: Settings, revision: str, sql: bool) -> int:
    from navi_memory.migrations import upgrade

    output = upgrade(settings, revision=revision, sql=sql)
    if sql:
        print(output, end="")
    else:
        print(f"migrate: the database is at {revision}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="navi-memory", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor", help="check the configured database and print what it offers")
    commands.add_parser(
        "backfill",
        help=(
            "index demoted messages no chunk holds, embed every row without a vector "
            "(BACKFILL_BATCH_SIZE, BACKFILL_PAUSE_SECONDS), then index every queued chunk vector"
        ),
    )
    migrate = commands.add_parser(
        "migrate", help="bring the database schema to head (the revisions ship with the package)"
    )
    migrate.add_argument("--to", default="head", help="the revision to reach (default: head)")
    migrate.add_argument(
        "--sql", action="store_true", help="print the SQL instead of running it (no database)"
    )
    extract = commands.add_parser(
        "extract",
        help=(
            "turn every stale session (idle MEMORY_STALE_MINUTES, not extracted since) into "
            "facts with the chat model, and rewrite each user's summary; exit 1 if some failed"
        ),
    )
    extract.add_argument("--user", help="only this user's sessions (a user id)")
    extract.add_argument(
        "--json", action="store_true", help="print the report as JSON (no progress bar)"
    )
    args = parser.parse_args(argv)
    settings = Settings()
    try:
        if args.command == "doctor":
            return asyncio.run(_doctor(settings))
        if args.command == "backfill":
            return asyncio.run(_backfill(settings))
        if args.command == "migrate":
            return _migrate(settings, args.to, args.sql)
        if args.command == "extract":
            return asyncio.run(_extract(settings, args.user, args.json))
    except NaviMemoryError as exc:
        print(f"\nnavi-memory: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nnavi-memory: interrupted; finished batches are saved, run it again to resume")
        return 130
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
