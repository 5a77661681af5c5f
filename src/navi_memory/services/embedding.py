"""Embedding for the write and read paths: the model's vectors checked before they reach a
vector(768) column, and a failing model degraded to "no vector", reported at most once per
EMBEDDING_FAILURE_LOG_INTERVAL_SECONDS with a count. Without a model (text-only mode) every
call answers "no vector" at once, silently.

A model that hangs (a call that failed only after ``hang_seconds``: its timeout ran out) is
left alone for ``pause_seconds`` (EMBEDDING_PAUSE_SECONDS): every call meanwhile answers "no
vector" at once, as if the model had failed, instead of each waiting out the timeout. The
first call after the pause asks the model again.

Never call these inside a transaction: the model may take its time.

The ``recorder`` (open_memory's: the embedding model of record, jobs/embedding_model.py) is
asked before any vector is made: in a model mismatch (another model's vectors are stored) every
call answers "no vector" at once, as with the model down, so rows land without one and searches
are text searches until a reembed; the recorder logs the mismatch once. Documents' vectors are
announced to it before they are stored (their model is recorded by the first ones).
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from navi_memory.constants import EMBEDDING_FAILURE_LOG_INTERVAL_SECONDS
from navi_memory.errors import EmbeddingError, StorageError
from navi_memory.llm import (
    Embedder,
    GuardedEmbedder,
    embedding_model_name,
    storable_vector,
    storable_vectors,
)

__all__ = ["EmbeddingService", "VectorRecorder", "storable_vector", "storable_vectors"]

logger = logging.getLogger(__name__)


class _Reports:
    """Events counted between two reports, reported at most once an interval (with their
    count): a failing dependency fails every call, one warning a call would drown the log."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.unreported = 0
        self.reported_at: float | None = None

    def counted(self, now: float) -> int | None:
        """Count one more; the count to report now (counting starts again), or None while
        the interval since the last report runs."""
        self.unreported += 1
        if self.reported_at is not None and now - self.reported_at < self.interval:
            return None
        count, self.unreported, self.reported_at = self.unreported, 0, now
        return count

    def reset(self) -> int:
        """The count not reported yet; the next event is reported at once."""
        count, self.unreported, self.reported_at = self.unreported, 0, None
        return count


class VectorRecorder(Protocol):
    async def may_embed(self) -> bool:
        """Whether vectors may be made now (False: a model mismatch). Called before every
        vector is made: answers from memory, with no database round trip per call."""
        ...

    async def vectors_made(self) -> bool:
        """Called before document vectors are stored: whether they may be. Cheap once the
        configured model is found recorded."""
        ...


class EmbeddingService:
    """The embedder behind the degradation the spec asks for: no vector → text search.

    ``embedder`` None is text-only mode. One service per Memory (open_memory shares it), so
    the failure report counts every caller's failures.
    """

    def __init__(
        self,
        embedder: Embedder | None,
        *,
        log_interval_seconds: float = EMBEDDING_FAILURE_LOG_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        recorder: VectorRecorder | None = None,
        pause_seconds: float = 0.0,
        hang_seconds: float = math.inf,
    ) -> None:
        """``pause_seconds``: how long a model that hung is left alone (0: never); a failure
        counts as a hang when the call took ``hang_seconds`` or more."""
        self.embedder = embedder
        # An unguarded embedder's junk is named as a guard names it (GuardedEmbedder).
        self._subject = (
            "" if embedder is None else f"embedding model {embedding_model_name(embedder)}"
        )
        self._recorder = recorder
        self._interval = log_interval_seconds
        self._clock = clock
        self._failures = _Reports(log_interval_seconds)
        """The model's failures (and the calls a pause answered) since the last report."""
        self._failing = False
        self._pause = pause_seconds
        self._hang = hang_seconds
        self._paused_until = -math.inf
        self._unreadable = _Reports(log_interval_seconds)
        """The model of record found unreadable since the last report."""

    @property
    def paused(self) -> bool:
        """Whether calls skip the model now (it hung lately; EMBEDDING_PAUSE_SECONDS)."""
        return self._clock() < self._paused_until

    @property
    def text_only(self) -> bool:
        return self.embedder is None

    async def document(self, text: str) -> list[float] | None:
        vectors = await self.documents([text])
        return None if vectors is None else vectors[0].tolist()

    async def documents(self, texts: Sequence[str]) -> list[array[float]] | None:
        embedder = self.embedder
        if embedder is None:
            return None
        if not await self._may_embed():
            return None
        if self._skipped():
            return None
        started = self._clock()
        try:
            # A guard has checked its answers already (open_memory's embedder always has one):
            # checking them again cost ~9 µs a vector on the write path, for nothing.
            if isinstance(embedder, GuardedEmbedder):
                vectors = await embedder.embed_documents(texts)
            else:
                vectors = storable_vectors(
                    await embedder.embed_documents(texts), len(texts), subject=self._subject
                )
        except EmbeddingError as exc:
            self._failed(exc, started)
            return None
        self._succeeded()
        if vectors and not await self._vectors_made():
            return None  # the record changed meanwhile: another model's vectors are stored
        return vectors

    async def query(self, text: str) -> array[float] | None:
        embedder = self.embedder
        if embedder is None:
            return None
        # Against another model's stored vectors, any distance is arbitrary: text search only.
        if not await self._may_embed():
            return None
        if self._skipped():
            return None
        started = self._clock()
        try:
            if isinstance(embedder, GuardedEmbedder):  # checked by the guard (see documents)
                vector = await embedder.embed_query(text)
            else:
                vector = storable_vector(await embedder.embed_query(text), subject=self._subject)
        except EmbeddingError as exc:
            self._failed(exc, started)
            return None
        self._succeeded()
        return vector

    async def _may_embed(self) -> bool:
        return await self._ask_recorder("may_embed")

    async def _vectors_made(self) -> bool:
        return await self._ask_recorder("vectors_made")

    async def _ask_recorder(self, question: Literal["may_embed", "vectors_made"]) -> bool:
        """The recorder's answer (True without one); False (no vector) when the model of
        record cannot be read (the database failing: the call's own statement will say so,
        or it has committed already, as a write through a hidden spelling before its
        vector)."""
        recorder = self._recorder
        if recorder is None:
            return True
        try:
            if question == "may_embed":
                return await recorder.may_embed()
            return await recorder.vectors_made()
        except StorageError as exc:
            self._record_unreadable(exc)
            return False

    def _record_unreadable(self, exc: StorageError) -> None:
        """Logged at most once per log interval, with the count since the last report: every
        call asks again while the database is down, and the caller hears of it anyway."""
        count = self._unreadable.counted(self._clock())
        if count is None:
            return
        logger.warning(
            "memory.embedding_record_unreadable: %s (%d time(s) since the last report; no "
            "vector made meanwhile, backfill makes them)",
            exc,
            count,
            extra={"event": "memory.embedding_record_unreadable", "failures": count},
        )

    def _skipped(self) -> bool:
        """A call the pause answers: counted as a failure (reported with the others)."""
        if not self.paused:
            return False
        self._failures.unreported += 1
        return True

    def _failed(self, exc: EmbeddingError, started: float) -> None:
        self._failing = True
        now = self._clock()
        if self._pause > 0 and now - started >= self._hang:
            self._paused_until = now + self._pause
            logger.warning(
                "memory.embedding_paused: %s; the model is not asked again for %g s "
                "(EMBEDDING_PAUSE_SECONDS): rows land without vectors meanwhile, search "
                "falls back to text at once",
                exc,
                self._pause,
                extra={"event": "memory.embedding_paused", "seconds": self._pause},
            )
        count = self._failures.counted(now)
        if count is None:
            return
        logger.warning(
            "memory.embedding_failed: %s (%d failure(s) since the last report; next report in "
            "%g s at the earliest; the rows land without vectors, search falls back to text)",
            exc,
            count,
            self._interval,
            extra={"event": "memory.embedding_failed", "failures": count},
        )

    def _succeeded(self) -> None:
        if not self._failing:
            return
        count = self._failures.reset()
        logger.info(
            "memory.embedding_recovered: the embedding model answers again (%d failure(s) "
            "since the last report)",
            count,
            extra={"event": "memory.embedding_recovered", "failures": count},
        )
        self._failing = False
