"""SQL for memory_facts (and its vector index tables) and memory_summary.

The hot statements — the one-statement upsert, the search passes, the indexer's batch — are
fixed text built once at import: prepared once per connection, their bind parameters parsed
once, whatever the call.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    RowMapping,
    Select,
    TextualSelect,
    and_,
    column,
    delete,
    false,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from navi_memory.constants import EMBEDDING_DIM, FACT_SCAN_HEAD
from navi_memory.db import vector_binary
from navi_memory.models import (
    FactForgottenRow,
    FactRow,
    FactVectorQueueRow,
    SessionRow,
    SummaryRow,
)
from navi_memory.repositories.like import contains_pattern, spellings, term_patterns
from navi_memory.repositories.statements import XACT_LOCK, FetchedRow, Reads, fetch_rows, queue_pop

__all__ = [
    "FACT_SORT_COLUMNS",
    "UPSERT",
    "FactRepository",
    "FactSearchRepository",
    "FactUpsertRepository",
    "FactVectorRepository",
    "FactWriteRepository",
    "UpsertDone",
    "UpsertStatement",
    "upsert_parameters",
]

FACT_SORT_COLUMNS = {
    "id": FactRow.id,
    "category": FactRow.category,
    "key": FactRow.key,
    "value": FactRow.value,
    "source": FactRow.source,
    "confidence": FactRow.confidence,
    "created_at": FactRow.created_at,
    "updated_at": FactRow.updated_at,
    "expires_at": FactRow.expires_at,
    "last_verified_at": FactRow.last_verified_at,
}
"""The columns get_all_facts may sort by; anything else is refused before SQL is built."""


_FACT_COLUMNS = (
    "f.id, f.user_id, f.category, f.key, f.value, f.source, f.confidence, f.expires_at, "
    "f.last_verified_at, f.source_context, f.merged_into, f.unmerged_at, f.created_at, "
    "f.updated_at, f.session_id"
)
"""Every memory_facts column a Fact shows, the vector excepted (text SQL form)."""

FACT_FIELDS: Final = (
    "id",
    "user_id",
    "category",
    "key",
    "value",
    "source",
    "confidence",
    "expires_at",
    "last_verified_at",
    "source_context",
    "merged_into",
    "unmerged_at",
    "created_at",
    "updated_at",
    "session_id",
    "has_embedding",
)
"""The columns of ``_RETURNED``, in order."""


def _returning(sql: str, *names: str) -> TextualSelect:
    """``sql`` with its result columns named in order: SQLAlchemy then builds the result's
    metadata once per statement, not on every execution (half of its cost per call here)."""
    return text(sql).columns(*(column(name) for name in names))


_HALFVEC: Final = f"halfvec({EMBEDDING_DIM})"
_VISIBLE: Final = "f.merged_into IS NULL AND (f.expires_at IS NULL OR f.expires_at > now())"
"""What every read path sees (text SQL form of ``visible()``)."""
_RETURNED: Final = f"{_FACT_COLUMNS}, f.embedding IS NOT NULL AS has_embedding"
UPSERT: Final = _returning(
    "SELECT unnormalized_ids, unnormalized_keys, merged, was_expired, action, "
    + ", ".join(FACT_FIELDS)
    + " FROM navi_fact_upsert(:uid, :cat, :key, :norm, :rules, :value, :embedding, "
    ":source, :confidence, :expires_seconds, :source_context, :sid, :dedupe)",
    "unnormalized_ids",
    "unnormalized_keys",
    "merged",
    "was_expired",
    "action",
    *FACT_FIELDS,
)
"""upsert_fact in one round trip: ``navi_fact_upsert``, created by revision 0007 and replaced by
0017 (its text is there), 0027 (which refuses a session of another user: ``_FOREIGN_SESSION``)
and 0031 (which returns ``unmerged_at`` too). Under the (user, category) lock it finds the
target — the visible row holding the key, else the row a hidden spelling of exactly this key
stands behind — and, when deduping, the other visible spellings (same ``key_norm``; never a row
the user separated, nor any when the target is one); then inserts, writes the new value (the
vector only on a target holding the key itself), or verifies (filling a missing vector,
likewise); then hides the other spellings, and the rows behind them, behind the written row. It
writes nothing when a visible spelling of the category has no current ``key_norm``: it returns
those instead, for the caller to fill. A function, not a statement here, because a VOLATILE
function's second statement sees what committed before its lock was granted, and its body keeps
one cached plan (``SET plan_cache_mode``) on connections that force custom plans."""

_SET_KEY_NORMS: Final = text(
    """
    UPDATE memory_facts f SET key_norm = x.norm
    FROM unnest(CAST(:ids AS bigint[]), CAST(:keys AS text[]), CAST(:norms AS text[]))
         AS x(id, key, norm)
    WHERE f.id = x.id AND f.key = x.key
    """
)

_SET_EMBEDDING: Final = text(
    """
    UPDATE memory_facts SET embedding = CAST(:vec AS vector)
    WHERE id = :id AND embedding IS NULL
      AND category || ' / ' || key || ': ' || value = CAST(:embedded AS text)
    """
)
"""Backfill's write; the text compared is ``llm.embedding_text_for_fact`` in SQL."""


_INDEX_QUEUED: Final = text(
    f"""
    WITH {queue_pop("memory_fact_vector_queue", "fact_id", "memory_facts")},
    source AS MATERIALIZED (
        SELECT t.fact_id, f.user_id, f.embedding
        FROM taken t JOIN memory_facts f ON f.id = t.fact_id
    ),
    moved AS (
        INSERT INTO memory_fact_vectors AS v (fact_id, user_id, embedding)
        SELECT fact_id, user_id, CAST(l2_normalize(embedding) AS {_HALFVEC})
        FROM source WHERE embedding IS NOT NULL
        ON CONFLICT (fact_id) DO UPDATE
            SET embedding = EXCLUDED.embedding, user_id = EXCLUDED.user_id
        RETURNING v.fact_id
    ),
    dropped AS (
        DELETE FROM memory_fact_vectors v USING source s
        WHERE v.fact_id = s.fact_id AND s.embedding IS NULL
    )
    SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM taken) AS taken,
           (SELECT count(*) FROM moved) AS indexed,
           ARRAY(SELECT fact_id FROM source) AS done
    """
)
"""Move a batch from the queue into memory_fact_vectors: each fact's current vector of record
replaces what the index held (a fact whose vector is gone leaves it). The vectors are read in
the statement's snapshot; ``_REQUEUE_CHANGED`` then catches a vector written since."""

_REQUEUE_CHANGED: Final = text(
    f"""
    WITH changed AS (
        SELECT f.id, f.user_id FROM memory_facts f
        LEFT JOIN memory_fact_vectors v ON v.fact_id = f.id
        WHERE f.id = ANY (CAST(:done AS bigint[]))
          AND CAST(l2_normalize(f.embedding) AS {_HALFVEC}) IS DISTINCT FROM v.embedding
    ),
    queued AS (
        INSERT INTO memory_fact_vector_queue (fact_id, user_id)
        SELECT id, user_id FROM changed
        ON CONFLICT (fact_id) DO NOTHING
        RETURNING fact_id
    )
    SELECT count(*) FROM queued
    """
)
"""After a batch, in its transaction and a new snapshot: queue again the facts of the batch
whose vector now differs from what the batch indexed (or dropped). A write that committed
between the batch's snapshot and its lock on the queue row (the trigger's DO UPDATE moved the
row, which the batch then took: 0011's wait does not cover it) is seen here; one that commits
later waits for the batch, its own queueing blocked by the row the batch took, and queues the
fact again itself. The batch locks facts FOR KEY SHARE, so writers never wait for it: a lock
that followed the update (FOR SHARE) would make every write of a fact in the batch wait, and
skip facts a verify holds."""

_REQUEUE_UNINDEXED: Final = text(
    """
    WITH added AS (
        INSERT INTO memory_fact_vector_queue (fact_id, user_id)
        SELECT f.id, f.user_id FROM memory_facts f
        WHERE f.embedding IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM memory_fact_vectors v WHERE v.fact_id = f.id)
        ON CONFLICT (fact_id) DO NOTHING
        RETURNING fact_id
    )
    SELECT count(*) FROM added
    """
)


def _search_sql(*, by_user: bool, with_vector: bool) -> TextualSelect:
    """Both passes of search_facts as one statement (FactSearchRepository.search)."""
    owner = "f.user_id = :uid" if by_user else "TRUE"
    where = f"{owner} AND {_VISIBLE}"
    document = "concat_ws(E'\\n', f.category, f.key, f.value)"
    text_pass = f"""
        txt AS (
            SELECT f.id, h.hits, {document} ILIKE ANY (CAST(:phrases AS text[])) AS whole
            FROM memory_facts f,
                 LATERAL (SELECT count(*) AS hits FROM unnest(CAST(:patterns AS text[])) p
                          WHERE {document} ILIKE p) h
            WHERE {where} AND {document} ILIKE ANY (CAST(:patterns AS text[]))
              {{fill_up}}
            ORDER BY h.hits DESC, whole DESC, f.updated_at DESC, f.id DESC
            LIMIT :limit
        )"""
    if not with_vector:
        return _returning(
            f"""
            WITH {text_pass.format(fill_up="")}
            SELECT {_RETURNED}, NULL::float8 AS distance, t.hits AS terms_hit,
                   t.whole AS whole_query
            FROM memory_facts f JOIN txt t ON t.id = f.id""",
            *FACT_FIELDS,
            "distance",
            "terms_hit",
            "whole_query",
        )
    query = "CAST(:q AS vector)"
    unit = f"CAST(l2_normalize({query}) AS {_HALFVEC})"
    # The nearest visible facts: from memory_fact_vectors for facts not queued, and exactly
    # over the queued ones. A queued fact's entry there may be missing or stale, so it never
    # counts: each fact is read from exactly one side, and results never depend on the indexer.
    # memory_fact_vectors is read exactly, by a user's btree or (everyone's) by a scan: there is
    # no graph (revision 0020). Measured at 100k facts, the exact scan beats an HNSW scan for
    # big users (2,105 facts: 5.2 against 23 ms, and HNSW's top 15 differed for 7 of 20
    # queries), and the graph cost every new or changed fact vector more than the rest of its
    # write, for the sake of a global (read_all) search alone.
    # The query's unit vector is a subquery, made once: this statement runs on a cached
    # generic plan, which would otherwise normalise and convert the query for every row
    # (1.4 us a row; docs/benchmarks.md, "2026-12-06, 09:30–10:50 UTC").
    # Visibility (a join per fact) is checked on the nearest FACT_SCAN_HEAD x limit only; the
    # whole list is checked only when too few of those are visible. Exact either way: a
    # visible fact outside the head is farther than every fact in it. A user's distances are
    # kept (MATERIALIZED) for that second look; everyone's are not (a top-N sort over the scan
    # keeps only the head, and the rare second look scans again).
    kept = f"""
        FROM {{scanned}} m JOIN memory_facts f ON f.id = m.fact_id
        WHERE {_VISIBLE}
          AND NOT EXISTS (SELECT 1 FROM memory_fact_vector_queue p
                          WHERE p.fact_id = m.fact_id)"""
    head = f":limit * {FACT_SCAN_HEAD}"
    kept_distances = "MATERIALIZED" if by_user else "NOT MATERIALIZED"
    nearest = f"""
    mine AS {kept_distances} (
        SELECT v.fact_id, v.embedding <=> (SELECT {unit}) AS approx
        FROM memory_fact_vectors v
        WHERE {owner.replace("f.", "v.")}
    ),
    head AS MATERIALIZED (
        SELECT fact_id, approx FROM mine ORDER BY approx, fact_id LIMIT {head}
    ),
    head_kept AS MATERIALIZED (
        SELECT m.fact_id AS id, m.approx {kept.format(scanned="head")}
        ORDER BY m.approx, m.fact_id
        LIMIT :limit
    ),
    indexed AS MATERIALIZED (
        SELECT id FROM head_kept
        WHERE (SELECT count(*) FROM head_kept) >= :limit
           OR (SELECT count(*) FROM head) < {head}
        UNION ALL
        (SELECT m.fact_id {kept.format(scanned="mine")}
           AND (SELECT count(*) FROM head_kept) < :limit
           AND (SELECT count(*) FROM head) >= {head}
         ORDER BY m.approx, m.fact_id
         LIMIT :limit)
    ),"""
    # Which facts make the ``limit`` is decided by one distance on both sides: the
    # half-precision one the index holds, made for a queued fact as the indexer will make it
    # (ties by id). Ranked by its exact distance, a queued fact could take the place of one
    # the index ranks first by 1e-5, and a search's hits changed once it was indexed. The
    # exact distance is the hits' own. Normalising every queued vector cost 2.5x on a queue
    # of 5,000 (review): the nearest FACT_SCAN_HEAD x limit by exact distance are the
    # candidates, ranked again by the index's (rounding swaps near-ties, not a fact at the
    # limit with one three times the limit further down).
    approx = f"CAST(l2_normalize(f.embedding) AS {_HALFVEC}) <=> (SELECT {unit})"
    vector_pass = f"""{nearest}
        queued_near AS MATERIALIZED (
            SELECT f.id, f.embedding <=> {query} AS distance
            FROM memory_fact_vector_queue p JOIN memory_facts f ON f.id = p.fact_id
            WHERE {owner.replace("f.", "p.")} AND {_VISIBLE} AND f.embedding IS NOT NULL
            ORDER BY distance, f.id
            LIMIT {head}
        ),
        queued AS MATERIALIZED (
            SELECT n.id, n.distance, {approx} AS approx
            FROM queued_near n JOIN memory_facts f ON f.id = n.id
            ORDER BY approx, n.id
            LIMIT :limit
        ),
        vec AS MATERIALIZED (
            SELECT n.id, n.distance FROM (
                SELECT f.id, f.embedding <=> {query} AS distance, {approx} AS approx
                FROM memory_facts f WHERE f.id = ANY (ARRAY(SELECT id FROM indexed))
                UNION ALL
                SELECT id, distance, approx FROM queued
            ) n
            WHERE n.distance < :max_distance
            ORDER BY n.approx, n.id
            LIMIT :limit
        )"""
    # The hits are looked up by id as an array (ARRAY(...), not IN or a join): these statements
    # run on generic plans, and everyone's shape, with no user to narrow it, then hash-joined
    # the ids with a scan of every fact (132 against 14 ms at 20k facts, measured in review).
    fill_up = "AND f.id NOT IN (SELECT id FROM vec) AND (SELECT count(*) FROM vec) < :limit"
    return _returning(
        f"""
        WITH {vector_pass},
        {text_pass.format(fill_up=fill_up)}
        SELECT {_RETURNED}, v.distance AS distance, t.hits AS terms_hit,
               t.whole AS whole_query
        FROM memory_facts f LEFT JOIN vec v ON v.id = f.id LEFT JOIN txt t ON t.id = f.id
        WHERE f.id = ANY (ARRAY(SELECT id FROM vec UNION ALL SELECT id FROM txt))""",
        *FACT_FIELDS,
        "distance",
        "terms_hit",
        "whole_query",
    )


_SEARCH: Final = {
    (by_user, with_vector): _search_sql(by_user=by_user, with_vector=with_vector)
    for by_user in (False, True)
    for with_vector in (False, True)
}
"""search_facts' statements, by (narrowed to one user, with a query vector)."""

_RECENT: Final = {
    by_user: _returning(
        f"""
        SELECT {_RETURNED} FROM memory_facts f
        WHERE {"f.user_id = :uid" if by_user else "TRUE"} AND {_VISIBLE}
        ORDER BY f.updated_at DESC, f.id DESC
        LIMIT :limit""",
        *FACT_FIELDS,
    )
    for by_user in (False, True)
}


def fact_columns() -> list[ColumnElement[Any] | InstrumentedAttribute[Any]]:
    """The same columns for Core selects, with ``has_embedding`` instead of the vector: reading
    768 floats back as text and parsing them costs more than the rest of a search."""
    return [
        FactRow.id,
        FactRow.user_id,
        FactRow.category,
        FactRow.key,
        FactRow.value,
        FactRow.source,
        FactRow.confidence,
        FactRow.expires_at,
        FactRow.last_verified_at,
        FactRow.source_context,
        FactRow.merged_into,
        FactRow.unmerged_at,
        FactRow.created_at,
        FactRow.updated_at,
        FactRow.session_id,
        FactRow.embedding.is_not(None).label("has_embedding"),
    ]


def owner_filter(user_id: uuid.UUID | None) -> ColumnElement[bool]:
    """Rows of one user, or every row for a global read (None)."""
    if user_id is None:
        return literal(True)
    return FactRow.user_id == user_id


def not_expired() -> ColumnElement[bool]:
    return or_(FactRow.expires_at.is_(None), FactRow.expires_at > func.now())


def visible() -> ColumnElement[bool]:
    """What every read path sees: not hidden behind a merge, not expired."""
    return and_(FactRow.merged_into.is_(None), not_expired())


def text_match(terms: Sequence[str]) -> ColumnElement[bool]:
    # One ILIKE per column and term, OR-ed: PostgreSQL can bitmap-OR trigram index scans for
    # this shape, which it cannot do for `ILIKE ANY (array)`.
    return or_(
        *(
            column.ilike(contains_pattern(spelling), escape="\\")
            for term in terms
            for spelling in spellings(term)
            for column in (FactRow.category, FactRow.key, FactRow.value)
        )
    )


@dataclass(frozen=True, slots=True)
class UpsertStatement:
    """The values of one upsert, as the statement binds them."""

    user_id: uuid.UUID
    category: str
    key: str
    key_norm: str
    """The key's canonical form, ``<rules>:<form>``."""
    rules: str
    """The ``<rules>`` of the current spelling rules: a form of any other is outdated."""
    value: str
    embedding: Sequence[float] | None
    source: str
    confidence: int
    expires_seconds: float | None
    source_context: str | None
    session_id: str | None
    dedupe: bool


@dataclass(frozen=True, slots=True)
class UpsertDone:
    """What the upsert statement did."""

    unnormalized: list[tuple[int, str]]
    """(id, key) of visible spellings whose canonical form is missing or outdated."""
    action: str | None
    """``insert``, ``new value``, ``verify`` or ``vector`` (verify, and the missing vector
    stored); None when nothing was written (``unnormalized``, or a target row deleted by a
    writer that does not take the category lock)."""
    merged: bool
    """Other visible spellings were hidden behind the written row."""
    was_expired: bool
    """The row written over had expired."""
    row: FetchedRow | None
    """The written row: the Fact columns and ``has_embedding``."""
    foreign_session: bool = False
    """Nothing written: ``sessions`` holds the session id given under another user
    (revision 0027)."""


_BEHIND_EXPIRED = """
    FROM memory_facts s JOIN memory_facts h ON h.merged_into = s.id
    WHERE s.expires_at <= now() AND (h.expires_at IS NULL OR h.expires_at > now())
      AND (CAST(:user_id AS uuid) IS NULL OR s.user_id = CAST(:user_id AS uuid))
"""
"""Live rows (h) hidden behind an expired fact (s): a purge must not lose them."""

_REATTACH = text(
    """
    WITH RECURSIVE walk (h, cur, depth, path) AS (
        SELECT h.id, s.merged_into, 1, ARRAY[h.id, s.id]
        FROM memory_facts s JOIN memory_facts h ON h.merged_into = s.id
        WHERE s.expires_at <= now() AND s.merged_into IS NOT NULL
          AND (h.expires_at IS NULL OR h.expires_at > now())
          AND (CAST(:user_id AS uuid) IS NULL OR s.user_id = CAST(:user_id AS uuid))
      UNION ALL
        SELECT w.h, t.merged_into, w.depth + 1, w.path || t.id
        FROM walk w JOIN memory_facts t ON t.id = w.cur
        WHERE t.merged_into IS NOT NULL AND t.id <> ALL (w.path) AND w.depth < :max_links
    ),
    ends AS (
        SELECT w.h, w.cur AS survivor FROM walk w JOIN memory_facts e ON e.id = w.cur
        WHERE e.merged_into IS NULL AND e.id <> ALL (w.path)
          AND (e.expires_at IS NULL OR e.expires_at > now())
    )
    UPDATE memory_facts f SET merged_into = ends.survivor
    FROM ends WHERE f.id = ends.h
    """
)
"""Live rows behind an expired row that is hidden itself (a legacy chain: merges flatten them)
go behind the row the chain ends at, when that row is visible and live; a chain that loops
back, runs past ``max_links`` or ends at an expired fact is left to the rescue."""

REATTACH_MAX_LINKS: Final = 32
"""How many links of a legacy chain a purge follows."""

_RESCUE = text(
    f"""
    WITH kept AS MATERIALIZED (
        SELECT h.id, h.merged_into AS survivor, h.updated_at {_BEHIND_EXPIRED}
    ),
    heir AS (
        SELECT DISTINCT ON (survivor) survivor, id FROM kept
        ORDER BY survivor, updated_at DESC, id DESC
    )
    UPDATE memory_facts f SET merged_into = heir.id
    FROM kept k JOIN heir ON heir.survivor = k.survivor
    WHERE f.id = k.id
    RETURNING heir.id AS heir
    """
)

_SETTLE_HEIRS = text(
    """
    WITH heirs AS MATERIALIZED (
        SELECT f.id, f.user_id, f.category, f.key, f.updated_at FROM memory_facts f
        WHERE f.id = ANY (CAST(:heirs AS bigint[])) AND f.merged_into = f.id
    ),
    newest AS (
        SELECT DISTINCT ON (user_id, category, key) id, user_id, category, key FROM heirs
        ORDER BY user_id, category, key, updated_at DESC, id DESC
    ),
    target AS (
        SELECT h.id AS heir,
               coalesce((SELECT v.id FROM memory_facts v
                         WHERE v.user_id IS NOT DISTINCT FROM h.user_id
                           AND v.category = h.category AND v.key = h.key
                           AND v.merged_into IS NULL),
                        n.id) AS winner
        FROM heirs h
        JOIN newest n ON n.user_id IS NOT DISTINCT FROM h.user_id
                     AND n.category = h.category AND n.key = h.key
    )
    UPDATE memory_facts f SET merged_into = NULLIF(t.winner, f.id)
    FROM target t
    WHERE f.merged_into = t.heir
    """
)
"""An heir (pointing at itself) and the rows behind it: behind the visible row holding the
heir's key, else behind the newest heir of that key, which becomes visible (NULLIF)."""


_FOREIGN_SESSION: Final = "foreign session"
"""navi_fact_upsert's action when ``sessions`` holds the session id under another user."""


def category_lock_scope(user_id: uuid.UUID | None, category: str) -> str:
    """The advisory lock key of one (user, category), hashed by PostgreSQL (navi_fact_upsert
    builds the same text)."""
    return f"memory_facts:{user_id}:{category}"


def upsert_parameters(write: UpsertStatement) -> dict[str, Any]:
    """UPSERT's bind parameters for ``write`` (the vector in binary)."""
    return {
        "uid": write.user_id,
        "cat": write.category,
        "key": write.key,
        "norm": write.key_norm,
        "rules": write.rules,
        "value": write.value,
        "embedding": None if write.embedding is None else vector_binary(write.embedding),
        "source": write.source,
        "confidence": write.confidence,
        "expires_seconds": write.expires_seconds,
        "source_context": write.source_context,
        "sid": write.session_id,
        "dedupe": write.dedupe,
    }


class FactWriteRepository:
    """The category lock, on a transaction's session (it holds until the transaction ends)."""

    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def lock_category(self, user_id: uuid.UUID, category: str) -> None:
        """Serialise writers of one (user, category) until the transaction ends (the upsert
        function takes the same lock).

        Dedupe compares a new key with every key of the category, so a unique index alone cannot
        stop two spellings landing at once; a transaction-scoped advisory lock can.
        """
        await self.session.execute(XACT_LOCK, {"scope": category_lock_scope(user_id, category)})


class FactUpsertRepository:
    """The one-statement upsert and the key forms it may ask for: each statement complete in
    itself, so on a transaction's session, an autocommit connection, or PooledStatements (then
    straight on the driver: upsert_fact's path, docs/architecture.md)."""

    def __init__(self, *, conn: Reads) -> None:
        self.conn = conn

    async def upsert(self, write: UpsertStatement) -> UpsertDone:
        """One statement (``UPSERT``): lock the category, then insert, write the new value or
        verify, and hide the other spellings — or write nothing and say why."""
        (row,) = await fetch_rows(self.conn, UPSERT, upsert_parameters(write))
        action = row["action"]
        if action == _FOREIGN_SESSION:
            return UpsertDone(
                unnormalized=[],
                action=None,
                merged=False,
                was_expired=False,
                row=None,
                foreign_session=True,
            )
        return UpsertDone(
            unnormalized=list(zip(row["unnormalized_ids"], row["unnormalized_keys"], strict=True)),
            action=action,
            merged=bool(row["merged"]),
            was_expired=bool(row["was_expired"]),
            row=row if action is not None else None,
        )

    async def set_key_norms(self, norms: Sequence[tuple[int, str, str]]) -> None:
        """Store (id, key, canonical form) — for rows that still hold that key."""
        await self.conn.execute(
            _SET_KEY_NORMS,
            {
                "ids": [fact_id for fact_id, _, _ in norms],
                "keys": [key for _, key, _ in norms],
                "norms": [norm for _, _, norm in norms],
            },
        )


class FactVectorRepository:
    """The fact vector index: the queue the trigger fills, drained into memory_fact_vectors."""

    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def index_queued(self, limit: int) -> tuple[int, int, int]:
        """Move up to ``limit`` queued facts' vectors into memory_fact_vectors (L2-normalised
        halfvec); returns (queue rows looked at, taken, vectors indexed): fewer
        than ``limit`` looked at, the queue is empty for this indexer; rows looked at and not
        taken are facts a delete holds (they stay queued). Rows another indexer holds are
        skipped, so indexers in several processes share the queue."""
        row = (await self.session.execute(_INDEX_QUEUED, {"limit": limit})).one()
        if row.done:
            await self.session.execute(_REQUEUE_CHANGED, {"done": list(row.done)})
        return int(row.picked), int(row.taken), int(row.indexed)

    async def queued_count(self) -> int:
        return int(
            await self.session.scalar(select(func.count()).select_from(FactVectorQueueRow)) or 0
        )

    async def requeue_unindexed(self) -> int:
        """Queue every fact with a vector that memory_fact_vectors lacks (written while the
        trigger was disabled, restored from a dump of memory_facts alone); returns how many.
        A full scan: for backfill."""
        return int((await self.session.execute(_REQUEUE_UNINDEXED)).scalar_one())


class FactRepository:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session

    async def now(self) -> datetime:
        """The transaction's time (``now()``): expiry and verification are stamped with it."""
        now: datetime = await self.session.scalar(select(func.now()))  # type: ignore[assignment]
        return now

    # --- single rows ------------------------------------------------------------------------

    async def get(self, fact_id: int) -> FactRow | None:
        return await self.session.get(FactRow, fact_id)

    async def get_fresh(self, fact_id: int) -> FactRow | None:
        """The row as the database holds it now (a new snapshot in READ COMMITTED), not the
        session's copy: None when it was deleted meanwhile."""
        return await self.session.scalar(
            select(FactRow).where(FactRow.id == fact_id).execution_options(populate_existing=True)
        )

    async def find_key(
        self, user_id: uuid.UUID | None, category: str, key: str, *, hidden: bool
    ) -> FactRow | None:
        """The visible row (or, with hidden=True, a hidden row) holding exactly this key."""
        merged = FactRow.merged_into.is_not(None) if hidden else FactRow.merged_into.is_(None)
        return await self.session.scalar(
            select(FactRow)
            .where(
                FactRow.user_id.is_(None) if user_id is None else FactRow.user_id == user_id,
                FactRow.category == category,
                FactRow.key == key,
                merged,
            )
            .order_by(FactRow.id.desc())
            .limit(1)
        )

    async def unhide(self, fact_id: int) -> bool:
        """Make the row visible, recording that the user separated it (a dedupe never merges
        it again); False when it is not there (deleted meanwhile)."""
        result = await self.session.execute(
            update(FactRow)
            .where(FactRow.id == fact_id)
            .values(merged_into=None, unmerged_at=func.now())
            .returning(FactRow.id)
        )
        return result.first() is not None

    # --- delete -----------------------------------------------------------------------------

    async def categories_with_key(self, user_id: uuid.UUID, key: str) -> list[str]:
        rows = await self.session.scalars(
            select(FactRow.category)
            .where(FactRow.user_id == user_id, FactRow.key == key)
            .distinct()
        )
        return list(rows)

    async def ids_for_delete(
        self, user_id: uuid.UUID, key: str, categories: Sequence[str]
    ) -> list[int]:
        """Visible rows of ``categories`` named by ``key`` directly or through a hidden spelling
        of theirs."""
        if not categories:
            return []
        named = select(FactRow.id, FactRow.merged_into).where(
            FactRow.user_id == user_id, FactRow.key == key, FactRow.category.in_(categories)
        )
        rows = (await self.session.execute(named)).all()
        return sorted({row.merged_into or row.id for row in rows})

    async def delete_with_hidden(self, ids: Sequence[int]) -> list[RowMapping]:
        """Delete the hidden rows pointing at ``ids`` first, then the rows. Returns the rows of
        ``ids`` deleted (the Fact columns, ``has_embedding``, and ``expired``: past its expiry,
        by the server's clock), by category and key."""
        if not ids:
            return []
        await self.session.execute(delete(FactRow).where(FactRow.merged_into.in_(ids)))
        expired = func.coalesce(FactRow.expires_at <= func.now(), false()).label("expired")
        result = await self.session.execute(
            delete(FactRow).where(FactRow.id.in_(ids)).returning(*fact_columns(), expired)
        )
        return sorted(result.mappings(), key=lambda row: (row["category"], row["key"], row["id"]))

    async def record_forgotten(
        self, user_id: uuid.UUID, forgotten: Iterable[tuple[str, str]]
    ) -> None:
        """Record, now, that the user forgot each (category as folded, canonical key)."""
        rows = [
            {"user_id": user_id, "category": category, "key_norm": key_norm}
            for category, key_norm in sorted(set(forgotten))
        ]
        if not rows:
            return
        statement = insert(FactForgottenRow).values(rows)
        await self.session.execute(
            statement.on_conflict_do_update(
                index_elements=[
                    FactForgottenRow.user_id,
                    FactForgottenRow.category,
                    FactForgottenRow.key_norm,
                ],
                set_={"forgotten_at": func.now()},
            )
        )

    async def forgotten_since(
        self, user_id: uuid.UUID, categories: Sequence[str], since: datetime
    ) -> list[tuple[str, datetime]]:
        """(canonical key, when) of each forget the user made in any of ``categories`` (as
        folded) after ``since``; the keys as stored, of the rules in force when each was made.
        A few rows, read by the (user, category, ...) primary key."""
        rows = await self.session.execute(
            select(FactForgottenRow.key_norm, FactForgottenRow.forgotten_at).where(
                FactForgottenRow.user_id == user_id,
                FactForgottenRow.category.in_(categories),
                FactForgottenRow.forgotten_at > since,
            )
        )
        return [(key, at) for key, at in rows]

    async def key_times(
        self, user_id: uuid.UUID, category: str, key_norm: str, rules: str
    ) -> list[RowMapping]:
        """The category's visible rows (expired ones too) stored as ``key_norm``, and those
        whose stored form is missing or of other ``rules`` than the ones in force (the caller
        spells their keys again): ``key``, ``value``, ``expired``, ``updated_at``,
        ``session_id``, the last activity of that session (``session_active``, None when the
        fact names no session of the user's). Through the (user, category, key_norm) index of
        visible rows: the forms of other rules are two ranges of it, empty but right after a
        change of the rules."""
        session_active = (
            select(SessionRow.last_active)
            .where(SessionRow.id == FactRow.session_id, SessionRow.user_id == FactRow.user_id)
            .scalar_subquery()
            .label("session_active")
        )
        rows = await self.session.execute(
            select(
                FactRow.key,
                FactRow.value,
                func.coalesce(FactRow.expires_at <= func.now(), False).label("expired"),
                FactRow.updated_at,
                FactRow.session_id,
                session_active,
            ).where(
                FactRow.user_id == user_id,
                FactRow.category == category,
                FactRow.merged_into.is_(None),
                or_(
                    FactRow.key_norm == key_norm,
                    FactRow.key_norm.is_(None),
                    FactRow.key_norm < f"{rules}:",
                    FactRow.key_norm >= f"{rules};",  # ";" follows ":" (collation "C")
                ),
            )
        )
        return list(rows.mappings())

    async def expired(self, user_id: uuid.UUID | None) -> tuple[int, int]:
        """How many facts are past their expiry, and how many rows hidden behind them have not
        expired themselves (a purge brings those back). ``user_id`` None: every user's."""
        gone = select(FactRow.id).where(FactRow.expires_at <= func.now())
        if user_id is not None:
            gone = gone.where(FactRow.user_id == user_id)
        expired = int(
            await self.session.scalar(select(func.count()).select_from(gone.subquery())) or 0
        )
        behind = int(
            await self.session.scalar(
                select(func.count()).where(FactRow.merged_into.in_(gone), FactRow.id.not_in(gone))
            )
            or 0
        )
        return expired, behind

    async def owners_of_expired(self) -> list[uuid.UUID]:
        """The users holding a fact past its expiry, by id (legacy rows without a user left
        out)."""
        rows = await self.session.scalars(
            select(FactRow.user_id)
            .where(FactRow.expires_at <= func.now(), FactRow.user_id.is_not(None))
            .distinct()
            .order_by(FactRow.user_id)
        )
        return [uid for uid in rows if uid is not None]

    async def categories_of_expired(self, user_id: uuid.UUID | None) -> list[tuple[uuid.UUID, str]]:
        """The (user, category) pairs holding an expired fact (legacy rows without a user have
        no lock, and are left out), in the order writers take their locks: by user, then
        category."""
        stmt = (
            select(FactRow.user_id, FactRow.category)
            .distinct()
            .where(FactRow.expires_at <= func.now(), FactRow.user_id.is_not(None))
        )
        if user_id is not None:
            stmt = stmt.where(FactRow.user_id == user_id)
        pairs = [(row.user_id, row.category) for row in await self.session.execute(stmt)]
        return sorted(pairs, key=lambda pair: (str(pair[0]), pair[1]))

    async def reattach_behind_expired_links(self, user_id: uuid.UUID | None) -> None:
        """The live rows hidden behind an expired row that is hidden itself go behind the row
        at the chain's end, the fact they are a spelling of (``user_id`` None: every user's):
        taking the expired row's key back would make a second visible spelling of it."""
        await self.session.execute(_REATTACH, {"user_id": user_id, "max_links": REATTACH_MAX_LINKS})

    async def rescue_behind_expired(self, user_id: uuid.UUID | None) -> list[int]:
        """The live rows hidden behind expired facts (``user_id`` None: every user's) leave
        them: behind each expired fact, the most recently updated one becomes its heir,
        pointing at itself for now, and the others point at the heir. Returns the heirs;
        ``settle_heirs`` ends the self-pointers once the expired facts are deleted."""
        rows = await self.session.execute(_RESCUE, {"user_id": user_id})
        return sorted({int(row.heir) for row in rows})

    async def settle_heirs(self, heirs: Sequence[int]) -> None:
        """Each heir of ``rescue_behind_expired`` takes its key back — unless a visible row
        holds that key already, or a newer heir takes the same key: then it and the rows
        behind it are hidden behind that row."""
        if heirs:
            await self.session.execute(_SETTLE_HEIRS, {"heirs": list(heirs)})

    async def delete_expired(self, user_id: uuid.UUID | None) -> None:
        """Delete the facts past their expiry. Rows hidden behind them that are still pointing
        at them (expired ones: ``rescue_behind_expired`` moved the others) go by the cascade."""
        stmt = delete(FactRow).where(FactRow.expires_at <= func.now())
        if user_id is not None:
            stmt = stmt.where(FactRow.user_id == user_id)
        await self.session.execute(stmt)

    # --- reads ------------------------------------------------------------------------------

    def _listing(
        self,
        user_id: uuid.UUID | None,
        search: str | None,
        include_merged: bool,
        category: str | None = None,
    ) -> Select[Any]:
        # include_merged adds hidden rows; expired rows stay out either way.
        where: list[ColumnElement[bool]] = [owner_filter(user_id), not_expired()]
        if not include_merged:
            where.append(FactRow.merged_into.is_(None))
        if category is not None:
            where.append(FactRow.category == category)
        if search:
            where.append(text_match([search]))
        return select(*fact_columns()).where(*where)

    async def list_facts(
        self,
        user_id: uuid.UUID | None,
        *,
        search: str | None,
        include_merged: bool,
        sort_by: str,
        descending: bool,
        limit: int | None,
        offset: int,
        category: str | None = None,
    ) -> list[RowMapping]:
        column = FACT_SORT_COLUMNS[sort_by]
        order = column.desc().nulls_last() if descending else column.asc().nulls_last()
        stmt = (
            self._listing(user_id, search, include_merged, category)
            .order_by(order, FactRow.key, FactRow.id)
            .offset(offset)
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def hidden_behind(self, fact_id: int, user_id: uuid.UUID | None) -> list[RowMapping]:
        """The rows of ``user_id`` (None: the legacy unowned rows) hidden behind ``fact_id``,
        expired ones too (they are behind it, and go when it is deleted), by id."""
        owner = FactRow.user_id.is_(None) if user_id is None else FactRow.user_id == user_id
        stmt = (
            select(*fact_columns())
            .where(FactRow.merged_into == fact_id, owner)
            .order_by(FactRow.id)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def most_recent(self, user_id: uuid.UUID, limit: int) -> list[RowMapping]:
        """The user's ``limit`` visible facts in the prompt's order (text.context.prompt_facts):
        the latest of ``last_verified_at``, else ``updated_at``, else ``created_at`` (a legacy
        row from before the column was never verified), then the latest update, then the
        newest row."""
        verified = func.coalesce(FactRow.last_verified_at, FactRow.updated_at, FactRow.created_at)
        updated = func.coalesce(FactRow.updated_at, FactRow.created_at)
        stmt = (
            self._listing(user_id, None, include_merged=False)
            .order_by(verified.desc().nulls_last(), updated.desc().nulls_last(), FactRow.id.desc())
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).mappings())

    async def count(self, user_id: uuid.UUID | None, *, include_merged: bool) -> int:
        stmt = self._listing(user_id, None, include_merged).with_only_columns(func.count())
        return int(await self.session.scalar(stmt) or 0)

    async def category_counts(self, user_id: uuid.UUID | None) -> list[tuple[str, int]]:
        """(category, visible facts in it), the fullest first, then by name."""
        count = func.count().label("facts")
        stmt = (
            select(FactRow.category, count)
            .where(owner_filter(user_id), visible())
            .group_by(FactRow.category)
            .order_by(count.desc(), FactRow.category)
        )
        return [(category, int(n)) for category, n in await self.session.execute(stmt)]

    # --- backfill ---------------------------------------------------------------------------

    async def missing_embeddings(self, after_id: int, limit: int) -> list[FactRow]:
        """Rows without a vector, by id: hidden ones too (an unmerge, or the expiry of the row
        a hidden one stands behind, brings it back, to be found by its vector)."""
        stmt = (
            select(FactRow)
            .where(FactRow.embedding.is_(None), FactRow.id > after_id)
            .order_by(FactRow.id)
            .limit(limit)
        )
        return list((await self.session.scalars(stmt)).all())

    async def count_missing_embeddings(self) -> int:
        stmt = select(func.count()).where(FactRow.embedding.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def set_embedding(
        self, fact_id: int, embedded_text: str, embedding: Sequence[float]
    ) -> bool:
        """Whether the vector was stored.

        Only where still missing, and only if the fact still reads as what was embedded: an
        upsert meanwhile may have stored a fresher vector, or a new value without one. The
        vector goes in binary; the trigger queues it for the index."""
        result = await self.session.execute(
            _SET_EMBEDDING,
            {"id": fact_id, "embedded": embedded_text, "vec": vector_binary(embedding)},
        )
        return bool(getattr(result, "rowcount", 0))

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, user_id: uuid.UUID | None) -> str | None:
        stmt = select(SummaryRow.content)
        stmt = stmt.where(
            SummaryRow.user_id.is_(None) if user_id is None else SummaryRow.user_id == user_id
        )
        return await self.session.scalar(stmt)

    async def summary_digest(self, user_id: uuid.UUID) -> tuple[str | None] | None:
        """The user's summary's ``facts_digest`` as a 1-tuple (its value None: a summary of
        unknown origin); None when they have no summary."""
        row = (
            await self.session.execute(
                select(SummaryRow.facts_digest).where(SummaryRow.user_id == user_id)
            )
        ).first()
        return None if row is None else (row[0],)

    async def set_summary(
        self, user_id: uuid.UUID, content: str, facts_digest: str | None = None
    ) -> None:
        stmt = insert(SummaryRow).values(
            user_id=user_id, content=content, facts_digest=facts_digest
        )
        await self.session.execute(
            stmt.on_conflict_do_update(
                index_elements=[SummaryRow.user_id],
                set_={
                    "content": stmt.excluded.content,
                    "facts_digest": stmt.excluded.facts_digest,
                    "updated_at": func.now(),
                },
            )
        )

    async def delete_summary(self, user_id: uuid.UUID) -> bool:
        """Remove the user's summary; False when they had none."""
        result = await self.session.execute(
            delete(SummaryRow).where(SummaryRow.user_id == user_id).returning(SummaryRow.id)
        )
        return result.first() is not None

    async def lock_summary(self, user_id: uuid.UUID) -> None:
        """Serialise the writers of one user's summary until the transaction ends: the
        extractor's check-then-write, and a forget that removes it."""
        await self.session.execute(XACT_LOCK, {"scope": f"memory_summary:{user_id}"})


class FactSearchRepository:
    """The read paths of search_facts: each one statement, so they run on an autocommit
    connection as well as in a transaction."""

    def __init__(self, *, session: Reads) -> None:
        self.session = session

    async def search(
        self,
        user_id: uuid.UUID | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        max_distance: float,
        phrase: str | None = None,
    ) -> list[FetchedRow]:
        """Both passes of search_facts in one statement: the ``limit`` nearest visible facts
        closer than ``max_distance`` (when there is a vector; exact: memory_fact_vectors for
        indexed facts, memory_facts for the queued ones), and the visible facts whose
        category, key or value contains any term, most terms first, then those holding
        ``phrase`` (the whole query, text.terms.query_phrase) verbatim (the vector hits left
        out; not run at all when the vector pass filled ``limit``).

        One fixed statement per shape (a user or everyone, a vector or none), built at import:
        the terms travel as a ``text[]`` of escaped patterns, the vector in binary; the vector
        is never sent back (only whether there is one). Rows carry ``distance`` (vector hits)
        or ``terms_hit`` and ``whole_query``; the caller orders them.
        """
        params: dict[str, Any] = {
            "limit": limit,
            "patterns": term_patterns(terms),
            # A one-word query is its own phrase: nothing to look for twice.
            "phrases": term_patterns([phrase]) if phrase and list(terms) != [phrase] else [],
        }
        if user_id is not None:
            params["uid"] = user_id
        if query_vector is not None:
            params["q"] = vector_binary(query_vector)
            params["max_distance"] = max_distance
        return await fetch_rows(
            self.session, _SEARCH[user_id is not None, query_vector is not None], params
        )

    async def recent(self, user_id: uuid.UUID | None, limit: int) -> list[FetchedRow]:
        """The ``limit`` most recently updated visible facts."""
        params: dict[str, Any] = {"limit": limit}
        if user_id is not None:
            params["uid"] = user_id
        return await fetch_rows(self.session, _RECENT[user_id is not None], params)
