"""Textual statements built once per shape.

``text()`` scans its SQL for bind parameters on every call: for the long search statements
that scan cost more than executing a small search (about a quarter of a millisecond each).
Statements whose text depends on the call's shape (a user or everyone, a session filter, a
vector or none) go through ``statement()``, which keeps one ``TextClause`` per distinct text.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import TextClause, text

__all__ = ["queue_pop", "statement"]

_SHAPES = 512
"""Distinct statement texts kept: every search has a handful of shapes, so this bounds
memory without ever evicting in practice."""


@lru_cache(maxsize=_SHAPES)
def statement(sql: str) -> TextClause:
    """The ``TextClause`` of ``sql``, made once per distinct text."""
    return text(sql)


def queue_pop(queue: str, key: str) -> str:
    """The CTEs ``picked`` and ``taken`` of a batch taken off ``queue``: up to ``:limit`` rows,
    lowest ``key`` first, skipping rows another indexer holds; ``taken`` returns ``key``.

    The rows are picked once, in a locked CTE, and deleted ``USING`` it: as ``DELETE … WHERE key
    IN (SELECT … LIMIT … SKIP LOCKED)`` the subquery could be run again for a row another
    indexer had just taken, and a batch of 64 took 1,340 rows (two indexers at once, 100k
    bench)."""
    return f"""picked AS (
        SELECT {key} FROM {queue}
        ORDER BY {key} LIMIT :limit FOR UPDATE SKIP LOCKED
    ),
    taken AS (
        DELETE FROM {queue} q USING picked p
        WHERE q.{key} = p.{key}
        RETURNING q.{key}
    )"""
