"""Row contents of every table, to prove a failed call changed nothing (contents, not counts)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

Snapshot = dict[str, list[str]]
"""Table name → every row as ``ctid xmin md5(row text)``, sorted: its contents (the digest of
PostgreSQL's text form of the whole row) and its version (a row rewritten even with the same
values has a new ctid and xmin). Digests keep a snapshot small when rows hold megabytes."""


async def table_contents(engine: AsyncEngine) -> Snapshot:
    """Every row of every table in ``public`` (bookkeeping aside: Alembic's, and the record of
    the embedding model, which the first vector write of a process makes before it writes and
    which a failed write rightly keeps), found in the catalog so that tables added later are
    covered without a change here."""
    async with engine.connect() as conn:
        tables = (
            await conn.execute(
                text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename NOT IN ('alembic_version', 'memory_embedding_model') "
                    "ORDER BY 1"
                )
            )
        ).scalars()
        contents: Snapshot = {}
        for table in list(tables):
            rows = await conn.execute(
                text(
                    f"SELECT t.ctid::text || ' ' || t.xmin::text || ' ' || md5(t::text) "
                    f'FROM public."{table}" t ORDER BY 1'
                )
            )
            contents[table] = list(rows.scalars())
    return contents


def changed_tables(before: Snapshot, after: Snapshot) -> dict[str, tuple[list[str], list[str]]]:
    """Per table that differs: (rows gone, rows new), each shortened for a readable failure."""
    diff: dict[str, tuple[list[str], list[str]]] = {}
    for table in sorted(before.keys() | after.keys()):
        old, new = set(before.get(table, [])), set(after.get(table, []))
        if old != new:
            diff[table] = (
                sorted(row[:200] for row in old - new),
                sorted(row[:200] for row in new - old),
            )
    return diff
