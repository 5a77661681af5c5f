"""The background drain both indexers share: a queue emptied in batches, each batch its own
transaction, started by ``kick()`` on the running event loop and retried after a failure.

A subclass says what one batch does (``_index_batch``) and how many rows wait
(``_queued_count``); ``ChunkIndexer`` and ``FactIndexer`` are the two. At most one background
drain runs per indexer; a kick during a drain makes it go round again; ``drain()`` indexes in
the caller's task; ``aclose()`` lets the batch in flight finish and stops, and a background
drain that was kicked but had not begun its batch (gathering writes, or not yet scheduled) runs
one batch first, so a short script's last writes are not left queued. A background drain
that failed sleeps before its retry; ``wait_batches()`` (an explicit drain's wait) does not wait
for that sleep, and ``wake()`` ends it. Indexers in several
processes share a queue (``FOR UPDATE SKIP LOCKED``), and so do an indexer's ``helpers``: more
indexers of the same queue, each with its own connection per batch, which a background drain
starts when a batch finds a backlog (a full batch), so a burst is drained by several server
processes at once and a trickle by one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import ClassVar, Final

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from navi_memory.db import MEMORY_CLOSED
from navi_memory.errors import NaviMemoryError, StorageError
from navi_memory.unit_of_work import unit_of_work

__all__ = ["CLOSE_GRACE_SECONDS", "HELPER_REST_SECONDS", "RETRY_DELAYS", "QueueIndexer"]

logger = logging.getLogger(__name__)

CLOSE_GRACE_SECONDS: Final = 10.0
"""How long aclose() waits for the batch in flight before cancelling it (it rolls back; the
queue keeps its rows for the next indexer)."""

RETRY_DELAYS: Final = (0.25, 1.0, 4.0, 15.0, 60.0)
"""Seconds before each retry of a failed background drain (a deadlock victim, a dropped
connection, a database restarting or failing over: 80 s in all, the length of an ordinary
outage); then it gives up until the next kick. A quiet process whose queue a longer outage
left behind drains at its next write, or by ``navi-memory backfill``; search reads the
queued rows meanwhile. An explicit drain never waits for these sleeps, and one that succeeds
ends them (``wake``)."""

HELPER_REST_SECONDS: Final = 30.0
"""A helper that gave up is not started again by the relay for this long (the indexer that
relays goes on alone), so a failing helper does not repeat its retries and warnings at every
batch of a backlog."""


class QueueIndexer:
    events: ClassVar[str]
    """The log events' prefix: ``<events>.index_retry``, ``.index_failed``, ``.indexed``."""
    retry_hint: ClassVar[str]
    """What retries after a drain gave up, for the ``index_failed`` warning."""
    gather_seconds: ClassVar[float] = 0.0
    """How long a background drain waits after the kick that started it, and again before
    each round a kick during it asks for."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        batch_size: int,
        background: bool,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        helpers: Sequence[QueueIndexer] = (),
    ) -> None:
        """``helpers``: indexers of the same queue (background ones) that this one's background
        drain kicks when a batch finds a backlog; ``wait_idle`` and ``aclose`` cover them."""
        self._sessionmaker = sessionmaker
        self._batch_size = batch_size
        self._background = background
        self._retry_delays = tuple(retry_delays)
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closing = False
        self._closed = asyncio.Event()
        self._woken = asyncio.Event()
        """Ends the sleep before a retry: set by ``wake()`` and by closing."""
        self._retry_pending = asyncio.Event()
        """Set while the background drain sleeps before a retry: no batch of it is in flight."""
        self._helpers = tuple(helpers)
        self._resting_until = 0.0
        self._in_batch = False
        """Whether the background drain is in a batch (an explicit drain's do not count)."""
        self._last_batch = False
        """Set by closing while a kicked background drain had not begun its batch: it runs
        one."""
        self.batches_run = 0
        """Batches this indexer has run (drains in the caller's task and in the background)."""
        self.caught_up = False
        """Whether the last batch found less than a full batch of work, or took none of it (a
        delete held it): nothing for this indexer to do at once (a worker polling with
        ``drain(max_batches=…)`` may pause)."""

    async def drain(self, max_batches: int | None = None, *, relay: bool = False) -> int:
        """Index queued rows until the queue is empty (or ``max_batches`` batches ran); returns
        how many were indexed. ``relay``: kick the idle helpers whenever a batch finds a
        backlog. Raises StorageError if the database fails, or if the indexer was closed
        before this drain began (its Memory is: "0 indexed" would say nothing was queued)."""
        if self._closing:
            raise StorageError(MEMORY_CLOSED)
        return await self._drain(max_batches, relay=relay, background=False)

    async def _drain(self, max_batches: int | None, *, relay: bool, background: bool) -> int:
        """``drain``; ``background``: the background drain's, which alone tells closing whether
        it is in a batch, and alone runs the one batch a close grants it (``_last_batch``)."""
        indexed, batches = 0, 0
        while (not self._closing or (background and self._last_batch)) and (
            max_batches is None or batches < max_batches
        ):
            if background:
                self._last_batch = False
                self._in_batch = True
            try:
                async with unit_of_work(self._sessionmaker) as session:
                    full, moved = await self._index_batch(session, self._batch_size)
            finally:
                if background:
                    self._in_batch = False
            indexed += moved
            batches += 1
            self.batches_run += 1
            self.caught_up = not full
            if self.caught_up:
                break
            if relay:
                now = time.monotonic()
                for helper in self._helpers:
                    if now >= helper._resting_until:
                        helper.kick()  # a running helper goes round once more
        return indexed

    async def drain_all(self) -> int:
        """Index queued rows until the queue is empty, in this task with the helpers beside it
        (each a batch per transaction on its own connection): ``drain()`` on every lane at
        once. Returns how many were indexed, over every lane. A failing lane stops the others
        (their batches in flight roll back) and its error is raised."""
        if not self._helpers:
            return await self.drain()
        try:
            async with asyncio.TaskGroup() as lanes:
                drains = [lanes.create_task(i.drain()) for i in (self, *self._helpers)]
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None
        return sum(drain.result() for drain in drains)

    @property
    def helpers(self) -> tuple[QueueIndexer, ...]:
        """The indexers of the same queue this one starts when a batch finds a backlog."""
        return self._helpers

    @property
    def running(self) -> bool:
        """Whether a background drain of this indexer is in flight."""
        return self._task is not None and not self._task.done()

    async def queued(self) -> int:
        """How many rows wait for the index."""
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            return await self._queued_count(session)

    async def _index_batch(self, session: AsyncSession, limit: int) -> tuple[bool, int]:
        """Index up to ``limit`` queued rows; returns (whether the batch found a full batch of
        work and took some of it: more may wait, and a next batch would progress; indexed).
        A batch whose rows a delete all held took none: repeated at once, it would pick the
        same rows again until the delete ends."""
        raise NotImplementedError

    async def _queued_count(self, session: AsyncSession) -> int:
        raise NotImplementedError

    def kick(self) -> None:
        """Start a background drain if background indexing is on (a no-op otherwise)."""
        if not self._background or self._closing:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._again = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"navi-memory {self.events} indexer"
        )

    async def _run(self) -> None:
        failures = 0
        if self.gather_seconds:
            await self._sleep(self.gather_seconds)
        while True:
            self._again = False
            try:
                indexed = await self._drain(None, relay=True, background=True)
            except NaviMemoryError as exc:
                # The queue keeps its rows, and search reads them exactly meanwhile.
                if failures < len(self._retry_delays) and not self._closing:
                    delay = self._retry_delays[failures]
                    logger.info(
                        "%s.index_retry: %s (retry %d in %.2g s)",
                        self.events,
                        exc,
                        failures + 1,
                        delay,
                        extra={"event": f"{self.events}.index_retry"},
                    )
                    self._woken.clear()
                    self._retry_pending.set()
                    try:
                        woken = await self._sleep(delay, until=self._woken)
                    finally:
                        self._retry_pending.clear()
                    # A retry a caller's wake() started early does not use up a retry: the
                    # schedule (80 s in all) is time the database gets to come back, and a
                    # caller polling wait_settled() during an outage must not spend it.
                    if not woken:
                        failures += 1
                    self._again = True
                    continue
                logger.warning(
                    "%s.index_failed: %s (%s retries)",
                    self.events,
                    exc,
                    self.retry_hint,
                    extra={"event": f"{self.events}.index_failed"},
                )
                self._resting_until = time.monotonic() + HELPER_REST_SECONDS
                return
            except Exception:
                logger.exception(
                    "%s.index_failed: unexpected error",
                    self.events,
                    extra={"event": f"{self.events}.index_failed"},
                )
                self._resting_until = time.monotonic() + HELPER_REST_SECONDS
                return
            failures = 0
            if indexed:
                event = f"{self.events}.indexed"
                logger.debug(event, extra={"event": event, "rows": indexed})
            if not self._again or self._closing:
                return
            if self.gather_seconds:
                # Kicked during the drain: a stream of writes. Gather again before the next
                # round, or each round takes the one or two rows written during the last,
                # and the writer pays a transaction of the indexer's every other write.
                await self._sleep(self.gather_seconds)

    async def _sleep(self, seconds: float, *, until: asyncio.Event | None = None) -> bool:
        """Sleep, but wake at once when the indexer is closed (or ``until`` is set); whether
        it was woken before the time was up."""
        try:
            await asyncio.wait_for((until or self._closed).wait(), seconds)
        except TimeoutError:
            return False
        return True

    def wake(self) -> None:
        """End the sleep before a retry of a background drain that failed, this indexer's and
        the helpers': they retry at once (an explicit drain just succeeded, so the database is
        back). A no-op for a drain that is not sleeping before a retry."""
        for indexer in (self, *self._helpers):
            if indexer._retry_pending.is_set():
                indexer._retry_pending.clear()  # in a batch again from now on
                indexer._woken.set()

    async def wait_batches(self) -> None:
        """Wait until no background drain, this indexer's or a helper's, has a batch in flight
        or is about to run one: each is done, or sleeps before a retry after a failure. What an
        explicit drain waits for before its own (its count then includes what the background
        would have taken): never a retry's sleep, up to RETRY_DELAYS' 60 s, so while the
        database is down the caller gets its own drain's error at once."""
        for indexer in (self, *self._helpers):
            await indexer._wait_out_of_batch()

    async def _wait_out_of_batch(self) -> None:
        while (task := self._task) is not None and not task.done():
            if self._retry_pending.is_set():
                return
            sleeping = asyncio.ensure_future(self._retry_pending.wait())
            try:
                await asyncio.wait({task, sleeping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeping.cancel()

    async def wait_settled(self) -> None:
        """``wake()``, then ``wait_batches()``: wait until the background drains have done what
        they can now — finished, or failed again and sleep before their next retry. Unlike
        ``wait_idle`` it never sleeps through a retry's backoff."""
        self.wake()
        await self.wait_batches()

    async def wait_idle(self) -> None:
        """Wait until no background drain is running, this indexer's or a helper's, sleeps
        before retries included (tests, benchmarks; a caller's wait is ``wait_settled``)."""
        while running := [
            i._task for i in (self, *self._helpers) if i._task is not None and not i._task.done()
        ]:
            await asyncio.wait(running)

    async def aclose(self) -> None:
        """Stop after the batch in flight (and the helpers after theirs), or after one batch
        when a kicked drain had not begun one yet; cancel a batch that takes longer than the
        grace."""
        await asyncio.gather(self._close(), *(helper.aclose() for helper in self._helpers))

    async def _close(self) -> None:
        task = self._task
        running = task is not None and not task.done()
        # Kicked, and neither in a batch nor sleeping before a retry: the writes that kicked it
        # get one batch, so a script that exits right after them leaves nothing queued.
        self._last_batch = running and not self._in_batch and not self._retry_pending.is_set()
        self._closing = True
        self._closed.set()
        self._woken.set()
        if task is None or task.done():
            return
        _, pending = await asyncio.wait({task}, timeout=CLOSE_GRACE_SECONDS)
        if pending:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
