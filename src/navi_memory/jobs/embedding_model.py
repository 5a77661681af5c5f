"""The embedding model of record: recorded by the first vector write, read again at start-up and
at most every EMBEDDING_MODEL_RECHECK_SECONDS, and replaced by ``reembed``, which embeds
everything again.

Vectors of two models are not comparable. While the model of record is another than the
configured one and its vectors are stored (a model mismatch), the process makes no vector: rows
land without one and searches are text searches, as with the model down, until a ``reembed``
records the configured model (or EMBEDDING_MODEL goes back to the recorded one: ``backfill`` then
fills the rows). Logged once as ``memory.embedding_model_changed``; a doctor finding.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.constants import (
    EMBEDDING_MODEL_CLAIM_AFTER_SECONDS,
    EMBEDDING_MODEL_RECHECK_SECONDS,
)
from navi_memory.db import is_deadlock
from navi_memory.errors import ConfigError, StorageError
from navi_memory.jobs.backfill import Backfill, ProgressCallback
from navi_memory.llm.embedder import same_model
from navi_memory.repositories.embedding_model import EmbeddingModelRepository, RecordedModel
from navi_memory.unit_of_work import unit_of_work

__all__ = ["EmbeddingModelRecord", "ModelChange", "Reembed"]

logger = logging.getLogger(__name__)

REPLACE_DEADLOCK_RETRIES: Final = 3
"""How many times replace_vectors runs again after the server made it a deadlock's victim."""


@dataclass(frozen=True, slots=True)
class ModelChange:
    """Another model of record than the configured one, which stops this model's vectors."""

    recorded: str
    vectors_stored: bool
    """Vectors of ``recorded`` are stored; False: none yet, but the record is too young to be
    a leftover (a reembed's, or another process's just before its first vectors)."""


class EmbeddingModelRecord:
    """The model of record of one database, against ``model``, the configured one, as this
    process last saw it (read at most every ``recheck_seconds``).

    ``passed_in_code``: ``model`` names an embedder the application passed to open_memory,
    not EMBEDDING_MODEL. Then neither `navi-memory reembed` (it embeds with EMBEDDING_MODEL's
    model) nor setting EMBEDDING_MODEL (ignored) is a fix, and the messages say what is."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        model: str,
        recheck_seconds: float = EMBEDDING_MODEL_RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        passed_in_code: bool = False,
    ) -> None:
        self._sessionmaker = sessionmaker
        self.model = model
        self.passed_in_code = passed_in_code
        self._recheck_seconds = recheck_seconds
        self._clock = clock
        self._checked_at = -math.inf
        self._looked = False
        self._ours = False
        """The last look found ``model`` recorded (or this process recorded it)."""
        self._mismatch: str | None = None
        """The other model of record while this process makes no vectors."""
        self._claimable: RecordedModel | None = None
        """The record found at this process's first look, once it was recorded at least
        EMBEDDING_MODEL_CLAIM_AFTER_SECONDS before: when it is another model's, a leftover
        whose vectors may all be gone (their users deleted), replaced by the first vectors
        stored then. A younger record is never taken: a reembed clears every vector and
        records its model, and its first vectors come a batch later; another process may have
        recorded its model a moment before storing its first vectors. Forgotten once the
        record is seen to change (recorded_at too)."""

    @property
    def mismatch(self) -> str | None:
        """The model of record while it is another than ``model`` and this process makes no
        vectors (as of the last look); None otherwise."""
        return self._mismatch

    async def may_embed(self) -> bool:
        """Whether vectors of ``model`` may be made now: False in a model mismatch. Reads the
        record again when the last look is ``recheck_seconds`` old (one small query), else
        answers from memory: no database round trip per call."""
        now = self._clock()
        if now - self._checked_at >= self._recheck_seconds:
            await self._look(now)
        return self._mismatch is None

    async def recheck(self) -> str | None:
        """Read the record now (open_memory, at start-up); returns ``mismatch``. Entering a
        mismatch is logged once, as ``memory.embedding_model_changed``."""
        await self._look(self._clock())
        return self._mismatch

    async def _look(self, now: float) -> None:
        before, self._checked_at = self._checked_at, now  # concurrent callers wait for no read
        try:
            async with unit_of_work(self._sessionmaker, read_only=True) as session:
                repo = EmbeddingModelRepository(session=session)
                recorded = await repo.record()
                others = recorded is not None and not same_model(recorded.model, self.model)
                stored = others and await repo.vectors_exist()
                # Only the first look's age counts: a record young then (a reembed's, another
                # process's) was recorded on purpose, whatever its age later.
                old = others and not self._looked and await _old_enough(repo)
        except BaseException:
            self._checked_at = before  # the next call reads again
            raise
        self._seen(recorded, vectors_stored=stored, claimable=old)

    def _seen(
        self, recorded: RecordedModel | None, *, vectors_stored: bool, claimable: bool = False
    ) -> None:
        """The state ``recorded`` (with another model's vectors stored or not) puts it in;
        ``claimable``: at this process's first look, the record was old enough to be a
        leftover (EMBEDDING_MODEL_CLAIM_AFTER_SECONDS); it stays so while it is unchanged."""
        if not self._looked:
            self._looked = True
            self._claimable = recorded if claimable else None
        elif recorded != self._claimable:
            self._claimable = None  # changed since the first look: recorded on purpose
        self._ours = recorded is not None and same_model(recorded.model, self.model)
        if recorded is None or self._ours:
            self._set_mismatch(None)
        elif recorded == self._claimable and not vectors_stored:
            self._set_mismatch(None)  # the first vectors stored replace it (vectors_made)
        else:
            self._set_mismatch(recorded.model)

    def _set_mismatch(self, recorded: str | None) -> None:
        if recorded == self._mismatch:
            return
        if recorded is not None:
            logger.warning(
                "memory.embedding_model_changed: the embedding model of record is %r, the "
                "configured one is %r: vectors of two models are not comparable, so no vector "
                "is made meanwhile (rows are stored without one, searches are text searches) "
                "until %s",
                recorded,
                self.model,
                self._fixes(recorded),
                extra={
                    "event": "memory.embedding_model_changed",
                    "recorded": recorded,
                    "configured": self.model,
                },
            )
        else:
            logger.info(
                "memory.embedding_model_matched: the vectors of %r are made again (it is the "
                "embedding model of record, or no other model's vector is stored)",
                self.model,
                extra={"event": "memory.embedding_model_matched", "configured": self.model},
            )
        self._mismatch = recorded

    async def vectors_made(self) -> bool:
        """Whether vectors of ``model``, just made, may be stored: called before they are.
        Records ``model`` when no model is recorded, or in place of the leftover found at the
        first look when no vector is stored (they all went: these are the first ones). False
        in a mismatch (the record changed meanwhile: the vectors are dropped). After the first
        call that finds ``model`` recorded, no query until the record is seen to change."""
        if self._ours:
            return True
        if self._mismatch is not None:
            return False
        if not self._looked:
            await self._look(self._clock())
            if self._ours or self._mismatch is not None:
                return self._ours
        async with unit_of_work(self._sessionmaker) as session:
            repo = EmbeddingModelRepository(session=session)
            recorded: RecordedModel | None = await repo.record_if_none(self.model)
            stored = False
            if recorded is not None and not same_model(recorded.model, self.model):
                stored = await repo.vectors_exist()
                # Kept, the leftover would be reported as a model change at every later start.
                if recorded == self._claimable and not stored:
                    await repo.replace_if(recorded, self.model)
                    # Replaced, or taken by another process first: as it is now.
                    recorded = await repo.record()
                    if recorded is not None and not same_model(recorded.model, self.model):
                        stored = await repo.vectors_exist()
        self._seen(recorded, vectors_stored=stored)
        return self._ours

    async def check_recorded(self, session: AsyncSession) -> None:
        """Raise ConfigError when another model than ``model`` is recorded, on ``session``:
        the transaction about to store a backfill's batch. Its vectors among another model's
        would be silently useless (a reembed after a change would skip them: not NULL), so a
        backfill of the old model stops at its next batch once a reembed recorded a new one,
        and one of a changed model is refused while the old model's vectors are stored. The
        record is held until the batch commits: a reembed (replace_vectors) waits for it and
        then clears its vectors too, or has recorded its model first and the batch is refused."""
        recorded = await EmbeddingModelRepository(session=session).recorded(held=True)
        if recorded is not None and not same_model(recorded, self.model):
            self._checked_at = -math.inf  # the next vector this process makes reads it again
            raise self._mixing(recorded)

    async def refuse_if_changed(self) -> None:
        """check_recorded's ConfigError before a backfill asks the model for anything, in a
        model mismatch (read now): the refusal does not wait for (or hide behind) a model
        that is down."""
        recorded = await self.recheck()
        if recorded is not None:
            raise self._mixing(recorded)

    def _mixing(self, recorded: str) -> ConfigError:
        # Setting the model back is a fix: rows written meanwhile got no vector (may_embed),
        # and a backfill with the recorded model fills them.
        if self.passed_in_code:
            fixes = (
                f"Call memory.admin.reembed() (on a Memory opened with this embedder) to embed "
                f"everything with {self.model!r}, or pass open_memory an embedder of "
                f"{recorded!r}"
            )
        else:
            fixes = (
                f"Run `navi-memory reembed` (memory.admin.reembed()) to embed everything with "
                f"{self.model!r}, or set EMBEDDING_MODEL back to {recorded!r}"
            )
        return ConfigError(
            f"the embedding model of record is {recorded!r}, the configured one is "
            f"{self.model!r}: a backfill would store {self.model!r}'s vectors where "
            f"{recorded!r}'s are expected (two models' vectors are not comparable). {fixes}"
        )

    def _fixes(self, recorded: str) -> str:
        """What ends a mismatch with ``recorded``, for the warning: the fixes that apply to
        how the model was configured (an embedder passed in code is out of the CLI's reach)."""
        if self.passed_in_code:
            return (
                f"memory.admin.reembed() (on a Memory opened with this embedder) has embedded "
                f"everything with {self.model!r}; or pass open_memory an embedder of "
                f"{recorded!r} and run memory.store.backfill_embeddings()"
            )
        return (
            f"`navi-memory reembed` (memory.admin.reembed()) has embedded everything with "
            f"{self.model!r}; or set EMBEDDING_MODEL back to {recorded!r} and run "
            f"`navi-memory backfill`"
        )

    async def changed_from(self) -> ModelChange | None:
        """The model of record when it is another than ``model`` and a process configured with
        ``model`` would make no vector: its vectors are stored (another model's space), or none
        is but it was recorded less than EMBEDDING_MODEL_CLAIM_AFTER_SECONDS ago (a reembed's
        record, whose first vectors come a batch later, is never taken over). None otherwise
        (a leftover record with no vector is taken over by the first vectors stored). Read
        now; the state is left alone."""
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            repo = EmbeddingModelRepository(session=session)
            recorded = await repo.recorded()
            if recorded is None or same_model(recorded, self.model):
                return None
            if await repo.vectors_exist():
                return ModelChange(recorded, vectors_stored=True)
            if not await _old_enough(repo):
                return ModelChange(recorded, vectors_stored=False)
            return None

    async def recorded_within(self, seconds: float) -> bool:
        """Whether a model was recorded in the last ``seconds`` by the database's clock: a
        reembed's clear, which records its model in the same transaction, committed then."""
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            age = await EmbeddingModelRepository(session=session).age_seconds()
        return age is not None and age <= seconds

    async def replace_vectors(self) -> None:
        """In one transaction: clear every stored vector and the vector indexes' copies and
        queues, and record ``model`` as the model of record (a mismatch ends).

        An indexer batch of a running application takes the same tables in another order
        (the queue, then the index; TRUNCATE the index first): the server may end this
        transaction as a deadlock's victim. It is run again then, REPLACE_DEADLOCK_RETRIES
        times at most: it clears everything anew, so a second run is the first's."""
        for attempt in range(REPLACE_DEADLOCK_RETRIES + 1):
            try:
                async with unit_of_work(self._sessionmaker) as session:
                    repo = EmbeddingModelRepository(session=session)
                    # First: a backfill batch past its check of the record commits before
                    # the vectors are cleared (its vectors are cleared with them).
                    await repo.hold_record()
                    await repo.clear_vectors()
                    await repo.replace(self.model)
                    recorded = await repo.record()
                break
            except StorageError as exc:
                if attempt == REPLACE_DEADLOCK_RETRIES or not is_deadlock(exc):
                    raise
                logger.info(
                    "embedding_model.replace_retry: %s (again, %d of %d)",
                    exc,
                    attempt + 1,
                    REPLACE_DEADLOCK_RETRIES,
                    extra={"event": "embedding_model.replace_retry"},
                )
                await asyncio.sleep(0.05 * (attempt + 1))
        self._checked_at = self._clock()
        self._seen(recorded, vectors_stored=False)


async def _old_enough(repo: EmbeddingModelRepository) -> bool:
    age = await repo.age_seconds()
    return age is not None and age >= EMBEDDING_MODEL_CLAIM_AFTER_SECONDS


class Reembed:
    """Clears the stored vectors, records the configured model, then backfills everything."""

    def __init__(self, *, record: EmbeddingModelRecord | None, backfill: Backfill) -> None:
        self._record = record
        self._backfill = backfill

    async def run(
        self,
        *,
        batch_size: int,
        pause_seconds: float,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Returns how many rows got a vector. The model is asked for a vector first: when it
        cannot answer (EmbeddingError) nothing is cleared. Until it is through, the rows
        without a vector are found by text search; interrupted, ``backfill`` (or this again)
        finishes it. Other processes still configured with the old model stop making vectors
        within EMBEDDING_MODEL_RECHECK_SECONDS (docs/operations.md)."""
        if self._record is None:
            raise ConfigError(
                "text-only mode (EMBEDDING_MODEL=none): there is no embedding model to "
                "re-embed with; set EMBEDDING_MODEL to a 768-dimensional model first"
            )
        # Cleared with the model down, every vector would be gone until it is back.
        await self._backfill.check_model()
        await self._record.replace_vectors()
        logger.info(
            "reembed.cleared: every vector cleared, %r recorded; embedding again",
            self._record.model,
            extra={"event": "reembed.cleared", "model": self._record.model},
        )
        return await self._backfill.run(
            batch_size=batch_size, pause_seconds=pause_seconds, progress=progress
        )
