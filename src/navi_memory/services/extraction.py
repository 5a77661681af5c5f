"""Extraction: a session's history turned into facts about its user, and the user's summary
rewritten from their facts (spec: "Automatic extraction").

The rules, on the session or connection each call is given. The model calls (``ask_facts``,
``ask_summary``) and ``embed`` take none: never call them inside a transaction.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.constants import SUMMARY_MAX_FACTS
from navi_memory.errors import NotFoundError
from navi_memory.llm import ChatModel, embedding_text_for_fact
from navi_memory.repositories.sessions import (
    ExtractionClaim,
    ExtractionClaimRepository,
    SessionActivity,
    SessionRepository,
)
from navi_memory.schemas import Fact
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.extraction_parser import (
    FactDraft,
    ParsedFacts,
    parse_extracted_facts,
    parse_summary,
)
from navi_memory.services.extraction_prompts import extraction_messages, summary_messages
from navi_memory.services.facts import FactService, FactWrite
from navi_memory.services.sessions import to_message
from navi_memory.text.keys import stored_category
from navi_memory.text.transcript import render_transcript, says_again

__all__ = [
    "CLAIM_LOST",
    "COVERED",
    "ExtractionService",
    "FactsWritten",
    "Finished",
    "NewSummary",
    "NotWritten",
    "SessionTranscript",
    "SummaryInput",
    "facts_digest",
]

_PARSE_ON_THE_LOOP_MAX_CHARS = 64 * 1024
"""Longest extraction reply parsed on the event loop (~10 ms at most); longer: in a thread."""


@dataclass(frozen=True, slots=True)
class SessionTranscript:
    """A session as read for extraction: whose it is, the activity it covers, and its text."""

    session_id: str
    user_id: uuid.UUID
    last_active: datetime
    """The activity this transcript covers: what the mark records when extraction succeeds, so
    a message that arrives while the model answers makes the session stale again."""
    extracted_at: datetime | None
    idle_seconds: float
    text: str
    started_at: datetime | None = None
    """When its first message was written (None: no message): a forget or a change of a fact
    elsewhere before it is older than everything the session says."""
    user_said: tuple[tuple[datetime, str], ...] = ()
    """The user's messages with when each was written (never after ``last_active``, the
    activity of record): what ``says_again_after`` reads."""

    def says_again_after(self, value: str, moment: datetime) -> bool:
        """Whether a user message written after ``moment`` states ``value`` again."""
        return says_again(value, (text for at, text in self.user_said if at > moment))

    @property
    def needs_extraction(self) -> bool:
        """Activity no extraction has covered yet: never marked, or marked before it."""
        return self.extracted_at is None or self.extracted_at < self.last_active


@dataclass(frozen=True, slots=True)
class FactsWritten:
    """What the upserts of one extraction did."""

    written: int
    """Facts inserted, updated, revived or verified (same value again)."""
    merged: int
    """Facts whose key merged other spellings of it (``dedupe``)."""
    outdated: int = 0
    """Facts not written: the user changed or forgot them after the session's activity."""
    vectors_queued: int = 0
    """Upserts (written or merged) that set or changed a fact's vector, queueing it for the
    fact indexer: as the upserts report it (``UpsertResult.vector_queued``)."""
    unembedded: tuple[Fact, ...] = ()
    """Facts written under another text than the one embedded — through a hidden spelling of
    the key (the value went to the row it was merged into), or into the user's spelling of the
    category — and left without a vector by the write; ``own_key_vectors`` and
    ``store_vectors`` give them theirs."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The session is marked; ``summary_written``: its summary was stored (or removed)."""

    summary_written: bool


def facts_digest(facts: Sequence[Fact]) -> str:
    """What a summary was written from, in a few bytes: a digest of each fact's id and of what
    the summary prompt shows of it (category, key, value, confidence), in id order. Any change
    to the set of current facts — one added, changed, deleted, expired, hidden or made visible
    again — changes it; a fact only confirmed again (``last_verified_at``) does not."""
    digest = hashlib.sha256()
    for fact in sorted(facts, key=lambda f: f.id):
        item = [fact.id, fact.category, fact.key, fact.value, fact.confidence]
        digest.update(json.dumps(item, ensure_ascii=True).encode() + b"\n")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class SummaryInput:
    """The user's current facts for the summary, their digest, and whether the stored summary
    is out of date (it was not written from exactly these facts)."""

    facts: list[Fact]
    digest: str
    outdated: bool


@dataclass(frozen=True, slots=True)
class NewSummary:
    """A summary to store, with the digest of the facts it was written from; ``content`` None
    removes the summary (no current fact is left to tell)."""

    content: str | None
    facts_digest: str


async def _lock_state(repo: SessionRepository, transcript: SessionTranscript) -> datetime | None:
    """Share-lock the transcript's session row until the transaction ends (a delete waits for
    this write, then removes the extraction state it wrote) — its user's row first, in a user
    delete's order (``SessionRepository.owner``), since every write of an extraction (the
    state row, facts, the summary) needs that row for its foreign key — then lock its
    extraction state row and return the user's mark. NotFoundError when the session is gone
    (or no longer the transcript's user's), or when its state row is another user's: that row
    is never read nor written for this user. A legacy row (of no user) counts as unmarked; the
    mark takes it."""
    if await repo.owner(transcript.session_id, lock=True) != transcript.user_id:
        raise NotFoundError(f"session {transcript.session_id!r} was deleted meanwhile")
    owner, mark = await repo.lock_extraction_state(transcript.session_id, transcript.user_id)
    if owner is None:
        return None
    if owner != transcript.user_id:
        raise NotFoundError(
            f"session {transcript.session_id!r}: its extraction state is another user's"
        )
    return mark


@dataclass(frozen=True, slots=True)
class NotWritten:
    """Why a write step of an extraction wrote nothing (``reason``, for the report)."""

    reason: str


COVERED = NotWritten("another extractor covered this activity")
CLAIM_LOST = NotWritten(
    "its claim was lost with the claim's connection; another extractor may hold the session "
    "now, and the next run extracts it if none did"
)


async def _may_write(
    repo: SessionRepository, transcript: SessionTranscript, claim: ExtractionClaim
) -> NotWritten | None:
    """Lock the session's state (``_lock_state``) and say why this extraction may not write,
    None when it may: another extraction covered the activity meanwhile, or ``claim`` is no
    longer held (its connection closed: another extractor may have claimed the session and be
    extracting the same activity). Checked under the state row's lock, which every
    extraction's writes take, so the window left is the rest of this transaction."""
    mark = await _lock_state(repo, transcript)
    if mark is not None and mark >= transcript.last_active:
        return COVERED
    if not await repo.claim_held(claim):
        return CLAIM_LOST
    return None


class ExtractionService:
    """Extraction's rules; the model calls go to ``chat_model`` (``complete``, JSON mode for
    facts), fact vectors through ``embedding``, fact writes through ``facts``."""

    def __init__(
        self, *, chat_model: ChatModel, embedding: EmbeddingService, facts: FactService
    ) -> None:
        self.chat_model = chat_model
        self.embedding = embedding
        self.facts = facts

    # --- which sessions -----------------------------------------------------------------------

    async def stale_sessions(
        self,
        session: AsyncSession,
        scope: uuid.UUID | None,
        *,
        stale_minutes: int,
        limit: int | None,
    ) -> list[SessionActivity]:
        """Sessions of ``scope`` (everyone's for None) idle for more than ``stale_minutes``
        whose last activity no extraction covers, longest idle first (the failed ones last)."""
        return await SessionRepository(session=session).stale_sessions(scope, stale_minutes, limit)

    async def record_failure(
        self, session: AsyncSession, user_id: uuid.UUID, session_id: str, *, counted: bool
    ) -> None:
        """Record that extracting the user's session failed now: later sweeps take it after the
        sessions never failed (stale_sessions), until an extraction of it succeeds. A failure
        of the session's own (``counted``: the model's reply unusable, a row unreadable, a
        defect meeting its content; not a model outage) also makes sweeps leave it for a
        while, longer after each: EXTRACTION_RETRY_BASE_SECONDS doubling, at most
        EXTRACTION_RETRY_MAX_SECONDS, or until it has new activity."""
        await SessionRepository(session=session).record_failure(
            session_id, user_id, counted=counted
        )

    async def try_claim(self, conn: AsyncConnection, session_id: str) -> ExtractionClaim | None:
        """Claim the session for this extractor, held by ``conn`` (outside any transaction)
        until ``release`` or until ``conn`` closes; None when another extractor, in any
        process, holds it. The writes (``write_facts``, ``finish``) check it is still held."""
        return await ExtractionClaimRepository(connection=conn).try_claim(session_id)

    async def release(self, conn: AsyncConnection, claim: ExtractionClaim) -> None:
        await ExtractionClaimRepository(connection=conn).release(claim)

    # --- reading ----------------------------------------------------------------------------

    async def owner(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> uuid.UUID | None:
        """The session's owner if it is ``scope``'s (anyone's for None), as ``transcript``
        reads it, without its messages; None when it is not (or gone). Asked before a session
        named by a call is claimed."""
        activity = await SessionRepository(session=session).activity(session_id, scope)
        return None if activity is None else activity.user_id

    async def transcript(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> SessionTranscript | None:
        """The session's whole history (demoted messages included) as the extractor's
        transcript, with the activity it covers; None when it is not ``scope``'s (or gone)."""
        repo = SessionRepository(session=session)
        activity = await repo.activity(session_id, scope)
        if activity is None:
            return None
        rows = await repo.messages(session_id, context_only=False)
        # A message's time, as of the activity of record at the latest (a clock step, an
        # application's SQL moving last_active back).
        times = [min(row.created_at, activity.last_active) for row in rows]
        return SessionTranscript(
            session_id=session_id,
            user_id=activity.user_id,
            last_active=activity.last_active,
            extracted_at=activity.extracted_at,
            idle_seconds=activity.idle_seconds,
            text=render_transcript(to_message(row) for row in rows),
            started_at=min(times, default=None),
            user_said=tuple(
                (at, row.content)
                for at, row in zip(times, rows, strict=True)
                if row.role == "user" and row.kind == "message"
            ),
        )

    # --- the model (no transaction) -------------------------------------------------------

    async def ask_facts(self, transcript: SessionTranscript) -> ParsedFacts:
        """The facts the model finds in the transcript. ChatModelError when the model fails,
        ExtractionError when its reply holds no JSON, or was cut off before its first complete
        fact; unusable items are only counted."""
        reply = await self.chat_model.complete(
            extraction_messages(transcript.text), json_format=True
        )
        if len(reply) > _PARSE_ON_THE_LOOP_MAX_CHARS:
            # A runaway reply of megabytes takes a few hundred ms to parse: in a thread, so the
            # event loop (the host's requests, other extractions) keeps turning meanwhile.
            return await asyncio.to_thread(parse_extracted_facts, reply)
        return parse_extracted_facts(reply)

    async def embed(self, drafts: Sequence[FactDraft]) -> list[array[float] | None]:
        """One vector per draft, or None for each when the embedding model fails (the facts
        are written without; backfill fills them)."""
        if not drafts:
            return []
        texts = [embedding_text_for_fact(d.category, d.key, d.value) for d in drafts]
        vectors = await self.embedding.documents(texts)
        if vectors is None:
            return [None] * len(drafts)
        return list(vectors)

    async def ask_summary(self, facts: Sequence[Fact]) -> str:
        """The model's summary of the user from ``facts``. ChatModelError when the model fails,
        ExtractionError when the reply is empty."""
        return parse_summary(await self.chat_model.complete(summary_messages(facts)))

    # --- writing ----------------------------------------------------------------------------

    async def write_facts(
        self,
        session: AsyncSession,
        transcript: SessionTranscript,
        drafts: Sequence[FactDraft],
        vectors: Sequence[array[float] | None],
        *,
        claim: ExtractionClaim,
    ) -> FactsWritten | NotWritten:
        """Upsert the drafts for the session's owner, each with ``dedupe=True``, into the
        user's spelling of its category (``_stored_categories``). Under the session's
        extraction-state lock the mark and ``claim`` are checked again first (``_may_write``):
        NotWritten, writing nothing, when another extraction has covered this activity
        meanwhile or the claim was lost. NotFoundError when the session was deleted meanwhile
        (its facts are not wanted then)."""
        repo = SessionRepository(session=session)
        refused = await _may_write(repo, transcript, claim)
        if refused is not None:
            return refused
        categories = await self._stored_categories(session, transcript.user_id, drafts)
        written = merged = queued = outdated = 0
        # Upserts lock (user, category); one order for every extractor keeps two extractions
        # of one user's sessions, in two processes, from deadlocking on each other.
        ordered = sorted(zip(categories, drafts, vectors, strict=True), key=lambda item: item[0])
        unembedded: list[Fact] = []
        for category, draft, vector in ordered:
            if await self._told_since(session, transcript, category, draft):
                outdated += 1
                continue
            # The vector embeds the draft's category: a row stored under another spelling of
            # it gets the vector of its own text afterwards (``unembedded``).
            embedding = vector if category == draft.category else None
            done = await self.facts.write(
                session,
                FactWrite(
                    user_id=transcript.user_id,
                    category=category,
                    key=draft.key,
                    value=draft.value,
                    source=draft.source,
                    confidence=draft.confidence,
                    expires_days=None,
                    source_context=draft.source_context,
                    embedding=embedding,
                    session_id=transcript.session_id,
                ),
                dedupe=True,
            )
            fact = done.fact
            queued += int(done.vector_queued)
            embedded_text = (draft.category, draft.key)
            if (
                (fact.category, fact.key) != embedded_text
                and not fact.has_embedding
                and vector is not None
            ):
                unembedded.append(fact)
            if done.outcome == "merged":
                merged += 1
            else:
                written += 1
        return FactsWritten(
            written=written,
            merged=merged,
            vectors_queued=queued,
            unembedded=tuple(unembedded),
            outdated=outdated,
        )

    async def _told_since(
        self,
        session: AsyncSession,
        transcript: SessionTranscript,
        category: str,
        draft: FactDraft,
    ) -> bool:
        """Whether the user changed or forgot the draft's fact after the session said it:
        the last time they did (FactService.last_told_since, under the category's lock, taken
        here first so a forget or a save committing meanwhile is seen) is after the session's
        last activity, or after its first message with no message of the user's since then
        stating the value again. The session's word is older then: a reply re-reading an old
        conversation must not overwrite, hide or bring back what the user said since — nor
        a conversation that only went on after it (a "thanks" the next day, or the forget's
        own exchange: a re-extraction reads the whole history again)."""
        await self.facts.lock_category(session, transcript.user_id, category)
        started = transcript.started_at or transcript.last_active
        moment = await self.facts.last_told_since(
            session,
            transcript.user_id,
            category,
            draft.key,
            started,
            session_id=transcript.session_id,
            value=draft.value,
        )
        if moment is None:
            return False
        return moment >= transcript.last_active or not transcript.says_again_after(
            draft.value, moment
        )

    async def _stored_categories(
        self, session: AsyncSession, user_id: uuid.UUID, drafts: Sequence[FactDraft]
    ) -> list[str]:
        """Each draft's category as the user stores it (``text.keys.stored_category``, the
        memory tool's rule too): an application's "Preferences" takes the extractor's
        "preferences", so dedupe merges the key's other spellings there instead of leaving
        the stale value visible beside it; a category new to the user takes the spelling of
        the reply's first draft in it. Each spelling's keys are read once."""
        # (name, visible facts), the fullest first.
        stored = [name for name, _ in await self.facts.categories(session, user_id)]
        keys: dict[str, list[str]] = {}  # a stored spelling's keys; read once

        async def keys_of(name: str) -> list[str]:
            if name not in keys:
                facts = await self.facts.list_facts(
                    session,
                    user_id,
                    search=None,
                    include_merged=False,
                    sort_by="id",
                    descending=False,
                    limit=None,
                    offset=0,
                    category=name,
                )
                keys[name] = [fact.key for fact in facts]
            return keys[name]

        chosen: list[str] = []
        for draft in drafts:
            category = await stored_category(draft.category, draft.key, stored, keys_of)
            if category not in stored:
                # A new category is stored by this write: a later draft of the reply spelling
                # it in another case or Unicode form goes into it too.
                stored.append(category)
            chosen.append(category)
        return chosen

    async def own_key_vectors(
        self, facts: Sequence[Fact]
    ) -> list[tuple[int, str, Sequence[float]]]:
        """(id, text, vector) of each fact's own text; empty when the model fails (backfill
        fills them then). Called outside any transaction: it waits on the embedding model."""
        if not facts:
            return []
        texts = [embedding_text_for_fact(f.category, f.key, f.value) for f in facts]
        vectors = await self.embedding.documents(texts)
        if vectors is None:
            return []
        return [(f.id, t, v) for f, t, v in zip(facts, texts, vectors, strict=True)]

    async def store_vectors(
        self, session: AsyncSession, vectors: Sequence[tuple[int, str, Sequence[float]]]
    ) -> int:
        """Store each vector on its fact if it still has none and still reads as the text
        embedded; how many were stored."""
        stored = 0
        for fact_id, embedded, vector in vectors:
            stored += await self.facts.give_vector(session, fact_id, embedded, vector)
        return stored

    async def _current_facts(self, session: AsyncSession, user_id: uuid.UUID) -> list[Fact]:
        """What a summary is written from: the user's visible facts, the most recently
        verified first, at most SUMMARY_MAX_FACTS."""
        return await self.facts.list_facts(
            session,
            user_id,
            search=None,
            include_merged=False,
            sort_by="last_verified_at",
            descending=True,
            limit=SUMMARY_MAX_FACTS,
            offset=0,
        )

    async def summary_input(
        self, session: AsyncSession, user_id: uuid.UUID, *, gave_facts: bool = True
    ) -> SummaryInput:
        """The user's current facts for the summary, and whether their summary is out of
        date: missing while there are facts, or written from another set of facts than the
        current one (``facts_digest``: a fact added, changed, forgotten, expired or hidden
        since). Facts only confirmed again change nothing, so they cost no model call; a
        summary that failed last time is still out of date on the retry. A summary of unknown
        origin (``set_summary``, an import) is out of date when there are facts and the session
        (``gave_facts``) gave some — a session that gave none leaves it as it is (issue #13) —
        and is never removed for want of them."""
        facts = await self._current_facts(session, user_id)
        digest = facts_digest(facts)
        stored = await self.facts.summary_digest(session, user_id)
        if stored is None:  # no summary
            outdated = bool(facts)
        elif stored[0] is None:  # of unknown origin
            outdated = bool(facts) and gave_facts
        else:
            outdated = stored[0] != digest
        return SummaryInput(facts=facts, digest=digest, outdated=outdated)

    async def finish(
        self,
        session: AsyncSession,
        transcript: SessionTranscript,
        summary: NewSummary | None,
        *,
        claim: ExtractionClaim,
    ) -> Finished | NotWritten:
        """Store the new summary (if any; content None removes it) and mark the session
        extracted at the activity the transcript covers, together. Under the extraction-state
        lock the mark and ``claim`` are checked again (``_may_write``): NotWritten, writing
        nothing, when another extraction covered this activity meanwhile or the claim was lost.
        NotFoundError, writing nothing, when the session was deleted meanwhile (the model's
        summary call is long enough for a delete to land in it).

        The summary is written only if it is of the current facts, checked under the user's
        summary lock: another extraction of the user (or a forget) that changed the facts
        while this one's model wrote has written, or will write, the summary of the facts as
        they are now; this one's, of the facts as they were, must not replace it."""
        repo = SessionRepository(session=session)
        refused = await _may_write(repo, transcript, claim)
        if refused is not None:
            return refused
        written = False
        if summary is not None:
            await self.facts.lock_summary(session, transcript.user_id)
            current = facts_digest(await self._current_facts(session, transcript.user_id))
            if current == summary.facts_digest:
                written = True
                if summary.content is None:
                    await self.facts.clear_summary(session, transcript.user_id)
                else:
                    await self.facts.set_summary(
                        session,
                        transcript.user_id,
                        summary.content,
                        facts_digest=summary.facts_digest,
                    )
        if (
            await repo.mark_extracted(
                transcript.session_id, transcript.user_id, at=transcript.last_active
            )
            is None
        ):  # pragma: no cover - the row is locked, and was checked to be the user's
            raise NotFoundError(f"session {transcript.session_id!r} was deleted meanwhile")
        return Finished(summary_written=written)
