"""Textual statements built once per shape.

``text()`` scans its SQL for bind parameters on every call: for the long search statements
that scan cost more than executing a small search (about a quarter of a millisecond each).
Statements whose text depends on the call's shape (a user or everyone, a session filter, a
vector or none) go through ``statement()``, which keeps one ``TextClause`` per distinct text.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def queue_pop(
    queue: str, key: str, parent: str, where: str = "TRUE", returning: Sequence[str] = ()
) -> str:
    """The CTEs ``picked``, ``held`` and ``taken`` of a batch taken off ``queue``: up to
    ``:limit`` rows, lowest ``key`` first, skipping rows another indexer holds; ``taken``
    returns ``key`` (and the queue row's columns ``returning`` names), and
    ``picked`` counts what the batch looked at (less than ``:limit``: the queue is empty for
    this indexer). ``where``: a condition on the queue row ``q``.

    The rows are picked once, in a locked CTE, and deleted ``USING`` it: as ``DELETE … WHERE key
    IN (SELECT … LIMIT … SKIP LOCKED)`` the subquery could be run again for a row another
    indexer had just taken, and a batch of 64 took 1,340 rows (two indexers at once, 100k
    bench).

    Each row's ``parent`` (``id`` = ``key``: the fact or chunk it queues) is locked too, FOR KEY
    SHARE, skipping parents a delete holds: the indexer's foreign key checks would otherwise
    wait for such a parent while holding the queue row that the delete's cascade waits for, a
    deadlock (CI, 2026-12-05: a fact deleted while the fact indexer ran). A row whose parent is
    held stays queued (the delete's cascade, or a later batch, drops it); a row whose parent is
    gone (the chunk text queue has no foreign key) is taken and indexes nothing. So the
    indexer never waits for a delete, and a delete waits for one batch at most."""
    return f"""picked AS (
        -- The queue alone, by its primary key: with the parent joined here, the vector-only
        -- batches of a 100k drain took 126 s against 27 s (measured, 2026-12-05).
        SELECT q.{key} FROM {queue} q WHERE {where}
        ORDER BY q.{key} LIMIT :limit FOR UPDATE SKIP LOCKED
    ),
    held AS (
        SELECT p.id FROM {parent} p JOIN picked k ON p.id = k.{key}
        FOR KEY SHARE OF p SKIP LOCKED
    ),
    taken AS (
        DELETE FROM {queue} q USING picked k
        WHERE q.{key} = k.{key}
          AND (q.{key} IN (SELECT id FROM held)
               OR NOT EXISTS (SELECT 1 FROM {parent} p WHERE p.id = q.{key}))
        RETURNING {", ".join(f"q.{column}" for column in (key, *returning))}
    )"""
