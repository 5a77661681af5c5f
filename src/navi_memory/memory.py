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
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.db import (
    Capabilities,
    check_capabilities,
    create_engine,
    create_sessionmaker,
    ensure_trgm_indexes,
    probe,
    resolve_database_url,
)
from navi_memory.facades.kv import KvStore
from navi_memory.facades.sessions import SessionStore
from navi_memory.facades.store import MemoryStore
from navi_memory.facades.users import Users
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.llm import (
    ChatModel,
    Embedder,
    OllamaChatModel,
    OllamaEmbedder,
    guard_chat_model,
    guard_embedder,
)
from navi_memory.services.chunks import ChunkService
from navi_memory.services.embedding import EmbeddingService

__all__ = ["Memory", "open_memory"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Memory:
    """Everything navi-memory offers, bound to one database."""

    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    capabilities: Capabilities
    embedder: Embedder
    chat_model: ChatModel
    users: Users
    store: MemoryStore
    sessions: SessionStore
    kv: KvStore


@asynccontextmanager
async def open_memory(
    settings: Settings | None = None,
    *,
    embedder: Embedder | None = None,
    chat_model: ChatModel | None = None,
) -> AsyncIterator[Memory]:
    """Open navi-memory on ``settings.database_url`` (unset: the embedded PostgreSQL).

    ``embedder`` and ``chat_model`` replace the Ollama clients built from the settings (they
    are then the caller's to close); no model is contacted until a call needs one.

    Refuses, with a SchemaError saying what to do, a server without pgvector >= 0.8 or a schema
    that is not at head; a server that cannot be reached is a StorageError naming the URL.
    """
    settings = settings or Settings()
    url = await asyncio.to_thread(resolve_database_url, settings)
    engine = create_engine(settings, url)
    owned_embedder, owned_chat = embedder is None, chat_model is None
    # Any model, ours or the caller's, fails the same way: a navi_memory error within the
    # configured timeout, junk answers refused (#9: a custom model was trusted).
    embedder = guard_embedder(embedder or OllamaEmbedder.from_settings(settings), settings)
    chat_model = guard_chat_model(chat_model or OllamaChatModel.from_settings(settings), settings)
    try:
        capabilities = await probe(engine)
        check_capabilities(capabilities, engine.url)
        if capabilities.pg_trgm:
            await ensure_trgm_indexes(engine)
        sessionmaker = create_sessionmaker(engine)
        # One chunk service and one indexer, shared: compression writes its chunks through
        # the same service as add_chunks, and their vectors share one queue drain.
        chunks = ChunkService.from_settings(settings, embedding=EmbeddingService(embedder))
        indexer = ChunkIndexer(
            sessionmaker,
            batch_size=settings.chunk_index_batch_size,
            background=settings.chunk_index_in_background,
        )
        store = MemoryStore(
            sessionmaker=sessionmaker,
            settings=settings,
            embedder=embedder,
            chunks=chunks,
            indexer=indexer,
        )
        memory = Memory(
            settings=settings,
            engine=engine,
            sessionmaker=sessionmaker,
            capabilities=capabilities,
            embedder=embedder,
            chat_model=chat_model,
            users=Users(sessionmaker),
            store=store,
            sessions=SessionStore(
                sessionmaker=sessionmaker,
                settings=settings,
                chat_model=chat_model,
                chunks=chunks,
                indexer=indexer,
            ),
            kv=KvStore(sessionmaker=sessionmaker),
        )
        try:
            yield memory
        finally:
            await store.aclose()
    finally:
        if owned_chat:
            await chat_model.aclose()
        if owned_embedder:
            await embedder.aclose()
        await engine.dispose()
