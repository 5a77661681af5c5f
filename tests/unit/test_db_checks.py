"""Start-up refusals that need a server we cannot run here (no pgvector, an old pgvector)."""

from __future__ import annotations

import pytest

from navi_memory import SchemaError
from navi_memory.db import SCHEMA_HEAD, Capabilities, check_capabilities, redact_url, to_async_url
from navi_memory.errors import ConfigError

URL = "postgresql+asyncpg://navi:secret@db.example:5432/navi"


def caps(**overrides: object) -> Capabilities:
    values: dict[str, object] = {
        "server_version": "16.4",
        "server_version_num": 160004,
        "vector": True,
        "vector_version": "0.8.0",
        "vector_available": "0.8.0",
        "pg_trgm": False,
        "pg_trgm_version": None,
        "revision": SCHEMA_HEAD,
    }
    values.update(overrides)
    return Capabilities(**values)  # type: ignore[arg-type]


def test_a_current_server_passes() -> None:
    check_capabilities(caps(), URL)


def test_a_server_without_pgvector_available_is_told_what_to_install() -> None:
    with pytest.raises(SchemaError, match=r"no pgvector.*postgresql-16-pgvector") as caught:
        check_capabilities(caps(vector=False, vector_version=None, vector_available=None), URL)
    assert "secret" not in str(caught.value)


def test_pgvector_older_than_0_8_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"pgvector 0\.7\.4 .* too old.*>= 0\.8\.0"):
        check_capabilities(caps(vector_version="0.7.4"), URL)


def test_urls_are_made_async_and_redacted() -> None:
    assert to_async_url("postgres://u:p@h/db").startswith("postgresql+asyncpg://u:p@h/db")
    assert redact_url(URL) == "postgresql+asyncpg://navi:***@db.example:5432/navi"
    with pytest.raises(ConfigError, match="PostgreSQL URL"):
        to_async_url("mysql://u:p@h/db")
    with pytest.raises(ConfigError, match="not a database URL"):
        to_async_url("not a url at all")


@pytest.mark.parametrize("found", [None, "off"])
def test_connections_without_iterative_hnsw_scans_are_refused_with_the_fix(
    found: str | None,
) -> None:
    fix = r"hnsw.iterative_scan.*ALTER DATABASE navi SET"
    with pytest.raises(ConfigError, match=fix) as caught:
        check_capabilities(caps(hnsw_iterative_scan=found), URL)
    assert "secret" not in str(caught.value)
