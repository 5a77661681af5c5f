"""The ``scratchpad`` tool: the writer of sketches — this session's working notes, one text per
section, kept in ``kv_store`` under scope ``scratchpad`` (spec: "Unified search", the sketches
store). ``memory_search`` reads them back alongside facts and raw history.

Its function-calling spec and its argument rules; what each action does is the handler's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

from navi_memory.constants import KV_KEY_MAX_CHARS
from navi_memory.errors import InvalidInputError
from navi_memory.tools.arguments import choice, optional_text, required_text

__all__ = [
    "SCRATCHPAD",
    "SCRATCHPAD_ACTIONS",
    "SCRATCHPAD_DESCRIPTION",
    "SCRATCHPAD_PARAMETERS",
    "ListSections",
    "ReadSection",
    "ScratchpadAction",
    "ScratchpadRequest",
    "WriteSection",
    "parse_scratchpad_arguments",
]

SCRATCHPAD: Final = "scratchpad"

ScratchpadAction: TypeAlias = Literal["write", "read", "list"]
SCRATCHPAD_ACTIONS: Final[tuple[ScratchpadAction, ...]] = get_args(ScratchpadAction)

SCRATCHPAD_DESCRIPTION: Final = (
    "Working notes for this conversation, kept by section: a plan, a list of findings, the "
    "state of a task. "
    'action="write" replaces one section\'s text (section, text). '
    'action="read" shows one section. '
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
            "description": "write, read or list.",
        },
        "section": {
            "type": "string",
            "description": "write and read (required): the section's name, e.g. plan, findings.",
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
class ListSections:
    pass


ScratchpadRequest: TypeAlias = WriteSection | ReadSection | ListSections


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
    text = optional_text(arguments, "text", allow_empty=True)
    if text is None:
        raise InvalidInputError("text is required: the section's whole new text")
    return WriteSection(section=section, text=text)
