"""Alembic revisions on a real server: empty and legacy databases reach the same head."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError

from navi_memory import open_memory
from navi_memory.db import SCHEMA_HEAD, TRGM_INDEXES
from navi_memory.models import Base
from navi_memory.testing import FakeOllama
from navi_memory.text.terms import STOP_WORDS
from tests import dbtools
from tests.conftest import make_settings

TABLES = {
    "navi_users",
    "memory_facts",
    "memory_summary",
    "session_memory_state",
    "sessions",
    "session_messages",
    "memory_chunks",
    "memory_chunk_vectors",
    "memory_chunk_vector_queue",
    "memory_chunk_text_stats",
    "memory_chunk_text_queue",
    "memory_chunk_terms",
    "memory_chunk_lexeme_df",
    "memory_fact_vectors",
    "memory_fact_vector_queue",
    "kv_store",
}

LEGACY_DDL = """
CREATE TABLE navi_users (id uuid primary key, name text, created_at timestamptz DEFAULT now());
CREATE TABLE memory_facts (
    id serial primary key,
    user_id uuid references navi_users(id) on delete cascade,
    category text NOT NULL, key text NOT NULL, value text NOT NULL,
    created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now(),
    unique (user_id, category, key));
CREATE TABLE memory_summary (user_id uuid, content text, updated_at timestamptz DEFAULT now());
CREATE TABLE session_memory_state (session_id text primary key, extracted_at timestamptz);
"""


def connect(server: dbtools.EmbeddedServer, db: str) -> psycopg.Connection[Any]:
    return server.admin(db)


def schema_snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    columns = conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2"
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
    ).fetchall()
    constraints = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2"
    ).fetchall()
    return [*columns, *indexes, *constraints]


def test_alembic_head_matches_the_revision_the_code_expects() -> None:
    script = ScriptDirectory.from_config(dbtools.alembic_config("postgresql://unused/x"))
    assert script.get_heads() == [SCHEMA_HEAD]


def test_upgrade_on_an_empty_database_creates_every_table_and_the_vector_extension(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    dbtools.upgrade(pg_server.url(scratch_db))
    with connect(pg_server, scratch_db) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        assert tables >= TABLES
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (SCHEMA_HEAD,)
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        # pg_trgm is never created by the package, so no trigram index either.
        assert not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()
        assert not conn.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname LIKE '%\\_trgm'"
        ).fetchone()


def test_a_second_upgrade_is_a_no_op(pg_server: dbtools.EmbeddedServer, scratch_db: str) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        before = schema_snapshot(conn)
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert schema_snapshot(conn) == before


def test_downgrade_to_base_and_upgrade_again_round_trips(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        at_head = schema_snapshot(conn)
    dbtools.downgrade(url, "base")
    with connect(pg_server, scratch_db) as conn:
        left = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        assert left <= {"alembic_version"}
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert schema_snapshot(conn) == at_head


def test_downgrade_to_the_legacy_shape_keeps_facts_and_unhides_merged_rows(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url)
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        survivor = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (%s, 'p', 'preferred_language', 'Dutch') RETURNING id",
            (uid,),
        ).fetchone()
        assert survivor is not None
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, merged_into) "
            "VALUES (%s, 'p', 'language', 'English', %s)",
            (uid, survivor[0]),
        )
    dbtools.downgrade(url, "0001")
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute("SELECT key, value FROM memory_facts ORDER BY key").fetchall()
        assert rows == [("language", "English"), ("preferred_language", "Dutch")]
    dbtools.upgrade(url)


def test_legacy_database_is_adopted_with_every_row_kept(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    alice, orphan = uuid.uuid4(), uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute(LEGACY_DDL)
        conn.execute("INSERT INTO navi_users (id, name) VALUES (%s, 'alice')", (alice,))
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, updated_at) VALUES "
            "(%s, 'preferences', 'editor', 'vim', now()),"
            # unowned duplicates: the legacy NULL-distinct constraint let all three in
            "(NULL, 'personal', 'city', 'Utrecht', now() - interval '2 days'),"
            "(NULL, 'personal', 'city', 'Amsterdam', now()),"
            "(NULL, 'personal', 'city', 'Leiden', now() - interval '1 day'),"
            "(NULL, 'personal', 'name', 'Sam', now())",
            (alice,),
        )
        conn.execute(
            "INSERT INTO memory_summary (user_id, content, updated_at) VALUES "
            "(%s, 'old summary', now() - interval '1 day'), (%s, 'new summary', now()),"
            "(%s, 'summary of a user the legacy app never registered', now())",
            (alice, alice, orphan),
        )
        conn.execute("INSERT INTO session_memory_state VALUES ('s1', now())")

    dbtools.upgrade(pg_server.url(scratch_db))

    with connect(pg_server, scratch_db) as conn:
        facts = conn.execute(
            "SELECT f.key, f.value, s.value FROM memory_facts f "
            "LEFT JOIN memory_facts s ON s.id = f.merged_into ORDER BY f.key, f.value"
        ).fetchall()
        assert facts == [
            ("city", "Amsterdam", None),  # the newest stays visible
            ("city", "Leiden", "Amsterdam"),  # the others are hidden behind it, not dropped
            ("city", "Utrecht", "Amsterdam"),
            ("editor", "vim", None),
            ("name", "Sam", None),
        ]
        assert conn.execute("SELECT count(*) FROM navi_users").fetchone() == (2,)
        summaries = conn.execute(
            "SELECT user_id, content FROM memory_summary ORDER BY content"
        ).fetchall()
        assert summaries == [
            (alice, "new summary"),
            (orphan, "summary of a user the legacy app never registered"),
        ]
        assert conn.execute("SELECT session_id FROM session_memory_state").fetchall() == [("s1",)]
        # New facts still get ids from the legacy sequence, now bigint.
        new_id = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) "
            "VALUES (%s, 'x', 'y', 'z') RETURNING id",
            (alice,),
        ).fetchone()
        assert new_id is not None and new_id[0] == 6


@pytest.mark.parametrize("own_chunks", [False, True])
def test_legacy_and_empty_databases_reach_the_same_schema(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, own_chunks: bool
) -> None:
    """Every column, index and constraint alike, by name too. With the legacy application's own
    memory_chunks (set aside), PostgreSQL 18's named NOT NULL constraints stayed with the old
    table and the new table's took a "1" suffix (memory_chunks_id_not_null1)."""
    legacy = pg_server.create_database("legacy")
    try:
        with connect(pg_server, legacy) as conn:
            conn.execute(LEGACY_DDL)
            if own_chunks:
                conn.execute(SPEC_CHUNKS_DDL)
        dbtools.upgrade(pg_server.url(legacy))
        dbtools.upgrade(pg_server.url(scratch_db))
        with connect(pg_server, legacy) as a, connect(pg_server, scratch_db) as b:
            set_aside = [row for row in schema_snapshot(a) if "_legacy" in str(row[:2])]
            assert bool(set_aside) is own_chunks
            assert [r for r in schema_snapshot(a) if r not in set_aside] == schema_snapshot(b)
    finally:
        pg_server.drop_database(legacy)


@pytest.mark.parametrize("trgm", [False, True])
def test_models_and_migrated_schema_do_not_drift(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, trgm: bool
) -> None:
    if trgm:
        with connect(pg_server, scratch_db) as conn:
            conn.execute("CREATE EXTENSION pg_trgm")
    dbtools.upgrade(pg_server.url(scratch_db))
    sync_url = f"postgresql+psycopg://postgres@/{scratch_db}?host={pg_server.socket_dir}"
    engine = create_engine(sync_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_object": lambda obj, name, type_, reflected, compare_to: (
                        not (type_ == "index" and name in TRGM_INDEXES)
                    )
                },
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_catalog_has_the_operator_classes_alembic_does_not_compare(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    with connect(pg_server, scratch_db) as conn:
        conn.execute("CREATE EXTENSION pg_trgm")
    dbtools.upgrade(pg_server.url(scratch_db))
    with connect(pg_server, scratch_db) as conn:
        defs = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            ).fetchall()
        )
    # The chunk graph is built wider since 0012 (its biggest users' recall).
    hnsw = defs["ix_memory_chunk_vectors_embedding_hnsw"]
    assert "USING hnsw (embedding halfvec_cosine_ops)" in hnsw
    assert "m='16'" in hnsw and "ef_construction='128'" in hnsw
    # Chunk vectors are HNSW-indexed in a side table only, off the write path; fact vectors
    # are read exactly, with no graph anywhere (0020).
    assert "ix_memory_chunks_embedding_hnsw" not in defs
    assert "ix_memory_facts_embedding_hnsw" not in defs
    assert "ix_memory_fact_vectors_embedding_hnsw" not in defs
    for name, column in TRGM_INDEXES.items():
        assert f"USING gin ({column} gin_trgm_ops)" in defs[name]
    assert "ix_memory_chunks_content_fts" not in defs  # 0004: no query used it
    assert "USING gin (breadcrumbs)" in defs["ix_memory_chunks_breadcrumbs"]
    # Chunk text is GIN-indexed in memory_chunk_terms only, off add_chunks' write path.
    assert "ix_memory_chunk_terms_tsv" not in defs  # 0014: the (user_id, tsv) index serves it
    assert (
        "USING gin (user_id, tsv) WITH (gin_pending_list_limit='128')"
        in defs["ix_memory_chunk_terms_user_id_tsv"]
    )
    assert not any("search_tsv" in d or "tsvector" in d for d in defs.values())
    assert "NULLS NOT DISTINCT" in defs["uq_memory_facts_user_id_category_key"]
    assert "WHERE (merged_into IS NULL)" in defs["uq_memory_facts_user_id_category_key"]
    assert "NULLS NOT DISTINCT" in defs["uq_kv_store_user_id_scope_session_id_key"]


def test_a_legacy_merged_into_column_is_repaired_not_trusted(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """The original application's migrate script may have added merged_into already."""
    with connect(pg_server, scratch_db) as conn:
        conn.execute(LEGACY_DDL)
        conn.execute("ALTER TABLE memory_facts ADD COLUMN merged_into integer")
        conn.execute(
            "INSERT INTO memory_facts (id, user_id, category, key, value, merged_into, updated_at)"
            " VALUES (1, NULL, 'p', 'language', 'English', 2, now()),"
            " (2, NULL, 'p', 'lang', 'German', 3, now()),"  # a chain: 1 -> 2 -> 3
            " (3, NULL, 'p', 'preferred_language', 'Dutch', NULL, now()),"
            " (4, NULL, 'p', 'editor', 'vim', 999, now()),"  # points at nothing
            " (5, NULL, 'x', 'a', 'cycle a', 6, now()),"  # a cycle: 5 -> 6 -> 5
            " (6, NULL, 'x', 'b', 'cycle b', 5, now()),"
            " (7, NULL, 'c', 'city', 'Leiden', 8, now() - interval '1 day'),"  # 7 -> 8, and
            " (8, NULL, 'c', 'city', 'Utrecht', NULL, now() - interval '1 day'),"  # 8 is an old
            " (9, NULL, 'c', 'city', 'Amsterdam', NULL, now())"  # duplicate of the newer 9
        )
        conn.execute("SELECT setval('memory_facts_id_seq', 9)")
    dbtools.upgrade(pg_server.url(scratch_db))
    with connect(pg_server, scratch_db) as conn:
        pointers = dict(conn.execute("SELECT id, merged_into FROM memory_facts").fetchall())
        data_type = conn.execute(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'memory_facts' AND column_name = 'merged_into'"
        ).fetchone()
    assert pointers == {1: 3, 2: 3, 3: None, 4: None, 5: None, 6: None, 7: 9, 8: 9, 9: None}
    assert data_type == ("bigint",)


def test_0004_moves_existing_chunk_vectors_into_the_index_table_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0003")
    uid = uuid.uuid4()
    scaled = "[" + ",".join(["3"] + ["0"] * 767) + "]"  # not unit length: 0004 normalises
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        for i, vector in enumerate((scaled, None)):
            conn.execute(
                "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
                "start_seq, end_seq, started_at, ended_at, embedding) "
                "VALUES (%s, 's1', %s, %s, 1, 1, now(), now(), %s::vector)",
                (uid, f"chunk {i}", f"h{i}", vector),
            )
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute(
            "SELECT c.content, v.user_id, v.session_id, l2_norm(v.embedding) "
            "FROM memory_chunk_vectors v JOIN memory_chunks c ON c.id = v.chunk_id"
        ).fetchall()
        assert rows == [("chunk 0", uid, "s1", pytest.approx(1.0))]
        assert conn.execute("SELECT count(*) FROM memory_chunk_vector_queue").fetchone() == (0,)
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "ix_memory_chunk_vectors_embedding_hnsw" in indexes
        assert "ix_memory_chunks_embedding_hnsw" not in indexes
    dbtools.downgrade(url, "0003")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert {"ix_memory_chunks_embedding_hnsw", "ix_memory_chunks_content_fts"} <= indexes
        assert conn.execute("SELECT to_regclass('memory_chunk_vectors')").fetchone() == (None,)


def test_0006_indexes_existing_chunks_text_and_counts_them_per_user(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0006 indexes the text of chunks written before it (memory_chunk_terms, GIN) with
    per-user statistics, queues nothing, and leaves the write path free of text work; its
    downgrade removes the tables, functions and triggers behind them."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0005")
    alice, bob = uuid.uuid4(), uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        for uid, contents in (
            (alice, ["set QUARTZ_RETRY_LIMIT", "see /etc/x.toml"]),
            (bob, ["hi"]),
        ):
            conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
            for i, content in enumerate(contents):
                conn.execute(
                    "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, "
                    "start_seq, end_seq, started_at, ended_at, breadcrumbs) "
                    "VALUES (%s, 's1', %s, %s, 1, 1, now(), now(), '{crumb}')",
                    (uid, content, f"h{i}"),
                )
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        found = conn.execute(
            "SELECT c.content FROM memory_chunk_terms t JOIN memory_chunks c ON c.id = t.chunk_id"
            " WHERE t.tsv @@ navi_text_tsquery(%s)",
            ("quartz_retry_limit",),
        ).fetchall()
        assert found == [("set QUARTZ_RETRY_LIMIT",)]
        exact = conn.execute(
            "SELECT bool_and(t.tsv = navi_chunk_tsv(c.content, c.breadcrumbs)"
            " AND t.lexemes = length(t.tsv) AND t.user_id = c.user_id"
            " AND t.session_id = c.session_id AND t.ended_at = c.ended_at), count(*)"
            " FROM memory_chunk_terms t JOIN memory_chunks c ON c.id = t.chunk_id"
        ).fetchone()
        assert exact == (True, 3)
        stats = {
            r[0]: (r[1], r[2])
            for r in conn.execute(
                "SELECT user_id, chunks, lexemes FROM memory_chunk_text_stats"
            ).fetchall()
        }
        lexemes = dict(
            conn.execute(
                "SELECT user_id, sum(lexemes) FROM memory_chunk_terms GROUP BY user_id"
            ).fetchall()
        )
        assert stats == {alice: (2, lexemes[alice]), bob: (1, lexemes[bob])}
        assert conn.execute("SELECT count(*) FROM memory_chunk_text_queue").fetchone() == (0,)
        # memory_chunks itself carries no text index: writing a chunk makes no tsvector.
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'memory_chunks' AND data_type = 'tsvector'"
        ).fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'memory_chunks'::regclass "
            "AND NOT tgisinternal"
        ).fetchone() == (0,)
    dbtools.downgrade(url, "0005")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (3,)
        for table in ("memory_chunk_text_stats", "memory_chunk_terms", "memory_chunk_text_queue"):
            assert conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,)
        left = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE 'navi\\_%%'"
        ).fetchone()
        assert left == (0,)


def test_0007_moves_existing_fact_vectors_into_the_index_table_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0007 copies every stored fact vector (normalised) into memory_fact_vectors, queues
    nothing, and from then on queues a fact whose vector is set or changed; its downgrade puts
    the HNSW index back on memory_facts."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0006")
    uid = uuid.uuid4()
    scaled = "[" + ",".join(["3"] + ["0"] * 767) + "]"  # not unit length: 0007 normalises
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        for key, vector in (("with", scaled), ("without", None)):
            conn.execute(
                "INSERT INTO memory_facts (user_id, category, key, value, embedding) "
                "VALUES (%s, 'p', %s, 'v', %s::vector)",
                (uid, key, vector),
            )
    dbtools.upgrade(url, "0007")
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute(
            "SELECT f.key, v.user_id, l2_norm(v.embedding) "
            "FROM memory_fact_vectors v JOIN memory_facts f ON f.id = v.fact_id"
        ).fetchall()
        assert rows == [("with", uid, pytest.approx(1.0))]
        assert conn.execute("SELECT count(*) FROM memory_fact_vector_queue").fetchone() == (0,)
        conn.execute(f"UPDATE memory_facts SET embedding = '{scaled}' WHERE key = 'without'")
        queued = conn.execute(
            "SELECT f.key FROM memory_fact_vector_queue q JOIN memory_facts f ON f.id = q.fact_id"
        ).fetchall()
        assert queued == [("without",)]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "ix_memory_fact_vectors_embedding_hnsw" in indexes
        assert "ix_memory_facts_embedding_hnsw" not in indexes
    dbtools.downgrade(url, "0006")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_facts").fetchone() == (2,)
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "ix_memory_facts_embedding_hnsw" in indexes
        assert conn.execute("SELECT to_regclass('memory_fact_vectors')").fetchone() == (None,)
        left = conn.execute(
            "SELECT count(*) FROM pg_proc "
            "WHERE proname IN ('navi_fact_vector_queue', 'navi_fact_upsert')"
        ).fetchone()
        assert left == (0,)


def test_0009_puts_only_big_users_vectors_in_the_graph_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0008")
    small, big = uuid.uuid4(), uuid.uuid4()
    unit = "[" + ",".join(["1"] + ["0"] * 767) + "]"
    with connect(pg_server, scratch_db) as conn:
        for uid in (small, big):
            conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
            for i in range(3):
                conn.execute(
                    "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content,"
                    " content_hash, start_seq, end_seq, started_at, ended_at, embedding)"
                    " VALUES (%s, 's1', %s, %s, %s, %s, now(), now(), %s::vector)"
                    " RETURNING id, user_id, session_id, ended_at, content, embedding),"
                    " v AS (INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id,"
                    " embedding) SELECT id, user_id, session_id, embedding::halfvec FROM c)"
                    " INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at,"
                    " lexemes, tsv) SELECT id, user_id, session_id, ended_at, 1,"
                    " to_tsvector('simple', content) FROM c",
                    (uid, f"chunk {uid} {i}", f"h{uid}{i}", i, i, unit),
                )
        # The statistics say the big user holds 2,000 chunks (0009's threshold).
        conn.execute("UPDATE memory_chunk_text_stats SET chunks = 2000 WHERE user_id = %s", (big,))
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        sides = conn.execute(
            "SELECT user_id, in_graph, count(*) FROM memory_chunk_vectors GROUP BY 1, 2"
        ).fetchall()
        assert sorted(sides, key=str) == sorted([(small, False, 3), (big, True, 3)], key=str)
        defs = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes").fetchall())
        assert defs["ix_memory_chunk_vectors_embedding_hnsw"].endswith("WHERE in_graph")
        assert defs["ix_memory_chunk_vectors_graph_user_id_session_id"].endswith("WHERE in_graph")
        assert defs["ix_memory_chunk_vectors_exact_user_id_session_id"].endswith(
            "WHERE (NOT in_graph)"
        )
        assert "ix_memory_chunk_vectors_user_id_session_id" not in defs
    dbtools.downgrade(url, "0008")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunk_vectors").fetchone() == (6,)
        defs = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes").fetchall())
        assert "WHERE" not in defs["ix_memory_chunk_vectors_embedding_hnsw"]
        assert "ix_memory_chunk_vectors_user_id_session_id" in defs
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'memory_chunk_vectors'"
        ).fetchall()
        assert ("in_graph",) not in columns


def test_0010_keeps_frequencies_of_big_users_only_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0009")
    small, big = uuid.uuid4(), uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        for uid in (small, big):
            conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
            conn.execute(
                "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content,"
                " content_hash, start_seq, end_seq, started_at, ended_at)"
                " SELECT %s, 's1', x, md5(x), 1, 1, now(), now()"
                " FROM unnest(ARRAY['alpha bravo', 'alpha']) x RETURNING *)"
                " INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at,"
                " lexemes, tsv) SELECT id, user_id, session_id, ended_at, length(tsv), tsv"
                " FROM (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM c) c",
                (uid,),
            )
        # 0008's triggers kept everyone's; the big user "holds" 1,000 chunks.
        assert conn.execute("SELECT count(*) FROM memory_chunk_lexeme_df").fetchone() == (4,)
        conn.execute("UPDATE memory_chunk_text_stats SET chunks = 1000 WHERE user_id = %s", (big,))
    dbtools.upgrade(url, "0010")
    with connect(pg_server, scratch_db) as conn:
        kept = conn.execute("SELECT user_id, df_kept FROM memory_chunk_text_stats").fetchall()
        assert dict(kept) == {small: False, big: True}
        rows = conn.execute("SELECT user_id, lexeme, df FROM memory_chunk_lexeme_df").fetchall()
        assert sorted(rows) == [(big, "alpha", 2), (big, "bravo", 1)]
        triggers = {
            r[0]
            for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memory_chunk_terms'::regclass"
            ).fetchall()
        }
        assert "memory_chunk_terms_df_added" not in triggers
        assert conn.execute("SELECT navi_chunk_df_from()").fetchone() == (1000,)
        # The statistics triggers keep the kept user's frequencies from now on, only theirs.
        for uid in (small, big):
            conn.execute(
                "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content,"
                " content_hash, start_seq, end_seq, started_at, ended_at)"
                " VALUES (%s, 's2', 'alpha charlie', 'h2', 2, 2, now(), now()) RETURNING *)"
                " INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at,"
                " lexemes, tsv) SELECT id, user_id, session_id, ended_at, length(tsv), tsv"
                " FROM (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM c) c",
                (uid,),
            )
        rows = conn.execute("SELECT user_id, lexeme, df FROM memory_chunk_lexeme_df").fetchall()
        assert sorted(rows) == [(big, "alpha", 3), (big, "bravo", 1), (big, "charlie", 1)]
    dbtools.downgrade(url, "0009")
    with connect(pg_server, scratch_db) as conn:  # everyone's again: 2 users x 3 lexemes
        assert conn.execute("SELECT count(*) FROM memory_chunk_lexeme_df").fetchone() == (6,)
        triggers = {
            r[0]
            for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memory_chunk_terms'::regclass"
            ).fetchall()
        }
        assert {"memory_chunk_terms_df_added", "memory_chunk_terms_df_removed"} <= triggers
        assert conn.execute("SELECT to_regprocedure('navi_chunk_df_from()')").fetchone() == (None,)


def test_0012_rebuilds_the_chunk_graph_wider_with_its_rows_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0011")
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
            " start_seq, end_seq, started_at, ended_at)"
            " SELECT %s, 's1', 'chunk ' || i, md5(i::text), i, i, now(), now()"
            " FROM generate_series(1, 50) i RETURNING id, user_id, session_id)"
            " INSERT INTO memory_chunk_vectors (chunk_id, user_id, session_id, embedding, in_graph)"
            " SELECT id, user_id, session_id, CAST(l2_normalize(CAST(ARRAY(SELECT"
            " sin(id * 7 + d) FROM generate_series(1, 768) d) AS vector)) AS halfvec), true"
            " FROM c",
            (uid,),
        )

    def graph(conn: psycopg.Connection[Any]) -> tuple[str, bool, list[int]]:
        definition, valid = conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i"
            " WHERE i.indexrelid = 'ix_memory_chunk_vectors_embedding_hnsw'::regclass"
        ).fetchone()  # type: ignore[misc]
        conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        conn.execute("SET enable_indexscan = on; SET hnsw.iterative_scan = relaxed_order")
        # Nearest to the 10th row's own vector, through the graph alone.
        plan = conn.execute(
            "EXPLAIN SELECT chunk_id FROM memory_chunk_vectors WHERE in_graph"
            " ORDER BY embedding <=> (SELECT embedding FROM memory_chunk_vectors"
            " ORDER BY chunk_id OFFSET 9 LIMIT 1) LIMIT 3"
        ).fetchall()
        assert any("ix_memory_chunk_vectors_embedding_hnsw" in row[0] for row in plan), plan
        nearest = conn.execute(
            "SELECT chunk_id FROM memory_chunk_vectors WHERE in_graph"
            " ORDER BY embedding <=> (SELECT embedding FROM memory_chunk_vectors"
            " ORDER BY chunk_id OFFSET 9 LIMIT 1) LIMIT 3"
        ).fetchall()
        return definition, valid, [row[0] for row in nearest]

    with connect(pg_server, scratch_db) as conn:
        before, _, found_before = graph(conn)
        tenth = conn.execute(
            "SELECT chunk_id FROM memory_chunk_vectors ORDER BY chunk_id OFFSET 9 LIMIT 1"
        ).fetchone()
    assert "ef_construction='64'" in before
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        after, valid, found_after = graph(conn)
        names = [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()]
    # Built wider, valid, under the old name, holding the rows it held: the row's own vector
    # finds the row first.
    assert "ef_construction='128'" in after and after.endswith("WHERE in_graph")
    assert valid
    assert not any(name.endswith("_hnsw_new") for name in names)
    assert tenth is not None and found_after[0] == tenth[0] == found_before[0]
    dbtools.downgrade(url, "0011")
    with connect(pg_server, scratch_db) as conn:
        again, valid, found_again = graph(conn)
    assert "ef_construction='64'" in again and valid and found_again[0] == tenth[0]


def test_0012_after_a_run_stopped_past_its_build_keeps_the_new_graph(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """A run stopped after building the new graph and dropping the old one: the next run builds
    nothing again, it gives the new graph its name."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0011")
    with connect(pg_server, scratch_db) as conn:
        conn.execute(
            "CREATE INDEX ix_memory_chunk_vectors_embedding_hnsw_new ON memory_chunk_vectors"
            " USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 128)"
            " WHERE in_graph"
        )
        conn.execute("DROP INDEX ix_memory_chunk_vectors_embedding_hnsw")
        built = conn.execute(
            "SELECT oid FROM pg_class WHERE relname = 'ix_memory_chunk_vectors_embedding_hnsw_new'"
        ).fetchone()
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        kept = conn.execute(
            "SELECT oid FROM pg_class WHERE relname = 'ix_memory_chunk_vectors_embedding_hnsw'"
        ).fetchone()
        leftover = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE '%hnsw_new'"
        ).fetchone()
    assert built is not None and kept == built  # the same index, renamed
    assert leftover == (0,)


def test_0013_keeps_queued_chunks_and_their_made_tsvectors_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0013 adds the made-ahead tsvector to the text queue and the normalised vector copy to
    the vector queue without touching their rows; a downgrade drops what was made ahead only
    (the index steps make it again) and keeps every queued chunk."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0012")
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
            " start_seq, end_seq, started_at, ended_at)"
            " SELECT %s, 's1', 'chunk ' || i, md5(i::text), i, i, now(), now()"
            " FROM generate_series(1, 6) i RETURNING id, user_id),"
            " v AS (INSERT INTO memory_chunk_vector_queue (chunk_id, user_id)"
            "  SELECT id, user_id FROM c)"
            " INSERT INTO memory_chunk_text_queue (chunk_id, user_id) SELECT id, user_id FROM c",
            (uid,),
        )

    def toast_target(conn: psycopg.Connection[Any]) -> Any:
        return conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'memory_chunk_text_queue'"
        ).fetchone()

    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute(
            "SELECT count(*), count(tsv) FROM memory_chunk_text_queue"
        ).fetchone() == (6, 0)
        assert conn.execute(
            "SELECT count(*), count(embedding) FROM memory_chunk_vector_queue"
        ).fetchone() == (6, 0)
        assert toast_target(conn) == (["toast_tuple_target=8160"],)
        conn.execute(
            "UPDATE memory_chunk_text_queue q SET tsv = navi_chunk_tsv(c.content, c.breadcrumbs)"
            " FROM memory_chunks c WHERE c.id = q.chunk_id AND c.start_seq <= 3"
        )
        # The rows without one, in id order, through the partial index.
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT chunk_id FROM memory_chunk_text_queue WHERE tsv IS NULL"
            " ORDER BY chunk_id LIMIT 2"
        ).fetchall()
        assert any("ix_memory_chunk_text_queue_unmade" in row[0] for row in plan), plan
    dbtools.downgrade(url, "0012")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunk_text_queue").fetchone() == (6,)
        assert conn.execute("SELECT count(*) FROM memory_chunk_vector_queue").fetchone() == (6,)
        assert toast_target(conn) == (None,)
        for queue in ("memory_chunk_text_queue", "memory_chunk_vector_queue"):
            columns = conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = %s ORDER BY 1",
                (queue,),
            ).fetchall()
            assert columns == [("chunk_id",), ("user_id",)], queue


def test_0014_finds_a_users_chunks_by_word_in_one_gin_index_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0014 creates btree_gin and replaces the tsvector GIN index with one over (user_id,
    tsv), built over the rows already indexed: a user's chunks holding a word are found in it
    alone, and so are every user's (by tsv alone). A downgrade brings the old index back."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0013")
    uid, other = uuid.uuid4(), uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s), (%s)", (uid, other))
        conn.execute(
            "WITH c AS (INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
            " start_seq, end_seq, started_at, ended_at)"
            " SELECT CASE WHEN i %% 2 = 0 THEN %s ELSE %s END, 's1',"
            "   'chunk ' || i || CASE WHEN i %% 10 < 2 THEN ' marimba' ELSE '' END,"
            "   md5(i::text), i, i, now(), now()"
            " FROM generate_series(1, 400) i RETURNING *)"
            " INSERT INTO memory_chunk_terms"
            "  (chunk_id, user_id, session_id, ended_at, lexemes, tsv)"
            " SELECT id, user_id, session_id, ended_at, length(t), t"
            " FROM c, navi_chunk_tsv(c.content, c.breadcrumbs) t",
            (uid, other),
        )

    def found(conn: psycopg.Connection[Any], user: uuid.UUID | None) -> tuple[list[str], int]:
        """The indexes a search of 'marimba' reads, and how many chunks it finds. A table
        this small is cheaper to read through the btree of user ids, which is set aside (in
        a transaction rolled back) to show what the GIN index alone does."""
        where = "tsv @@ to_tsquery('simple', 'marimba')" + (" AND user_id = %s" if user else "")
        args = (user,) if user else ()
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("DROP INDEX ix_memory_chunk_terms_user_id_session_id")
            plan = [
                row[0]
                for row in conn.execute(
                    "EXPLAIN SELECT chunk_id FROM memory_chunk_terms WHERE " + where, args
                ).fetchall()
            ]
            count = conn.execute("SELECT count(*) FROM memory_chunk_terms WHERE " + where, args)
            total = count.fetchone()[0]  # type: ignore[index]
        used = sorted({w for line in plan for w in line.split() if w.startswith("ix_")})
        conds = [line for line in plan if "Index Cond" in line]
        # The user's id is looked up in the index itself, beside the word.
        assert not user or any("user_id =" in line for line in conds), plan
        return used, total

    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").fetchone()
        assert found(conn, uid) == (["ix_memory_chunk_terms_user_id_tsv"], 40)
        assert found(conn, None) == (["ix_memory_chunk_terms_user_id_tsv"], 80)
    dbtools.downgrade(url, "0013")
    with connect(pg_server, scratch_db) as conn:
        assert found(conn, None) == (["ix_memory_chunk_terms_tsv"], 80)
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "ix_memory_chunk_terms_user_id_tsv" not in names


def test_0014_stops_with_what_to_do_when_btree_gin_cannot_be_created(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """A role without CREATE on the database may not create even a trusted extension: 0014
    then stops, names the extension and who must create it, and changes nothing (the schema
    stays at 0013 with its old index)."""
    dbtools.upgrade(pg_server.url(scratch_db), "0013")
    role = f"migrator_{uuid.uuid4().hex[:8]}"
    with connect(pg_server, scratch_db) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute(f'REVOKE CREATE ON DATABASE "{scratch_db}" FROM "{role}", PUBLIC')
    url = dbtools.socket_url(str(pg_server.socket_dir), scratch_db, user=role)
    with pytest.raises(DBAPIError) as raised:
        dbtools.upgrade(url)
    message = str(raised.value)
    assert "revision 0014 needs the btree_gin extension" in message, message
    assert "permission denied" in message, message
    assert "CREATE EXTENSION btree_gin; in this database" in message, message
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0013",)
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "ix_memory_chunk_terms_tsv" in names
        assert not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").fetchone()


def test_0016_lets_equal_text_be_a_chunk_at_another_start_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0016 keys chunks by (user, session, start_seq, text) and keeps the rows there are: the
    same text at another start is a chunk of its own, at the same start still a conflict. A
    downgrade keeps the oldest of equal texts in a session (its index rows go with the rest)
    and restores the old key."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0015")
    uid = uuid.uuid4()
    insert = (
        "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
        " end_seq, started_at, ended_at) VALUES (%s, 's1', %s, md5(%s), %s, %s, now(), now())"
        " ON CONFLICT DO NOTHING RETURNING id"
    )
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(insert, (uid, "User: yes", "User: yes", 1, 2))
        conn.execute(insert, (uid, "User: other", "User: other", 3, 3))
        assert conn.execute(insert, (uid, "User: yes", "User: yes", 4, 5)).fetchone() is None

    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)
        again = conn.execute(insert, (uid, "User: yes", "User: yes", 4, 5)).fetchone()
        assert again is not None
        conn.execute(
            "INSERT INTO memory_chunk_text_queue (chunk_id, user_id) VALUES (%s, %s)",
            (again[0], uid),
        )
        assert conn.execute(insert, (uid, "User: yes", "User: yes", 4, 5)).fetchone() is None

    dbtools.downgrade(url, "0015")
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute("SELECT content, start_seq FROM memory_chunks ORDER BY id").fetchall()
        assert rows == [("User: yes", 1), ("User: other", 3)]
        assert conn.execute("SELECT count(*) FROM memory_chunk_text_queue").fetchone() == (0,)
        assert conn.execute(insert, (uid, "User: yes", "User: yes", 7, 7)).fetchone() is None


def test_0017_keeps_separated_spellings_apart_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0017 adds memory_facts.unmerged_at (NULL for the rows there are) and replaces
    navi_fact_upsert: a dedupe write leaves a row with unmerged_at set visible. Its downgrade
    drops the column and restores the 0007 function, which merges the row again."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0016")
    uid = uuid.uuid4()
    upsert = (
        "SELECT action, id FROM navi_fact_upsert(%s, 'p', 'preferred_language', 'r:language',"
        " 'r', 'German', NULL, 'conversation', 70, NULL, NULL, NULL, true)"
    )
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, key_norm, value) "
            "VALUES (%s, 'p', 'language', 'r:language', 'English')",
            (uid,),
        )
    dbtools.upgrade(url)

    def visible(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT key FROM memory_facts WHERE merged_into IS NULL ORDER BY key"
        ).fetchall()

    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT unmerged_at FROM memory_facts").fetchall() == [(None,)]
        conn.execute("UPDATE memory_facts SET unmerged_at = now() WHERE key = 'language'")
        assert conn.execute(upsert, (uid,)).fetchone()[0] == "insert"  # type: ignore[index]
        assert visible(conn) == [("language",), ("preferred_language",)]
    dbtools.downgrade(url, "0016")
    with connect(pg_server, scratch_db) as conn:
        columns = conn.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'memory_facts' AND column_name = 'unmerged_at'"
        ).fetchall()
        assert columns == []
        assert conn.execute(upsert, (uid,)).fetchone()[0] == "verify"  # type: ignore[index]
        assert visible(conn) == [("preferred_language",)]  # the 0007 rule merges it again


def test_0018_adds_an_empty_embedding_model_table_of_one_row_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0018 creates memory_embedding_model empty (which model made the vectors there are is
    not known), holding at most one row; its downgrade drops it."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0017")
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT * FROM memory_embedding_model").fetchall() == []
        conn.execute("INSERT INTO memory_embedding_model (model) VALUES ('nomic-embed-text')")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO memory_embedding_model (id, model) VALUES (2, 'other')")
    dbtools.downgrade(url, "0017")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT to_regclass('memory_embedding_model')").fetchone() == (None,)


def test_0019_drops_the_legacy_scripts_ann_indexes_and_keeps_every_other_index(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """A legacy database that ran the original application's migrate_pgvector.py kept its
    HNSW index on memory_facts.embedding under the script's name: every fact write paid its
    insertion, and no navi-memory statement reads it. The upgrade drops every HNSW and IVFFlat
    index of memory_facts and memory_chunks (navi-memory's own live on the vector tables) and
    leaves the script's other indexes, and navi-memory's, where they are."""
    url = pg_server.url(scratch_db)
    with connect(pg_server, scratch_db) as conn:
        conn.execute(LEGACY_DDL)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        # What migrate_pgvector.py adds (the spec's "Schema migration"), under its own names.
        conn.execute("ALTER TABLE memory_facts ADD COLUMN embedding vector(768)")
        conn.execute(
            "CREATE INDEX memory_facts_embedding_idx ON memory_facts "
            "USING hnsw (embedding vector_cosine_ops)"
        )
        conn.execute(
            'CREATE INDEX "Facts IVF" ON memory_facts USING ivfflat (embedding vector_cosine_ops)'
        )
        conn.execute("CREATE INDEX memory_facts_category_idx ON memory_facts (category)")
    dbtools.upgrade(url, "0018")
    with connect(pg_server, scratch_db) as conn:
        before = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert {"memory_facts_embedding_idx", "Facts IVF"} <= before
    dbtools.upgrade(url, "0019")
    with connect(pg_server, scratch_db) as conn:
        after = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        ann = conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam WHERE a.amname IN ('hnsw', 'ivfflat') "
            "ORDER BY 1"
        ).fetchall()
    assert after == before - {"memory_facts_embedding_idx", "Facts IVF"}
    assert "memory_facts_category_idx" in after
    # navi-memory's own ANN indexes, on the vector tables, stay.
    assert ann == [
        ("ix_memory_chunk_vectors_embedding_hnsw",),
        ("ix_memory_fact_vectors_embedding_hnsw",),
    ]
    dbtools.downgrade(url, "0018")
    dbtools.upgrade(url)


def test_0020_drops_the_fact_vectors_graph_and_search_stays_exact(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0020 drops the HNSW graph of memory_fact_vectors (a global fact search scans the
    vectors exactly) and keeps the table, its rows and the chunk graph; its downgrade builds
    the fact graph again over the rows there are."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0019")
    uid = uuid.uuid4()
    unit = "[" + ",".join(["1"] + ["0"] * 767) + "]"
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, embedding) "
            "VALUES (%s, 'p', 'k', 'v', %s::vector)",
            (uid, unit),
        )
        conn.execute(
            "INSERT INTO memory_fact_vectors (fact_id, user_id, embedding) "
            "SELECT id, user_id, embedding::halfvec(768) FROM memory_facts"
        )

    def ann(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam WHERE a.amname IN ('hnsw', 'ivfflat') "
            "ORDER BY 1"
        ).fetchall()

    with connect(pg_server, scratch_db) as conn:
        assert ann(conn) == [
            ("ix_memory_chunk_vectors_embedding_hnsw",),
            ("ix_memory_fact_vectors_embedding_hnsw",),
        ]
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        assert ann(conn) == [("ix_memory_chunk_vectors_embedding_hnsw",)]
        assert conn.execute("SELECT count(*) FROM memory_fact_vectors").fetchone() == (1,)
    dbtools.downgrade(url, "0019")
    with connect(pg_server, scratch_db) as conn:
        assert ann(conn) == [
            ("ix_memory_chunk_vectors_embedding_hnsw",),
            ("ix_memory_fact_vectors_embedding_hnsw",),
        ]
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT fact_id FROM memory_fact_vectors "
            "ORDER BY embedding <=> %s::halfvec(768) LIMIT 1",
            (unit,),
        ).fetchall()
        assert any("ix_memory_fact_vectors_embedding_hnsw" in str(row[0]) for row in plan)
    dbtools.upgrade(url)


def test_0021_add_chunks_claims_the_session_id_as_a_create_does(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0021's navi_session_claim(sid) reads the session's owner under the id's lock, shared:
    a create's exclusive lock on the id cannot be taken meanwhile, another claim's can; the
    downgrade drops the function."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0020")
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute("INSERT INTO sessions (id, user_id) VALUES ('s1', %s)", (uid,))
    dbtools.upgrade(url, "0021")
    key = "hashtextextended('sessions.id:' || %s, 0)"
    with connect(pg_server, scratch_db) as claim, connect(pg_server, scratch_db) as other:
        claim.autocommit = False
        assert claim.execute("SELECT user_id FROM navi_session_claim('s1')").fetchall() == [(uid,)]
        assert claim.execute("SELECT * FROM navi_session_claim('nobody')").fetchall() == []
        for sid in ("s1", "nobody"):  # held until the claim's transaction ends
            assert other.execute(f"SELECT pg_try_advisory_xact_lock({key})", (sid,)).fetchone() == (
                False,
            )
            assert other.execute(
                f"SELECT pg_try_advisory_xact_lock_shared({key})", (sid,)
            ).fetchone() == (True,)
        claim.rollback()
        assert other.execute(f"SELECT pg_try_advisory_xact_lock({key})", ("s1",)).fetchone() == (
            True,
        )
    dbtools.downgrade(url, "0020")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT to_regproc('navi_session_claim')").fetchone() == (None,)
    dbtools.upgrade(url)


def test_0022_reads_a_chunks_text_from_its_first_120000_characters(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0022's navi_chunk_tsv gives 0006's tsvector for a chunk up to 120,000 characters, and
    one (not an error) for a chunk whose whole text passes a tsvector's 1 MB; the downgrade
    brings back the unbounded function."""
    url = pg_server.url(scratch_db)
    words = " ".join(f"w{i:06d}x" for i in range(120_000))  # 1.2 M characters, all distinct
    small = "User: harbor lantern keeper"
    same = "SELECT navi_chunk_tsv(%s, ARRAY['k']) = navi_text_tsv(%s || E'\\n' || 'k')"
    dbtools.upgrade(url, "0022")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute(same, (small, small)).fetchone() == (True,)
        size = conn.execute("SELECT length(navi_chunk_tsv(%s, ARRAY[]::text[]))", (words,))
        assert 0 < size.fetchone()[0] < 120_000  # type: ignore[index]
        # The breadcrumbs are bounded too, and the worst text measured (one-character words
        # of three-byte letters, ≈ 6 bytes a character) fits in both.
        cjk = " ".join(chr(0x4E00 + i % 20_000) for i in range(200_000))
        assert conn.execute(
            "SELECT length(navi_chunk_tsv(%s, ARRAY[%s, %s])) > 0", (cjk, words, cjk)
        ).fetchone() == (True,)
    dbtools.downgrade(url, "0021")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute(same, (small, small)).fetchone() == (True,)
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            conn.execute("SELECT navi_chunk_tsv(%s, ARRAY[]::text[])", (words,))
    dbtools.upgrade(url)


# The chunk text index's revisions (0023, 0024): where a chunk's row is, whether every stored
# tsvector and count is the current function's, which chunks (by breadcrumb) a query finds.


def seed_chunk_text(
    conn: psycopg.Connection[Any], uid: uuid.UUID, contents: dict[str, str]
) -> None:
    """One user whose document frequencies are kept (as for one of navi_chunk_df_from()
    chunks), a chunk of each of ``contents`` (its name its only breadcrumb), indexed by the
    database's current function — the one named "queued" left on the text queue with its
    tsvector made ahead."""
    conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
    conn.execute(
        "INSERT INTO memory_chunk_text_stats (user_id, chunks, lexemes, df_kept)"
        " VALUES (%s, 0, 0, true)",
        (uid,),
    )
    for i, (name, content) in enumerate(contents.items()):
        conn.execute(
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash,"
            " start_seq, end_seq, started_at, ended_at, breadcrumbs)"
            " VALUES (%s, 's1', %s, md5(%s), %s, %s, now(), now(), %s)",
            (uid, content, content, i, i, [name]),
        )
    conn.execute(
        "INSERT INTO memory_chunk_terms (chunk_id, user_id, session_id, ended_at, lexemes,"
        " tsv) SELECT id, user_id, session_id, ended_at, length(tsv), tsv FROM"
        " (SELECT *, navi_chunk_tsv(content, breadcrumbs) AS tsv FROM memory_chunks"
        "  WHERE breadcrumbs <> '{queued}') c"
    )
    conn.execute(
        "INSERT INTO memory_chunk_text_queue (chunk_id, user_id, tsv)"
        " SELECT id, user_id, navi_chunk_tsv(content, breadcrumbs) FROM memory_chunks"
        " WHERE breadcrumbs = '{queued}'"
    )


def chunk_ctid(conn: psycopg.Connection[Any], name: str) -> Any:
    return conn.execute(
        "SELECT t.ctid::text FROM memory_chunk_terms t JOIN memory_chunks c"
        " ON c.id = t.chunk_id WHERE c.breadcrumbs = ARRAY[%s]",
        (name,),
    ).fetchone()


def text_index_in_line(conn: psycopg.Connection[Any]) -> None:
    """Every stored tsvector is the current function's, and every count is theirs."""
    assert conn.execute(
        "SELECT count(*) FROM memory_chunk_terms t JOIN memory_chunks c ON c.id = t.chunk_id"
        " WHERE t.tsv <> navi_chunk_tsv(c.content, c.breadcrumbs)"
        " OR t.lexemes <> length(t.tsv)"
    ).fetchone() == (0,)
    assert conn.execute(
        "SELECT count(*) FROM memory_chunk_text_queue q JOIN memory_chunks c"
        " ON c.id = q.chunk_id WHERE q.tsv <> navi_chunk_tsv(c.content, c.breadcrumbs)"
    ).fetchone() == (0,)
    assert (
        conn.execute("SELECT chunks, lexemes FROM memory_chunk_text_stats").fetchone()
        == conn.execute("SELECT count(*), sum(lexemes) FROM memory_chunk_terms").fetchone()
    )
    kept = "SELECT lexeme, df FROM memory_chunk_lexeme_df ORDER BY 1"
    counted = (
        "SELECT l, count(*) FROM memory_chunk_terms, unnest(tsvector_to_array(tsv)) l"
        " GROUP BY l ORDER BY 1"
    )
    assert conn.execute(kept).fetchall() == conn.execute(counted).fetchall()


def found_by(conn: psycopg.Connection[Any], query: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.breadcrumbs[1] FROM memory_chunk_terms t JOIN memory_chunks c"
        " ON c.id = t.chunk_id WHERE t.tsv @@ navi_text_tsquery(%s) ORDER BY 1",
        (query,),
    ).fetchall()
    return [row[0] for row in rows]


def test_0023_remakes_only_the_tsvectors_it_reads_apart_and_their_counts_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Chunks indexed by 0022's function — one stored decomposed, one about C# — get 0023's
    tsvectors on the upgrade, in memory_chunk_terms and made ahead on the text queue, with the
    per-user statistics and a kept user's document frequencies in step; a chunk the two
    functions read alike keeps its row untouched. The downgrade makes them the old way again."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0022")
    uid = uuid.uuid4()
    contents = {
        "nfd": "Tool result (ls): Zu\u0308rich-itinerary.pdf",
        "sharp": "User: the service is written in C# on .NET 8",
        "celsius": "User: it is 20 °C outside in the city today",
        "queued": "User: the engine is written in C++ with templates",
    }
    with connect(pg_server, scratch_db) as conn:
        seed_chunk_text(conn, uid, contents)
        assert conn.execute("SELECT navi_text_tsquery('C#')").fetchone() == ("'c'",)

    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        untouched = chunk_ctid(conn, "celsius")
        moved = chunk_ctid(conn, "sharp")
        assert found_by(conn, "Z\u00fcrich") == []
        assert found_by(conn, "C#") == ["celsius", "sharp"]
    dbtools.upgrade(url, "0023")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert chunk_ctid(conn, "celsius") == untouched  # read alike: not rewritten
        assert chunk_ctid(conn, "sharp") != moved
        assert found_by(conn, "Z\u00fcrich") == found_by(conn, "Zu\u0308rich") == ["nfd"]
        assert found_by(conn, "C#") == ["sharp"]
        assert found_by(conn, "°C") == ["celsius"]
        assert conn.execute(
            "SELECT q.tsv @@ navi_text_tsquery('C++') FROM memory_chunk_text_queue q"
        ).fetchone() == (True,)
        df = dict(conn.execute("SELECT lexeme, df FROM memory_chunk_lexeme_df").fetchall())
        assert df["csharp"] == 1 and df["c"] == 1 and "zu\u0308rich-itinerary.pdf" not in df
    dbtools.downgrade(url, "0022")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert found_by(conn, "C#") == ["celsius", "sharp"]
        assert found_by(conn, "Z\u00fcrich") == []
        spelling = conn.execute("SELECT to_regprocedure('navi_text_spelling(text)')")
        assert spelling.fetchone() == (None,)
    dbtools.upgrade(url)


def test_0024_adds_the_parts_of_compound_words_and_the_stems_of_words_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Chunks indexed by 0023's function: "settings", "readme", "bob" and "node" found nothing
    (the parser keeps "settings.py", "README.md", "bob@example.com", "node.js" whole), nor did
    "deploy" find "deployed". After 0024 they find them — indexed, and made ahead on the text
    queue —, the whole still finds them, statistics and kept frequencies are in step, a chunk
    with neither keeps its row; the downgrade makes them the old way again."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0023")
    uid = uuid.uuid4()
    contents = {
        "files": "User: edit settings.py and README.md, e.g. now",
        "mail": "User: mail bob@example.com about it",
        "plain": "User: ok, 42",
        "stems": "User: I deployed the builds",
        "queued": "User: rewrite it in node.js",
    }
    with connect(pg_server, scratch_db) as conn:
        seed_chunk_text(conn, uid, contents)
        text_index_in_line(conn)
        untouched = chunk_ctid(conn, "plain")
        words = ("settings", "readme", "bob", "deploy", "build")
        assert [found_by(conn, word) for word in words] == [[]] * len(words)
    dbtools.upgrade(url, "0024")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert chunk_ctid(conn, "plain") == untouched
        assert found_by(conn, "settings") == found_by(conn, "README") == ["files"]
        assert found_by(conn, "settings.py") == ["files"]
        assert found_by(conn, "bob") == found_by(conn, "example") == ["mail"]
        assert found_by(conn, "deploy") == found_by(conn, "build") == ["stems"]
        assert found_by(conn, "deploying") == ["stems"]  # by the stem both hold
        assert conn.execute(
            "SELECT q.tsv @@ navi_text_tsquery('node') FROM memory_chunk_text_queue q"
        ).fetchone() == (True,)
        df = dict(conn.execute("SELECT lexeme, df FROM memory_chunk_lexeme_df").fetchall())
        assert df["settings"] == df["settings.py"] == 1

        # The candidates' tsquery leaves a compound's stop-word and one-letter parts out,
        # unless they are all a term has.
        def asked(*terms: str) -> set[str]:
            row = conn.execute(
                "SELECT CAST(navi_terms_tsquery(%s) AS text)", (list(terms),)
            ).fetchone()
            assert row is not None
            return {operand.strip("'") for operand in row[0].split(" | ")}

        assert asked("rock-and-roll", "me@example.com") == {
            "rock-and-roll",
            "rock",
            "roll",
            "me@example.com",
            "example",
            "exampl",  # the part's stem
            "com",
        }
        assert asked("the", "of") == {"the", "of"}
        assert asked("deployed") == {"deployed", "deploy"}
        # Past 20,000 characters of parts a host gets none, but no part is cut in two.
        hosts = [f"h{i}x.ex{i}.com" for i in range(3_000)]
        lexemes = conn.execute(
            "SELECT tsvector_to_array(navi_text_tsv(%s))", (" ".join(hosts),)
        ).fetchone()
        assert lexemes is not None
        parts = set(lexemes[0]) - set(hosts)
        whole_parts = {part for host in hosts for part in host.split(".")}
        assert 1_000 < len(parts) < len(whole_parts) and parts <= whole_parts
    dbtools.downgrade(url, "0023")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert found_by(conn, "settings") == found_by(conn, "deploy") == []
        for name in ("navi_text_parts", "navi_text_stems"):
            function = conn.execute("SELECT to_regprocedure(%s)", (f"{name}(tsvector)",))
            assert function.fetchone() == (None,)
    dbtools.upgrade(url)


SPEC_CHUNKS_DDL = """
CREATE TABLE memory_chunks (
    id serial primary key,
    user_id uuid references navi_users(id) on delete cascade,
    session_id text NOT NULL, content text NOT NULL, content_hash text NOT NULL,
    created_at timestamptz DEFAULT now(),
    unique (session_id, content_hash));
CREATE INDEX ix_memory_chunks_user_id ON memory_chunks (user_id);
"""
"""The spec's storage section has a fourth table of the original application's, its raw history
(unique on session_id, content_hash; no foreign key on the session). Its index is named as
navi-memory names its own."""


def test_a_legacy_database_with_its_own_chunks_and_a_keyed_summary_is_adopted(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """The original application's memory_chunks (and sequence, and an index whose name navi-memory
    uses too) is set aside as memory_chunks_legacy with every row, and a summary table keyed by
    user loses that key for navi-memory's: `alembic upgrade head` completes (it stopped at 0001
    with "relation memory_chunks already exists", then "multiple primary keys"), new chunks go
    into navi-memory's table, and the way down puts the legacy table back."""
    alice = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute(
            LEGACY_DDL.replace(
                "CREATE TABLE memory_summary (user_id uuid,",
                "CREATE TABLE memory_summary (user_id uuid primary key,",
            )
        )
        conn.execute(SPEC_CHUNKS_DDL)
        conn.execute("INSERT INTO navi_users (id, name) VALUES (%s, 'alice')", (alice,))
        conn.execute(
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash) VALUES "
            "(%s, 's1', 'User: the old app kept this', 'h1'), (%s, 's1', 'and this', 'h2')",
            (alice, alice),
        )
        conn.execute("INSERT INTO memory_summary VALUES (%s, 'alice likes tea', now())", (alice,))

    dbtools.upgrade(pg_server.url(scratch_db))

    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT content FROM memory_chunks_legacy ORDER BY id").fetchall() == [
            ("User: the old app kept this",),
            ("and this",),
        ]
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (0,)
        assert conn.execute("SELECT user_id, content FROM memory_summary").fetchall() == [
            (alice, "alice likes tea")
        ]
        conn.execute(
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
            " end_seq, started_at, ended_at) VALUES (%s, 's1', 'new', 'h1', 1, 1, now(), now())",
            (alice,),
        )
        assert conn.execute(
            "SELECT count(*) FROM memory_chunks_legacy WHERE user_id = %s", (alice,)
        ).fetchone() == (2,)
    dbtools.downgrade(pg_server.url(scratch_db), "0001")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)
        assert conn.execute("SELECT to_regclass('memory_chunks_legacy')").fetchone() == (None,)
    # All the way down: the legacy chunks' foreign key to navi_users stopped the drop of
    # navi_users ("other objects depend on it"), leaving the database at 0001.
    dbtools.downgrade(pg_server.url(scratch_db), "base")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone() == (0,)
        for table in ("navi_users", "memory_facts", "memory_summary", "session_memory_state"):
            assert conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,)
        # The original application's own table, put back by 0002's downgrade, is not one of
        # the four 0001 adopted: it stays, with its rows, without its key to navi_users.
        assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)


def test_tables_set_aside_are_the_migrated_schemas_only(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """With navi-memory's schema first on the search path, a `sessions` table of another
    application in `public` is not navi-memory's to set aside: it stays as it is, and the
    migration (which once failed on a hard-coded `public.memory_summary`) completes."""
    with connect(pg_server, scratch_db) as conn:
        conn.execute("CREATE SCHEMA app")
        conn.execute(f'ALTER DATABASE "{scratch_db}" SET search_path = app, public')
        conn.execute("CREATE TABLE public.sessions (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO public.sessions VALUES (1, 'not navi-memory''s')")

    dbtools.upgrade(pg_server.url(scratch_db))

    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT * FROM public.sessions").fetchall() == [
            (1, "not navi-memory's")
        ]
        assert conn.execute("SELECT to_regclass('public.sessions_legacy')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM app.sessions").fetchone() == (0,)


def test_0024s_stop_words_are_the_packages() -> None:
    """0024 leaves the stop words out of the stems of the chunks' tsvectors and out of a query's
    compounds (navi_term_lexemes), from its own copy of the list (a revision is a snapshot);
    query_terms drops the package's. When that list changes, the stored tsvectors do not, and
    a new revision must make them again (this test says when)."""
    import importlib.util

    path = dbtools.ROOT / "alembic" / "versions" / "0024_chunk_text_parts.py"
    spec = importlib.util.spec_from_file_location("revision_0024", path)
    assert spec is not None and spec.loader is not None
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    assert set(revision._STOP_WORDS) == STOP_WORDS


def test_0028_finds_whose_rows_a_session_id_holds_and_a_failed_downgrade_keeps_it(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0028's navi_session_held_by_others(sid, uid): chunks, kv entries or extraction state of
    another user under the id (legacy state of no user does not count). A downgrade that fails
    at an index drop (a lock it cannot get) leaves the version at 0028 with the function that
    code at 0028 calls; a full downgrade drops both indexes and the function."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0028")
    alice, bob = uuid.uuid4(), uuid.uuid4()
    held = "SELECT navi_session_held_by_others(%s, %s)"
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s), (%s)", (alice, bob))
        conn.execute(
            "INSERT INTO memory_chunks (user_id, session_id, content, content_hash, start_seq,"
            " end_seq, started_at, ended_at) VALUES (%s, 'c', 'x', 'h', 1, 2, now(), now())",
            (bob,),
        )
        conn.execute(
            "INSERT INTO kv_store (user_id, scope, session_id, key, value)"
            " VALUES (%s, 'scratchpad', 'k', 'plan', 'v')",
            (bob,),
        )
        conn.execute(
            "INSERT INTO session_memory_state (session_id, user_id) VALUES ('m', %s)", (bob,)
        )
        conn.execute("INSERT INTO session_memory_state (session_id) VALUES ('legacy')")
        for sid, expected in (
            ("c", True),
            ("k", True),
            ("m", True),
            ("legacy", False),
            ("n", False),
        ):
            assert conn.execute(held, (sid, alice)).fetchone() == (expected,), sid
            assert conn.execute(held, (sid, bob)).fetchone() == (False,), sid
        conn.execute(f"ALTER DATABASE {scratch_db} SET lock_timeout = '300ms'")
    with connect(pg_server, scratch_db) as blocker:
        blocker.autocommit = False
        blocker.execute("LOCK TABLE kv_store IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(Exception, match="lock timeout"):
            dbtools.downgrade(url, "0027")
        blocker.rollback()
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0028",)
        assert conn.execute("SELECT to_regproc('navi_session_held_by_others')").fetchone() != (
            None,
        )
        conn.execute(f"ALTER DATABASE {scratch_db} RESET lock_timeout")
    dbtools.downgrade(url, "0027")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT to_regproc('navi_session_held_by_others')").fetchone() == (
            None,
        )
        names = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE indexname LIKE %s", ("%session_id_user_id",)
            )
        }
        assert names == set()
    dbtools.upgrade(url)


def test_0029_buckets_session_ids_and_its_claim_reads_the_sessions_row(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0029: navi_session_bucket_key spreads ids over 256 keys (one key an id, every time);
    navi_session_held_by_others also counts another user's ``sessions`` row, and waits while
    an import holds the id's bucket. A downgrade puts back 0028's function."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0029")
    alice, bob = uuid.uuid4(), uuid.uuid4()
    held = "SELECT navi_session_held_by_others(%s, %s)"
    with connect(pg_server, scratch_db) as conn:
        keys = conn.execute(
            "SELECT count(DISTINCT navi_session_bucket_key('s-' || i)),"
            " bool_and(navi_session_bucket_key('s-' || i) = navi_session_bucket_key('s-' || i))"
            " FROM generate_series(1, 20000) i"
        ).fetchone()
        assert keys == (256, True)
        conn.execute("INSERT INTO navi_users (id) VALUES (%s), (%s)", (alice, bob))
        conn.execute("INSERT INTO sessions (id, user_id) VALUES ('s', %s)", (bob,))
        assert conn.execute(held, ("s", alice)).fetchone() == (True,)
        assert conn.execute(held, ("s", bob)).fetchone() == (False,)
    with connect(pg_server, scratch_db) as importer, connect(pg_server, scratch_db) as claimer:
        importer.autocommit = False
        importer.execute("SELECT pg_advisory_xact_lock(navi_session_bucket_key('new'))")
        claimer.execute("SET lock_timeout = '200ms'")
        with pytest.raises(Exception, match="lock timeout"):
            claimer.execute(held, ("new", alice))
        importer.rollback()
        assert claimer.execute(held, ("new", alice)).fetchone() == (False,)
    dbtools.downgrade(url, "0028")
    with connect(pg_server, scratch_db) as conn:
        assert conn.execute("SELECT to_regproc('navi_session_bucket_key')").fetchone() == (None,)
        assert conn.execute(held, ("s", alice)).fetchone() == (False,)  # 0028 read no sessions
    dbtools.upgrade(url)


def test_0031_the_upsert_returns_unmerged_at_and_a_downgrade_puts_back_0027s(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """0031 changes navi_fact_upsert's result type (drop and create): the written row's
    unmerged_at comes back; a downgrade restores the result without it."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0031")
    uid = uuid.uuid4()
    upsert = (
        "SELECT * FROM navi_fact_upsert(%s, 'p', 'k', 'r:k', 'r', 'v', NULL, 'conversation',"
        " 70, NULL, NULL, NULL, false)"
    )
    columns = (
        "SELECT array_agg(a ORDER BY o) FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY"
        " AS x(a, o) WHERE p.proname = 'navi_fact_upsert'"
    )
    with connect(pg_server, scratch_db) as conn:
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(upsert, (uid,))
        conn.execute(
            "UPDATE memory_facts SET unmerged_at = '2026-12-01Z' WHERE user_id = %s", (uid,)
        )
        cursor = conn.execute(upsert, (uid,))
        row = cursor.fetchone()
        assert row is not None and cursor.description is not None
        names = [column.name for column in cursor.description]
        assert row[names.index("action")] == "verify"
        assert str(row[names.index("unmerged_at")]).startswith("2026-12-01")
    dbtools.downgrade(url, "0030")
    with connect(pg_server, scratch_db) as conn:
        (args,) = conn.execute(columns).fetchone() or (None,)
        assert args is not None and "unmerged_at" not in args and "has_embedding" in args
    dbtools.upgrade(url)


def test_0032_parts_latin_words_from_unspaced_letters_in_the_stored_tsvectors_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Chunks indexed by 0023's spelling: "python", "8099" and "nginx" written against Han,
    Hangul or Thai letters were inside one lexeme. After 0032 those words are lexemes —
    indexed, and made ahead on the text queue —, the runs of those letters stay whole,
    statistics and kept frequencies are in step, an ASCII chunk and a chunk of Chinese alone
    keep their rows; the downgrade makes them the old way again."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0031")
    uid = uuid.uuid4()
    contents = {
        "han": "User: 我用Python写的爬虫，端口8099",
        "hangul": "User: 서버nginx설정",
        "ascii": "User: python on port 8099",
        "chinese": "用户：今天天气不错",
        "queued": "User: ใช้Pythonเขียน",
        # A KEYS line's item is kept verbatim, and every chunk of a compression carries it.
        "nginx端口": "User: ok, ship it",
    }
    with connect(pg_server, scratch_db) as conn:
        seed_chunk_text(conn, uid, contents)
        text_index_in_line(conn)
        untouched = {name: chunk_ctid(conn, name) for name in ("ascii", "chinese")}
        assert found_by(conn, "python") == found_by(conn, "8099") == ["ascii"]
        assert found_by(conn, "nginx") == []
    dbtools.upgrade(url, "0032")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert {name: chunk_ctid(conn, name) for name in untouched} == untouched
        assert found_by(conn, "python") == ["ascii", "han"]
        assert found_by(conn, "8099") == ["ascii", "han"]
        assert set(found_by(conn, "nginx")) == {"hangul", "nginx端口"}
        assert conn.execute(
            "SELECT q.tsv @@ navi_text_tsquery('python') FROM memory_chunk_text_queue q"
        ).fetchone() == (True,)
        lexemes = conn.execute("SELECT tsvector_to_array(navi_text_tsv('我用Python写的 用C#写'))")
        assert lexemes.fetchone() == (["csharp", "python", "写", "写的", "我用", "用"],)
        df = dict(conn.execute("SELECT lexeme, df FROM memory_chunk_lexeme_df").fetchall())
        assert df["python"] == 2 and df["用户"] == 1 and "서버nginx설정" not in df
    dbtools.downgrade(url, "0031")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert found_by(conn, "python") == ["ascii"]
        assert found_by(conn, "nginx") == []
    dbtools.upgrade(url)


def holding_all(conn: psycopg.Connection[Any], term: str) -> list[str]:
    """The chunks holding every lexeme of ``term`` (the hit of a query term)."""
    rows = conn.execute(
        "SELECT c.breadcrumbs[1] FROM memory_chunk_terms t JOIN memory_chunks c"
        " ON c.id = t.chunk_id WHERE t.tsv @@ (SELECT CAST(string_agg(quote_literal(l), ' & ')"
        " AS tsquery) FROM unnest(tsvector_to_array(navi_text_tsv(%s))) l) ORDER BY 1",
        (term,),
    ).fetchall()
    return [row[0] for row in rows]


def test_0035_joins_numbers_with_thousands_separators_in_the_stored_tsvectors_and_back(
    pg_server: dbtools.EmbeddedServer, scratch_db: str
) -> None:
    """Chunks indexed by 0032's spelling: "$1,234.50" was the lexemes 1 and 234.50, which a
    chunk saying "$1 and 234.50" held too. After 0035 the amount is one lexeme, in the stored
    tsvectors and those made ahead on the text queue, with the statistics and kept
    frequencies in step; a list of numbers, a chunk without one and a decimal comma keep their
    rows; the downgrade makes them the old way again."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0034")
    uid = uuid.uuid4()
    contents = {
        "invoice": "User: the invoice total was $1,234.50 last month",
        "apart": "User: paid $1 and 234.50 euros",
        "ports": "User: open ports 8080,8081 and 1,2345",
        "plain": "User: nothing to see here, really",
        "decimal": "User: it weighs 4,5 kg",
        "queued": "User: the budget is 1,200,000 a year",
    }
    with connect(pg_server, scratch_db) as conn:
        seed_chunk_text(conn, uid, contents)
        text_index_in_line(conn)
        untouched = {name: chunk_ctid(conn, name) for name in ("ports", "plain", "decimal")}
        assert holding_all(conn, "1,234.50") == ["apart", "invoice"]
        assert holding_all(conn, "1234.50") == []
    dbtools.upgrade(url, "0035")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert {name: chunk_ctid(conn, name) for name in untouched} == untouched
        assert holding_all(conn, "1,234.50") == holding_all(conn, "1234.50") == ["invoice"]
        assert holding_all(conn, "8081") == holding_all(conn, "2345") == ["ports"]
        assert conn.execute(
            "SELECT q.tsv @@ navi_text_tsquery('1200000') FROM memory_chunk_text_queue q"
        ).fetchone() == (True,)
        lexemes = conn.execute(
            "SELECT tsvector_to_array(navi_text_tsv('x1,234 3.1,234 -12,345 端口1,234'))"
        )
        assert lexemes.fetchone() == (["-12345", "1234", "234", "3.1", "x1", "端口"],)
        df = dict(conn.execute("SELECT lexeme, df FROM memory_chunk_lexeme_df").fetchall())
        assert df["1234.50"] == 1 and df["1"] == 2 and df["234.50"] == 1  # apart, ports
    dbtools.downgrade(url, "0034")
    with connect(pg_server, scratch_db) as conn:
        text_index_in_line(conn)
        assert holding_all(conn, "1,234.50") == ["apart", "invoice"]
    dbtools.upgrade(url)


# Legacy databases whose facts columns allow NULL, or whose embedding column is of another
# width (the original application's CREATE TABLE and migrate script left both open).

NULLABLE_LEGACY_DDL = LEGACY_DDL.replace(
    "category text NOT NULL, key text NOT NULL, value text NOT NULL",
    "category text, key text, value text",
)


def vector_text(width: int, start: float = 0.1) -> str:
    return "[" + ",".join(str(start + i * 1e-4) for i in range(width)) + "]"


def test_a_legacy_fact_without_a_category_key_or_value_is_kept_and_readable(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    """0002 kept the NULLs and the columns nullable: one such fact made its user's listing,
    search and export fail. Each gets a key, a value or the category "general" (a duplicate
    it makes is merged, newest visible), and the schema is a fresh database's."""
    uid = uuid.uuid4()
    assert NULLABLE_LEGACY_DDL != LEGACY_DDL
    with connect(pg_server, scratch_db) as conn:
        conn.execute(NULLABLE_LEGACY_DDL)
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value, updated_at) VALUES"
            " (%s, 'a', 'k', NULL, now()), (%s, NULL, 'editor', 'vim', now() - interval '1 day'),"
            " (%s, 'general', 'editor', 'helix', now()), (%s, 'a', NULL, 'v1', now()),"
            " (%s, 'a', NULL, 'v2', now())",
            (uid,) * 5,
        )
    dbtools.upgrade(pg_server.url(scratch_db))
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute(
            "SELECT category, key, value, merged_into IS NOT NULL FROM memory_facts ORDER BY id"
        ).fetchall()
        ids = [r[0] for r in conn.execute("SELECT id FROM memory_facts ORDER BY id").fetchall()]
        nullable = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memory_facts'"
            " AND column_name IN ('category', 'key', 'value') AND is_nullable = 'YES'"
        ).fetchall()
    assert rows == [
        ("a", "k", "", False),
        ("general", "editor", "vim", True),  # the older of two "general/editor": hidden
        ("general", "editor", "helix", False),
        ("a", f"unnamed_{ids[3]}", "v1", False),  # two facts without a key stay two
        ("a", f"unnamed_{ids[4]}", "v2", False),
    ]
    assert nullable == []

    async def read() -> list[str]:
        settings = make_settings(pg_server.url(scratch_db), fake_ollama)
        async with open_memory(settings, embedder=False) as memory:
            listed = await memory.store.get_all_facts(user_id=uid)
            found = await memory.store.search_facts("v1", user_id=uid)
            assert [f.value for f in found][:1] == ["v1"]
            return sorted(f.value for f in listed)

    assert asyncio.run(read()) == ["", "helix", "v1", "v2"]


@pytest.mark.parametrize(("column", "widths"), [("vector", (384, 768)), ("vector(1024)", (1024,))])
def test_a_legacy_embedding_column_of_another_width_becomes_vector_768(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, column: str, widths: tuple[int, ...]
) -> None:
    """A `vector` column stopped 0002 ("column does not have dimensions"), a `vector(1024)` one
    with rows 0007 — half migrated; without rows it reached head and every fact write failed.
    The column is vector(768) now: vectors 768 wide kept, the others cleared for backfill."""
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(LEGACY_DDL)
        conn.execute(f"ALTER TABLE memory_facts ADD COLUMN embedding {column}")
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        for width in widths:
            conn.execute(
                "INSERT INTO memory_facts (user_id, category, key, value, embedding)"
                " VALUES (%s, 'a', %s, 'v', CAST(%s AS vector))",
                (uid, f"k{width}", vector_text(width)),
            )
    dbtools.upgrade(pg_server.url(scratch_db))
    with connect(pg_server, scratch_db) as conn:
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'memory_facts'::regclass AND attname = 'embedding'"
        ).fetchone()
        kept = conn.execute(
            "SELECT key, vector_dims(embedding) FROM memory_facts ORDER BY key"
        ).fetchall()
    assert kind == ("vector(768)",)
    assert kept == [(f"k{w}", 768 if w == 768 else None) for w in widths]


def test_0034_repairs_a_database_0002_adopted_before(
    pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    """A database adopted by the old 0002 (nullable columns with NULLs, an embedding column of
    another width) is repaired at 0034: a fact write works, the NULL-category row that would
    collide with a visible "general" row is hidden behind it."""
    url = pg_server.url(scratch_db)
    dbtools.upgrade(url, "0033")
    uid = uuid.uuid4()
    with connect(pg_server, scratch_db) as conn:
        conn.execute(
            "ALTER TABLE memory_facts ALTER COLUMN category DROP NOT NULL,"
            " ALTER COLUMN key DROP NOT NULL, ALTER COLUMN value DROP NOT NULL"
        )
        # As the old 0002 left such a column: its type kept from the legacy script, the
        # triggers of later revisions made over it.
        triggers = [
            row[0]
            for row in conn.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
                " WHERE tgrelid = 'memory_facts'::regclass AND NOT tgisinternal"
            ).fetchall()
        ]
        assert triggers
        for name in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memory_facts'::regclass"
            " AND NOT tgisinternal"
        ).fetchall():
            conn.execute(f'DROP TRIGGER "{name[0]}" ON memory_facts')
        conn.execute("ALTER TABLE memory_facts ALTER COLUMN embedding TYPE vector(1024)")
        for trigger in triggers:
            conn.execute(trigger)
        conn.execute("INSERT INTO navi_users (id) VALUES (%s)", (uid,))
        general = conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) VALUES"
            " (%s, 'general', 'editor', 'helix') RETURNING id",
            (uid,),
        ).fetchone()
        conn.execute(
            "INSERT INTO memory_facts (user_id, category, key, value) VALUES"
            " (%s, NULL, 'editor', 'vim'), (%s, 'a', NULL, NULL)",
            (uid, uid),
        )
    dbtools.upgrade(url)
    with connect(pg_server, scratch_db) as conn:
        rows = conn.execute(
            "SELECT category, key LIKE 'unnamed_%%', value, merged_into FROM memory_facts"
            " ORDER BY id"
        ).fetchall()
        kept = conn.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE tgrelid = 'memory_facts'::regclass AND NOT tgisinternal"
        ).fetchall()
    assert sorted(row[0] for row in kept) == sorted(triggers)
    assert general is not None
    assert rows == [
        ("general", False, "helix", None),
        ("general", False, "vim", general[0]),
        ("a", True, "", None),
    ]

    async def write() -> bool:
        settings = make_settings(url, fake_ollama)
        async with open_memory(settings) as memory:
            fact = await memory.store.upsert_fact("tools", "shell", "fish", user_id=uid)
            return fact.has_embedding

    assert asyncio.run(write())
