"""Context compression: older messages leave the context behind a summary, and are kept verbatim
as raw chunks with breadcrumbs (spec: "Raw chunks and breadcrumbs").

The steps are separate so that no lock is held while the model answers: ``plan_compression``
picks the rows from a read, ``summarize`` asks the model outside any transaction,
``CompressionService.apply`` re-checks and writes under the session lock, and
``index_raw_chunks`` hands the demoted messages to ``add_chunks`` after the commit.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.constants import SUMMARY_MAX_KEYS
from navi_memory.errors import ChatModelError, NaviMemoryError, NotFoundError
from navi_memory.llm.chat import ChatModel, ChatTurn
from navi_memory.repositories.sessions import SessionRepository, to_message
from navi_memory.schemas import ChunkDraft, CompressionResult, Message
from navi_memory.text import (
    build_chunks,
    elide_middle,
    extract_breadcrumbs,
    merge_breadcrumbs,
    render_message,
    split_keys_line,
)

__all__ = [
    "SUMMARY_PROMPT",
    "AddChunks",
    "CompressionPlan",
    "CompressionService",
    "Summary",
    "fallback_summary",
    "index_raw_chunks",
    "nothing_demoted",
    "plan_compression",
    "raw_chunks",
    "summarize",
]

logger = logging.getLogger(__name__)

AddChunks = Callable[[Sequence[ChunkDraft], uuid.UUID, str], Awaitable[int]]
"""``MemoryStore.add_chunks``: embeds and stores chunks, skipping ones already stored; returns
how many rows it wrote."""

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

SUMMARY_INPUT_MAX_CHARS: Final = 24_000
"""What the summarizer is shown at most; a longer transcript loses its middle (the demoted
messages are still indexed whole)."""

SUMMARY_MAX_CHARS: Final = 12_000
"""A longer summary is cut in the middle: it rides in every prompt from now on."""

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
    would leave: a summary is never rewritten for nothing."""
    ordered = sorted(context, key=lambda m: m.seq)
    conversation = [m for m in ordered if m.kind == "message"]
    if len(conversation) <= keep_last:
        return None
    kept = {m.id for m in conversation[len(conversation) - keep_last :]}
    return CompressionPlan(demoted=tuple(m for m in ordered if m.id not in kept))


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
    its reply holds nothing but a KEYS: line, or when no demoted message has text to summarise.

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
    if not text:
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
    items first, then what ``extract_breadcrumbs`` finds in the messages themselves."""
    rendered = (render_message(m) for m in plan.demoted)
    found = extract_breadcrumbs("\n\n".join(r for r in rendered if r is not None))
    breadcrumbs = merge_breadcrumbs(keys, found)
    chunks = build_chunks(plan.demoted, max_chars=max_chars, message_max_chars=message_max_chars)
    return [c.model_copy(update={"breadcrumbs": breadcrumbs}) for c in chunks], breadcrumbs


async def index_raw_chunks(
    add_chunks: AddChunks, chunks: Sequence[ChunkDraft], user_id: uuid.UUID, session_id: str
) -> int:
    """Store the chunks; a failure is logged (``compressor.chunk_index_failed``), never raised:
    the compression it belongs to has already happened."""
    if not chunks:
        return 0
    try:
        return await add_chunks(chunks, user_id, session_id)
    except NaviMemoryError as exc:
        logger.warning(
            "compressor.chunk_index_failed: session %s, %d chunk(s): %s",
            session_id,
            len(chunks),
            exc,
            extra={"event": "compressor.chunk_index_failed"},
        )
        return 0


class CompressionService:
    def __init__(self, *, session: AsyncSession) -> None:
        self.session = session
        self.sessions = SessionRepository(session=session)

    async def apply(
        self, user_id: uuid.UUID, session_id: str, plan: CompressionPlan, summary: str
    ) -> Message | None:
        """Flip exactly the planned rows out of the context and add the summary after them.

        Takes the session lock, then checks the context is still the one the plan was made from:
        if another compression got there first (a planned row already left, or a summary the
        plan did not see arrived) nothing is written and None comes back.
        """
        if await self.sessions.lock_owned(session_id, user_id) is None:
            raise NotFoundError(f"no session {session_id!r} for this user")
        in_context = await self.sessions.context_kinds(session_id)
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
        await self.sessions.demote(session_id, planned)
        row = await self.sessions.insert_message(
            {
                "session_id": session_id,
                "seq": await self.sessions.next_seq(session_id),
                "role": "system",
                "content": summary,
                "kind": "summary",
                "is_context": True,
            }
        )
        return to_message(row)
