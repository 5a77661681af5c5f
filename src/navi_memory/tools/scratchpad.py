"""The ``scratchpad`` tool: the writer of sketches — this session's working notes, one text per
section, kept in ``kv_store`` under scope ``scratchpad`` (spec: "Unified search", the sketches
store). ``memory_search`` reads them back alongside facts and raw history.

Its function-calling spec and its argument rules; what each action does is the handler's.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final, Literal, Protocol, TypeAlias, get_args

from navi_memory.constants import KV_KEY_MAX_CHARS, SKETCH_SCOPE
from navi_memory.errors import InvalidInputError
from navi_memory.request_context import current_user_id
from navi_memory.schemas import KvEntry
from navi_memory.text.hits import one_line
from navi_memory.tools.arguments import choice, optional_text, required_text
from navi_memory.tools.base import Tool, ToolContext

__all__ = [
    "SCRATCHPAD",
    "SCRATCHPAD_ACTIONS",
    "SCRATCHPAD_DESCRIPTION",
    "SCRATCHPAD_PARAMETERS",
    "DeleteSection",
    "ListSections",
    "ReadSection",
    "ScratchpadAction",
    "ScratchpadRequest",
    "SketchStore",
    "WriteSection",
    "parse_scratchpad_arguments",
    "scratchpad_tool",
]

SCRATCHPAD: Final = "scratchpad"

ScratchpadAction: TypeAlias = Literal["write", "read", "delete", "list"]
SCRATCHPAD_ACTIONS: Final[tuple[ScratchpadAction, ...]] = get_args(ScratchpadAction)

SCRATCHPAD_DESCRIPTION: Final = (
    "Working notes for this conversation, kept by section: a plan, a list of findings, the "
    "state of a task. "
    'action="write" replaces one section\'s text (section, text). '
    'action="read" shows one section. '
    'action="delete" removes a section that is no longer needed. '
    'action="list" names the sections with when each was last written. '
    "Notes belong to this session; they are not facts about the user (save those with the "
    "memory tool). memory_search finds them too."
)

SCRATCHPAD_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": list(SCRATCHPAD_ACTIONS),
            "description": "write, read, delete or list.",
        },
        "section": {
            "type": "string",
            "description": (
                "write, read and delete (required): the section's name, e.g. plan, findings."
            ),
        },
        "text": {
            "type": "string",
            "description": "write (required): the section's whole new text; empty clears it.",
        },
    },
    "required": ["action"],
}


@dataclass(frozen=True, slots=True)
class WriteSection:
    section: str
    text: str


@dataclass(frozen=True, slots=True)
class ReadSection:
    section: str


@dataclass(frozen=True, slots=True)
class DeleteSection:
    section: str


@dataclass(frozen=True, slots=True)
class ListSections:
    pass


ScratchpadRequest: TypeAlias = WriteSection | ReadSection | DeleteSection | ListSections


def parse_scratchpad_arguments(arguments: Mapping[str, Any]) -> ScratchpadRequest:
    """The action a ``scratchpad`` call asks for, with its arguments checked; an
    ``InvalidInputError`` / ``InvalidTypeError`` worded for the model otherwise."""
    action = choice(arguments, "action", SCRATCHPAD_ACTIONS)
    if action == "list":
        return ListSections()
    section = required_text(
        arguments, "section", max_chars=KV_KEY_MAX_CHARS, why="the name of the section"
    ).strip()
    if action == "read":
        return ReadSection(section=section)
    if action == "delete":
        return DeleteSection(section=section)
    text = optional_text(arguments, "text", allow_empty=True)
    if text is None:
        raise InvalidInputError("text is required: the section's whole new text")
    return WriteSection(section=section, text=text)


# --- the handler ------------------------------------------------------------------------------


class SketchStore(Protocol):
    """What the tool needs of ``memory.kv`` (``KvStore`` provides it)."""

    async def set(
        self,
        scope: str,
        key: str,
        value: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> KvEntry: ...

    async def get(
        self,
        scope: str,
        key: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> str | None: ...

    async def delete(
        self,
        scope: str,
        key: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> bool: ...

    async def list(
        self,
        scope: str,
        *,
        session_id: str | None = None,
        user_id: uuid.UUID | str | None = None,
    ) -> builtins.list[KvEntry]: ...


LIST_MAX_SECTIONS: Final = 100
"""Sections a ``list`` answer names at most (the rest are counted): a conversation may hold
thousands, and the answer goes into the model's context."""


def scratchpad_tool(kv: SketchStore) -> Tool:
    """The ``scratchpad`` tool on ``kv``: the notes of the context's session (kv_store scope
    ``scratchpad``), for the context's user; a context without a session has no notes."""

    async def handle(arguments: Mapping[str, Any], context: ToolContext) -> str:
        request = parse_scratchpad_arguments(arguments)
        session_id = context.session_id
        if session_id is None:
            raise InvalidInputError(
                "the scratchpad keeps the notes of one conversation, and this call belongs to "
                "none (the host sets no session)"
            )
        with context.applied():
            if current_user_id() is None:
                # With read_all and no user, a list would mix every user's notes filed under
                # this session id, unlabelled.
                raise InvalidInputError(
                    "the scratchpad keeps one user's notes, and this call acts for no user "
                    "(the host sets none)"
                )
            if isinstance(request, WriteSection):
                # Blank text clears the section, as empty text does: no blank note is a hit.
                written = request.text if request.text.strip() else ""
                entry = await kv.set(SKETCH_SCOPE, request.section, written, session_id=session_id)
                return f"scratchpad: wrote section {entry.key!r} ({len(entry.value):,} characters)"
            if isinstance(request, ReadSection):
                stored = await kv.get(SKETCH_SCOPE, request.section, session_id=session_id)
                if stored is None:
                    return (
                        f"scratchpad: there is no section {request.section!r} in this "
                        'conversation\'s notes (action "list" names the sections).'
                    )
                if not stored.strip():
                    return f"scratchpad section {request.section!r} is empty (cleared)."
                return f"scratchpad section {request.section!r}:\n{stored}"
            if isinstance(request, DeleteSection):
                if await kv.delete(SKETCH_SCOPE, request.section, session_id=session_id):
                    return f"scratchpad: deleted section {request.section!r}"
                return (
                    f"scratchpad: there is no section {request.section!r} in this "
                    'conversation\'s notes (action "list" names the sections).'
                )
            entries = await kv.list(SKETCH_SCOPE, session_id=session_id)
        if not entries:
            return "scratchpad: this conversation has no notes yet."
        lines = [f"scratchpad: {len(entries)} section(s) in this conversation's notes", ""]
        lines.extend(
            f"• {one_line(entry.key)} ({len(entry.value):,} characters, written "
            f"{entry.updated_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC)"
            for entry in entries[:LIST_MAX_SECTIONS]
        )
        if len(entries) > LIST_MAX_SECTIONS:
            lines.append(f"… and {len(entries) - LIST_MAX_SECTIONS:,} more section(s)")
        return "\n".join(lines)

    return Tool(
        name=SCRATCHPAD,
        description=SCRATCHPAD_DESCRIPTION,
        parameters=SCRATCHPAD_PARAMETERS,
        handler=handle,
        needs_user=True,
    )
