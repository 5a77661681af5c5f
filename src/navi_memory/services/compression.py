"""Context compression: older messages leave the context behind a summary, and are kept verbatim
as raw chunks with breadcrumbs (spec: "Raw chunks and breadcrumbs").

The steps are separate so that no lock is held while a model answers (the sessions facade
runs them): ``CompressionService.context`` reads the rows, ``plan_compression`` picks what
leaves, ``summarize`` and ``embed_chunks`` ask the models outside any transaction, then in one
unit of work ``CompressionService.apply`` re-checks and writes under the session lock and
``CompressionService.write_chunks`` stores the demoted messages through the chunk service.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from navi_memory.config import Settings
from navi_memory.constants import SUMMARY_INPUT_MAX_CHARS, SUMMARY_MAX_CHARS, SUMMARY_MAX_KEYS
from navi_memory.errors import ChatModelError, NotFoundError
from navi_memory.llm.chat import ChatModel, ChatTurn
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.schemas import ChunkDraft, CompressionResult, Message
from navi_memory.services.chunks import ChunkService
from navi_memory.services.sessions import to_message
from navi_memory.text import (
    build_chunks,
    elide_middle,
    elided_parts,
    extract_breadcrumbs,
    merge_breadcrumbs,
    render_message,
    split_keys_line,
)

__all__ = [
    "SUMMARY_PROMPT",
    "CompressionPlan",
    "CompressionService",
    "Summary",
    "fallback_summary",
    "nothing_demoted",
    "plan_compression",
    "raw_chunks",
    "summarize",
]

logger = logging.getLogger(__name__)

SUMMARY_PROMPT: Final = (
    "You compress the older part of a conversation between a user and an assistant. Your "
    "summary replaces those messages in the assistant's context, so keep what the rest of the "
    "conversation still needs: what the user wants, decisions and their reasons, facts about "
    "the user and their systems, open tasks, and exact values (names, files, commands, ports, "
    "amounts, links). Fold the previous summary in and drop what was settled or abandoned. "
    "Write plain prose in the language of the conversation; invent nothing.\n"
    "End with ONE line KEYS: item, item, … — the breadcrumbs of this history: the files, "
    "commands, identifiers, ports, amounts, tickets, links and names a later question would be "
    f"phrased with, copied exactly, at most {SUMMARY_MAX_KEYS}, most important first. "
    "Write KEYS: NONE when nothing is worth indexing."
)

_FALLBACK_NOTE = "Earlier conversation ({count} {noun}) was truncated; search memory for details."
_FALLBACK_NOTE_LINE = re.compile(
    r"\AEarlier conversation \((\d+) messages?\) was truncated; search memory for details\."
    r"[ \t]*(?:\n+|\Z)"
)


def nothing_demoted() -> CompressionResult:
    """The result of a compression that found nothing to do (or lost the race to another)."""
    return CompressionResult(
        demoted=0, summary=None, chunks_written=0, breadcrumbs=[], used_fallback=False
    )


@dataclass(frozen=True, slots=True)
class CompressionPlan:
    """The context rows one compression takes out of the context, in seq order."""

    demoted: tuple[Message, ...]

    @property
    def messages(self) -> list[Message]:
        """The demoted conversation (kind 'message'); old summaries and markers left out."""
        return [m for m in self.demoted if m.kind == "message"]

    @property
    def previous_summary(self) -> str | None:
        summaries = [m for m in self.demoted if m.kind == "summary"]
        return summaries[-1].content if summaries else None


def plan_compression(context: Sequence[Message], keep_last: int) -> CompressionPlan | None:
    """Keep the last ``keep_last`` context messages of kind 'message'; everything else in the
    context (older messages, the previous summary, markers) is demoted. None when no message
    would leave: a summary is never rewritten for nothing.

    The boundary never parts a tool result from its call (a prompt with a result the model did
    not ask for is refused by OpenAI-style APIs): a kept ``tool`` row keeps the ``tool_call``
    rows of its turn, or, when that would keep every message, the results leave with them.
    Calls still waiting for their results (the conversation ends with their turn, with fewer
    results than calls) are always kept with that turn, even with ``keep_last`` 0: their
    results arrive next, and must find them in the context.
    """
    ordered = sorted(context, key=lambda m: m.seq)
    conversation = [m for m in ordered if m.kind == "message"]
    if len(conversation) <= keep_last:
        return None
    start = min(_keep_start(conversation, len(conversation) - keep_last), _pending(conversation))
    if start == 0:
        return None
    kept = {m.id for m in conversation[start:]}
    return CompressionPlan(demoted=tuple(m for m in ordered if m.id not in kept))


def _pending(conversation: Sequence[Message]) -> int:
    """Where the last tool-call turn starts when some of its calls still wait for a result
    (the conversation ends with the turn's calls, then fewer results than calls: "a", "b",
    result of "a"); ``len(conversation)`` when nothing waits."""
    end = len(conversation)
    results = end
    while results > 0 and conversation[results - 1].role == "tool":
        results -= 1
    calls = results
    while calls > 0 and conversation[calls - 1].role == "tool_call":
        calls -= 1
    if results - calls > end - results:  # more calls than results: the turn is open
        return calls
    return end


def _keep_start(conversation: Sequence[Message], start: int) -> int:
    """``start`` (the first kept message) moved off the middle of a tool-call turn: back to the
    turn's first call, else (nothing would leave) forward past its results."""
    back = start
    while 0 < back < len(conversation) and conversation[back].role == "tool":
        if conversation[back - 1].role not in ("tool", "tool_call"):
            break  # a result stored with no call before it: nothing to keep it with
        back -= 1
    while 0 < back < len(conversation) and conversation[back].role == "tool_call":
        if conversation[back - 1].role != "tool_call":
            break
        back -= 1
    if back > 0:
        return back
    forward = start
    for role in ("tool_call", "tool"):
        while forward < len(conversation) and conversation[forward].role == role:
            forward += 1
    return forward


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    keys: list[str]
    used_fallback: bool


def fallback_summary(plan: CompressionPlan) -> str:
    """The deterministic summary when no model summary can be had.

    It says how many messages left (counting those of an earlier truncation note it replaces)
    and keeps the previous summary's text, so nothing already summarised leaves the context.
    """
    count = len(plan.messages)
    previous = (plan.previous_summary or "").strip()
    earlier = _FALLBACK_NOTE_LINE.match(previous)
    if earlier is not None:
        count += int(earlier.group(1))
        previous = previous[earlier.end() :].strip()
    note = _FALLBACK_NOTE.format(count=count, noun="message" if count == 1 else "messages")
    return f"{note}\n\n{previous}" if previous else note


def _clean_reply(text: str) -> str:
    # PostgreSQL text holds neither NUL nor lone surrogates; a model may send both.
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _transcript(plan: CompressionPlan, message_max_chars: int) -> str:
    rendered = [render_message(m) for m in plan.messages]
    return "\n\n".join(elide_middle(r, message_max_chars) for r in rendered if r is not None)


async def summarize(
    chat_model: ChatModel | None, plan: CompressionPlan, *, message_max_chars: int
) -> Summary:
    """The model's summary of the previous summary plus the demoted messages, its KEYS: line
    split off. The deterministic fallback instead when there is no model, when it fails, when
    its reply holds no word but a KEYS: line (invisible characters and punctuation are none), or
    when no demoted message has text to summarise.

    Never call this inside a transaction: the model may take its time.
    """
    fallback = Summary(fallback_summary(plan), [], used_fallback=True)
    transcript = _transcript(plan, message_max_chars)
    if chat_model is None or not transcript:
        return fallback
    previous = plan.previous_summary
    header = f"Previous summary:\n{previous}\n\n" if previous else ""
    prompt = f"{header}Messages to fold in, oldest first:\n\n{transcript}"
    try:
        reply = await chat_model.complete(
            [
                ChatTurn("system", SUMMARY_PROMPT),
                ChatTurn("user", elide_middle(prompt, SUMMARY_INPUT_MAX_CHARS)),
            ]
        )
    except ChatModelError as exc:
        logger.warning(
            "compressor.summary_failed: %s; truncating instead",
            exc,
            extra={"event": "compressor.summary_failed"},
        )
        return fallback
    text, keys = split_keys_line(_clean_reply(reply))
    if not any(character.isalnum() for character in text):
        # Nothing, or nothing a reader sees as a word: zero-width spaces, a byte-order mark,
        # punctuation alone. Stored, it would stand in for the previous summary.
        logger.warning(
            "compressor.summary_failed: the reply held no summary; truncating instead",
            extra={"event": "compressor.summary_failed"},
        )
        return fallback
    return Summary(elide_middle(text, SUMMARY_MAX_CHARS), keys, used_fallback=False)


def raw_chunks(
    plan: CompressionPlan, keys: Sequence[str], *, max_chars: int, message_max_chars: int
) -> tuple[list[ChunkDraft], list[str]]:
    """The demoted messages as chunks, every one carrying the merged breadcrumbs: the KEYS:
    items first, then what ``extract_breadcrumbs`` finds in the messages themselves.

    The breadcrumbs are looked for only in what the chunks keep of each message (its head and
    tail, ``message_max_chars`` at most): a breadcrumb must lead to a chunk that holds it, and a
    tool may return a whole file (1,000,000 characters, about a second of scanning each).
    """
    kept: list[str] = []
    for message in plan.demoted:
        rendered = render_message(message)
        if rendered is not None:
            head, _, tail = elided_parts(rendered, message_max_chars)
            kept.extend((head, tail) if tail else (head,))
    found = extract_breadcrumbs("\n\n".join(kept))
    breadcrumbs = merge_breadcrumbs(keys, found)
    chunks = build_chunks(plan.demoted, max_chars=max_chars, message_max_chars=message_max_chars)
    return [c.model_copy(update={"breadcrumbs": breadcrumbs}) for c in chunks], breadcrumbs


class CompressionService:
    """Compression's rules; chunk writing goes through the ChunkService it is given."""

    def __init__(
        self, *, settings: Settings, chat_model: ChatModel | None, chunks: ChunkService
    ) -> None:
        self.settings = settings
        self.chat_model = chat_model
        self.chunks = chunks

    async def context(
        self, session: AsyncSession, user_id: uuid.UUID, session_id: str
    ) -> list[Message]:
        """The session's context as compression plans from it; NotFoundError if not theirs."""
        repo = SessionRepository(session=session)
        if await repo.get(session_id, user_id) is None:
            raise NotFoundError(f"no session {session_id!r} for this user")
        return [to_message(r) for r in await repo.messages(session_id, context_only=True)]

    async def summarize(self, plan: CompressionPlan) -> Summary:
        """``summarize`` with this service's model; never inside a transaction."""
        return await summarize(
            self.chat_model, plan, message_max_chars=self.settings.chunk_message_max_chars
        )

    async def raw_chunks(
        self, plan: CompressionPlan, keys: Sequence[str]
    ) -> tuple[list[ChunkDraft], list[str]]:
        """``raw_chunks`` at the configured chunk sizes, in a worker thread: rendering, hashing
        and scanning many long messages takes long enough to stall every other task."""
        return await asyncio.to_thread(
            raw_chunks,
            plan,
            keys,
            max_chars=self.settings.chunk_max_chars,
            message_max_chars=self.settings.chunk_message_max_chars,
        )

    async def embed_chunks(self, chunks: Sequence[ChunkDraft]) -> list[array[float]] | None:
        """The chunks' vectors (None when the model fails); never inside a transaction."""
        return await self.chunks.embed(chunks)

    async def write_chunks(
        self,
        conn: AsyncSession | AsyncConnection,
        user_id: uuid.UUID,
        session_id: str,
        chunks: Sequence[ChunkDraft],
        vectors: Sequence[Sequence[float]] | None,
    ) -> int:
        """Store the demoted messages' chunks; the session row must still exist (a session
        deleted meanwhile took its messages with it: NotFoundError)."""
        return await self.chunks.write(
            conn, user_id, session_id, chunks, vectors, require_session=True
        )

    async def apply(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        plan: CompressionPlan,
        summary: str,
    ) -> Message | None:
        """Flip exactly the planned rows out of the context and add the summary after them.

        Takes the session lock, then checks the context is still the one the plan was made from:
        if another compression got there first (a planned row already left, or a summary the
        plan did not see arrived) nothing is written and None comes back.
        """
        sessions = SessionRepository(session=session)
        # The user row first: the chunks written next reference it (SessionRepository.owner).
        if await sessions.lock_owned(session_id, user_id, user_row=True) is None:
            raise NotFoundError(f"no session {session_id!r} for this user")
        in_context = await sessions.context_kinds(session_id)
        planned = [m.id for m in plan.demoted if m.id is not None]
        planned_ids = set(planned)
        if not planned_ids <= in_context.keys() or any(
            kind != "message" and row_id not in planned_ids for row_id, kind in in_context.items()
        ):
            logger.info(
                "compressor.already_compressed: session %s changed since it was read",
                session_id,
                extra={"event": "compressor.already_compressed"},
            )
            return None
        await sessions.demote(session_id, planned)
        row = await sessions.insert_message(
            {
                "session_id": session_id,
                "seq": await sessions.next_seq(session_id),
                "role": "system",
                "content": summary,
                "kind": "summary",
                "is_context": True,
            }
        )
        return to_message(row)
