"""Start-up refusals that need a server we cannot run here (no pgvector, an old pgvector)."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from navi_memory import SchemaError
from navi_memory.config import Settings
from navi_memory.db import (
    SCHEMA_HEAD,
    Capabilities,
    check_capabilities,
    connect_options,
    connection_error,
    redact_text,
    redact_unparsed_url,
    redact_url,
    to_async_url,
)
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


@pytest.mark.parametrize(
    ("option", "fix"),
    [
        ("keepalives=1", "keepalives"),
        ("sslcompression=1", "sslcompression"),
        ("gssencmode=disable", "gssencmode"),
        ("prepared_statement_cache_size=lots", "prepared_statement_cache_size.*whole number"),
        ("sslmode=sometimes", "sslmode.*disable, allow, prefer, require, verify-ca, verify-full"),
        ("connect_timeout=soon", "connect_timeout.*seconds"),
        ("connect_timeout=0", "connect_timeout.*seconds"),
        ("target_session_attrs=whichever", "target_session_attrs.*read-write"),
        ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "sslrootcert.*/nonexistent/ca"),
    ],
)
def test_a_url_option_the_driver_cannot_take_is_a_config_error_naming_it(
    option: str, fix: str
) -> None:
    with pytest.raises(ConfigError, match=fix) as caught:
        to_async_url(f"postgresql://navi:secret@db.example/navi?{option}")
    assert "secret" not in str(caught.value)


def test_the_dialects_statement_cache_size_stays_in_the_url_for_sqlalchemy() -> None:
    """SQLAlchemy's asyncpg dialect reads prepared_statement_cache_size from the URL (0 behind
    PgBouncer in transaction mode): it is kept there, not refused nor passed to connect()."""
    url, args = connect_options("postgresql://navi@db.example/navi?prepared_statement_cache_size=0")
    assert dict(url.query) == {"prepared_statement_cache_size": "0"}
    assert args == {}


def test_libpq_options_become_the_drivers_connect_arguments() -> None:
    url, args = connect_options(
        "postgresql+asyncpg://navi@db.example/navi?sslmode=verify-ca&connect_timeout=4"
        "&application_name=worker-1&options=-c%20work_mem%3D8MB&target_session_attrs=read-write"
        "&passfile=/etc/pgpass&krbsrvname=pg&gsslib=gssapi&dbname=other"
    )
    assert url.query == {}
    assert url.database == "other"
    assert args == {
        "dsn": "postgresql://?sslmode=verify-ca",
        "timeout": 4.0,
        "server_settings": {"application_name": "worker-1", "options": "-c work_mem=8MB"},
        "target_session_attrs": "read-write",
        "passfile": "/etc/pgpass",
        "krbsrvname": "pg",
        "gsslib": "gssapi",
    }
    # SQLAlchemy's spelling for asyncpg, and what SQLAlchemy itself reads, stay as they were.
    url, args = connect_options("postgresql+asyncpg://u@/navi?host=/run/pg&ssl=require")
    assert dict(url.query) == {"host": "/run/pg"}
    assert args == {"dsn": "postgresql://?sslmode=require"}


def test_a_non_numeric_port_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="port") as caught:
        to_async_url("postgresql://u:pwsecret@127.0.0.1:abc/db")
    assert "pwsecret" not in str(caught.value)


def test_an_unescaped_at_sign_in_the_password_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match="%40") as caught:
        to_async_url("postgresql://u:sec@ret@h/db")
    assert "sec@" not in str(caught.value) and "ret@" not in str(caught.value)
    assert redact_url("postgresql://u:sec@ret@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h/db?password=qsecret",
        "postgresql://u@h/db?host=/run/pg&password=qsecret&sslmode=disable",
        "postgresql://u@h/db?sslmode=verify-full&sslpassword=qsecret",
        "postgresql://u:qsecret@h/db",
        "postgresql://u:q%40secret@h/db",
        "postgresql://u:qsecret@127.0.0.1:abc/db",
        "host=h port=5432 password=qsecret",
        "host=h password='q secret' dbname=db",
        'host=h password="q secret" dbname=db',
        "PGPASSWORD=qsecret psql -h h",
        'export PGPASSWORD="q secret"',
        "POSTGRES_PASSWORD=qsecret docker compose up",
        "DB_PASSWORD='q secret'",
    ],
)
def test_no_form_of_password_survives_redaction(url: str) -> None:
    assert "secret" not in redact_url(url)
    assert "secret" not in redact_text(url)


def test_a_key_value_dsn_is_refused_without_echoing_its_password() -> None:
    with pytest.raises(ConfigError, match=r"postgresql://user:password@host") as caught:
        to_async_url("host=h port=5432 password=kvsecret")
    assert "kvsecret" not in str(caught.value)


def test_a_schema_newer_than_the_code_says_to_upgrade_navi_memory_not_to_migrate() -> None:
    newer = r"newer navi-memory \(revision 9999\).*upgrade navi-memory"
    with pytest.raises(SchemaError, match=newer) as caught:
        check_capabilities(caps(revision="9999"), URL)
    assert "run `navi-memory migrate`" not in str(caught.value)


@pytest.mark.parametrize("revision", [None, "0010"])
def test_a_schema_behind_the_code_says_to_migrate(revision: str | None) -> None:
    with pytest.raises(SchemaError, match="run `navi-memory migrate`"):
        check_capabilities(caps(revision=revision), URL)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pwsecret@/db1?host=/sock&port=abc",
        "postgresql://u:pwsecret@/db1?host=/sock&port=5432&port=5433",
        "postgresql://u:pwsecret@/db1?host=/sock&host=/sock",
        "postgresql://u:pwsecret@/db1?host=h1:5432&host=h2",
        "postgresql://u:pwsecret@localhost:70000/db1",
        "postgresql://u:pwsecret@localhost:0/db1",
        "postgresql://u:pwsecret@/db1?host=/sock&port=70000",
        "postgresql://u:pwsecret@/db1?host=/sock&port=-1",
        "postgresql://u:pwsecret@/db1?host=h1:5432&host=h2:99999",
    ],
)
def test_hosts_and_ports_that_cannot_be_connected_to_are_a_config_error(url: str) -> None:
    """SQLAlchemy refused these only when the engine was built, with an ArgumentError the
    command called a bug; a port past 65535 was taken modulo 65536 (70000 reached 4464)."""
    for check in (to_async_url, connect_options):
        with pytest.raises(ConfigError, match="DATABASE_URL") as caught:
            check(url)
        message = str(caught.value)
        assert "pwsecret" not in message and "\n" not in message


def test_ports_in_range_and_several_hosts_with_theirs_are_taken() -> None:
    assert connect_options("postgresql://u@h:65535/db")[0].port == 65535
    url, _ = connect_options("postgresql://u@/db?host=h1:1&host=h2:5432")
    assert url.query["host"] == ("h1:1", "h2:5432")
    assert connect_options("postgresql://u@/db?host=/sock&port=5433")[0].query["port"] == "5433"


def test_a_url_that_is_not_utf8_is_a_config_error_without_its_password() -> None:
    """Bytes that are not UTF-8 reach a URL as lone surrogates: they failed in SQLAlchemy's
    rendering of the URL as an UnicodeEncodeError the command called a bug."""
    with pytest.raises(ConfigError, match=r"DATABASE_URL.*UTF-8") as caught:
        to_async_url("postgresql://postgres:pwsecret@/db1\udcff?host=/x")
    assert "pwsecret" not in str(caught.value) and "\\udcff" not in str(caught.value)


def test_the_database_option_names_the_database_as_dbname_does() -> None:
    """?database=name (SQLAlchemy's spelling of libpq's dbname) is the database connected
    to: it must be the one a missing-database error names, not the URL path's."""
    for key in ("dbname", "database"):
        url, _ = connect_options(f"postgresql://postgres@/db1?host=/sock&{key}=other")
        assert url.database == "other" and dict(url.query) == {"host": "/sock"}
        missing = DBAPIError(
            "connect", {}, asyncpg.exceptions.InvalidCatalogNameError("no such database")
        )
        error = connection_error(missing, f"postgresql://postgres@/db1?host=/sock&{key}=other")
        assert isinstance(error, ConfigError)
        assert "'other' does not exist" in str(error) and "'db1'" not in str(error)
    with pytest.raises(ConfigError, match="dbname and database"):
        connect_options("postgresql://postgres@/db1?dbname=a&database=b")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:my secret@h:abc/db",  # a blank in the password, and a bad port
        "postgresql://u:my secret@h:5432:5433/db",
        "postgresql:/u:secret@h/db",  # a slash missing
        "postgresql:u:secret@h/db",
        "postgresql://my user:secret@h:abc/db",  # a blank in the user name
        "postgresql://navi@myserver:secret@db.example:abc/db",  # Azure's user@server
    ],
)
def test_a_url_that_does_not_parse_never_shows_its_password(url: str) -> None:
    """The password was printed: the mask wanted "//" and no blank in the password. It is
    masked in the refusal, in the printed settings and in any text holding the URL."""
    with pytest.raises(ConfigError) as refused:
        to_async_url(url)
    assert "secret" not in str(refused.value)
    assert "secret" not in repr(Settings(database_url=url, _env_file=None))
    assert "secret" not in redact_unparsed_url(url)
    assert redact_unparsed_url(url).startswith("postgresql")


@pytest.mark.parametrize(
    "url",
    [
        "app:secret@db.internal:5432/app",  # no scheme: "app:" looked like one
        "u:secret@h/d",
        "secret@h/d",  # a user part without a ":" may be a password alone
        "secret",  # no "@", no "://": the value may be a password alone
        "my:secret",
    ],
)
def test_a_url_without_a_scheme_never_shows_its_password(url: str) -> None:
    """The ops review's repro: a DATABASE_URL written without postgresql:// was refused with
    its password in clear — in the refusal, the printed settings and doctor's finding."""
    with pytest.raises(ConfigError) as refused:
        to_async_url(url)
    assert "secret" not in str(refused.value)
    assert "secret" not in repr(Settings(database_url=url, _env_file=None))
    assert "secret" not in redact_unparsed_url(url)


def test_a_url_with_a_blank_before_it_is_refused_naming_the_blank() -> None:
    """Refused with the value shown stripped, it looked like the form the message asked for
    (ops review)."""
    for url in (" postgresql://u:secret@h/d", "\tpostgresql://u:secret@h/d"):
        with pytest.raises(ConfigError, match="starts or ends with a blank") as refused:
            to_async_url(url)
        assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("Ollama at http://localhost:11434 is unreachable; ask ops@example.com", "11434"),
        ("embedding:retry:gave up for alice@example.com", "gave up"),
        ("POST http://u:pw@ollama:11434/api/embed failed\nreported by bob@example.com", "ollama"),
    ],
)
def test_text_holding_no_password_keeps_what_it_says(message: str, kept: str) -> None:
    """The masking of log lines (the CLI's formatter) and messages must not eat what is no
    password: a loose URL mask once took everything up to the text's last "@"."""
    assert kept in redact_text(message)
    assert ":pw@" not in redact_text(message)
