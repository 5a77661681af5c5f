"""The database edge: URL resolution, the async engine, the capability probe, schema checks.

Nothing here runs at import. Driver errors are translated to navi_memory.errors where they enter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct
import sys
import weakref
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlencode

import asyncpg
from pgvector import Vector
from sqlalchemy import Executable, Result, event, text
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    EmulatedDBAPIException,
    SQLAlchemyError,
)
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.util import greenlet_spawn

from navi_memory.config import Settings
from navi_memory.constants import MEMORY_CLOSE_GRACE_SECONDS, MIN_PGVECTOR
from navi_memory.errors import (
    ConfigError,
    ConnectionLostError,
    NaviMemoryError,
    NotFoundError,
    SchemaError,
    StorageError,
)

__all__ = [
    "DRIVER_ERRORS",
    "SCHEMA_HEAD",
    "SCHEMA_REVISIONS",
    "TRGM_INDEXES",
    "URL_OPTIONS",
    "Capabilities",
    "PooledStatements",
    "check_capabilities",
    "commit_settings",
    "connect_options",
    "connection_error",
    "create_engine",
    "create_sessionmaker",
    "dispose_engines",
    "drain_engines",
    "ensure_trgm_indexes",
    "is_connection_lost",
    "missing_trgm_indexes",
    "newer_schema_error",
    "parallel_settings",
    "probe",
    "redact_text",
    "redact_unparsed_url",
    "redact_url",
    "refuse_connections",
    "resolve_database_url",
    "to_async_url",
    "translate_driver_error",
    "vector_binary",
    "vector_search_settings",
]

logger = logging.getLogger(__name__)

SCHEMA_REVISIONS: Final = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
    "0014",
    "0015",
    "0016",
    "0017",
    "0018",
    "0019",
    "0020",
    "0021",
    "0022",
    "0023",
    "0024",
    "0025",
    "0026",
    "0027",
    "0028",
    "0029",
    "0030",
    "0031",
    "0032",
    "0033",
    "0034",
    "0035",
)
"""The Alembic revisions this code ships, oldest first (a test keeps them equal to
alembic/versions'): a database at any other revision was migrated by a newer release."""
SCHEMA_HEAD: Final = SCHEMA_REVISIONS[-1]
"""The Alembic head this code expects."""

TRGM_INDEXES = {f"ix_memory_facts_{column}_trgm": column for column in ("category", "key", "value")}
"""pg_trgm GIN indexes on memory_facts, made where pg_trgm is installed (as in revision 0003)."""

DRIVER_ERRORS: tuple[type[Exception], ...] = (
    SQLAlchemyError,
    # What asyncpg raises where SQLAlchemy does not wrap it: in the pool's connect events (the
    # dialect's JSON codecs, our vector codec) and in a rollback or close on a dead connection,
    # as asyncpg's own classes or as SQLAlchemy's emulated DBAPI ones.
    EmulatedDBAPIException,
    asyncpg.exceptions.PostgresError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
"""Everything the driver stack raises: what the edge translates into navi_memory errors."""

_SERVER_GONE = (
    asyncpg.exceptions.PostgresConnectionError,  # SQLSTATE class 08, ConnectionDoesNotExist...
    asyncpg.exceptions.AdminShutdownError,  # 57P01: pg_terminate_backend, a fast shutdown
    asyncpg.exceptions.CrashShutdownError,  # 57P02
    asyncpg.exceptions.CannotConnectNowError,  # 57P03: starting up or shutting down
    DisconnectionError,
    OSError,  # refused, reset, broken pipe, no socket: the server is not there
    TimeoutError,  # the connect timeout
)
_CLOSED_MESSAGES = ("connection is closed", "connection was closed", "cannot switch to state")
FOREIGN_KEY_VIOLATION = "23503"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, the driver error it wraps (``.orig``) and its causes, nearest first."""
    found: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending and len(found) < 8:
        item = pending.pop(0)
        if item is None or item in found:
            continue
        found.append(item)
        pending += [getattr(item, "orig", None), item.__cause__, item.__context__]
    return found


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone (killed, reset, server down or restarting),
    as opposed to the server refusing a statement on a healthy connection.

    asyncpg's InternalClientError "cannot switch to state N" is what a killed connection's
    protocol raises at the next operation; it refuses before sending anything."""
    for item in _chain(exc):
        if isinstance(item, _SERVER_GONE):
            return True
        if isinstance(item, DBAPIError) and item.connection_invalidated:
            return True
        if isinstance(
            item,
            asyncpg.exceptions.InterfaceError
            | asyncpg.exceptions.InternalClientError
            | EmulatedDBAPIException,
        ) and any(message in str(item) for message in _CLOSED_MESSAGES):
            return True
    return False


DEADLOCK_DETECTED = "40P01"


def is_deadlock(exc: BaseException) -> bool:
    """Whether ``exc`` (a navi_memory error translated from one, or a driver error) is the
    server ending a transaction as a deadlock's victim: the whole transaction may run again."""
    return _sqlstate(exc) == DEADLOCK_DETECTED


def _sqlstate(exc: BaseException) -> str | None:
    for item in _chain(exc):
        code = getattr(item, "sqlstate", None) or getattr(item, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


def translate_driver_error(
    exc: BaseException, bind: AsyncEngine | None, *, committing: bool, read_only: bool = False
) -> NaviMemoryError:
    """The navi_memory error for a driver error (one of DRIVER_ERRORS), naming the database.

    A lost connection is a ConnectionLostError (safe to call again) unless ``committing``: the
    COMMIT was in flight, so the call may or may not have landed, and saying "safe to retry"
    would be a lie — except for a transaction that only read (``read_only``): it wrote
    nothing, so whether its COMMIT landed does not matter. A foreign-key violation on
    ``user_id`` is the missing user's NotFoundError.
    """
    where = redact_url(bind.url) if bind is not None else "the database"
    detail = _describe(exc)
    if is_connection_lost(exc):
        if committing and read_only:
            return ConnectionLostError(
                f"lost the connection to {where} ({detail}) while committing a transaction "
                "that only read: nothing was written, so calling again is safe"
            )
        if committing:
            return StorageError(
                f"lost the connection to {where} while committing ({detail}): the call may or "
                "may not have taken effect"
            )
        return ConnectionLostError(
            f"lost the connection to {where} ({detail}) before the call's transaction "
            "committed, so calling again is safe"
        )
    if _sqlstate(exc) == FOREIGN_KEY_VIOLATION and any(
        # The driver's own message names the violated key; SQLAlchemy's wrapper also carries
        # the statement's text, which may name user_id where another key was violated.
        "user_id" in str(item)
        for item in _chain(exc)
        if not isinstance(item, SQLAlchemyError)
    ):
        return NotFoundError(
            "that user does not exist: create it first with memory.users.ensure(user_id)"
        )
    return StorageError(f"database error at {where}: {detail}")


def _describe(exc: BaseException) -> str:
    detail = getattr(exc, "orig", None) or exc
    return f"{detail.__class__.__name__}: {_first_line(detail)}"


_SSL_MODES: Final = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SSL_FILES: Final = ("sslrootcert", "sslcert", "sslkey", "sslcrl")
_SSL_OPTIONS: Final = (
    "sslmode",
    *_SSL_FILES,
    "sslpassword",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "sslnegotiation",
)
"""libpq's TLS options, which asyncpg reads from a DSN only: they travel as connect(dsn=...)."""
_TARGET_SESSION_ATTRS: Final = (
    "any",
    "primary",
    "standby",
    "prefer-standby",
    "read-write",
    "read-only",
)
_DRIVER_KEYWORDS: Final = ("target_session_attrs", "passfile", "krbsrvname", "gsslib")
"""libpq options asyncpg.connect takes under the same name."""
_SERVER_SETTINGS: Final = ("application_name", "options")
"""libpq options that are startup parameters: they go into asyncpg's server_settings."""
_SQLALCHEMY_READS: Final = ("host", "port", "user", "password")
"""Query keys SQLAlchemy's asyncpg dialect turns into connect() arguments itself."""
_DATABASE_OPTIONS: Final = ("dbname", "database")
"""libpq's and SQLAlchemy's name of the database option: it becomes the URL's database, the
one connected to and named in errors."""
_DIALECT_OPTIONS: Final = ("prepared_statement_cache_size",)
"""Query keys SQLAlchemy's asyncpg dialect takes for itself (left in the URL): a cache of 0 is
what a pooler that cannot keep prepared statements (PgBouncer in transaction mode) needs."""
URL_OPTIONS: Final = tuple(
    sorted(
        {
            *_SSL_OPTIONS,
            "ssl",
            "connect_timeout",
            *_DATABASE_OPTIONS,
            *_DRIVER_KEYWORDS,
            *_SERVER_SETTINGS,
            *_SQLALCHEMY_READS,
            *_DIALECT_OPTIONS,
        }
    )
)
"""Every query option DATABASE_URL may carry (docs/config.md lists them)."""
_SECRET_OPTIONS: Final = ("password", "sslpassword")


def to_async_url(url: str) -> str:
    """Any PostgreSQL URL as a SQLAlchemy asyncpg URL; its options are checked here (see
    connect_options), so a bad one is a ConfigError before anything connects."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() not in {"postgresql", "postgres"}:
        raise ConfigError(
            f"DATABASE_URL must be a PostgreSQL URL (postgresql://...), got {redact_url(parsed)}"
        )
    if parsed.host is not None and "@" in parsed.host:
        raise ConfigError(
            f"DATABASE_URL has an '@' in its user name or password ({redact_url(parsed)}): "
            "percent-encode it as %40 (and ':' as %3A, '/' as %2F)"
        )
    if parsed.host is not None and parsed.host[:3].lower() == "%2f":
        # libpq's way of naming a socket directory in the host part (postgresql://%2Frun%2F
        # postgresql/db): asyncpg would resolve "%2Frun%2Fpostgresql" by DNS.
        if "host" in parsed.query:
            raise ConfigError(
                f"DATABASE_URL names a socket directory in its host part and a host option "
                f"({redact_url(parsed)}): keep one"
            )
        parsed = URL.create(
            parsed.drivername,
            username=parsed.username,
            password=parsed.password,
            port=parsed.port,
            database=parsed.database,
            query={**parsed.query, "host": unquote(parsed.host)},
        )
    connect_options(parsed)
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def _parse_url(url: str | URL) -> URL:
    try:
        # Bytes that are not UTF-8 reach a URL as lone surrogates (the environment's
        # surrogateescape): SQLAlchemy's rendering of it raised UnicodeEncodeError.
        str(url).encode()
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"DATABASE_URL is not UTF-8 text (an undecodable byte at character {exc.start + 1}): "
            "write it in UTF-8, percent-encoding (%XX) what is not ASCII"
        ) from None
    try:
        return make_url(url)
    except ValueError as exc:  # make_url's int(port)
        several = "," in str(url).partition("?")[0]
        raise ConfigError(
            f"DATABASE_URL's port is not a number: {redact_unparsed_url(str(url))}: write "
            + (
                "several hosts as postgresql://user:password@/database?host=h1:5432&host=h2:5432 "
                "(every host with its port)"
                if several
                else "postgresql://user:password@host:5432/database"
            )
        ) from exc
    except ArgumentError as exc:
        if str(url) != str(url).strip():
            raise ConfigError(
                f"DATABASE_URL starts or ends with a blank ({redact_unparsed_url(str(url))!r}): "
                "remove it (quotes in a .env file keep what is inside them)"
            ) from exc
        raise ConfigError(
            f"DATABASE_URL is not a database URL: {redact_unparsed_url(str(url))}: write it as "
            "postgresql://user:password@host:port/database (key=value connection strings are "
            "not supported)"
        ) from exc


def connect_options(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """DATABASE_URL split into the URL SQLAlchemy gets and asyncpg.connect()'s arguments for its
    libpq query options, which the dialect would pass to connect() under libpq's names (a
    TypeError). Raises ConfigError naming an option asyncpg cannot take, or a bad value.

    sslmode (or SQLAlchemy's ``ssl``) and the TLS files go in a ``dsn`` that carries nothing
    else: asyncpg reads them from a DSN only, and lets the other arguments win over it."""
    parsed = _parse_url(url)
    query = {
        key: value if isinstance(value, str) else value[-1] for key, value in parsed.query.items()
    }
    unknown = sorted(set(query) - set(URL_OPTIONS))
    if unknown:
        raise ConfigError(
            f"DATABASE_URL option {unknown[0]!r} is not supported by navi-memory's driver "
            f"(asyncpg): remove it from the URL. Supported: {', '.join(URL_OPTIONS)} "
            "(docs/config.md)"
        )
    args: dict[str, Any] = {}
    ssl: dict[str, str] = {key: query.pop(key) for key in _SSL_OPTIONS if key in query}
    if "ssl" in query:
        if "sslmode" in ssl:
            raise ConfigError("DATABASE_URL has both sslmode and ssl: keep one of them")
        ssl["sslmode"] = query.pop("ssl")
    if ssl.get("sslmode", "disable") not in _SSL_MODES:
        raise ConfigError(
            f"DATABASE_URL's sslmode={ssl['sslmode']!r} is not one of {', '.join(_SSL_MODES)}"
        )
    for key in _SSL_FILES:
        if key in ssl and not Path(ssl[key]).expanduser().is_file():
            raise ConfigError(
                f"DATABASE_URL's {key}={ssl[key]} names no file: give the path of the "
                "PEM file (asyncpg does not read sslrootcert=system)"
            )
    if ssl:
        args["dsn"] = "postgresql://?" + urlencode(ssl)
    if "connect_timeout" in query:
        timeout = query.pop("connect_timeout")
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = 0.0
        if not 0 < seconds < float("inf"):
            raise ConfigError(
                f"DATABASE_URL's connect_timeout={timeout!r} is not a positive number of "
                "seconds (leave it out to use DB_CONNECT_TIMEOUT_SECONDS)"
            )
        args["timeout"] = seconds
    server_settings = {key: query.pop(key) for key in _SERVER_SETTINGS if key in query}
    if server_settings:
        args["server_settings"] = server_settings
    if query.get("target_session_attrs", "any") not in _TARGET_SESSION_ATTRS:
        raise ConfigError(
            f"DATABASE_URL's target_session_attrs={query['target_session_attrs']!r} is not one "
            f"of {', '.join(_TARGET_SESSION_ATTRS)}"
        )
    args.update({key: query.pop(key) for key in _DRIVER_KEYWORDS if key in query})
    cache = query.get("prepared_statement_cache_size")
    if cache is not None and not (cache.isascii() and cache.isdigit()):
        raise ConfigError(
            f"DATABASE_URL's prepared_statement_cache_size={cache!r} is not a whole number "
            "(0: no prepared statements, as PgBouncer in transaction mode needs)"
        )
    if set(_DATABASE_OPTIONS) <= set(query):
        raise ConfigError("DATABASE_URL has both dbname and database: keep one of them")
    for key in _DATABASE_OPTIONS:
        if key in query:
            parsed = parsed.set(database=query.pop(key))
    kept = {key: value for key, value in parsed.query.items() if key in query}
    driver_url = parsed.set(query=kept)
    _check_hosts_and_ports(driver_url)
    return driver_url, args


_PORTS: Final = range(1, 65536)


def _check_hosts_and_ports(url: URL) -> None:
    """Refuse, as a ConfigError naming DATABASE_URL, the hosts and ports SQLAlchemy's asyncpg
    dialect would refuse only once the engine is built (an ArgumentError: a port that is not a
    number, hosts and ports that do not pair up), and a port past 65535, which it passes on to
    be taken modulo 65536 (70000 reached port 4464)."""
    dialect = PGDialect_asyncpg()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it unannotated
    try:
        _, options = dialect.create_connect_args(url)  # type: ignore[no-untyped-call]
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(
            f"DATABASE_URL's hosts and ports do not fit together ({_first_line(exc)}): write "
            "postgresql://user:password@host:5432/database, or several hosts as "
            "postgresql://user:password@/database?host=h1:5432&host=h2:5432 (every host with "
            "its port)"
        ) from exc
    port = options.get("port")
    # The URL's own port too: SQLAlchemy drops a port 0 as if none were given.
    for number in [url.port, *(port if isinstance(port, list) else [port])]:
        if number is not None and int(number) not in _PORTS:
            raise ConfigError(
                f"DATABASE_URL's port {number} is out of range: a port is a number from 1 to 65535"
            )


def redact_url(url: str | URL) -> str:
    """The URL with its passwords hidden (the user:password@ one, an un-encoded '@' in it, and
    ``password`` / ``sslpassword`` options), for messages and logs."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return redact_unparsed_url(str(url))
    if parsed.host is not None and "@" in parsed.host:
        # An un-encoded '@' in the password: the parser split it at the first one.
        parsed = parsed.set(password="***", host=parsed.host.rpartition("@")[2])  # noqa: S106
    secrets = {key: "***" for key in _SECRET_OPTIONS if key in parsed.query}
    if secrets:
        parsed = parsed.update_query_dict(secrets)
    # Unquoted, so a socket directory reads as the path a person would type.
    return unquote(parsed.render_as_string(hide_password=True))


_URL_PASSWORD = re.compile(r"(//[^:/@\s]*:)\S*@")
_SCHEME = re.compile(r"\s*[A-Za-z][\w+.-]*:/{0,3}")
_OPTION_PASSWORD = re.compile(
    r"\b((?:\w*?_)?(?:ssl|pg)?password\s*=\s*)"
    r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&]+)",
    re.I,
)
"""A password option or variable: password=, sslpassword=, PGPASSWORD=, POSTGRES_PASSWORD=,
DB_PASSWORD=…, its value bare, in single quotes (libpq's) or in double quotes (a shell's, a
.env file's)."""


def redact_text(value: str) -> str:
    """``value`` (a URL or a key=value DSN that did not parse) with every password masked."""
    return _OPTION_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", value))


def redact_unparsed_url(url: str) -> str:
    """A database URL that did not parse, with its password masked however it is written: a
    blank or an "@" in the user or the password ("my user:my pass@h", Azure's
    "user@server:pw@h"), a slash or two missing ("postgresql:u:pw@h"), no scheme at all
    ("app:secret@db/app"). The user part ends at the first ":" after the scheme, the password
    at the URL's last "@": more than the password at times, never less (a user part without
    a ":" is masked whole, and a text with neither "@" nor "://" is not shown). Only for a URL
    alone (``redact_text`` is for text holding one)."""
    at = url.rfind("@")
    if at == -1:
        # No user part. Without "://" the text may be anything, a password alone included
        # ("DATABASE_URL=hunter2"): none of it is shown.
        return redact_text(url) if "://" in url else "***"
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    colon = url.find(":", start, at)
    if colon == -1 and scheme is not None and "//" not in scheme.group():
        # What looked like a scheme is the user ("app:secret@db/app", no scheme written).
        colon = url.find(":", 0, at)
    # No colon: the user part alone, or a password alone, before the "@".
    masked = f"{url[: colon + 1]}***{url[at:]}" if colon != -1 else f"***{url[at:]}"
    return redact_text(masked)


def resolve_database_url(settings: Settings) -> str:
    """DATABASE_URL, or the embedded server (started or reattached) when it is unset."""
    if settings.database_url:
        return to_async_url(settings.database_url)
    from navi_memory.embedded import ensure_embedded_server

    return ensure_embedded_server(settings.navi_memory_data_dir)


def create_engine(settings: Settings, url: str, *, cached_plans: bool = False) -> AsyncEngine:
    """The async engine, with custom plans forced on every connection (``cached_plans``: left
    to PostgreSQL, see below).

    Vectors travel in pgvector's binary form: each new connection registers a codec for the
    ``vector`` type (see vector_codec) when the extension exists, so a vector is 3 KB of
    float32 on the wire, not ~15 KB of text that Python formats at ~0.4 µs a number.

    asyncpg prepares statements; after five executions PostgreSQL may switch a per-user query to
    a generic plan that cannot see the user and scans everyone (bench/README.md: 16/226 ms
    p50/p95 against 5.6/23 with custom plans). ``force_custom_plan`` keeps plans per user.

    That costs a planning per execution: 1.3 ms for the user's fact search, more than it takes
    to run for most users. Statements whose best plan is the same for every user (a user's
    facts scanned exactly through their btree, the sketches) run on a second engine,
    ``cached_plans=True``, where each is planned once per connection: the fact search then took
    1.6-2.0 ms at p50 against 2.9-3.7 with custom plans, the same rows. So does the raw
    history's statement for a user known small (services.chunks.small_user); this engine's pool
    holds twice DB_POOL_SIZE connections, as a unified search may take two.

    That engine forces generic plans (``force_generic_plan``) rather than leaving the choice to
    PostgreSQL's ``auto``, which after five custom plans keeps a generic plan only while its
    estimated cost, made for an average user, is below the average of the custom plans so far:
    with most users smaller than the average one (Zipf-sized histories), a connection whose
    first searches were of small users may go on planning every call. Every statement sent
    there is written so that one plan serves every user.

    The URL's libpq options become connect() arguments (connect_options); its
    ``connect_timeout`` and ``application_name`` win over DB_CONNECT_TIMEOUT_SECONDS and
    ``navi-memory``.
    """
    driver_url, url_args = connect_options(url)
    engine = create_async_engine(
        driver_url,
        # The cached-plans engine keeps twice DB_POOL_SIZE: a unified search of a user known
        # small reads both its lanes there (raw history's small-user statement, facts and
        # sketches). With one pool's worth, eight callers' sixteen reads went past it, and
        # each overflow connection, closed when given back, cost a connect, the vector codec's
        # lookups and five custom plans again (searches/s fell from ~340 to ~210). Extraction
        # claims come from this pool too (at most DB_POOL_SIZE, held for an extraction each:
        # StaleSessionSweep), so a burst of extractions takes up to half of it.
        pool_size=settings.db_pool_size * (2 if cached_plans else 1),
        max_overflow=settings.db_max_overflow,
        pool_pre_ping=settings.db_pool_pre_ping,
        pool_recycle=settings.db_pool_recycle_seconds,
        connect_args={
            **url_args,
            "timeout": url_args.get("timeout", settings.db_connect_timeout_seconds),
            "server_settings": {
                "application_name": "navi-memory",
                **url_args.get("server_settings", {}),
                "plan_cache_mode": ("force_generic_plan" if cached_plans else "force_custom_plan"),
                # What every vector query wants, from the connection's start: no SET LOCAL
                # round trips (nor a transaction) per search. See vector_search_settings.
                **vector_search_settings(settings),
                **parallel_settings(settings),
                **commit_settings(settings),
            },
        },
    )
    event.listen(engine.sync_engine, "connect", _register_vector_codec)
    event.listen(engine.sync_engine.pool, "checkout", _replace_closed_connection)
    return engine


def _replace_closed_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """The free half of a pre-ping: a pooled connection whose socket the server closed (restart,
    idle timeout, pg_terminate_backend) is known to asyncpg as closed once the event loop has
    seen the EOF; raising DisconnectionError makes the pool replace it before anyone uses it.
    A connection lost silently (no EOF: a dead network) is caught only by DB_POOL_PRE_PING."""
    driver = getattr(dbapi_connection, "driver_connection", None)
    if driver is not None and driver.is_closed():
        raise DisconnectionError("the server closed this pooled connection")


def vector_search_settings(settings: Settings) -> dict[str, str]:
    """Iterative HNSW scans (pgvector >= 0.8) and the search width, for the engine's connections.

    With a per-user filter a plain HNSW scan stops after ``ef_search`` candidates, most of them
    other users' rows, and returns too few; an iterative scan keeps going until enough rows pass
    the filter. ``relaxed_order`` is faster than ``strict_order``; callers re-sort by distance.
    The engine's connections run only navi-memory's queries, so they can start with these.
    """
    return {
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(settings.hnsw_ef_search),
    }


def parallel_settings(settings: Settings) -> dict[str, str]:
    """``max_parallel_workers_per_gather`` for the engine's connections (nothing when
    DB_PARALLEL_WORKERS_PER_GATHER is -1: the server's value).

    0 by default: the package's statements read one user's rows, where a parallel plan's
    worker start costs more than it saves. The planner also gives a parallel plan to a
    UNION arm that a one-time filter turns off at run time, and its workers start all the
    same: the pruned BM25 statement's arm for users without kept frequencies started two for
    every big user, ~4 ms of a 23 ms search at 1M chunks (docs/benchmarks.md)."""
    workers = settings.db_parallel_workers_per_gather
    return {} if workers < 0 else {"max_parallel_workers_per_gather": str(workers)}


def commit_settings(settings: Settings) -> dict[str, str]:
    """``synchronous_commit`` for the engine's connections (nothing when
    DB_SYNCHRONOUS_COMMIT is 'server': the server's value, on by default).

    One caller's writes (upsert_fact, add_chunks) each wait for their commit's WAL flush,
    which is most of a small write's time on a slow disk (docs/benchmarks.md: 345 upserts/s
    durable against ~1,000 with 'off'). 'off' trades the last fraction of a second of commits
    on a server crash for that; PostgreSQL never applies half a transaction either way."""
    value = settings.db_synchronous_commit
    return {} if value == "server" else {"synchronous_commit": value}


def _register_vector_codec(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.run_async(register_vector_codec)


async def register_vector_codec(conn: asyncpg.Connection) -> None:
    """Binary I/O for ``vector`` on this asyncpg connection (a no-op where the extension is not
    created yet: open_memory refuses such a database anyway)."""
    schema = await conn.fetchval(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    )
    if schema is None:
        return
    await conn.set_type_codec(
        "vector",
        schema=schema,
        encoder=encode_vector,
        decoder=Vector.from_binary,
        format="binary",
    )


_VECTOR_HEADER = struct.Struct(">HH")


def vector_binary(vector: Sequence[float]) -> bytes:
    """pgvector's binary form of a vector (float32), built in one C pass: what the repositories
    bind for a ``vector`` parameter. Being bytes, an array of vectors holds it as one element
    (a list would be taken for a second dimension)."""
    values = array("f", vector)  # a copy: the byte swap must not touch the caller's array
    if sys.byteorder == "little":
        values.byteswap()
    return _VECTOR_HEADER.pack(len(values), 0) + values.tobytes()


def encode_vector(value: object) -> bytes:
    """The connection codec's encoder: a vector given in pgvector's binary form already
    (vector_binary), as a ``pgvector.Vector``, as pgvector's text form (what the ORM's Vector
    column type sends), or as a sequence of floats."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Vector):
        return value.to_binary()
    if isinstance(value, str):
        return Vector.from_text(value).to_binary()
    return vector_binary(value)  # type: ignore[arg-type]


_CLOSING: set[asyncio.Future[Any]] = set()
"""Connections a cancelled read is closing (PooledStatements.fetch): a strong reference, so a
close whose caller stopped waiting is not garbage-collected before it ends."""


def _closed_quietly(closing: asyncio.Future[Any]) -> None:
    """A cancelled read's close is done: forgotten, and its failure (if any: the connection
    is gone either way) logged rather than left for asyncio to report as never retrieved."""
    _CLOSING.discard(closing)
    if not closing.cancelled() and closing.exception() is not None:
        logger.debug("db.cancelled_read_close_failed", exc_info=closing.exception())


class PooledStatements:
    """Statements complete in themselves, each its own transaction, on ``engine``'s pool: the
    search paths' reads (unit_of_work.pooled_reads) and upsert_fact's one-statement write
    (unit_of_work.pooled_write), which open them and translate their errors.

    ``fetch``: a statement compiled for the driver (repositories.statements.fetch_rows)
    takes a pooled connection for itself alone and runs on its asyncpg driver: no SQLAlchemy
    Connection made and closed, nor its isolation level set and reset, around it — 24 µs a
    checkout against 69 for unit_of_work.single_statement (measured, docs/benchmarks.md).
    Without ``hold`` the connection is back in the pool as soon as the rows are read. Without
    a transaction each statement is its own, as on single_statement's autocommit connection.

    ``hold``: the first fetch's connection is kept for the next ones, until ``release`` (a
    lane of unified search reads its stores one after the other: one checkout for the lane
    instead of one a statement, ~50 µs each with its checkin). Never for reads that may run
    concurrently.

    ``execute`` and ``scalar``: any other statement, on an autocommit SQLAlchemy connection of
    its own, its result read in full (if it returns rows) before the connection goes back."""

    __slots__ = ("_held", "engine", "hold")

    def __init__(self, engine: AsyncEngine, *, hold: bool = False) -> None:
        self.engine = engine
        self.hold = hold
        self._held: Any = None

    async def fetch(self, sql: str, args: Sequence[Any]) -> list[Any]:
        """The rows (asyncpg Records) of ``sql`` with positional ``args``."""
        fairy = self._held
        if fairy is None:
            fairy = await self.engine.raw_connection()
            if self.hold:
                self._held = fairy
        try:
            driver = fairy.driver_connection
            assert driver is not None
            return await driver.fetch(sql, *args)  # type: ignore[no-any-return]
        except BaseException as exc:
            driver = fairy.driver_connection
            if driver is not None and driver.is_closed():
                # Lost: never back in the pool, and, as SQLAlchemy does on a disconnect, every
                # connection pooled before it is replaced at its next checkout (a restart or a
                # dead network path took them too, maybe without an EOF the loop has seen).
                self.engine.sync_engine.pool._invalidate(fairy, exc)
                self._held = None
            elif not isinstance(exc, Exception):
                # Cancelled (a caller's timeout) mid-statement: the server may be halfway
                # through it — a statement parsed, its locks taken, its transaction open,
                # waiting for the rest of the protocol — and the pool's reset sends nothing
                # on a connection SQLAlchemy did not see used. Back in the pool, it would hold
                # those locks until its next checkout (DDL, and every reader queued behind
                # it, would wait). Discarded, as SQLAlchemy discards a connection a
                # cancellation interrupted: one reconnect. Only this one: the others are fine.
                # Through a greenlet, the driver closes it gracefully (2 s at most): first the
                # cancel request asyncpg queued reaches the server, which stops the statement
                # and drops its locks at once; a plain terminate drops that request and the
                # server runs the statement to its end before it sees the closed socket.
                # A task of its own, awaited shielded: a second cancellation ends the wait,
                # never the close (cut short, the close drops the cancel request too).
                self._held = None
                closing = asyncio.ensure_future(greenlet_spawn(fairy.invalidate, exc))
                _CLOSING.add(closing)
                closing.add_done_callback(_closed_quietly)
                fairy = None  # checked in by the invalidation
                await asyncio.shield(closing)
            raise
        finally:
            if fairy is not None and fairy is not self._held:
                # Through a greenlet: the pool may close the connection (overflow), which
                # awaits.
                await greenlet_spawn(fairy.close)

    async def release(self) -> None:
        """Give the held connection (if any) back to the pool."""
        fairy, self._held = self._held, None
        if fairy is not None:
            await greenlet_spawn(fairy.close)

    async def execute(self, statement: Executable, params: Any = None) -> Result[Any]:
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            result = await conn.execute(statement, params)
            if not result.returns_rows:  # a write without RETURNING: nothing left to read
                return result
            return result.freeze()()

    async def scalar(self, statement: Executable, params: Any = None) -> Any:
        return (await self.execute(statement, params)).scalar()


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the connected server offers, as the probe found it."""

    server_version: str
    server_version_num: int
    vector: bool
    vector_version: str | None
    vector_available: str | None
    pg_trgm: bool
    pg_trgm_version: str | None
    revision: str | None
    hnsw_iterative_scan: str | None = "relaxed_order"
    """What this connection's ``hnsw.iterative_scan`` is (vector_search_settings sets it)."""
    pg_trgm_available: str | None = None
    """The pg_trgm version the server could create (None: the server does not ship it)."""

    @property
    def vector_version_tuple(self) -> tuple[int, ...] | None:
        if self.vector_version is None:
            return None
        return tuple(int(part) for part in re.findall(r"\d+", self.vector_version)[:3])


async def probe(engine: AsyncEngine) -> Capabilities:
    """Ask the server its version, which extensions it has, and the schema revision."""
    try:
        async with engine.connect() as conn:
            return await _probe(conn)
    except DRIVER_ERRORS as exc:
        raise connection_error(exc, engine.url, probing=True) from exc


_MISSING_DATABASE = "3D000"
_LOGIN_REFUSED = frozenset({"28000", "28P01"})  # no such role / wrong password
_NO_PRIVILEGE = "42501"
_STARTUP_OPTION_REFUSED = frozenset({"42704", "22023"})  # unknown parameter / bad value
_CANCELLED = "57014"  # a statement timeout, or a cancel request


def connection_error(
    exc: BaseException, url: str | URL, *, probing: bool = False
) -> ConfigError | StorageError:
    """What a failed connection means, for a person: a database that does not exist and a
    refused login are configuration errors (DATABASE_URL names the wrong thing), anything else
    is a server that cannot be reached.

    ``probing``: ``exc`` came from probe's few reads, so the server was reached if it answered
    with an error: a role without grants and a startup option it refuses (DATABASE_URL's
    ``options``) are configuration errors too; a cancelled or refused probe is a StorageError
    saying so. Elsewhere (a migration's DDL) the same SQLSTATEs mean other things."""
    where = redact_url(url)
    sqlstate = _sqlstate(exc)
    detail = getattr(exc, "orig", None) or exc  # the driver's error, without SQLAlchemy's
    reason = _first_line(detail)
    if sqlstate == _MISSING_DATABASE:
        database = _database_name(url)
        return ConfigError(
            f"the database {database!r} does not exist on the server at {where}: create it "
            f"(createdb {database}, or CREATE DATABASE as a superuser), or point DATABASE_URL at "
            "an existing one; then run `navi-memory migrate`"
        )
    if sqlstate in _LOGIN_REFUSED:
        return ConfigError(
            f"the server at {where} refused the login ({reason}): check the user and password "
            "in DATABASE_URL"
        )
    if probing and sqlstate == _NO_PRIVILEGE:
        parsed = make_url(url)
        role = _query_value(parsed, "user") or parsed.username or "<role>"
        grant = (
            f"GRANT CONNECT ON DATABASE {_database_name(url)} TO {role}"
            if "for database" in reason
            else f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; "
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}"
        )
        return ConfigError(
            f"the role {role!r} may not use the database at {where} ({reason}): connect as "
            f"the role that ran `navi-memory migrate`, or grant this one access as that role: "
            f"{grant}"
        )
    if probing and sqlstate in _STARTUP_OPTION_REFUSED:
        return ConfigError(
            f"the server at {where} refused a startup option ({reason}): correct or remove it "
            "in DATABASE_URL's options parameter (options=-c%20name%3Dvalue)"
        )
    if probing and sqlstate == _CANCELLED:
        hint = (
            ": statement_timeout is too short for navi-memory's statements; raise it (in "
            "DATABASE_URL's options parameter, or ALTER ROLE / ALTER DATABASE ... SET "
            "statement_timeout)"
            if "statement timeout" in reason
            else ""
        )
        return StorageError(f"the server at {where} cancelled the start-up probe ({reason}){hint}")
    if is_connection_lost(exc):
        return ConnectionLostError(
            f"cannot reach PostgreSQL at {where}: {detail.__class__.__name__}: {reason}"
        )
    if probing and sqlstate is not None:  # the server was reached, and refused
        return StorageError(
            f"the server at {where} refused the start-up probe: "
            f"{detail.__class__.__name__}: {reason}"
        )
    return StorageError(
        f"cannot reach PostgreSQL at {where}: {detail.__class__.__name__}: {reason}"
    )


def _query_value(url: URL, key: str) -> str | None:
    """The URL's query option ``key`` (its last value when given more than once)."""
    value = url.query.get(key)
    return value if value is None or isinstance(value, str) else value[-1]


def _database_name(url: str | URL) -> str:
    """The database ``url`` connects to: its ``dbname`` or ``database`` option, else its
    path's (as connect_options reads them)."""
    parsed = make_url(url)
    for key in _DATABASE_OPTIONS:
        if value := _query_value(parsed, key):
            return value
    return parsed.database or "<database>"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


async def _probe(conn: AsyncConnection) -> Capabilities:
    row = (
        await conn.execute(
            text(
                "SELECT current_setting('server_version'), "
                "current_setting('server_version_num')::int, "
                "(SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
                "(SELECT default_version FROM pg_available_extensions WHERE name = 'vector'), "
                "(SELECT extversion FROM pg_extension WHERE extname = 'pg_trgm'), "
                "to_regclass('alembic_version') IS NOT NULL, "
                "current_setting('hnsw.iterative_scan', true), "
                "(SELECT default_version FROM pg_available_extensions WHERE name = 'pg_trgm')"
            )
        )
    ).one()
    revision = None
    if row[5]:
        revision = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    return Capabilities(
        server_version=row[0],
        server_version_num=row[1],
        vector=row[2] is not None,
        vector_version=row[2],
        vector_available=row[3],
        pg_trgm=row[4] is not None,
        pg_trgm_version=row[4],
        revision=revision,
        hnsw_iterative_scan=row[6],
        pg_trgm_available=row[7],
    )


def check_capabilities(caps: Capabilities, url: str | URL) -> None:
    """Refuse a server without pgvector >= 0.8 or a schema that is not at head."""
    where = redact_url(url)
    minimum = ".".join(str(part) for part in MIN_PGVECTOR)
    if not caps.vector:
        if caps.vector_available is None:
            raise SchemaError(
                f"PostgreSQL at {where} has no pgvector extension available: install pgvector "
                f">= {minimum} on the server (e.g. the "
                f"postgresql-{caps.server_version_num // 10000}-pgvector package), "
                "then run `navi-memory migrate`"
            )
        raise SchemaError(
            f"the vector extension is not created in the database at {where}: "
            "run `navi-memory migrate` (it creates it)"
        )
    version = caps.vector_version_tuple or ()
    if version < MIN_PGVECTOR:
        raise SchemaError(
            f"pgvector {caps.vector_version} at {where} is too old: navi-memory needs >= "
            f"{minimum} (iterative index scans); upgrade the pgvector package on the server, then "
            "run ALTER EXTENSION vector UPDATE"
        )
    if caps.revision is not None and caps.revision not in SCHEMA_REVISIONS:
        raise newer_schema_error(caps.revision, url)
    if caps.revision != SCHEMA_HEAD:
        found = caps.revision or "no schema"
        raise SchemaError(
            f"the database at {where} is at revision {found}, this code needs {SCHEMA_HEAD}: "
            "run `navi-memory migrate` (or `alembic upgrade head` in a checkout)"
        )
    if caps.hnsw_iterative_scan not in ("relaxed_order", "strict_order"):
        # Without it a per-user HNSW scan silently returns too few hits.
        database = _database_name(url)
        raise ConfigError(
            f"the connections to {where} do not carry hnsw.iterative_scan = relaxed_order "
            f"(found {caps.hnsw_iterative_scan or 'nothing'}): a pooler dropping startup "
            "parameters (PgBouncer in transaction mode)? Set them on the database: ALTER "
            f"DATABASE {database} SET hnsw.iterative_scan = relaxed_order; ALTER DATABASE "
            f"{database} SET hnsw.ef_search = <HNSW_EF_SEARCH, 100 by default>"
        )


def newer_schema_error(revision: str, url: str | URL) -> SchemaError:
    """A database a newer release migrated (a rollback, a rolling deploy): migrate cannot take
    it back, only a navi-memory that knows its revision can use it."""
    return SchemaError(
        f"the database at {redact_url(url)} was migrated by a newer navi-memory (revision "
        f"{revision}); this one knows revisions up to {SCHEMA_HEAD}: upgrade navi-memory to "
        "the release that migrated it (`navi-memory migrate` cannot take a schema back)"
    )


TRGM_LOCK: Final = 7_265_310_442_517_000_001
"""The transaction-level advisory lock (a bigint key, per database) the process creating the
pg_trgm indexes holds: processes starting together do not build them twice."""


async def ensure_trgm_indexes(engine: AsyncEngine) -> list[str]:
    """Create the pg_trgm indexes that are missing, when pg_trgm is installed. Returns created.

    Best effort: the indexes only speed up the fact listings' text filter, which works without
    them, so a start-up never fails for them. A role that does not own memory_facts (CREATE
    INDEX needs the owner), or any other refusal, is logged (``db.trgm_indexes_skipped``) and
    start-up goes on; a process that finds another one creating them leaves it to that one."""
    try:
        created = await _ensure_trgm_indexes(engine)
    except DRIVER_ERRORS as exc:
        # Each index is CREATE INDEX IF NOT EXISTS: the next start tries again.
        reason = translate_driver_error(exc, engine, committing=False)
        logger.warning(
            "db.trgm_indexes_skipped: pg_trgm is installed but its indexes on memory_facts "
            "could not be created (%s); the fact listings' text filter works without them, "
            "only slower. Start navi-memory once as the role that owns memory_facts (the one "
            "that ran `navi-memory migrate`) to create them",
            reason,
            extra={"event": "db.trgm_indexes_skipped", "reason": str(reason)},
        )
        return []
    if created:
        logger.info("db.trgm_indexes_created", extra={"indexes": created})
    return created


async def missing_trgm_indexes(conn: AsyncConnection) -> list[str]:
    """TRGM_INDEXES that memory_facts lacks (doctor reports them; the next open makes them)."""
    present = set(
        (
            await conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_facts'")
            )
        ).scalars()
    )
    return [name for name in TRGM_INDEXES if name not in present]


async def _ensure_trgm_indexes(engine: AsyncEngine) -> list[str]:
    created: list[str] = []
    async with engine.begin() as conn:
        installed = (
            await conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"))
        ).scalar()
        if not installed:
            return created
        if not await missing_trgm_indexes(conn):
            return created
        # Two processes creating one index at once: one of them failed on the catalog's
        # unique name (IF NOT EXISTS checks before it inserts). One builds, the others go on.
        locked = await conn.execute(text(f"SELECT pg_try_advisory_xact_lock({TRGM_LOCK})"))
        if not locked.scalar():
            return created
        # Read again under the lock: a process that held it before may have built them (and
        # they are not this one's to report as created).
        for name in await missing_trgm_indexes(conn):
            await conn.execute(
                text(
                    f"CREATE INDEX IF NOT EXISTS {name} ON memory_facts "
                    f"USING gin ({TRGM_INDEXES[name]} gin_trgm_ops)"
                )
            )
            created.append(name)
    return created


# --- closing a Memory's engines (open_memory's end) ---------------------------------------


MEMORY_CLOSED: Final = (
    "this Memory is closed (its open_memory() block has ended): make the call inside the "
    "block, or open a new Memory"
)
"""What every call of a closed Memory raises (a StorageError)."""


def _closed(*_: object, **__: object) -> None:
    """A checkout or connection of a closed Memory's engines (``refuse_connections``)."""
    raise StorageError(MEMORY_CLOSED)


async def drain_engines(*engines: AsyncEngine) -> None:
    """Until the calls in flight have given their connections back, MEMORY_CLOSE_GRACE_SECONDS
    at most: disposing drops only the connections in the pool, and one still out would outlive
    it, to be closed by the garbage collector."""
    loop = asyncio.get_running_loop()
    drained = asyncio.Event()

    def check() -> None:
        if not any(_checked_out(engine) for engine in engines):
            drained.set()

    def checked_in(*_: object) -> None:
        loop.call_soon(check)  # the pool counts the connection back in after its event

    pools = [engine.sync_engine.pool for engine in engines]
    for pool in pools:
        event.listen(pool, "checkin", checked_in)
    try:
        check()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.wait(), MEMORY_CLOSE_GRACE_SECONDS)
    finally:
        for pool in pools:
            event.remove(pool, "checkin", checked_in)


_LOOPS: weakref.WeakKeyDictionary[Engine, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()
"""The event loop each Memory's engines were opened in (``bind_to_loop``)."""

OTHER_LOOP: Final = (
    "this Memory was opened in another event loop: asyncio connections belong to the loop that "
    "made them; call it from that loop (or open a Memory in this one)"
)


def bind_to_loop(loop: asyncio.AbstractEventLoop, *engines: AsyncEngine) -> None:
    """``engines`` belong to ``loop`` (the one that opened the Memory): ``check_loop``
    refuses a call from another. asyncpg's connections belong to the loop that made them, and
    such a call failed with a bare RuntimeError, the connection left mid-operation."""
    for engine in engines:
        _LOOPS[engine.sync_engine] = loop


def check_loop(engine: AsyncEngine | None) -> None:
    """A StorageError when ``engine`` was bound to another event loop than the running one
    (before any connection is taken: nothing to clean up)."""
    if engine is None:
        return
    bound = _LOOPS.get(engine.sync_engine)
    if bound is not None and bound is not asyncio.get_running_loop():
        raise StorageError(OTHER_LOOP)


def refuse_connections(*engines: AsyncEngine) -> None:
    """From now on every checkout and connection of ``engines`` is refused: a call made on
    the closed Memory is a StorageError saying so, not a fresh pool that nothing disposes."""
    for engine in engines:
        event.listen(engine.sync_engine.pool, "checkout", _closed)
        event.listen(engine.sync_engine, "do_connect", _closed)


async def dispose_engines(*engines: AsyncEngine) -> None:
    """Dispose every one of ``engines``, the others too when one fails."""
    first, *rest = engines
    try:
        await first.dispose()
    finally:
        for engine in rest:
            await engine.dispose()


def _checked_out(engine: AsyncEngine) -> int:
    checked_out = getattr(engine.sync_engine.pool, "checkedout", None)
    return int(checked_out()) if callable(checked_out) else 0
