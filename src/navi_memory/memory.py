"""open_memory(): the entry point. It connects (or starts the embedded server), checks the schema
and hands back a Memory that holds every facade; on exit it disposes all it opened.

Wiring only: the facades, the services two of them share and the jobs they start are built
here and passed in as typed constructor arguments; nothing in the package imports this module
except the package itself and the entry points (cli, demo).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings, load_settings
from navi_memory.constants import EMBEDDING_MODEL_RECHECK_SECONDS
from navi_memory.db import (
    Capabilities,
    bind_to_loop,
    check_capabilities,
    create_engine,
    create_sessionmaker,
    dispose_engines,
    drain_engines,
    ensure_trgm_indexes,
    probe,
    refuse_connections,
    resolve_database_url,
)
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.facades.admin import Admin
from navi_memory.facades.context import ContextBuilder
from navi_memory.facades.extractor import Extractor
from navi_memory.facades.kv import KvStore
from navi_memory.facades.search import UnifiedMemorySearch
from navi_memory.facades.sessions import SessionStore
from navi_memory.facades.store import MemoryStore
from navi_memory.facades.users import Users
from navi_memory.jobs.backfill import Backfill
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.embedding_model import EmbeddingModelRecord, Reembed
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.jobs.stale_sessions import BackgroundExtraction, StaleSessionSweep
from navi_memory.llm import (
    ChatModel,
    Embedder,
    OllamaChatModel,
    embedder_from_settings,
    embedding_model_name,
    guard_chat_model,
    guard_embedder,
)
from navi_memory.llm.embedder import canonical_model_name
from navi_memory.services.chunks import ChunkService
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.extraction import ExtractionService
from navi_memory.services.facts import FactService
from navi_memory.services.search import UnifiedSearchService
from navi_memory.tools import MemoryTools, memory_tools

__all__ = ["Memory", "open_memory"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Memory:
    """Everything navi-memory offers, bound to one database."""

    settings: Settings
    engine: AsyncEngine
    cached_plans_engine: AsyncEngine
    """Where statements whose plan is the same for every user run (db.create_engine)."""
    sessionmaker: async_sessionmaker[AsyncSession]
    capabilities: Capabilities
    embedder: Embedder | None
    """None in text-only mode (EMBEDDING_MODEL=none, or open_memory(embedder=False))."""
    chat_model: ChatModel
    users: Users
    store: MemoryStore
    sessions: SessionStore
    kv: KvStore
    extractor: Extractor
    search: UnifiedMemorySearch
    context: ContextBuilder
    """Each model call's prompt: ``build(session_id, incoming, system_prompt=...)``."""
    tools: MemoryTools
    """The agent's memory tools: ``specs()`` for the model, ``call(name, arguments, context)``."""
    admin: Admin
    """Operators' calls (stats, purge_expired, export_user, import_user, reembed); need
    read_all."""


def _check_arguments(settings: object, embedder: object, chat_model: object) -> None:
    """Refuse what cannot be a Settings or a model at once, not at the first call that uses it
    (a model that is one but misbehaves is the guard's business)."""
    if settings is not None and not isinstance(settings, Settings):
        raise InvalidTypeError(
            f"settings must be a navi_memory.Settings, got {type(settings).__name__}: "
            "open_memory(Settings(database_url=...))"
        )
    for name, value, methods in (
        ("embedder", embedder, ("embed_documents", "embed_query")),
        ("chat_model", chat_model, ("complete",)),
    ):
        if value is None or (name == "embedder" and value is False):  # False: text-only mode
            continue
        if not all(callable(getattr(value, m, None)) for m in methods):
            raise InvalidTypeError(
                f"{name} must have {' and '.join(methods)} methods, got {type(value).__name__}"
            )


class _OpenOnce(AbstractAsyncContextManager[Memory]):
    """``open_memory``'s context manager, entered once: a second ``async with`` on the same
    object was contextlib's AttributeError (a generator cannot start twice)."""

    def __init__(self, opening: AbstractAsyncContextManager[Memory]) -> None:
        self._opening = opening
        self._entered = False

    async def __aenter__(self) -> Memory:
        if self._entered:
            raise InvalidInputError(
                "this open_memory(...) was entered already: call open_memory() again for "
                "another Memory"
            )
        self._entered = True
        return await self._opening.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._opening.__aexit__(exc_type, exc, tb)


def open_memory(
    settings: Settings | None = None,
    *,
    embedder: Embedder | Literal[False] | None = None,
    chat_model: ChatModel | None = None,
) -> AbstractAsyncContextManager[Memory]:
    """Open navi-memory on ``settings.database_url`` (unset: the embedded PostgreSQL).

    ``embedder`` and ``chat_model`` replace the Ollama clients built from the settings (they
    are then the caller's to close); no model is contacted until a call needs one.
    ``embedder=False`` (or EMBEDDING_MODEL=none with no embedder passed) is text-only mode: no
    embedding client at all, rows stored without vectors, every search a text search.

    Without ``settings``, reads them from the environment (a malformed value: ConfigError).
    Refuses, with a SchemaError saying what to do, a server without pgvector >= 0.8 or a schema
    that is not at head; a server that cannot be reached is a StorageError naming the URL.
    The object it returns is entered once (again: an InvalidInputError).
    """
    return _OpenOnce(_opened(settings, embedder=embedder, chat_model=chat_model))


@asynccontextmanager
async def _opened(
    settings: Settings | None,
    *,
    embedder: Embedder | Literal[False] | None,
    chat_model: ChatModel | None,
) -> AsyncIterator[Memory]:
    """``open_memory``'s work, from its ``async with`` to its end."""
    _check_arguments(settings, embedder, chat_model)
    # From the environment: a malformed value is one ConfigError line naming the variable.
    settings = settings or load_settings()
    url = await asyncio.to_thread(resolve_database_url, settings)
    engine = create_engine(settings, url)
    cached_plans = create_engine(settings, url, cached_plans=True)
    bind_to_loop(asyncio.get_running_loop(), engine, cached_plans)
    owned_embedder, owned_chat = embedder is None, chat_model is None
    text_only = embedder is False or (embedder is None and settings.text_only)
    # Any model, ours or the caller's, fails the same way: a navi_memory error within the
    # configured timeout, junk answers refused (#9: a custom model was trusted).
    guarded: Embedder | None = None
    if not text_only:
        guarded = guard_embedder(embedder or embedder_from_settings(settings), settings)
    else:
        logger.info(
            "memory.text_only: no embedding model (%s): rows are stored without vectors and "
            "every search is a text search",
            "EMBEDDING_MODEL=none" if embedder is None else "open_memory(embedder=False)",
            extra={"event": "memory.text_only"},
        )
    chat_model = guard_chat_model(chat_model or OllamaChatModel.from_settings(settings), settings)
    try:
        capabilities = await probe(engine)
        check_capabilities(capabilities, engine.url)
        if capabilities.pg_trgm:
            await ensure_trgm_indexes(engine)
        sessionmaker = create_sessionmaker(engine)
        # One embedding service, one chunk service and one indexer, shared: compression writes
        # its chunks through the same service as add_chunks, their vectors share one queue
        # drain, and a failing model is reported once for all of them.
        # The model the stored vectors were made by: recorded by the first vector write, read
        # here and again every EMBEDDING_MODEL_RECHECK_SECONDS. Another model's vectors stored
        # (a model mismatch, logged once): the embedding service makes no vector meanwhile.
        record: EmbeddingModelRecord | None = None
        if guarded is not None:
            model = (
                canonical_model_name(settings.embedding_model)
                if embedder is None
                else embedding_model_name(guarded)
            )
            record = EmbeddingModelRecord(
                sessionmaker,
                model=model,
                recheck_seconds=EMBEDDING_MODEL_RECHECK_SECONDS,
                passed_in_code=embedder is not None,
            )
            await record.recheck()
        embedding = EmbeddingService(
            guarded,
            recorder=record,
            pause_seconds=settings.embedding_pause_seconds,
            hang_seconds=settings.embedding_timeout_seconds / 2,
        )
        chunks = ChunkService.from_settings(settings, embedding=embedding)
        indexer = ChunkIndexer.from_settings(sessionmaker, settings)
        fact_indexer = FactIndexer(
            sessionmaker,
            batch_size=settings.fact_index_batch_size,
            background=settings.fact_index_in_background,
        )
        # One sweep: on demand (memory.extractor), and in the background for a user who starts
        # a session; the background tasks end with the Memory.
        sweep = StaleSessionSweep(
            sessionmaker,
            settings=settings,
            service=ExtractionService(
                chat_model=chat_model, embedding=embedding, facts=FactService()
            ),
            fact_indexer=fact_indexer,
            # Claims are held for a whole extraction: on the other pool than the one its
            # transactions draw from (StaleSessionSweep).
            claims=cached_plans,
        )
        background = BackgroundExtraction(sweep)
        backfill = Backfill(
            sessionmaker,
            embedder=guarded,
            indexer=indexer,
            fact_indexer=fact_indexer,
            recorder=record,
        )
        store = MemoryStore(
            sessionmaker=sessionmaker,
            settings=settings,
            embedder=guarded,
            embedding=embedding,
            chunks=chunks,
            indexer=indexer,
            fact_indexer=fact_indexer,
            backfill=backfill,
            cached_plans=cached_plans,
        )
        kv = KvStore(sessionmaker=sessionmaker)
        unified = UnifiedSearchService.from_settings(settings, prune_hints=chunks.prune_hints)
        search = UnifiedMemorySearch(
            sessionmaker=sessionmaker,
            embedding=embedding,
            service=unified,
            cached_plans=cached_plans,
        )
        context = ContextBuilder(
            sessionmaker=sessionmaker,
            settings=settings,
            embedding=embedding,
            search=unified,
            cached_plans=cached_plans,
        )
        memory = Memory(
            settings=settings,
            engine=engine,
            cached_plans_engine=cached_plans,
            sessionmaker=sessionmaker,
            capabilities=capabilities,
            embedder=guarded,
            chat_model=chat_model,
            users=Users(sessionmaker),
            store=store,
            sessions=SessionStore(
                sessionmaker=sessionmaker,
                settings=settings,
                chat_model=chat_model,
                chunks=chunks,
                indexer=indexer,
                extraction=background if settings.memory_extract_on_create else None,
            ),
            kv=kv,
            extractor=Extractor(sweep=sweep, background=background),
            search=search,
            context=context,
            tools=memory_tools(store=store, search=search, kv=kv, shown=context),
            admin=Admin(
                sessionmaker=sessionmaker,
                indexer=indexer,
                fact_indexer=fact_indexer,
                reembed=Reembed(record=record, backfill=backfill),
                embedding_model=None if record is None else record.model,
                backfill_pause_seconds=settings.backfill_pause_seconds,
            ),
        )
        try:
            yield memory
        finally:
            try:
                await background.aclose()
            finally:
                await store.aclose()
    finally:
        try:
            # The calls still in flight finish first, with the models they may need.
            await drain_engines(engine, cached_plans)
        finally:
            refuse_connections(engine, cached_plans)
            try:
                try:
                    if owned_chat:
                        await chat_model.aclose()
                finally:
                    if owned_embedder and guarded is not None:
                        await guarded.aclose()
            finally:
                await dispose_engines(engine, cached_plans)
