"""The context builder's rules (spec: "Memory injection into agent context", "Automatic recall"):
what one turn's prompt is read from and its order, the session's messages as model turns,
recall's rules (when it runs, what it searches for, which hits qualify) and its ledger, kept
under the session row lock.

On the session each call is given; the facade (``facades/context.py``) opens the transactions,
embeds recall's query and runs its search between them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.constants import INJECTED_LEDGER_MAX, SEARCH_K_MAX
from navi_memory.llm.chat import ChatTurn, ToolCall
from navi_memory.repositories.facts import FactRepository
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.schemas import Fact, MemoryHit, Message
from navi_memory.services.facts import to_fact
from navi_memory.services.search import SearchPlan, SearchRequest, plan_search
from navi_memory.services.sessions import to_message
from navi_memory.text.context import facts_block_text, memory_message_text, prompt_facts
from navi_memory.text.recall import (
    LEDGER_KEY,
    RECALL_MIN_TERMS,
    RecallCandidate,
    context_seqs,
    extend_ledger,
    metadata_ledger,
    qualifies,
    recall_message_text,
    recall_min_terms,
    recall_query,
    recall_terms,
    repeats_context,
    select_recall,
)

__all__ = [
    "ContextService",
    "ContextSnapshot",
    "RecallOutcome",
    "RecallSearch",
    "context_turns",
    "prompt_messages",
]

RecallOutcome = Literal["injected", "disabled", "no_summary", "nothing_found", "failed"]
"""What automatic recall did for one prompt: injected excerpts; was switched off
(MEMORY_RECALL_ENABLED=false or MEMORY_RECALL_K=0); had nothing to do (the context holds no
summary yet); found no excerpt that qualifies and is not in the ledger; or failed (logged)."""


H = TypeVar("H", bound=RecallCandidate)


@dataclass(frozen=True, slots=True)
class ContextSnapshot:
    """What one prompt is built from, read in one transaction."""

    now: datetime
    """The database's clock: the facts' ages are measured against the clock that wrote them."""
    summary: str | None
    """The user's narrative summary (memory_summary)."""
    facts: list[Fact]
    """The user's visible facts, most recently verified first, at most the prompt's cap."""
    facts_total: int
    """How many visible facts the user holds in all."""
    messages: list[Message]
    """The session's context: its summary (if any) first, then the kept messages by seq."""
    ledger: list[int]
    """Chunk ids recall delivered to this session before (session_metadata)."""

    @property
    def has_summary(self) -> bool:
        """Whether the context already holds a compression summary: the moment recall starts."""
        return any(message.kind == "summary" for message in self.messages)


@dataclass(frozen=True, slots=True)
class RecallSearch:
    """What automatic recall searches for one prompt: its query (the text to embed) and the
    raw-history search plan of its terms."""

    query: str
    plan: SearchPlan

    @property
    def min_terms(self) -> int:
        """The distinct terms an excerpt found by text must hit (``recall_min_terms``)."""
        return recall_min_terms(self.plan.terms)

    def request(
        self,
        user_id: uuid.UUID,
        session_id: str,
        snapshot: ContextSnapshot,
        vector: Sequence[float] | None,
    ) -> SearchRequest:
        """The search: the user's, narrowed to this session, with the context's summary time
        as the freshness boundary; ``vector``: the query's (None: text only)."""
        return SearchRequest(
            plan=self.plan,
            owner=user_id,
            query_vector=vector,
            session_id=session_id,
            current_session_id=session_id,
            summary_at=summary_at(snapshot),
        )


class ContextService:
    """Reads for the prompt, recall's rules and its ledger, on the session each call is
    given; the facade embeds the query and runs the search between them."""

    @staticmethod
    def recall_skipped(snapshot: ContextSnapshot, *, enabled: bool, k: int) -> RecallOutcome | None:
        """Why recall does not run for this prompt (switched off; no summary in the context
        yet: dropped history does not matter before), None when it runs."""
        if not enabled or k < 1:
            return "disabled"
        if not snapshot.has_summary:
            return "no_summary"
        return None

    @staticmethod
    def recall_search(snapshot: ContextSnapshot, incoming: str) -> RecallSearch | None:
        """The search for the current topic: the incoming message and the last user/assistant
        messages (recall_query), scope raw, asked for its most hits plus one for every id in
        the ledger, so excerpts delivered before (left out by ``deliver``) never crowd out the
        next ones: with the ledger's ids taken out, SEARCH_K_MAX hits remain whenever that
        many match. Its terms leave out the rendering words (recall_terms). None without a
        term: search would list the most recent excerpts, and "recent" never qualifies."""
        query = recall_query(snapshot.messages, incoming)
        # The first 16 terms, in order: the incoming message's first (recall_query).
        plan = plan_search(query, "raw", SEARCH_K_MAX + len(snapshot.ledger), topic_last=False)
        plan = replace(plan, terms=recall_terms(plan.terms))
        if not plan.terms:
            return None
        return RecallSearch(query=query, plan=plan)

    @staticmethod
    def recall_candidates(
        hits: Sequence[MemoryHit],
        snapshot: ContextSnapshot,
        *,
        min_similarity: float,
        min_terms: int = RECALL_MIN_TERMS,
    ) -> list[MemoryHit]:
        """The hits that qualify for recall (``qualifies``: similar enough, or enough terms;
        not superseded, not "recent") and hold more than messages the prompt shows already
        (``repeats_context``), in search order."""
        in_context = context_seqs(snapshot.messages)
        return [
            hit
            for hit in hits
            if qualifies(hit, min_similarity=min_similarity, min_terms=min_terms)
            and not repeats_context(hit, in_context)
        ]

    async def snapshot(
        self, session: AsyncSession, user_id: uuid.UUID, session_id: str, *, max_facts: int
    ) -> ContextSnapshot | None:
        """Everything the prompt shows of the user and the session; None when the session is
        not the user's (another user's session reads exactly like a missing one)."""
        sessions = SessionRepository(session=session)
        row = await sessions.get(session_id, user_id)
        if row is None:
            return None
        facts = FactRepository(session=session)
        now = await facts.now()
        shown = await self._prompt_facts(facts, user_id, max_facts=max_facts, now=now)
        messages = await sessions.messages(session_id, context_only=True)
        return ContextSnapshot(
            now=now,
            summary=await facts.get_summary(user_id),
            facts=shown,
            facts_total=await facts.count(user_id, include_merged=False),
            messages=[to_message(message) for message in messages],
            ledger=metadata_ledger(row.session_metadata),
        )

    @staticmethod
    async def _prompt_facts(
        facts: FactRepository, user_id: uuid.UUID, *, max_facts: int, now: datetime
    ) -> list[Fact]:
        """The ``max_facts`` visible facts the block shows, read in the block's own order (a
        never-verified legacy row by its update: ordered by ``last_verified_at`` alone, SQL put
        it last and the cap dropped it)."""
        if max_facts < 1:
            return []
        rows = await facts.most_recent(user_id, max_facts)
        return prompt_facts((to_fact(row) for row in rows), now=now)

    async def deliver(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        candidates: Sequence[H],
        *,
        k: int,
        min_similarity: float,
        min_terms: int = RECALL_MIN_TERMS,
    ) -> list[H]:
        """Choose up to ``k`` of ``candidates`` (search order) that qualify and are not in the
        session's ledger, and append their chunk ids to it — all under the session row lock,
        reading the ledger afresh, so two turns of one session built at once neither lose ids
        nor deliver the same excerpt twice. [] when the session is no longer the user's."""
        sessions = SessionRepository(session=session)
        row = await sessions.lock_owned(session_id, user_id)
        if row is None:
            return []
        ledger = metadata_ledger(row.session_metadata)
        chosen = select_recall(
            candidates, ledger=ledger, min_similarity=min_similarity, k=k, min_terms=min_terms
        )
        delivered = [hit.chunk_id for hit in chosen if hit.chunk_id is not None]
        await _append_to_ledger(sessions, session_id, ledger, delivered)
        return chosen

    async def record_shown(
        self, session: AsyncSession, user_id: uuid.UUID, session_id: str, chunk_ids: Sequence[int]
    ) -> None:
        """Append ``chunk_ids`` (excerpts of the session shown to the model another way: a
        memory_search result in its context) to the session's ledger, under the session row
        lock as ``deliver`` does: recall then never injects them again beside the tool result.
        Nothing when the session is no longer the user's."""
        if not chunk_ids:
            return
        sessions = SessionRepository(session=session)
        row = await sessions.lock_owned(session_id, user_id)
        if row is None:
            return
        await _append_to_ledger(
            sessions, session_id, metadata_ledger(row.session_metadata), chunk_ids
        )


async def _append_to_ledger(
    sessions: SessionRepository, session_id: str, ledger: list[int], chunk_ids: Sequence[int]
) -> None:
    """Write ``chunk_ids`` into the session's ledger (read under its row lock), the last
    INJECTED_LEDGER_MAX kept; nothing when that changes nothing."""
    updated = extend_ledger(ledger, chunk_ids, max_ids=INJECTED_LEDGER_MAX)
    if updated != ledger:
        await sessions.set_metadata_value(session_id, LEDGER_KEY, updated)


def summary_at(snapshot: ContextSnapshot) -> datetime | None:
    """When the summary now in the context was written: the session's freshness boundary."""
    times = [m.created_at for m in snapshot.messages if m.kind == "summary"]
    return max(times) if times else None


def prompt_messages(
    snapshot: ContextSnapshot,
    *,
    system_prompt: str,
    incoming: str,
    recalled: Sequence[MemoryHit],
    recall_terms: Sequence[str],
    max_facts: int,
) -> list[ChatTurn]:
    """The prompt, in its order: the host's system prompt (left out when blank), the memory
    message (the summary), the facts block, the recall message (each left out when empty),
    the session's context, the incoming message."""
    messages: list[ChatTurn] = []
    if system_prompt.strip():
        messages.append(ChatTurn("system", system_prompt))
    memory_text = memory_message_text(snapshot.summary)
    if memory_text is not None:
        messages.append(ChatTurn("system", memory_text))
    facts_text = facts_block_text(
        snapshot.facts, now=snapshot.now, max_facts=max_facts, total=snapshot.facts_total
    )
    if facts_text is not None:
        messages.append(ChatTurn("system", facts_text))
    recall_text = recall_message_text(recalled, recall_terms)
    if recall_text is not None:
        messages.append(ChatTurn("system", recall_text))
    messages.extend(context_turns(snapshot.messages))
    messages.append(ChatTurn("user", incoming))
    return messages


def context_turns(messages: Iterable[Message]) -> list[ChatTurn]:
    """The session's context messages as the model's turns, tool calls and results included.

    A compression summary and system messages are system turns; ``tool_call`` rows become the
    tool calls of an assistant turn — of the assistant text right before them, as the model
    sent them in one reply, else of an assistant turn of their own (consecutive calls share
    one) — and ``tool`` rows are tool turns. Text stored on a ``tool_call`` row (what the
    assistant said alongside the call) is that turn's text, after any text it already has.
    Compression markers are bookkeeping, not conversation, and are left out.
    """
    turns: list[ChatTurn] = []
    for message in messages:
        if message.kind == "marker":
            continue
        if message.role == "tool_call":
            call = ToolCall(message.tool_name or "", dict(message.tool_args or {}))
            said = message.content if message.content.strip() else ""
            last = turns[-1] if turns else None
            if last is not None and last.role == "assistant":
                text = "\n\n".join(part for part in (last.content, said) if part)
                turns[-1] = ChatTurn("assistant", text, (*last.tool_calls, call))
            else:
                turns.append(ChatTurn("assistant", said, (call,)))
        elif message.role == "tool":
            turns.append(ChatTurn("tool", message.content, tool_name=message.tool_name))
        elif message.kind == "summary":
            turns.append(ChatTurn("system", message.content))
        else:
            turns.append(ChatTurn(message.role, message.content))
    return turns
