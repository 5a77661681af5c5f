"""Textual statements built once per shape.

``text()`` scans its SQL for bind parameters on every call: for the long search statements
that scan cost more than executing a small search (about a quarter of a millisecond each).
Statements whose text depends on the call's shape (a user or everyone, a session filter, a
vector or none) go through ``statement()``, which keeps one ``TextClause`` per distinct text.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import TextClause, text

__all__ = ["statement"]

_SHAPES = 512
"""Distinct statement texts kept: every search has a handful of shapes, so this bounds
memory without ever evicting in practice."""


@lru_cache(maxsize=_SHAPES)
def statement(sql: str) -> TextClause:
    """The ``TextClause`` of ``sql``, made once per distinct text."""
    return text(sql)
