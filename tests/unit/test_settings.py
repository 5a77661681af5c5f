"""Settings: environment names, defaults, and the EMBEDDING_OLLAMA_* -> OLLAMA_* fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from navi_memory import Settings
from navi_memory.config import default_data_dir, load_settings
from navi_memory.errors import ConfigError


def settings_from(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings(_env_file=None)


def test_defaults_are_the_documented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings_from(monkeypatch)
    assert s.database_url is None
    assert s.ollama_host == "http://127.0.0.1:11434"
    assert s.embedding_model == "nomic-embed-text:latest"
    assert s.embedding_document_prefix == "search_document: "
    assert s.embedding_query_prefix == "search_query: "
    assert (s.memory_recall_k, s.memory_recall_min_similarity) == (2, 0.55)
    assert s.memory_prompt_max_facts == 50
    assert (s.memory_stale_minutes, s.backfill_batch_size, s.backfill_pause_seconds) == (30, 8, 2.0)
    assert (s.chunk_max_chars, s.chunk_message_max_chars) == (4000, 12000)
    assert s.memory_search_enabled and s.memory_recall_enabled


def test_environment_names_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = settings_from(
        monkeypatch,
        DATABASE_URL="postgresql://u:p@db/navi",
        NAVI_MEMORY_DATA_DIR=str(tmp_path),
        EMBEDDING_MODEL="other-embed",
        MEMORY_SEARCH_ENABLED="false",
        MEMORY_RECALL_K="5",
        MEMORY_PROMPT_MAX_FACTS="9",
        BACKFILL_PAUSE_SECONDS="0",
        MEMORY_COMPRESS_KEEP_LAST="7",
    )
    assert s.database_url == "postgresql://u:p@db/navi"
    assert s.navi_memory_data_dir == tmp_path
    assert s.embedding_model == "other-embed"
    assert s.memory_search_enabled is False
    assert (s.memory_recall_k, s.backfill_pause_seconds, s.memory_compress_keep_last) == (5, 0, 7)
    assert s.memory_prompt_max_facts == 9


def test_empty_embedding_host_falls_back_to_ollama_host_and_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = settings_from(
        monkeypatch,
        OLLAMA_HOST="https://ollama.example/",
        OLLAMA_API_KEY="cloud-key",
        EMBEDDING_OLLAMA_HOST="",
        EMBEDDING_OLLAMA_API_KEY="ignored-without-its-host",
    )
    assert s.embedding_host == "https://ollama.example"
    assert s.embedding_api_key == "cloud-key"


def test_a_dedicated_embedding_host_keeps_its_own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings_from(
        monkeypatch,
        OLLAMA_HOST="https://ollama.example",
        OLLAMA_API_KEY="cloud-key",
        EMBEDDING_OLLAMA_HOST="http://192.168.1.168:11434",
    )
    assert s.embedding_host == "http://192.168.1.168:11434"
    assert s.embedding_api_key == ""


def test_malformed_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="memory_recall_k"):
        settings_from(monkeypatch, MEMORY_RECALL_K="lots")
    with pytest.raises(ValidationError, match="backfill_batch_size"):
        settings_from(monkeypatch, BACKFILL_BATCH_SIZE="0")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # a chunk bigger than add_chunks stores: its text index entry may pass PostgreSQL's 1 MB
        ("CHUNK_MAX_CHARS", "100001"),
        ("CHUNK_MESSAGE_MAX_CHARS", "1000000"),
        # accepted, then every compress() failed on it
        ("MEMORY_COMPRESS_KEEP_LAST", "2147483648"),
    ],
)
def test_values_the_store_cannot_use_are_refused_when_read(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    with pytest.raises(ValidationError, match=name.lower()):
        settings_from(monkeypatch, **{name: value})


def test_the_largest_chunk_sizes_are_the_largest_chunk_add_chunks_stores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = settings_from(monkeypatch, CHUNK_MAX_CHARS="100000", CHUNK_MESSAGE_MAX_CHARS="100000")
    assert (s.chunk_max_chars, s.chunk_message_max_chars) == (100_000, 100_000)


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_url_or_data_dir_is_unset(monkeypatch: pytest.MonkeyPatch, empty: str) -> None:
    """DATABASE_URL= and NAVI_MEMORY_DATA_DIR= (a .env line left empty) mean the defaults: the
    embedded server in the default data directory — not a URL of nothing, not the current
    directory (a new empty cluster wherever a process starts)."""
    s = settings_from(monkeypatch, DATABASE_URL=empty, NAVI_MEMORY_DATA_DIR=empty)
    assert s.database_url is None
    assert s.navi_memory_data_dir == default_data_dir()
    assert s.navi_memory_data_dir.is_absolute()


def test_root_keeps_the_embedded_data_out_of_its_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert default_data_dir() == Path("/var/lib/navi-memory")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert default_data_dir().name == "navi-memory"
    assert default_data_dir() != Path("/var/lib/navi-memory")


def test_more_chunk_indexers_than_the_pool_can_serve_are_refused_by_name() -> None:
    assert load_settings(chunk_index_workers=4).chunk_index_workers == 4
    with pytest.raises(ConfigError, match=r"CHUNK_INDEX_WORKERS=16 .* = 15") as refused:
        load_settings(chunk_index_workers=16)
    assert "settings=" not in str(refused.value)
    assert (
        load_settings(
            chunk_index_workers=16, db_pool_size=10, db_max_overflow=10
        ).chunk_index_workers
        == 16
    )
