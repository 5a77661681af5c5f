"""LIKE patterns from user text: every repository escapes ``%``, ``_`` and ``\\`` the same way.

Patterns here go into arrays (``ILIKE ANY (CAST(:patterns AS text[]))``), which SQLAlchemy's
``autoescape=True`` cannot reach, so they are escaped by hand, with ``\\`` as the escape.
"""

from __future__ import annotations

__all__ = ["contains_pattern", "escape_like"]


def escape_like(term: str) -> str:
    """``term`` as a literal inside a LIKE pattern (escape character ``\\``)."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def contains_pattern(term: str) -> str:
    """A LIKE pattern matching any text that contains ``term``."""
    return f"%{escape_like(term)}%"
