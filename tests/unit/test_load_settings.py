"""load_settings(): a malformed setting is one ConfigError line naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from navi_memory.config import load_settings
from navi_memory.errors import ConfigError


def test_a_malformed_setting_is_named_with_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """DB_POOL_SIZE=abc gives a ConfigError that names DB_POOL_SIZE and the value, on one line."""
    monkeypatch.setenv("DB_POOL_SIZE", "abc")
    monkeypatch.setenv("MEMORY_RECALL_K", "99")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert "DB_POOL_SIZE='abc'" in message and "MEMORY_RECALL_K='99'" in message
    assert "\n" not in message


def test_good_settings_load_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Well-formed values come through; keyword overrides win over the environment."""
    monkeypatch.setenv("DB_POOL_SIZE", "7")
    assert load_settings(_env_file=None).db_pool_size == 7
    assert load_settings(_env_file=None, db_pool_size=3).db_pool_size == 3


def test_a_synchronous_commit_value_the_server_does_not_take_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DB_SYNCHRONOUS_COMMIT is checked before any connection: a typo is not sent to the
    server as a startup parameter (which would refuse every connection)."""
    monkeypatch.setenv("DB_SYNCHRONOUS_COMMIT", "sometimes")
    with pytest.raises(ConfigError, match="DB_SYNCHRONOUS_COMMIT='sometimes'"):
        load_settings(_env_file=None)
    monkeypatch.setenv("DB_SYNCHRONOUS_COMMIT", "off")
    assert load_settings(_env_file=None).db_synchronous_commit == "off"


@pytest.mark.parametrize(
    "name", ["database_url", "ollama_api_key", "embedding_ollama_api_key", "ollama_host"]
)
def test_a_malformed_secret_bearing_setting_is_named_without_its_value(name: str) -> None:
    """The value of a setting that may hold a password or a key is never echoed."""
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None, **{name: 987654321})
    message = str(caught.value)
    assert name.upper() in message and "987654321" not in message


def test_printing_the_settings_shows_no_secret() -> None:
    """repr() and str() of Settings (a log line, a debugger, an f-string) hide the API keys
    and the passwords in DATABASE_URL and the host URLs; the rest stays readable."""
    settings = load_settings(
        _env_file=None,
        database_url="postgresql+asyncpg://navi:DB-PASS@db.example:5432/navi",
        ollama_api_key="OLLAMA-KEY",
        ollama_host="https://bob:HOST-PASS@ollama.example",
        embedding_ollama_host="http://emb.example:11434",
        embedding_ollama_api_key="EMB-KEY",
    )
    for shown in (repr(settings), str(settings), f"{settings}"):
        for secret in ("DB-PASS", "OLLAMA-KEY", "HOST-PASS", "EMB-KEY"):
            assert secret not in shown, (secret, shown)
        assert "db.example:5432/navi" in shown and "bob:***@ollama.example" in shown
        assert "http://emb.example:11434" in shown and "db_pool_size=5" in shown
    assert settings.ollama_api_key == "OLLAMA-KEY"  # the values themselves are untouched
    assert "DB-PASS" in (settings.database_url or "")


def test_a_stale_time_postgresql_cannot_take_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MEMORY_STALE_MINUTES goes to make_interval() as a PostgreSQL integer: 2**31 loaded fine
    and failed every extraction (and every background sweep of sessions.create) with a
    StorageError about make_interval(..., bigint). It is a ConfigError naming it now."""
    monkeypatch.setenv("MEMORY_STALE_MINUTES", str(2**31))
    with pytest.raises(ConfigError, match="MEMORY_STALE_MINUTES='2147483648'"):
        load_settings(_env_file=None)
    monkeypatch.setenv("MEMORY_STALE_MINUTES", str(2**31 - 1))
    assert load_settings(_env_file=None).memory_stale_minutes == 2**31 - 1


def test_a_graph_threshold_postgresql_cannot_take_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CHUNK_GRAPH_FROM is bound into the chunk indexer's and the searches' statements: 2**63
    loaded fine, then every index batch and every chunk search failed with a StorageError
    (value out of int64 range). No user holds 2**31 chunks: the bound is PostgreSQL's int."""
    monkeypatch.setenv("CHUNK_GRAPH_FROM", str(2**63))
    with pytest.raises(ConfigError, match="CHUNK_GRAPH_FROM"):
        load_settings(_env_file=None)
    monkeypatch.setenv("CHUNK_GRAPH_FROM", str(2**31 - 1))
    assert load_settings(_env_file=None).chunk_graph_from == 2**31 - 1


def test_the_chat_context_window_defaults_to_8192_and_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MEMORY_LLM_NUM_CTX (Ollama's num_ctx): 8192 unless set; a window too small for the
    extraction prompt, or no number of tokens at all, is a ConfigError naming it."""
    assert load_settings(_env_file=None).memory_llm_num_ctx == 8192
    monkeypatch.setenv("MEMORY_LLM_NUM_CTX", "32768")
    assert load_settings(_env_file=None).memory_llm_num_ctx == 32768
    for bad in ("1024", str(2**20 + 1), "8k"):
        monkeypatch.setenv("MEMORY_LLM_NUM_CTX", bad)
        with pytest.raises(ConfigError, match="MEMORY_LLM_NUM_CTX"):
            load_settings(_env_file=None)


def test_a_settings_file_that_is_not_utf8_is_named_not_a_bug(tmp_path: Path) -> None:
    """A .env saved in another encoding made Settings() raise UnicodeDecodeError, which the
    command reported as "unexpected UnicodeDecodeError (a bug in navi-memory)", exit 1."""
    env_file = tmp_path / ".env"
    env_file.write_bytes(b"DB_POOL_SIZE=7\nDATABASE_URL=postgresql://u:pw\xff\xfe@h/db\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=env_file)
    message = str(caught.value)
    assert str(env_file) in message and "UTF-8" in message and "line 2" in message
    assert "pw" not in message and "\n" not in message


@pytest.mark.parametrize("name", ["DATABASE_URL", "EMBEDDING_MODEL", "OLLAMA_API_KEY"])
def test_a_variable_holding_bytes_that_are_not_utf8_is_named_without_them(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The environment hands undecodable bytes over as lone surrogates: such a DATABASE_URL
    failed in SQLAlchemy's URL rendering as "unexpected UnicodeEncodeError ... (a bug)"."""
    monkeypatch.setenv(name, "postgresql://postgres@/db1\udcff?host=/x")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert name in message and "UTF-8" in message
    assert "db1" not in message and "\\udcff" not in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DB_POOL_SIZE", "1\udce9"),
        ("DB_POOL_PRE_PING", "tru\udce9"),
        ("EMBEDDING_TIMEOUT_SECONDS", "3\udce9"),
        ("CHUNK_TEXT_RANKING", "bm\udce9"),
    ],
)
def test_a_number_flag_or_choice_not_utf8_is_named_without_its_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Text settings were checked for UTF-8 after their parsing: a number, flag or choice
    failed pydantic's own check first, whose report printed the value (as '1\\udce9')."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert message.startswith(f"bad setting {name}: is not UTF-8 text"), message
    assert "udce9" not in message


@pytest.mark.parametrize(
    "host",
    [
        "http://127.0.0.1:99999",
        "::::",
        "http://[::1",
        "http://bob:hostsecret",  # a password where the port goes
        "ftp://ollama.example",
    ],
)
@pytest.mark.parametrize("name", ["OLLAMA_HOST", "EMBEDDING_OLLAMA_HOST"])
def test_a_malformed_ollama_host_is_named_without_its_value(
    monkeypatch: pytest.MonkeyPatch, name: str, host: str
) -> None:
    """A host the ollama client cannot parse surfaced as "unexpected ValueError: Port out of
    range" from doctor (exit 1), or as an obscure failure of every embedding call."""
    monkeypatch.setenv(name, host)
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert name in message and "http://host:11434" in message
    assert "hostsecret" not in message and host not in message


@pytest.mark.parametrize(
    "host",
    [
        "http://127.0.0.1:11434",
        "127.0.0.1",
        "ollama.example:8080/",
        "https://bob:pw@ollama.example",
        "http://[::1]:11434",
        "[::1]",
    ],
)
def test_the_host_forms_the_ollama_client_takes_are_kept(host: str) -> None:
    settings = load_settings(_env_file=None, ollama_host=host, embedding_ollama_host=host)
    assert settings.ollama_host == host.rstrip("/")


def test_a_host_given_in_code_wins_over_a_malformed_one_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/config.md: keyword arguments win over the environment."""
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:99999")
    assert load_settings(_env_file=None, ollama_host="http://127.0.0.1:9").ollama_host == (
        "http://127.0.0.1:9"
    )


def test_an_empty_ollama_host_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """OLLAMA_HOST= (a .env line left empty) was taken as a host: every chat call failed, and
    doctor reported findings (exit 1) where DATABASE_URL= is simply the default."""
    monkeypatch.setenv("OLLAMA_HOST", " ")
    monkeypatch.setenv("EMBEDDING_OLLAMA_HOST", "")
    settings = load_settings(_env_file=None)
    assert settings.ollama_host == "http://127.0.0.1:11434"
    assert settings.embedding_host == "http://127.0.0.1:11434"
