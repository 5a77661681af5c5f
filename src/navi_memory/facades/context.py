"""memory.context: the messages for one model call of an agent turn — the host's system prompt,
what navi-memory remembers about the user, the excerpts of dropped history that matter now, the
session's context and the incoming message (spec: "Memory injection into agent context",
"Automatic recall").
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from navi_memory.config import Settings
from navi_memory.constants import MESSAGE_MAX_CHARS
from navi_memory.errors import InvalidTypeError, NotFoundError
from navi_memory.llm.chat import ChatTurn
from navi_memory.request_context import write_scope
from navi_memory.schemas import MemoryHit
from navi_memory.services.context import (
    ContextService,
    ContextSnapshot,
    RecallOutcome,
    prompt_messages,
)
from navi_memory.services.embedding import EmbeddingService
from navi_memory.services.search import UnifiedSearchService
from navi_memory.text.recall import recall_message_text
from navi_memory.unit_of_work import LaneEngines, engine_of, unit_of_work
from navi_memory.validation import check_sequence, check_session_id, check_text

__all__ = ["ContextBuilder", "ContextPrompt"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ContextPrompt:
    """One prompt as ``ContextBuilder.build_prompt`` made it: the messages for the model, and
    what automatic recall put in them."""

    messages: list[ChatTurn]
    recalled: list[MemoryHit] = field(default_factory=list)
    """The raw excerpts in the recall message (their chunk ids are now in the ledger)."""
    recall: RecallOutcome = "no_summary"
    recall_terms: tuple[str, ...] = ()
    """The recall query's terms: a long excerpt is shown around them (text.hits.cut_text)."""

    @property
    def recall_message(self) -> ChatTurn | None:
        """The recall message among ``messages``, if recall injected one."""
        if not self.recalled:
            return None
        text = recall_message_text(self.recalled, self.recall_terms)
        return next((m for m in self.messages if m.content == text), None)


class ContextBuilder:
    """``memory.context``: ``build(session_id, incoming, system_prompt=...)`` per model call."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        embedding: EmbeddingService,
        search: UnifiedSearchService | None = None,
        service: ContextService | None = None,
        cached_plans: AsyncEngine | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._engines = LaneEngines(engine_of(sessionmaker), cached_plans)
        self._settings = settings
        self._embedding = embedding
        # Recall's raw hits are cut at its own similarity threshold, not the search's.
        self._search = (search or UnifiedSearchService()).for_recall(
            settings.memory_recall_min_similarity
        )
        self._service = service or ContextService()

    async def build(
        self,
        session_id: str,
        incoming: str,
        *,
        system_prompt: str,
        user_id: uuid.UUID | str | None = None,
    ) -> list[ChatTurn]:
        """The messages for one model call, in this order (each memory part a system message):

        1. the host's ``system_prompt`` (left out when blank);
        2. the memory message, ``## What I remember about the user`` and the user's summary
           (left out when the user has none);
        3. the facts block: one line a fact, most recently verified first, at most
           MEMORY_PROMPT_MAX_FACTS, the cap stated (left out without facts);
        4. the recall message: up to MEMORY_RECALL_K verbatim excerpts of this session's
           dropped history that match the current topic (left out when none is recalled);
        5. the session's context as ``memory.sessions.context`` returns it, tool calls and
           tool results included;
        6. ``incoming``, the user's new message.

        ``user_id=None`` is the current user; the session must be theirs (NotFoundError
        otherwise, exactly as for a session that does not exist). Recall runs once per call,
        records what it delivered in the session's ledger, and never fails the call: its
        failures are logged (``context.recall_failed``) and the prompt comes without it.
        ``incoming`` is not appended to the session: that is the caller's, once the turn is
        under way.
        """
        prompt = await self.build_prompt(
            session_id, incoming, system_prompt=system_prompt, user_id=user_id
        )
        return prompt.messages

    async def build_prompt(
        self,
        session_id: str,
        incoming: str,
        *,
        system_prompt: str,
        user_id: uuid.UUID | str | None = None,
    ) -> ContextPrompt:
        """``build``, also saying what recall injected (for logs, demos and tests)."""
        # The ledger is written: a prompt is always one user's, never a global read.
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        incoming = check_text("incoming", incoming, max_chars=MESSAGE_MAX_CHARS, allow_empty=True)
        system_prompt = check_text(
            "system_prompt", system_prompt, max_chars=MESSAGE_MAX_CHARS, allow_empty=True
        )
        settings = self._settings
        async with unit_of_work(self._sessionmaker, read_only=True) as session:
            snapshot = await self._service.snapshot(
                session, uid, sid, max_facts=settings.memory_prompt_max_facts
            )
        if snapshot is None:
            raise NotFoundError(f"no session {sid!r} for this user")

        recalled, outcome, terms = await self._recall(uid, sid, snapshot, incoming)
        messages = prompt_messages(
            snapshot,
            system_prompt=system_prompt,
            incoming=incoming,
            recalled=recalled,
            recall_terms=terms,
            max_facts=settings.memory_prompt_max_facts,
        )
        return ContextPrompt(
            messages=messages, recalled=recalled, recall=outcome, recall_terms=terms
        )

    async def record_shown(
        self, session_id: str, hits: Sequence[MemoryHit], *, user_id: uuid.UUID | str | None = None
    ) -> None:
        """Record the session's raw excerpts among ``hits`` (a memory_search result the model
        now has in its context) in the session's ledger, as recall records what it delivers:
        the next prompts' recall leaves them out instead of injecting them a second time. The
        memory_search tool calls it; ``user_id=None`` is the current user."""
        uid = write_scope(user_id)
        sid = check_session_id(session_id)
        hits = check_sequence("hits", hits)
        for hit in hits:
            if not isinstance(hit, MemoryHit):
                raise InvalidTypeError(
                    f"hits must be MemoryHit objects (as memory.search returns them), got "
                    f"{type(hit).__name__}"
                )
        shown = [
            hit.chunk_id
            for hit in hits
            if hit.source_type == "raw" and hit.chunk_id is not None and hit.session_id == sid
        ]
        if not shown:
            return
        async with unit_of_work(self._sessionmaker) as session:
            await self._service.record_shown(session, uid, sid, shown)

    async def _recall(
        self, user_id: uuid.UUID, session_id: str, snapshot: ContextSnapshot, incoming: str
    ) -> tuple[list[MemoryHit], RecallOutcome, tuple[str, ...]]:
        """The excerpts recall delivers, what it did, and its query's terms (the rules:
        ContextService; here the embedding, the search and the ledger's transaction)."""
        settings = self._settings
        service = self._service
        skipped = service.recall_skipped(
            snapshot, enabled=settings.memory_recall_enabled, k=settings.memory_recall_k
        )
        if skipped is not None:
            return [], skipped, ()
        try:
            search = service.recall_search(snapshot, incoming)
            if search is None:
                return [], "nothing_found", ()
            vector = await self._embedding.query(search.query) if search.plan.embed else None
            hits = await self._search.search(
                self._engines.run, search.request(user_id, session_id, snapshot, vector)
            )
            candidates = service.recall_candidates(
                hits,
                snapshot,
                min_similarity=settings.memory_recall_min_similarity,
                min_terms=search.min_terms,
            )
            if not candidates:
                return [], "nothing_found", search.plan.terms
            async with unit_of_work(self._sessionmaker) as session:
                chosen = await service.deliver(
                    session,
                    user_id,
                    session_id,
                    candidates,
                    k=settings.memory_recall_k,
                    min_similarity=settings.memory_recall_min_similarity,
                    min_terms=search.min_terms,
                )
        except Exception:
            # A turn never fails because recall did (spec): whatever broke — the database, a
            # model, a bug — the prompt is built without it and the log says why.
            logger.warning(
                "context.recall_failed: session %s",
                session_id,
                exc_info=True,
                extra={"event": "context.recall_failed", "session_id": session_id},
            )
            return [], "failed", ()
        return chosen, "injected" if chosen else "nothing_found", search.plan.terms
