"""memory.admin: an operator's calls, for the CLI and for a host's admin endpoint: stats,
purging expired facts, one user's memory exported and imported, and every vector made again.

Every call needs ``navi.memory.read_all`` (DESIGN: tenancy), and on top of it the rules of
any read or write: ``user_id=None`` means the current user when there is one (every user only
when the request acts for nobody), and a call that writes into a user — purge_expired and
import_user, whose target may come from the export's header — is refused when the request acts
for another user, read_all or not.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.constants import (
    BACKFILL_BATCH_SIZE,
    BACKFILL_PAUSE_MAX_SECONDS,
    BATCH_SIZE_MAX,
    PERMISSION_READ_ALL,
    STATS_USERS_DEFAULT,
)
from navi_memory.errors import ConfigError, PermissionDeniedError
from navi_memory.jobs.backfill import ProgressCallback
from navi_memory.jobs.chunk_indexer import ChunkIndexer
from navi_memory.jobs.embedding_model import Reembed
from navi_memory.jobs.fact_indexer import FactIndexer
from navi_memory.request_context import (
    as_user_id,
    current_user_id,
    has_permission,
    read_scope,
    write_scope,
)
from navi_memory.schemas import ExportRecord, ImportResult, MemoryStats, PurgeResult
from navi_memory.services.facts import FactService
from navi_memory.services.stats import StatsService
from navi_memory.services.transfer import TransferService, export_header, parse_records
from navi_memory.unit_of_work import engine_of, unit_of_work
from navi_memory.validation import check_batch_job, check_bool, check_int, check_optional_text

__all__ = ["Admin"]


def _require_admin(what: str) -> None:
    if not has_permission(PERMISSION_READ_ALL):
        raise PermissionDeniedError(f"{what} is an operator's call and needs {PERMISSION_READ_ALL}")


def _write_target(user_id: uuid.UUID | str | None) -> uuid.UUID | None:
    """The user an admin write goes to, by write_scope's rule (the one named, else the current
    one; never another than the current one); None, every user, only when acting for nobody."""
    if user_id is None and current_user_id() is None:
        return None
    return write_scope(user_id)


class Admin:
    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        indexer: ChunkIndexer,
        fact_indexer: FactIndexer | None = None,
        reembed: Reembed | None = None,
        embedding_model: str | None = None,
        backfill_pause_seconds: float = 0.0,
    ) -> None:
        """``reembed`` None: this Admin cannot re-embed (open_memory always passes one)."""
        self._sessionmaker = sessionmaker
        self._reembed = reembed
        self._embedding_model = embedding_model
        self._pause_seconds = backfill_pause_seconds
        # An export reads many tables: one snapshot, so a concurrent write cannot tear it.
        self._snapshot = async_sessionmaker(
            engine_of(sessionmaker).execution_options(isolation_level="REPEATABLE READ"),
            expire_on_commit=False,
        )
        self._indexer = indexer
        self._fact_indexer = fact_indexer
        self._stats = StatsService()
        self._facts = FactService()
        self._transfer = TransferService()

    async def stats(
        self, user_id: uuid.UUID | str | None = None, *, users: int = STATS_USERS_DEFAULT
    ) -> MemoryStats:
        """Rows per table, vectors missing, every vector-index backlog, hidden and expired
        facts; per user for ``user_id``, or for the ``users`` users holding the most rows."""
        _require_admin("stats")
        uid = read_scope(user_id)
        users = check_int("users", users, minimum=1)
        async with unit_of_work(self._snapshot, read_only=True) as session:
            return await self._stats.stats(
                session, uid, users=users, graph_from=self._indexer.graph_from
            )

    async def purge_expired(
        self, user_id: uuid.UUID | str | None = None, *, dry_run: bool = False
    ) -> PurgeResult:
        """Delete the facts past their expiry — every user's, or ``user_id``'s. The rows hidden
        behind them that have not expired are kept and brought back (docs/memory.md, "Expiry
        and merges"). Expired facts are invisible already; this frees their rows (and forgoes
        reviving one by saving the same value again). Acting for a user, None means
        that user, and another user's id is refused.

        Every user's purge goes user by user, each committed before the next (one user's
        category locks at a time, never every user's in one transaction), then once over what
        is left: the legacy rows without a user, and facts that expired meanwhile.
        Interrupted, the users done stay purged; a rerun does the rest."""
        _require_admin("purge_expired")
        uid = _write_target(user_id)
        dry_run = check_bool("dry_run", dry_run)
        # Only one user's purge writes here; a dry run counts, and every user's purge reads
        # the owners here and writes in the transactions below.
        only_reads = dry_run or uid is None
        async with unit_of_work(self._sessionmaker, read_only=only_reads) as session:
            if uid is not None or dry_run:
                expired, hidden = await self._facts.purge_expired(session, uid, dry_run=dry_run)
                return PurgeResult(expired=expired, hidden=hidden, dry_run=dry_run)
            owners = await self._facts.owners_of_expired(session)
        expired = hidden = 0
        for owner in [*owners, None]:
            async with unit_of_work(self._sessionmaker) as session:
                counts = await self._facts.purge_expired(session, owner, dry_run=False)
            expired, hidden = expired + counts[0], hidden + counts[1]
        return PurgeResult(expired=expired, hidden=hidden, dry_run=dry_run)

    async def export_user(
        self, user_id: uuid.UUID | str, *, with_vectors: bool = False
    ) -> list[ExportRecord]:
        """Everything the user owns, as records (a JSON Lines file holds one per line): the
        header, facts (hidden ones too, linked by ref), summary, chunks, sessions with their
        messages, extraction states and key/value entries (sketches). Vectors only with
        ``with_vectors``; without them an import leaves them to backfill."""
        _require_admin("export_user")
        uid = as_user_id(user_id)
        read_scope(uid)  # the read rule, as everywhere (read_all, required here, reads anyone)
        with_vectors = check_bool("with_vectors", with_vectors)
        async with unit_of_work(self._snapshot, read_only=True) as session:
            return await self._transfer.export(session, uid, with_vectors=with_vectors)

    async def import_user(
        self,
        records: Iterable[ExportRecord | Mapping[str, Any]],
        *,
        user_id: uuid.UUID | str | None = None,
        replace: bool = False,
        session_prefix: str | None = None,
    ) -> ImportResult:
        """Restore an export, into this or another database, in one transaction: all of it or
        nothing. ``user_id`` imports it as another user (default: the exported one). A user
        who holds memory already is refused unless ``replace`` (their memory is deleted
        first); session ids another user holds are refused unless ``session_prefix`` renames
        every session id of the import."""
        _require_admin("import_user")
        target = None if user_id is None else write_scope(user_id)
        replace = check_bool("replace", replace)
        session_prefix = check_optional_text("session_prefix", session_prefix, allow_empty=False)
        parsed = parse_records(records)
        if target is None:
            target = write_scope(export_header(parsed).user_id)
        async with unit_of_work(self._sessionmaker) as session:
            result = await self._transfer.import_(
                session,
                parsed,
                user_id=target,
                replace=replace,
                session_prefix=session_prefix,
                configured_model=self._embedding_model,
            )
        if result.rows.get("chunk"):
            self._indexer.kick()
        if result.rows.get("fact") and self._fact_indexer is not None:
            self._fact_indexer.kick()  # memory_facts' trigger queued their vectors
        return result

    async def reembed(
        self,
        batch_size: int = BACKFILL_BATCH_SIZE,
        *,
        pause_seconds: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Embed every fact and chunk again with the configured model, after a model change:
        once the model has answered one request (down: EmbeddingError, nothing cleared),
        clears every stored vector and the vector indexes' copies and queues in one
        transaction, records the configured model as the one that made the vectors, then runs
        the backfill (``store.backfill_embeddings``; same batches, pause and progress). Returns
        how many rows got a vector. Meanwhile the rows without one are found by text search;
        interrupted, ``backfill_embeddings`` finishes the work. Every user's rows: acting for
        nobody, with ``navi.memory.read_all``. Refused in text-only mode (ConfigError)."""
        _require_admin("reembed")
        if current_user_id() is not None:
            raise PermissionDeniedError(
                "reembed re-embeds every user's memory: call it acting for nobody (outside "
                "request_context(user_id=...)), with navi.memory.read_all"
            )
        batch_size, pause_seconds = check_batch_job(
            batch_size,
            self._pause_seconds if pause_seconds is None else pause_seconds,
            progress,
            batch_max=BATCH_SIZE_MAX,
            pause_max=BACKFILL_PAUSE_MAX_SECONDS,
        )
        if self._reembed is None:
            raise ConfigError("this Admin was built without a re-embedding job: use open_memory()")
        return await self._reembed.run(
            batch_size=batch_size, pause_seconds=pause_seconds, progress=progress
        )
