"""SQL for memory_chunks (raw history) and its index tables: vectors (HNSW) and text (GIN)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any, Final, NamedTuple

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.constants import (
    CHUNK_BM25_SEED_EVERY,
    CHUNK_BM25_SEED_ROWS,
    CHUNK_GRAPH_CANDIDATES,
    CHUNK_GRAPH_FROM,
    CHUNK_INSERT_BATCH,
    EMBEDDING_DIM,
)
from navi_memory.db import vector_binary
from navi_memory.models import ChunkRow
from navi_memory.repositories.like import term_patterns
from navi_memory.repositories.sessions import HELD_BY_OTHERS, summary_at_of_chunk
from navi_memory.repositories.statements import (
    FetchedRow,
    Reads,
    fetch_rows,
    owner_where,
    queue_pop,
    statement,
)
from navi_memory.repositories.vectors import (
    QUERY_VECTOR,
    HybridSearch,
)
from navi_memory.schemas import ChunkDraft

__all__ = [
    "ChunkRepository",
    "ChunkSearchRepository",
    "IndexedBatch",
    "ranked_text_sql",
    "settled_rows",
]


class IndexedBatch(NamedTuple):
    """What one chunk index batch did."""

    done: int
    """Rows of work: vectors moved into the graph, queued chunks looked at (fewer than the limit:
    the queues are empty for this indexer)."""
    took: int
    """Of those, the rows it took: all but the queued chunks a delete held (they stay queued;
    a batch that took none should not be repeated at once)."""
    indexed: int
    """Chunks indexed whole: their text, and their vector when they have one (a chunk whose
    text and vector go in two batches counts in the second)."""
    graph_left: bool
    """The look at every grown user ran out of room: the next batch should look again."""
    crossing: tuple[uuid.UUID, ...] = ()
    """Users this batch (or an earlier one) took past the threshold who may still have
    vectors beside the graph: the next batch moves theirs first."""


_HALFVEC = f"halfvec({EMBEDDING_DIM})"

_INSERT = text(
    f"""
    WITH owner AS (
        -- The session's row, if it has one, share-locked: a session delete that has not
        -- committed makes this wait and then see no row (refused if require_session), and one
        -- that starts after waits for this statement, so it deletes these chunks too. Read
        -- under the id's lock (shared; revision 0021): a create of the id, which checks for
        -- another user's chunks under that lock, waits for this statement, or this one for
        -- the create's commit, and then sees its row.
        SELECT user_id FROM navi_session_claim(:sid)
    ),
    allowed AS (
        -- The session's row, else the rows of a session kept outside sessions (revision
        -- 0028): an id another user holds chunks, sketches or extraction state under is theirs.
        SELECT CASE WHEN EXISTS (SELECT 1 FROM owner)
                    THEN NOT EXISTS (SELECT 1 FROM owner WHERE user_id <> :uid)
                    ELSE NOT :require_session AND NOT ({HELD_BY_OTHERS})
               END AS ok
    ),
    ins AS (
        INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,
                                   end_seq, started_at, ended_at, breadcrumbs, embedding)
        SELECT :uid, :sid, r.content, r.content_hash, r.start_seq, r.end_seq, r.started_at,
               r.ended_at, ARRAY(SELECT jsonb_array_elements_text(CAST(r.crumbs AS jsonb))),
               r.embedding
        FROM unnest(CAST(:content AS text[]), CAST(:hash AS text[]), CAST(:start_seq AS int[]),
                    CAST(:end_seq AS int[]), CAST(:started_at AS timestamptz[]),
                    CAST(:ended_at AS timestamptz[]), CAST(:crumbs AS text[]),
                    CAST(:vectors AS vector[]))
             AS r(content, content_hash, start_seq, end_seq, started_at, ended_at, crumbs,
                  embedding)
        WHERE (SELECT ok FROM allowed)
        ON CONFLICT (user_id, session_id, start_seq, content_hash) DO NOTHING
        RETURNING id, embedding IS NOT NULL AS has_vector
    ),
    queued AS (
        INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)
        SELECT id, :uid FROM ins WHERE has_vector
    ),
    text_queued AS (
        -- Every chunk: its tsvector and GIN entries are made by the indexer, off this path.
        INSERT INTO memory_chunk_text_queue (chunk_id, user_id)
        SELECT id, :uid FROM ins
    )
    SELECT (SELECT ok FROM allowed) AS allowed, (SELECT count(*) FROM ins) AS written
    """
)

_MAKE_TEXT = text(
    f"""
    WITH picked AS (
        SELECT q.chunk_id FROM memory_chunk_text_queue q WHERE q.tsv IS NULL
        ORDER BY q.chunk_id LIMIT :limit FOR UPDATE SKIP LOCKED
    ),
    backlog AS (
        -- Only a full batch: fewer rows than that are the whole backlog, and the text step
        -- indexes them at once (an update first would only add a write).
        SELECT k.chunk_id FROM picked k WHERE (SELECT count(*) FROM picked) >= :limit
    ),
    made AS (
        UPDATE memory_chunk_text_queue q
        SET tsv = navi_chunk_tsv(c.content, c.breadcrumbs)
        FROM backlog k JOIN memory_chunks c ON c.id = k.chunk_id
        WHERE q.chunk_id = k.chunk_id
        RETURNING q.chunk_id
    ),
    dropped AS (
        -- A row whose chunk is gone (deleted by SQL of its own: the queue has no foreign key)
        -- is dropped, not made: a chunk restored later under its id is queued again whole.
        DELETE FROM memory_chunk_text_queue q USING backlog k
        WHERE q.chunk_id = k.chunk_id
          AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.id = q.chunk_id)
        RETURNING q.chunk_id
    ),
    vector_held AS (
        -- Their queued vectors, skipping any a delete holds (the indexer never waits for one).
        SELECT p.chunk_id FROM memory_chunk_vector_queue p JOIN made m ON m.chunk_id = p.chunk_id
        WHERE p.embedding IS NULL
        FOR UPDATE OF p SKIP LOCKED
    ),
    vectors_made AS (
        UPDATE memory_chunk_vector_queue p
        SET embedding = CAST(l2_normalize(c.embedding) AS {_HALFVEC})
        FROM vector_held h JOIN memory_chunks c ON c.id = h.chunk_id
        WHERE p.chunk_id = h.chunk_id AND c.embedding IS NOT NULL
        RETURNING p.chunk_id
    )
    -- vectors_made runs whether read or not (a data-modifying CTE always does).
    SELECT (SELECT count(*) FROM made) + (SELECT count(*) FROM dropped) AS made
    """
)
"""Up to ``:limit`` queued chunks' tsvectors, lowest ids first, made and kept on their queue
rows (revision 0013), and their queued vectors copied, normalised, onto theirs — only when
that many wait without a tsvector: a backlog."""

_INDEX_TEXT = text(
    f"""
    WITH {queue_pop("memory_chunk_text_queue", "chunk_id", "memory_chunks", returning=["tsv"])},
    made AS MATERIALIZED (
        -- MATERIALIZED: inlined, "length(tsv), tsv" below made every tsvector twice (a third
        -- of the indexer's text time: 2.9 against 1.9 ms a chunk, measured). A tsvector
        -- made ahead (_MAKE_TEXT) is taken as it is.
        SELECT c.id, c.user_id, c.session_id, c.ended_at,
               coalesce(t.tsv, navi_chunk_tsv(c.content, c.breadcrumbs)) AS tsv
        FROM memory_chunks c JOIN taken t ON t.chunk_id = c.id
    ),
    moved AS (
        -- One statement a batch: the statistics trigger runs once for the batch.
        INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes, tsv)
        SELECT id, user_id, session_id, ended_at, length(tsv), tsv FROM made
        ON CONFLICT (chunk_id) DO NOTHING
        RETURNING chunk_id
    )
    SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM taken) AS taken,
           ARRAY(SELECT chunk_id FROM moved) AS moved,
           -- Indexed whole: no vector waits for it (a chunk with one counts when it moves).
           ARRAY(SELECT m.chunk_id FROM moved m
                 WHERE NOT EXISTS (SELECT 1 FROM memory_chunk_vector_queue q
                                   WHERE q.chunk_id = m.chunk_id)) AS whole
    """
)
"""Up to ``:limit`` queued chunks' text into memory_chunk_terms (GIN), lowest ids first."""

_VECTOR_POP = queue_pop(
    "memory_chunk_vector_queue",
    "chunk_id",
    "memory_chunks",
    # Never a chunk whose text waits (or another indexer has it): text goes first.
    where="NOT EXISTS (SELECT 1 FROM memory_chunk_text_queue t WHERE t.chunk_id = q.chunk_id)",
    returning=["embedding"],
)

_INDEX_VECTORS = text(
    f"""
    WITH {_VECTOR_POP},
    moved AS (
        -- Into the HNSW graph when the user holds :graph_from indexed chunks or more (text is
        -- indexed first); otherwise beside it, searched exactly.
        INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id, embedding, in_graph)
        SELECT c.id, c.user_id, c.session_id,
               coalesce(t.embedding, CAST(l2_normalize(c.embedding) AS {_HALFVEC})),
               coalesce(s.chunks, 0) >= :graph_from
        FROM memory_chunks c JOIN taken t ON t.chunk_id = c.id
             LEFT JOIN memory_chunk_text_stats s ON s.user_id = c.user_id
        WHERE c.embedding IS NOT NULL
        ON CONFLICT (chunk_id) DO NOTHING
        RETURNING chunk_id
    )
    SELECT (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM taken) AS taken,
           ARRAY(SELECT chunk_id FROM moved) AS moved
    """
)
"""Up to ``:limit`` queued vectors whose text is indexed, lowest ids first, into
memory_chunk_vectors."""


_BATCH_USERS = """batch AS (
        SELECT t.user_id, count(*) AS chunks
        FROM memory_chunk_terms t
        WHERE t.chunk_id = ANY(CAST(:moved AS bigint[]))
        GROUP BY t.user_id
    )"""
"""The users of the chunks whose text a batch indexed (``:moved``), with how many of them."""

_CROSSED = "s.chunks >= :graph_from AND s.chunks - b.chunks < :graph_from"
"""Of those (``b``), the users the batch took past the threshold (``s``: their statistics)."""

_CROSSED_USERS = text(
    f"""
    WITH {_BATCH_USERS}
    SELECT array_agg(s.user_id) FROM memory_chunk_text_stats s JOIN batch b USING (user_id)
    WHERE {_CROSSED}
    """
)
"""The users the chunks ``:moved`` (a batch's text) took past ``:graph_from``."""


def _into_graph_sql(*, users: bool) -> str:
    """``_INTO_GRAPH`` or ``_INTO_GRAPH_USERS``: the same move, over every grown user or over
    the users named (those a batch took past the threshold)."""
    named, join = "", ""
    if users:
        named = "crossing AS (SELECT unnest(CAST(:users AS uuid[])) AS user_id),\n    "
        join = "JOIN crossing x ON x.user_id = s.user_id"
    return f"""
    WITH {named}due AS (
        SELECT v.chunk_id
        FROM memory_chunk_text_stats s {join}
             JOIN memory_chunk_vectors v ON v.user_id = s.user_id AND NOT v.in_graph
        WHERE s.chunks >= :graph_from
        ORDER BY v.user_id, v.chunk_id
        LIMIT :limit
        FOR UPDATE OF v SKIP LOCKED
    )
    UPDATE memory_chunk_vectors v SET in_graph = true
    FROM due WHERE v.chunk_id = due.chunk_id
    RETURNING v.chunk_id
    """


_INTO_GRAPH = text(_into_graph_sql(users=False))
"""Up to ``:limit`` indexed vectors of users who now hold ``:graph_from`` indexed chunks or
more but were smaller when those vectors were indexed: into the HNSW graph, user by user."""

_INTO_GRAPH_USERS = text(_into_graph_sql(users=True))
"""``_INTO_GRAPH`` for the users ``:users`` (those a batch took past ``:graph_from``): the one
place a user crosses, without looking at every big user (after a burst at 1M that look took
0.3-0.4 s, and ran every other second while crossing users' vectors moved 64 at a time)."""


_CHUNK_COLUMNS = (
    "c.id, c.user_id, c.session_id, c.content, c.content_hash, c.start_seq, c.end_seq, "
    "c.started_at, c.ended_at, c.breadcrumbs, c.created_at"
)
"""Every memory_chunks column a Chunk shows, the vector excepted (text SQL form)."""


_UNMADE_HEAD: Final = 4
"""Queued chunks whose normalised copy is not made yet are ranked as the index will rank them
(half precision): normalising every one cost 1.6x on a queue of 5,000, so the nearest
``limit`` x this by exact distance are the candidates (rounding swaps near-ties, not a chunk at
the limit with one three times the limit further down)."""


def _nearest(vector_where: str, queue_where: str, *, by_user: bool, by_session: bool) -> str:
    """The ``limit`` nearest chunks by cosine distance, from three places, each chunk in
    exactly one of them or in none (no vector): the HNSW graph (the rows of users who hold
    CHUNK_GRAPH_FROM indexed chunks or more), exactly over the indexed rows beside it (smaller
    users': their partial btree), and exactly over the chunks still queued — by the normalised
    copy on the queue row when the indexer made one ahead (as the rows beside the graph are
    read), by memory_chunks' vector otherwise, normalised and rounded as the indexer will
    store it: every side ranks by the same half-precision distance (ties by id), so which rows
    make the ``limit`` does not depend on the indexer's progress, near-ties included (the
    exact distance is computed for the rows kept). The indexer moves a
    chunk between them in one transaction, and one statement sees one snapshot, so each row is
    read from exactly one place whatever the indexer's progress (the graph's side is
    approximate, as HNSW is, so a user's hits may change a little when their rows move in).

    ``by_user``: the graph is read only when the user has a row in it (a one-time check on
    its partial btree): an HNSW scan filtered to a user it holds nothing of walks the graph
    up to ``hnsw.max_scan_tuples`` for nothing.

    Without a session, a user settled in the graph (``:settled_rows`` rows in it at least,
    ``settled_rows``: the graph's threshold, CHUNK_GRAPH_FROM, and never fewer than
    CHUNK_GRAPH_CANDIDATES; none beside it) is read through the graph alone: its user filter
    is written so that no btree can serve it (``IS NOT FALSE``). The planner costs pgvector's
    scan high and read such users of up to ~8,000 rows exactly through the graph side's btree
    (at 1M chunks: 15-16 ms p50 for users of 2,000-9,999 chunks, 3.6-4.0 through the graph). A
    user still moving in (rows on both sides: the indexer puts new vectors in the graph once the
    user has crossed, and moves the old ones batch by batch) is left to the planner: the graph
    may hold a few of their rows among everyone's, which an HNSW scan filtered to them would
    walk up to ``hnsw.max_scan_tuples`` to find (p95 905 ms while a burst's users moved in).
    So is a user the graph holds fewer rows of than the threshold (one who shrank after
    their sessions were deleted, or whose chunks mostly have no vector): a scan filtered to
    a few dozen rows among the graph's hundreds of thousands would stop at
    ``hnsw.max_scan_tuples`` with their nearest chunks unfound.

    The graph side reads CHUNK_GRAPH_CANDIDATES rows at least (its scan yields them only
    roughly by distance), and the outer sort is on ``approx + 0``, which no side is ordered
    by: a merge of the sides would stop after ``limit`` rows and leave the rest unread."""
    unit = f"CAST(l2_normalize({QUERY_VECTOR}) AS {_HALFVEC})"
    # A queued vector copied ahead (revision 0013) is read from its queue row alone; the
    # chunk's row only for a condition on it (the session).
    made_join = "JOIN memory_chunks c ON c.id = p.chunk_id" if by_session else ""
    gate = (
        "AND EXISTS (SELECT 1 FROM memory_chunk_vectors g WHERE g.in_graph AND g.user_id = :uid)"
        if by_user
        else ""
    )
    graph = f"""
            (SELECT v.chunk_id AS id, v.embedding <=> {unit} AS approx
             FROM memory_chunk_vectors v
             WHERE v.in_graph AND {{where}}
             ORDER BY approx
             LIMIT greatest(CAST(:limit AS integer), {CHUNK_GRAPH_CANDIDATES}))"""
    if by_user and not by_session:
        settled = (
            "((SELECT count(*) FROM (SELECT 1 FROM memory_chunk_vectors g WHERE g.in_graph"
            " AND g.user_id = :uid LIMIT :settled_rows) x) = :settled_rows"
            " AND NOT EXISTS (SELECT 1 FROM memory_chunk_vectors b"
            " WHERE NOT b.in_graph AND b.user_id = :uid))"
        )
        graph_sides = (
            graph.format(where=f"(v.user_id = :uid) IS NOT FALSE AND {settled}")
            + "\n            UNION ALL"
            + graph.format(where=f"{vector_where} AND NOT {settled} {gate}")
        )
    else:
        graph_sides = graph.format(where=f"{vector_where} {gate}")
    return f"""
        SELECT u.id, u.approx FROM ({graph_sides}
            UNION ALL
            (SELECT v.chunk_id AS id, v.embedding <=> {unit} AS approx
             FROM memory_chunk_vectors v
             WHERE NOT v.in_graph AND {vector_where}
             ORDER BY approx
             LIMIT :limit)
            UNION ALL
            (SELECT p.chunk_id AS id, p.embedding <=> {unit} AS approx
             FROM memory_chunk_vector_queue p {made_join}
             WHERE p.embedding IS NOT NULL AND {queue_where}
             ORDER BY approx
             LIMIT :limit)
            UNION ALL
            (SELECT n.id, CAST(l2_normalize(n.embedding) AS {_HALFVEC}) <=> {unit} AS approx
             FROM (SELECT c.id, c.embedding
                   FROM memory_chunk_vector_queue p JOIN memory_chunks c ON c.id = p.chunk_id
                   WHERE p.embedding IS NULL AND {queue_where} AND c.embedding IS NOT NULL
                   ORDER BY c.embedding <=> {QUERY_VECTOR}, c.id
                   LIMIT :limit * {_UNMADE_HEAD}) n
             ORDER BY approx, n.id
             LIMIT :limit)
        ) u
        ORDER BY u.approx + 0, u.id
        LIMIT :limit"""


def _nearest_small(*, by_session: bool) -> str:
    """One small user's ``limit`` nearest chunks (the statement ``small`` of ranked_text_sql;
    ``by_session``: of one session of theirs), exactly: every vector of theirs on either side
    of the graph (a user below CHUNK_BM25_PRUNE_FROM is beside it, unless they shrank out of
    it: then exact is better than the graph's approximation), and the queue's, as ``_nearest``
    reads them.

    Written for a generic plan, the same for every such user: the query's unit vector a scalar
    subquery (made once, not per row), and each side a subquery behind ``OFFSET 0``, so that no
    index can serve its order — the HNSW graph, which a plan that cannot see the user's size
    might take, walks everyone's rows. Each side is read through the user's btree. Equal
    distances (the same text in two sessions) are cut by id, so the rows kept do not depend on
    the plan."""
    unit = f"(SELECT CAST(l2_normalize({QUERY_VECTOR}) AS {_HALFVEC}))"
    vectors = "v.user_id = :uid AND v.session_id = :sid" if by_session else "v.user_id = :uid"
    # A queue row has no session: the chunk's row says it.
    made_join = "JOIN memory_chunks c ON c.id = p.chunk_id" if by_session else ""
    queued = "p.user_id = :uid AND c.session_id = :sid" if by_session else "p.user_id = :uid"
    return f"""
        SELECT u.id, u.approx FROM (
            (SELECT s.id, s.approx FROM (
                SELECT v.chunk_id AS id, v.embedding <=> {unit} AS approx
                FROM memory_chunk_vectors v WHERE NOT v.in_graph AND {vectors}
                UNION ALL
                SELECT v.chunk_id, v.embedding <=> {unit}
                FROM memory_chunk_vectors v WHERE v.in_graph AND {vectors}
                OFFSET 0) s
             ORDER BY s.approx, s.id
             LIMIT :limit)
            UNION ALL
            (SELECT s.id, s.approx FROM (
                SELECT p.chunk_id AS id, p.embedding <=> {unit} AS approx
                FROM memory_chunk_vector_queue p {made_join}
                WHERE p.embedding IS NOT NULL AND {queued}
                OFFSET 0) s
             ORDER BY s.approx, s.id
             LIMIT :limit)
            UNION ALL
            (SELECT s.id, s.approx FROM (
                SELECT n.id, CAST(l2_normalize(n.embedding) AS {_HALFVEC}) <=> {unit} AS approx
                FROM (SELECT c.id, c.embedding
                      FROM memory_chunk_vector_queue p JOIN memory_chunks c ON c.id = p.chunk_id
                      WHERE p.embedding IS NULL AND {queued} AND c.embedding IS NOT NULL
                      ORDER BY c.embedding <=> {QUERY_VECTOR}, c.id
                      LIMIT :limit * {_UNMADE_HEAD}) n
                OFFSET 0) s
             ORDER BY s.approx, s.id
             LIMIT :limit)
        ) u
        ORDER BY u.approx + 0, u.id
        LIMIT :limit"""


_OPERAND = r"'''' || replace(replace({0}, '\', '\\'), '''', '''''') || ''''"
"""A lexeme quoted as a tsquery operand (quotes doubled, backslashes escaped)."""

_RANKED_HEAD = (
    r"""
    WITH qt AS MATERIALIZED (
        -- Each query term's lexemes, made by the very function that made every chunk's
        -- tsvector: ``asked`` (navi_term_lexemes, as the candidates' navi_terms_tsquery
        -- reads them: less the stop words and lone letters the parts of a compound bring,
        -- "state-of-the-art": the, of, unless they are all the term has), its words (weight
        -- D) and their stems (weight C, revision 0024), which the chunks are scored by;
        -- ``hit``, the words among them as words, which a chunk hits the term by holding all
        -- of (an identifier whole, a path with every segment): terms_hit counts terms, as the
        -- spec's "distinct terms hit" does, not lexemes (QUARTZ_RETRY_LIMIT is four), and a
        -- stem never hits ("important" gives import, which must not hit a query of "import").
        SELECT t.ord, a.asked,
               (SELECT CAST(string_agg("""
    + _OPERAND.format("u.lexeme")
    + r""" || ':' || 'D', ' & ') AS tsquery)
                FROM unnest(navi_text_tsv(t.term)) u
                WHERE 'D' = ANY (u.weights) AND u.lexeme = ANY (a.asked)) AS hit
        FROM unnest(CAST(:terms AS text[])) WITH ORDINALITY t(term, ord),
             LATERAL (SELECT navi_term_lexemes(t.term) AS asked) a
    ),
    ql AS MATERIALIZED (
        -- The query's lexemes: its terms', stems included.
        SELECT DISTINCT l AS lexeme FROM qt, unnest(qt.asked) l
    ),
    queued AS MATERIALIZED (
        -- The scope's chunks whose text the indexer has not reached: the tsvector it made
        -- ahead, or else one made here by the function it uses. A chunk in both tables
        -- counts once, as indexed.
        SELECT c.id, c.session_id, c.ended_at,
               coalesce(q.tsv, navi_chunk_tsv(c.content, c.breadcrumbs)) AS tsv
        FROM memory_chunk_text_queue q JOIN memory_chunks c ON c.id = q.chunk_id
        WHERE {queue_where}
          AND NOT EXISTS (SELECT 1 FROM memory_chunk_terms i WHERE i.chunk_id = q.chunk_id)
    ),
    st AS MATERIALIZED (
        -- N and the total length in integers, indexed and queued chunks together: the same
        -- figures, to the bit, however many the indexer has moved. And k1 and b, cast: an
        -- untyped parameter in ":k1 + 1" is an integer, which truncated 1.5 to 1 and 0.75 to 0.
        SELECT CAST(:k1 AS float8) AS k1, CAST(:b AS float8) AS b,
               s.chunks + q.chunks AS chunks,
               greatest(s.chunks + q.chunks, 1)::float8 AS n,
               greatest((s.lexemes + q.lexemes)::float8 / greatest(s.chunks + q.chunks, 1), 1)
                   AS avgdl
        FROM (SELECT coalesce(sum(chunks), 0) AS chunks, coalesce(sum(lexemes), 0) AS lexemes
              FROM memory_chunk_text_stats s WHERE {stats_where}) s,
             (SELECT count(*) AS chunks, coalesce(sum(length(tsv)), 0) AS lexemes
              FROM queued) q
    ),"""
)
"""What both BM25 statements start with: the query's lexemes and terms, the scope's queued
chunks, and its chunk count, N and average length."""


def _query_lexemes_of(tsv: str) -> str:
    """The query's lexemes ``tsv`` holds, with their positions: marked (weight A, a binary
    search each) and kept, instead of unnesting all its lexemes (5x faster on long chunks).
    Braces doubled for the template's ``format``."""
    return f"ts_filter(setweight({tsv}, 'A', (SELECT array_agg(lexeme) FROM ql)), '{{{{a}}}}')"


def _tf(name: str, cand: str) -> str:
    """CTE ``name``: each query lexeme (``lexeme``, ``tf``) of each chunk of CTE ``cand`` (id,
    ended_at, tsv, dl: its tsv already narrowed to the query's lexemes by ``_query_lexemes_of``,
    so that a candidate carries tens of bytes instead of its whole tsvector), with its length
    ``dl``."""
    return f"""
    {name} AS (
        SELECT c.id, u.lexeme, coalesce(cardinality(u.positions), 1) AS tf, c.dl
        FROM {cand} c, unnest(c.tsv) u
    )"""


def _scored(name: str, tf: str, df: str) -> str:
    """CTE ``name``: the BM25 ``score`` of each chunk in CTE ``tf`` (see ``_tf``), document
    frequencies from CTE ``df`` (lexeme, df as float8).

    The sum runs in lexeme order: floating-point addition is not associative, and the plan (so
    the row order) may differ between two searches of the same chunks; both statements score a
    chunk alike, to the bit."""
    return f"""
    {name} AS (
        SELECT tf.id,
               sum(ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5))
                   * tf.tf * (st.k1 + 1) / (tf.tf + st.k1 * (1 - st.b + st.b * tf.dl / st.avgdl))
                   ORDER BY tf.lexeme) AS score
        FROM {tf} tf JOIN {df} d USING (lexeme) CROSS JOIN st
        GROUP BY tf.id
    )"""


_RANKED_TAIL = """,
    best AS (
        SELECT s.id, s.score FROM scored s JOIN cand ON cand.id = s.id
        ORDER BY s.score DESC, cand.ended_at DESC, s.id DESC
        LIMIT :limit
    ),
    top AS MATERIALIZED (
        -- Terms hit by the chunk's own words (qt.hit: weight D, not the stems of weight C it
        -- holds beside them), its tsvector read again for these rows alone: "important"
        -- gives the stem import, which scores for a query of "import" and does not hit it
        -- ("assistant" would hit "assist" in every excerpt of an assistant's message).
        SELECT b.id, b.score, (SELECT count(*) FROM qt WHERE c.tsv @@ qt.hit) AS hits
        FROM best b,
             LATERAL (SELECT coalesce(
                          (SELECT t.tsv FROM memory_chunk_terms t WHERE t.chunk_id = b.id),
                          (SELECT q.tsv FROM queued q WHERE q.id = b.id)) AS tsv) c
    )"""


_QUEUED_DF = f"""
    queued_df AS (
        SELECT u.lexeme, count(*) AS df
        FROM queued q, unnest({_query_lexemes_of("q.tsv")}) u
        GROUP BY u.lexeme
    ),"""
"""CTE ``queued_df``: each query lexeme's queued chunks in scope (``queued``)."""


def _user_df(*, small: bool) -> str:
    """CTEs ``queued_df``, ``kept`` and ``idx_df``: each query lexeme's document frequency over
    all of ``:uid``'s chunks, whatever narrows the candidates — the queued ones (``queued``
    holds the user's, a session filter or not) and the indexed ones, from
    memory_chunk_lexeme_df where it is kept (a user big enough to prune), else counted over the
    user's chunks holding a query word (``small``: through the user's btree, for a generic
    plan; see _RANKED_TEXT_SMALL). Braces doubled for the template's ``format``."""
    holding = (
        "FROM (SELECT * FROM memory_chunk_terms t WHERE t.user_id = :uid OFFSET 0) t,"
        f" unnest({_query_lexemes_of('t.tsv')}) u"
        " WHERE NOT (SELECT yes FROM kept) AND t.tsv @@ (SELECT q FROM tq)"
        if small
        else f"FROM memory_chunk_terms t, unnest({_query_lexemes_of('t.tsv')}) u"
        " WHERE NOT (SELECT yes FROM kept) AND t.user_id = :uid"
        " AND t.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))"
    )
    return (
        _QUEUED_DF
        + f"""
    kept AS MATERIALIZED (
        -- Whether memory_chunk_lexeme_df holds this user's frequencies (revision 0010: only
        -- for users big enough to prune).
        SELECT coalesce((SELECT s.df_kept FROM memory_chunk_text_stats s
                         WHERE s.user_id = :uid), FALSE) AS yes
    ),
    idx_df AS MATERIALIZED (
        -- Each query lexeme's indexed chunks: from memory_chunk_lexeme_df when it is kept,
        -- else counted in one pass over the user's chunks holding a query word (a small
        -- user; what the plain statement counts). The same integers either way.
        SELECT d.lexeme, d.df
        FROM memory_chunk_lexeme_df d
        WHERE (SELECT yes FROM kept) AND d.user_id = :uid
          AND d.lexeme IN (SELECT lexeme FROM ql)
        UNION ALL
        SELECT u.lexeme, count(*)
        {holding}
        GROUP BY u.lexeme
    ),"""
    )


_EVERYONES_DF = (
    _QUEUED_DF
    + f"""
    idx_df AS MATERIALIZED (
        -- A search of every user's chunks (read_all) narrowed to one session: each query
        -- lexeme's indexed chunks among everyone's, as N and the length are everyone's.
        SELECT u.lexeme, count(*) AS df
        FROM memory_chunk_terms t, unnest({_query_lexemes_of("t.tsv")}) u
        WHERE t.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))
        GROUP BY u.lexeme
    ),"""
)
"""_user_df's CTEs for a scope of every user: the frequencies counted over all chunks (a
session id is not one user's: a read_all search by session reads every user's chunks filed
under it, and scores them as the unnarrowed search does)."""


def _scored_over_cand(cand: str, *, users_df: str | None = None) -> str:
    """A plain (unpruned) BM25 statement: ``_RANKED_HEAD``, then ``cand`` (CTEs ending in
    ``cand``: the candidate chunks, see ``_tf``), scored with document frequencies counted over
    the candidates, then ``_RANKED_TAIL``.

    ``users_df`` (``_user_df``'s CTEs): the document frequencies are the user's instead, for
    candidates narrowed to one session: N and the average length are the user's (``st``), and
    frequencies counted over one session's chunks made every word of the session rare (a word
    in thirty of the user's chunks outranked one in a single chunk)."""
    if users_df is None:
        df = """
    df AS (SELECT lexeme, count(*)::float8 AS df FROM cand_tf GROUP BY lexeme),"""
    else:
        df = (
            users_df
            + """
    df AS (
        SELECT ql.lexeme, (coalesce(d.df, 0) + coalesce(qd.df, 0))::float8 AS df
        FROM ql
        LEFT JOIN idx_df d ON d.lexeme = ql.lexeme
        LEFT JOIN queued_df qd ON qd.lexeme = ql.lexeme
    ),"""
        )
    return (
        _RANKED_HEAD
        + cand
        + _tf("cand_tf", "cand")
        + ","
        + df
        + _scored("scored", "cand_tf", "df")
        + _RANKED_TAIL
    )


_CAND_TEXT = (
    """
    cand AS MATERIALIZED (
        -- Only chunks holding a query lexeme (navi_terms_tsquery: evaluated while planning, so
        -- the planner weighs the words: the per-user btree for a small user, GIN for rare
        -- words), and the queued ones holding one.
        SELECT t.chunk_id AS id, t.ended_at, """
    + _query_lexemes_of("t.tsv")
    + """ AS tsv, t.lexemes AS dl
        FROM memory_chunk_terms t
        WHERE {terms_where} AND t.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))
        UNION ALL
        SELECT q.id, q.ended_at, """
    + _query_lexemes_of("q.tsv")
    + """, length(q.tsv)
        FROM queued q
        WHERE {queued_where} AND q.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))
    ),"""
)

_RANKED_TEXT = _scored_over_cand(_CAND_TEXT)
"""BM25 over the chunks' tsvectors: memory_chunk_terms (GIN) and, exactly, the queued chunks;
idf from the statistics of the chunks in scope (the user's own), tf saturation (``k1``),
length normalisation (``b``, length in distinct lexemes). The document frequency of a lexeme is
counted over the candidates, which is exact: every chunk holding the lexeme is a candidate."""

_CAND_TEXT_SMALL = (
    """
    tq AS MATERIALIZED (SELECT navi_terms_tsquery(CAST(:terms AS text[])) AS q),
    cand AS MATERIALIZED (
        -- The user's chunks holding a query lexeme: every chunk of theirs through their btree
        -- (behind OFFSET 0, so that no plan ANDs it with GIN, which reads every user's chunks
        -- holding a common word), the tsquery made once (tq). And the queued ones.
        SELECT t.chunk_id AS id, t.ended_at, """
    + _query_lexemes_of("t.tsv")
    + """ AS tsv, t.lexemes AS dl
        FROM (SELECT * FROM memory_chunk_terms t WHERE {terms_where} OFFSET 0) t
        WHERE t.tsv @@ (SELECT q FROM tq)
        UNION ALL
        SELECT q.id, q.ended_at, """
    + _query_lexemes_of("q.tsv")
    + """, length(q.tsv)
        FROM queued q
        WHERE {queued_where} AND q.tsv @@ (SELECT q FROM tq)
    ),"""
)

_RANKED_TEXT_SMALL = _scored_over_cand(_CAND_TEXT_SMALL)
"""_RANKED_TEXT for one small user, written for a generic plan (ranked_text_sql's ``small``):
the same candidates, scored by the same expressions, so the same rows to the bit."""

_RANKED_SESSION = _scored_over_cand(_CAND_TEXT, users_df=_user_df(small=False))
_RANKED_SESSION_SMALL = _scored_over_cand(_CAND_TEXT_SMALL, users_df=_user_df(small=True))
"""_RANKED_TEXT and _RANKED_TEXT_SMALL for one session of ``:uid``: the session's candidates
scored with the user's document frequencies, as a search of the whole user scores them."""

_RANKED_SESSION_EVERYONE = _scored_over_cand(_CAND_TEXT, users_df=_EVERYONES_DF)
"""_RANKED_TEXT for one session of every user's chunks (read_all): everyone's frequencies."""


_RANKED_TEXT_PRUNED = (
    _RANKED_HEAD
    + _user_df(small=False)
    + f"""
    lx AS MATERIALIZED (
        -- Each query lexeme the user's chunks hold, with its document frequency: indexed
        -- chunks (above), queued ones counted here. The very integer the unpruned statement
        -- counts over its candidates, so the same idf to the bit.
        SELECT ql.lexeme, (coalesce(d.df, 0) + coalesce(qd.df, 0))::float8 AS df,
               {_OPERAND.format("ql.lexeme")} AS operand
        FROM ql
        LEFT JOIN idx_df d ON d.lexeme = ql.lexeme
        LEFT JOIN queued_df qd ON qd.lexeme = ql.lexeme
        WHERE coalesce(d.df, 0) + coalesce(qd.df, 0) > 0
    ),
    bound AS MATERIALIZED (
        -- A lexeme adds less than idf * (k1 + 1) to any chunk's score (tf saturates below
        -- k1 + 1). ``upto``: the bounds summed from the smallest up (MaxScore's prefix sums);
        -- ``rarer``: the document frequencies summed from the rarest up.
        SELECT b.*,
               sum(b.idf) OVER (ORDER BY b.idf, b.lexeme ROWS UNBOUNDED PRECEDING)
                   * b.tf_bound AS upto,
               sum(b.df) OVER (ORDER BY b.df, b.lexeme ROWS UNBOUNDED PRECEDING) AS rarer
        FROM (SELECT lx.*, ln(1 + (st.n - lx.df + 0.5) / (lx.df + 0.5)) AS idf,
                     st.k1 + 1 AS tf_bound
              FROM lx CROSS JOIN st) b
    ),
    seedq AS MATERIALIZED (
        -- Only for a user of :prune_from chunks or more whose frequencies are kept (a
        -- one-row filter): the chunks of the rarest words (up to :seed_rows in all by their
        -- frequencies; always the rarest, :seed_rows of its chunks at most when it alone has
        -- more), and up to :seed_every times :limit more holding every word. Any real
        -- chunks' scores bound the top from below: which are read decides only how much is
        -- pruned.
        SELECT (SELECT CAST(string_agg(operand, ' | ') AS tsquery)
                FROM bound WHERE rarer <= :seed_rows OR rarer = df) AS rare,
               (SELECT CAST(string_agg(operand, ' & ') AS tsquery) FROM bound) AS every
        FROM st WHERE st.chunks >= :prune_from AND (SELECT yes FROM kept)
    ),
    seed AS MATERIALIZED (
        SELECT DISTINCT ON (s.id) s.* FROM (
            (SELECT t.chunk_id AS id, t.ended_at, {_query_lexemes_of("t.tsv")} AS tsv,
                    t.lexemes AS dl
             FROM memory_chunk_terms t
             WHERE t.user_id = :uid AND t.tsv @@ (SELECT rare FROM seedq)
             LIMIT CAST(:seed_rows AS bigint))
            UNION ALL
            (SELECT t.chunk_id, t.ended_at, {_query_lexemes_of("t.tsv")}, t.lexemes
             FROM memory_chunk_terms t
             WHERE t.user_id = :uid AND t.tsv @@ (SELECT every FROM seedq)
             LIMIT CAST(:seed_every AS bigint) * CAST(:limit AS bigint))
        ) s
        ORDER BY s.id
    ),"""
    + _tf("seed_tf", "seed")
    + ","
    + _scored("seed_scored", "seed_tf", "lx")
    + f""",
    theta AS MATERIALIZED (
        -- The :limit-th best seed score (0 with fewer seeds): the top :limit all score at
        -- least this much.
        SELECT coalesce((SELECT score FROM seed_scored ORDER BY score DESC
                         OFFSET :limit - 1 LIMIT 1), 0) AS v
    ),
    essential AS MATERIALIZED (
        -- A chunk holding no lexeme but those of the longest prefix whose bounds sum below
        -- theta scores below theta, so below :limit others: it cannot be in the top. The
        -- rest are the lexemes a top chunk must hold (all of them when theta is 0). The
        -- margin covers the rounding of the sums.
        SELECT CAST(string_agg(operand, ' | ') AS tsquery) AS q
        FROM bound CROSS JOIN theta WHERE NOT (bound.upto * (1 + 1e-9) < theta.v)
    ),
    cand AS MATERIALIZED (
        -- Pruned (theta above 0): the chunks holding an essential word, through GIN (the
        -- rare words'). Not pruned (theta 0: a small user, or too few seeds): every word is
        -- essential, and the plain statement's candidates are read, by a tsquery the planner
        -- sees. The essential tsquery is unknown when planning: for a small user the planner
        -- ANDed the user's btree with a GIN scan of every query word, common ones included,
        -- which read every user's chunks holding them (0.2-0.8 s at 1M chunks).
        SELECT t.chunk_id AS id, t.ended_at, {_query_lexemes_of("t.tsv")} AS tsv,
               t.lexemes AS dl
        FROM memory_chunk_terms t
        WHERE (SELECT v FROM theta) > 0
          AND t.user_id = :uid AND t.tsv @@ (SELECT q FROM essential)
        UNION ALL
        SELECT t.chunk_id, t.ended_at, {_query_lexemes_of("t.tsv")}, t.lexemes
        FROM memory_chunk_terms t
        WHERE (SELECT v FROM theta) = 0
          AND t.user_id = :uid AND t.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))
        UNION ALL
        SELECT q.id, q.ended_at, {_query_lexemes_of("q.tsv")}, length(q.tsv)
        FROM queued q
        WHERE q.tsv @@ navi_terms_tsquery(CAST(:terms AS text[]))
    ),"""
    + _tf("cand_tf", "cand")
    + ","
    + _scored("scored", "cand_tf", "lx")
    + _RANKED_TAIL
)
"""The BM25 statement of one user, exact and pruned (MaxScore): document frequencies come from
memory_chunk_lexeme_df, so each lexeme's bound is known before any chunk is read; a few seed
chunks give a score the top :limit reach, and only chunks holding a lexeme that can still lift
a chunk to it are read and scored. Returns what the unpruned statement returns, to the bit
(tests/integration/test_chunk_bm25_pruning.py)."""


@cache
def ranked_text_sql(
    *,
    by_user: bool,
    by_session: bool,
    with_vector: bool = False,
    with_summary_at: bool = False,
    prune: bool = False,
    small: bool = False,
) -> str:
    """The BM25 text statement, narrowed to ``:uid`` and/or ``:sid`` (bound parameters, with
    ``:terms``, ``:k1``, ``:b`` and ``:limit``). Rows carry
    ``score`` and ``terms_hit`` (query terms the chunk holds whole), best first.

    ``with_vector`` adds the ``:limit`` nearest chunks to ``:q`` (see ``_nearest``) in the same
    statement: one round trip, each chunk read once. Rows then carry ``distance`` when they
    are among the nearest, ``score`` and ``terms_hit`` when they are in the text list (NULL
    otherwise), and every row its ``query_distance`` (NULL for a chunk without a vector: the
    fusion scores a text hit by its similarity too), in no order. ``with_summary_at`` adds
    each row's ``summary_at`` (see ``summary_at_of_chunk``). Every row carries
    ``scope_chunks``, the number of the user's chunks (all of them, a session filter or not).

    ``prune`` (one user's chunks, no session: ``by_user`` and not ``by_session``) takes the
    pruned statement (``_RANKED_TEXT_PRUNED``), which also binds ``:prune_from`` (it prunes
    only for a user of that many chunks or more, and otherwise reads what the plain one reads),
    ``:seed_rows`` and ``:seed_every`` (its seed's sizes, see CHUNK_BM25_SEED_ROWS).

    ``small`` (one user's chunks, or one session of theirs; not with ``prune``): the plain
    statement written for a generic plan, the same for every user small enough
    (CHUNK_BM25_PRUNE_FROM) for the plain statement: ``_RANKED_TEXT_SMALL`` and
    ``_nearest_small``. The same rows as the plain
    statement (for a user the graph holds rows of, its exact nearest chunks where the plain
    one's graph side is approximate); it binds no ``:settled_rows``.
    """
    if prune and (not by_user or by_session):
        raise ValueError("the pruned BM25 statement is for one user's chunks, by no session")
    if small and (not by_user or prune):
        raise ValueError("the small-user statement is for one user's chunks, and never pruned")
    queue_where, terms_where, queued_where, stats_where = ["TRUE"], ["TRUE"], ["TRUE"], ["TRUE"]
    vector_where, vector_queue_where = ["TRUE"], ["TRUE"]
    if by_user:
        queue_where.append("q.user_id = :uid")
        terms_where.append("t.user_id = :uid")
        stats_where.append("s.user_id = :uid")
        vector_where.append("v.user_id = :uid")
        vector_queue_where.append("p.user_id = :uid")
    if by_session:
        terms_where.append("t.session_id = :sid")
        queued_where.append("q.session_id = :sid")
        vector_where.append("v.session_id = :sid")
        vector_queue_where.append("c.session_id = :sid")
    if prune:
        template = _RANKED_TEXT_PRUNED
    elif by_session and by_user:
        template = _RANKED_SESSION_SMALL if small else _RANKED_SESSION
    elif by_session:
        template = _RANKED_SESSION_EVERYONE
    else:
        template = _RANKED_TEXT_SMALL if small else _RANKED_TEXT
    ctes = template.format(
        queue_where=" AND ".join(queue_where),
        terms_where=" AND ".join(terms_where),
        queued_where=" AND ".join(queued_where),
        stats_where=" AND ".join(stats_where),
    )
    columns = (
        f"{_CHUNK_COLUMNS}, c.embedding IS NOT NULL AS has_embedding,"
        " (SELECT chunks FROM st) AS scope_chunks"
    )
    if with_summary_at:
        columns += f", {summary_at_of_chunk('c')} AS summary_at"
    if not with_vector:
        return f"""{ctes}
    SELECT {columns}, top.score, top.hits AS terms_hit
    FROM top JOIN memory_chunks c ON c.id = top.id
    ORDER BY top.score DESC, c.ended_at DESC, c.id DESC"""
    nearest = (
        _nearest_small(by_session=by_session)
        if small
        else _nearest(
            " AND ".join(vector_where),
            " AND ".join(vector_queue_where),
            by_user=by_user,
            by_session=by_session,
        )
    )
    return f"""{ctes},
    nearest AS MATERIALIZED ({nearest}),
    picked AS (SELECT id FROM top UNION SELECT id FROM nearest)
    SELECT {columns}, top.score, top.hits AS terms_hit,
           CASE WHEN c.id IN (SELECT id FROM nearest) THEN x.query_distance END AS distance,
           x.query_distance
    FROM picked JOIN memory_chunks c ON c.id = picked.id LEFT JOIN top ON top.id = c.id
         CROSS JOIN LATERAL (SELECT c.embedding <=> {QUERY_VECTOR} AS query_distance) x"""


def settled_rows(graph_from: int) -> int:
    """How many of a user's rows the graph holds at least before a search (without a session)
    reads the user through the graph alone (``_nearest``): the threshold that put them there,
    never fewer than the graph side's CHUNK_GRAPH_CANDIDATES."""
    return max(graph_from, CHUNK_GRAPH_CANDIDATES)


def _patterns(terms: Sequence[str]) -> list[str]:
    return term_patterns(terms)


class ChunkSearchRepository:
    """The raw history's search reads: one statement each, on the search paths' PooledStatements
    (or inside a unit of work). Writes live in ChunkRepository, which a PooledStatements cannot
    be given: each of its statements would commit on a connection of its own."""

    def __init__(self, *, session: Reads) -> None:
        self.session = session

    async def search(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        max_distance: float,
        *,
        with_summary_at: bool = False,
        graph_from: int = CHUNK_GRAPH_FROM,
    ) -> list[FetchedRow]:
        """Both passes of search_chunks in one statement (the shape of FactRepository.search):
        the ``limit`` nearest chunks closer than ``max_distance``, and the chunks whose content
        or breadcrumbs contain any term (case-insensitive), by distinct terms hit, then recency.
        Rows carry ``distance`` or ``terms_hit``, never the vector.

        The text pass is ``lower(x) LIKE ANY (lowered patterns)``: ILIKE's matches, at half its
        cost on long text (ILIKE folds the text once per pattern). It has no full-text arm: a
        word ``to_tsvector('simple', …)`` finds is a substring these patterns find too, and
        recomputing the tsvector cost ~0.17 ms a chunk (docs/raw-history.md, "Search").

        ``with_summary_at`` adds each hit's ``summary_at`` (its session's last summary, see
        ``summary_at_of_chunk``): unified search's freshness boundaries in the same statement.
        ``graph_from``: CHUNK_GRAPH_FROM, which users the graph side reads alone (``_nearest``)."""
        where, vector_where, queue_where = ["TRUE"], ["TRUE"], ["TRUE"]
        params: dict[str, Any] = {"limit": limit, "patterns": _patterns(terms)}
        if user_id is not None:
            where.append("c.user_id = :uid")
            vector_where.append("v.user_id = :uid")
            queue_where.append("p.user_id = :uid")
            params["uid"] = user_id
            if session_id is None:
                params["settled_rows"] = settled_rows(graph_from)
        if session_id is not None:
            where.append("c.session_id = :sid")
            vector_where.append("v.session_id = :sid")
            queue_where.append("c.session_id = :sid")
            params["sid"] = session_id
        crumbs = "lower(array_to_string(c.breadcrumbs, E'\\n'))"
        lowered = "ARRAY(SELECT lower(x) FROM unnest(CAST(:patterns AS text[])) x)"
        search = HybridSearch(
            table="memory_chunks",
            alias="c",
            columns=(
                f"{_CHUNK_COLUMNS}, {summary_at_of_chunk('c')} AS summary_at"
                if with_summary_at
                else _CHUNK_COLUMNS
            ),
            where=" AND ".join(where),
            match=f"(lower(c.content) LIKE ANY ({lowered}) OR {crumbs} LIKE ANY ({lowered}))",
            hits=f"lower(c.content) LIKE lower(p) OR {crumbs} LIKE lower(p)",
            recency="ended_at",
            nearest=_nearest(
                " AND ".join(vector_where),
                " AND ".join(queue_where),
                by_user=user_id is not None,
                by_session=session_id is not None,
            ),
        )
        return await search.run(self.session, params, query_vector, max_distance)

    async def search_ranked_text(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        terms: Sequence[str],
        limit: int,
        *,
        k1: float,
        b: float,
        with_summary_at: bool = False,
        prune_from: int | None = None,
        small: bool = False,
    ) -> list[FetchedRow]:
        """The ``limit`` best chunks by BM25 over their content and breadcrumbs, best first;
        rows carry ``score``, ``terms_hit`` (query terms held whole by the chunk's words: every
        word lexeme of the term, a stem beside a word never counting) and
        ``scope_chunks``. Reads the indexed chunks holding a query lexeme (GIN on
        memory_chunk_terms) and the scope's queued chunks, never the vectors.

        ``prune_from`` (one user's chunks, no session): the pruned statement, which reads
        only the chunks that can reach the top when the user holds that many chunks or more
        (``ranked_text_sql``); the same rows. ``small``: the small-user statement, for a user
        of fewer than CHUNK_BM25_PRUNE_FROM chunks (its plan is every such user's: run it on
        cached plans); the same rows again."""
        params = self._ranked_params(
            user_id, session_id, terms, limit, k1=k1, b=b, prune_from=prune_from
        )
        sql = ranked_text_sql(
            by_user=user_id is not None,
            by_session=session_id is not None,
            with_summary_at=with_summary_at,
            prune=prune_from is not None,
            small=small,
        )
        return await fetch_rows(self.session, statement(sql), params)

    async def search_ranked(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        query_vector: Sequence[float],
        terms: Sequence[str],
        limit: int,
        *,
        k1: float,
        b: float,
        with_summary_at: bool = False,
        prune_from: int | None = None,
        small: bool = False,
        graph_from: int = CHUNK_GRAPH_FROM,
    ) -> tuple[list[FetchedRow], list[FetchedRow]]:
        """Both lists of a fused search in one statement: the ``limit`` nearest chunks (HNSW
        index and queue, see ``_nearest``), nearest first, each with its exact cosine
        ``distance`` (no threshold: the caller applies one); and the ``limit`` best by BM25,
        best first, with ``score`` and ``terms_hit``. A chunk in both lists is read once and
        is the same row in both. ``prune_from``, ``small``: as for ``search_ranked_text`` (the
        small-user statement reads the user's nearest chunks exactly, see ``_nearest_small``);
        ``graph_from``: as for ``search``."""
        params = self._ranked_params(
            user_id, session_id, terms, limit, k1=k1, b=b, prune_from=prune_from
        )
        params["q"] = vector_binary(query_vector)
        if user_id is not None and session_id is None and not small:
            params["settled_rows"] = settled_rows(graph_from)
        sql = ranked_text_sql(
            by_user=user_id is not None,
            by_session=session_id is not None,
            with_vector=True,
            with_summary_at=with_summary_at,
            prune=prune_from is not None,
            small=small,
        )
        rows = await fetch_rows(self.session, statement(sql), params)
        nearest = sorted(
            (r for r in rows if r["distance"] is not None), key=lambda r: (r["distance"], r["id"])
        )
        ranked = sorted(
            (r for r in rows if r["score"] is not None),
            key=lambda r: (-r["score"], -r["ended_at"].timestamp(), -r["id"]),
        )
        return nearest, ranked

    @staticmethod
    def _ranked_params(
        user_id: uuid.UUID | None,
        session_id: str | None,
        terms: Sequence[str],
        limit: int,
        *,
        k1: float,
        b: float,
        prune_from: int | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "limit": limit,
            "query": " ".join(terms),
            "terms": list(terms),
            "k1": k1,
            "b": b,
        }
        if user_id is not None:
            params["uid"] = user_id
        if session_id is not None:
            params["sid"] = session_id
        if prune_from is not None:
            params["prune_from"] = prune_from
            params["seed_rows"] = CHUNK_BM25_SEED_ROWS
            params["seed_every"] = CHUNK_BM25_SEED_EVERY
        return params

    async def recent(
        self,
        user_id: uuid.UUID | None,
        session_id: str | None,
        limit: int,
        *,
        with_summary_at: bool = False,
    ) -> list[FetchedRow]:
        params: dict[str, Any] = {"limit": limit}
        where = ["TRUE", *owner_where("c", user_id, session_id, params)]
        summary_at = f", {summary_at_of_chunk('c')} AS summary_at" if with_summary_at else ""
        sql = f"""
            SELECT {_CHUNK_COLUMNS}, c.embedding IS NOT NULL AS has_embedding{summary_at}
            FROM memory_chunks c
            WHERE {" AND ".join(where)}
            ORDER BY c.ended_at DESC, c.id DESC
            LIMIT :limit"""
        return await fetch_rows(self.session, statement(sql), params)


class ChunkRepository:
    """Chunk writes, backfill and the indexers' statements, inside a unit of work (or one
    statement on an autocommit connection: single_statement)."""

    def __init__(self, *, session: AsyncSession | AsyncConnection) -> None:
        self.session = session

    async def insert_many(
        self,
        user_id: uuid.UUID,
        session_id: str,
        rows: Sequence[ChunkDraft],
        vectors: Sequence[Sequence[float]] | None,
        *,
        require_session: bool,
    ) -> int | None:
        """Write ``rows`` (INSERT … ON CONFLICT DO NOTHING) and queue the vector of every row
        written for the indexer; returns how many were written, or None — nothing written —
        when the session has a row of another user (or none and ``require_session``).

        ``vectors``: one per row, or None (the rows land without; backfill fills them). One
        fixed-shape statement per CHUNK_INSERT_BATCH rows, the columns sent as arrays (unnest)
        and the vectors as one flat binary ``real[]``: prepared once per connection whatever the
        number of rows, no vector formatted as text, and — with one batch — one round trip, so
        the caller can run it as its own transaction (autocommit)."""
        written = 0
        for start in range(0, len(rows), CHUNK_INSERT_BATCH):
            batch = rows[start : start + CHUNK_INSERT_BATCH]
            params = {
                "uid": user_id,
                "sid": session_id,
                "require_session": require_session,
                "content": [r.content for r in batch],
                "hash": [r.content_hash for r in batch],
                "start_seq": [r.start_seq for r in batch],
                "end_seq": [r.end_seq for r in batch],
                "started_at": [r.started_at for r in batch],
                "ended_at": [r.ended_at for r in batch],
                "crumbs": [json.dumps(list(r.breadcrumbs)) for r in batch],
                "vectors": (
                    None
                    if vectors is None
                    else [vector_binary(v) for v in vectors[start : start + CHUNK_INSERT_BATCH]]
                ),
            }
            result = (await self.session.execute(_INSERT, params)).one()
            if not result.allowed:
                return None
            written += int(result.written)
        return written

    # --- backfill ---------------------------------------------------------------------------

    async def count_missing_embeddings(self) -> int:
        stmt = select(func.count()).where(ChunkRow.embedding.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def missing_embeddings(self, after_id: int, limit: int) -> list[tuple[int, str]]:
        stmt = (
            select(ChunkRow.id, ChunkRow.content)
            .where(ChunkRow.embedding.is_(None), ChunkRow.id > after_id)
            .order_by(ChunkRow.id)
            .limit(limit)
        )
        return [(row.id, row.content) for row in (await self.session.execute(stmt)).all()]

    async def set_embedding(
        self, chunk_id: int, embedded_text: str, embedding: Sequence[float]
    ) -> None:
        """Store a vector the chunk lacks and queue it for the index (chunks are immutable:
        the text embedded is still the chunk's)."""
        del embedded_text
        await self.session.execute(
            text(
                "WITH filled AS ("
                " UPDATE memory_chunks SET embedding = CAST(:vec AS vector)"
                " WHERE id = :id AND embedding IS NULL RETURNING id, user_id)"
                " INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)"
                " SELECT id, user_id FROM filled"
                # A row left queued with a copy of an earlier vector (revision 0013) must not
                # index that one: the copy is dropped, the new vector read again.
                " ON CONFLICT (chunk_id) DO UPDATE SET embedding = NULL"
            ),
            {"id": chunk_id, "vec": vector_binary(embedding)},
        )

    # --- the indexes ------------------------------------------------------------------------

    async def index_queued(
        self,
        limit: int,
        *,
        graph_from: int,
        sweep: bool = True,
        crossing: Sequence[uuid.UUID] = (),
    ) -> IndexedBatch:
        """One batch of up to ``limit`` rows of work, in this order: with ``sweep``, vectors of
        every user who has grown past ``graph_from`` indexed chunks into the HNSW graph, and
        else those of the users ``crossing`` (an earlier batch took them past it) — first, so
        that a user is wholly on one side again within a few batches, however full the queues;
        then, when a full batch of queued chunks has no tsvector yet (a backlog), their
        tsvectors, made and kept on their queue rows, and nothing else; else queued chunks'
        text into memory_chunk_terms (GIN); then, with the room left,
        queued vectors whose text is not queued into memory_chunk_vectors (L2-normalised
        halfvec; in the graph when the user holds ``graph_from`` indexed chunks or more); then
        with any room left the vectors of the users this batch took past ``graph_from``. Rows
        another indexer holds are skipped, so indexers in several processes share the work.

        Text goes first, and of text the tsvectors: a search makes the tsvector of every
        queued chunk in its scope that has none (≈ 0.3 ms a chunk), reads a made one in
        microseconds, and reads a queued vector for a distance (microseconds). Making one is a
        fifth of indexing it (its GIN insertion is the rest), so after a burst the indexers
        make the backlog's tsvectors about five times faster than they could index it. With a
        short queue a chunk's text and vector go in the same batch, its tsvector made once.

        A user crosses ``graph_from`` only in the batch that indexes their text past it; that
        batch moves their vectors with the room it has, and names them in ``crossing`` while
        some may be left, for the next batch. The look at every grown user (``sweep``) is for
        what another process left."""
        moved_in = 0
        if sweep:
            moved_in = await self._into_graph(limit, graph_from)
            if moved_in >= limit:
                return IndexedBatch(
                    moved_in, moved_in, 0, graph_left=True, crossing=tuple(crossing)
                )
        elif crossing:
            moved_in = await self._into_graph(limit, graph_from, users=crossing)
            if moved_in >= limit:
                return IndexedBatch(
                    moved_in, moved_in, 0, graph_left=False, crossing=tuple(crossing)
                )
        room = limit - moved_in
        if room == limit:  # a batch with its whole room: a backlog is made ahead first
            made = (await self.session.execute(_MAKE_TEXT, {"limit": limit})).one()
            if made.made:
                return IndexedBatch(int(made.made), int(made.made), 0, graph_left=False)
        texts = (await self.session.execute(_INDEX_TEXT, {"limit": room})).one()
        done, took = moved_in + int(texts.picked), moved_in + int(texts.taken)
        vectors: Sequence[int] = []
        if done < limit:
            row = (
                await self.session.execute(
                    _INDEX_VECTORS, {"limit": limit - done, "graph_from": graph_from}
                )
            ).one()
            done, took = done + int(row.picked), took + int(row.taken)
            vectors = row.moved
        indexed = len(texts.whole) + len(vectors)  # a vector moves after its text
        if not texts.moved:  # only indexed text moves a user's count
            return IndexedBatch(done, took, indexed, graph_left=False)
        params = {"moved": list(texts.moved), "graph_from": graph_from}
        crossed = tuple((await self.session.execute(_CROSSED_USERS, params)).scalar() or ())
        if not crossed:
            return IndexedBatch(done, took, indexed, graph_left=False)
        if done >= limit:  # no room: the next batch moves them
            return IndexedBatch(done, took, indexed, graph_left=False, crossing=crossed)
        moved = await self._into_graph(limit - done, graph_from, users=crossed)
        done, took = done + moved, took + moved
        left = crossed if done >= limit else ()
        return IndexedBatch(done, took, indexed, graph_left=False, crossing=left)

    async def _into_graph(
        self, limit: int, graph_from: int, *, users: Sequence[uuid.UUID] | None = None
    ) -> int:
        """``_INTO_GRAPH`` (every grown user), or ``_INTO_GRAPH_USERS`` for ``users``: how
        many vectors it moved."""
        params: dict[str, Any] = {"limit": limit, "graph_from": graph_from}
        if users is None:
            moved = await self.session.execute(_INTO_GRAPH, params)
        else:
            moved = await self.session.execute(_INTO_GRAPH_USERS, {**params, "users": list(users)})
        return len(moved.all())

    async def requeue_unindexed(self) -> int:
        """Queue every chunk whose text is in neither memory_chunk_terms nor its queue, and
        every chunk that has a vector in neither memory_chunk_vectors nor its queue (written
        by SQL of its own, restored from a dump of memory_chunks alone, or by a process older
        than revision 0004 or 0006); returns how many chunks. A full scan: for backfill."""
        requeued = (
            await self.session.execute(
                text(
                    "WITH vectors AS ("
                    " INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)"
                    " SELECT c.id, c.user_id FROM memory_chunks c"
                    " WHERE c.embedding IS NOT NULL AND NOT EXISTS"
                    " (SELECT 1 FROM memory_chunk_vectors v WHERE v.chunk_id = c.id)"
                    " ON CONFLICT (chunk_id) DO NOTHING RETURNING chunk_id),"
                    " texts AS ("
                    " INSERT INTO memory_chunk_text_queue (chunk_id, user_id)"
                    " SELECT c.id, c.user_id FROM memory_chunks c WHERE NOT EXISTS"
                    " (SELECT 1 FROM memory_chunk_terms t WHERE t.chunk_id = c.id)"
                    " ON CONFLICT (chunk_id) DO NOTHING RETURNING chunk_id)"
                    " SELECT ARRAY(SELECT chunk_id FROM vectors UNION SELECT chunk_id FROM texts)"
                )
            )
        ).scalar_one()
        # An indexer that committed while the INSERTs ran took rows they did not see yet: a
        # new statement sees that commit, and drops what is now queued and indexed both.
        await self.session.execute(
            text(
                "DELETE FROM memory_chunk_vector_queue q USING memory_chunk_vectors v"
                " WHERE v.chunk_id = q.chunk_id"
            )
        )
        await self.session.execute(
            text(
                "DELETE FROM memory_chunk_text_queue q USING memory_chunk_terms t"
                " WHERE t.chunk_id = q.chunk_id"
            )
        )
        still = await self.session.scalar(
            text(
                "SELECT count(*) FROM unnest(CAST(:ids AS bigint[])) i(id)"
                " WHERE EXISTS (SELECT 1 FROM memory_chunk_vector_queue q WHERE q.chunk_id = i.id)"
                " OR EXISTS (SELECT 1 FROM memory_chunk_text_queue q WHERE q.chunk_id = i.id)"
            ),
            {"ids": list(requeued)},
        )
        return int(still or 0)

    async def queued_count(self) -> int:
        """How many chunks wait for an index (their text, their vector or both)."""
        return int(
            await self.session.scalar(
                text(
                    "SELECT count(*) FROM (SELECT chunk_id FROM memory_chunk_text_queue"
                    " UNION SELECT chunk_id FROM memory_chunk_vector_queue) q"
                )
            )
            or 0
        )
