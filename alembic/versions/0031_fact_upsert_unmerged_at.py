"""navi_fact_upsert returns the written row's ``unmerged_at`` too.

Every read of a fact now carries ``unmerged_at`` (``Fact.unmerged_at``: when the user separated
the row from the fact it was merged into; ``navi-memory facts show`` prints it). The upsert's
result type predates the column (0017 added it and kept the result), so the returned Fact would
lack it; looking it up in the calling statement cost ≈ 0.07 ms a call (≈ 7% of an upsert). The
function returns it from its RETURNING clauses instead: no work more.

A function's result type cannot be changed in place: the function is dropped and created
again, in the migration's transaction (a caller meanwhile runs the old definition; the swap is
atomic at the commit). Its text is 0027's with the column added. Downgrade restores 0027's
function the same way.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SIGNATURE = (
    "navi_fact_upsert(uuid, text, text, text, text, text, vector, text, integer, "
    "double precision, text, text, boolean)"
)

_CHANGES = (
    # The result type: the column last.
    (
        "    session_id text, has_embedding boolean\n)",
        "    session_id text, has_embedding boolean, unmerged_at timestamptz\n)",
        1,
    ),
    # Every RETURNING of a written row (insert, new value, verify, vector).
    (
        "f.embedding IS NOT NULL AS has_embedding",
        "f.embedding IS NOT NULL AS has_embedding, f.unmerged_at",
        4,
    ),
    # The result row.
    (
        "       w.updated_at, w.session_id, w.has_embedding\nFROM go",
        "       w.updated_at, w.session_id, w.has_embedding, w.unmerged_at\nFROM go",
        1,
    ),
)


def _revision(revision_file: str) -> ModuleType:
    """An earlier revision's module (frozen, like this one)."""
    path = Path(__file__).with_name(revision_file)
    spec = importlib.util.spec_from_file_location(f"navi_revision_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function_0027() -> str:
    text: str = _revision("0027_fact_session_owner.py").upsert_function()
    return text


def upsert_function() -> str:
    """0027's function, returning ``unmerged_at``."""
    text = _function_0027()
    for old, new, count in _CHANGES:
        if text.count(old) != count:
            raise RuntimeError(f"revision 0031: 0027's function text changed near {old!r}")
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    op.execute(f"DROP FUNCTION {_SIGNATURE}")
    op.execute(upsert_function())


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {_SIGNATURE}")
    op.execute(_function_0027())
