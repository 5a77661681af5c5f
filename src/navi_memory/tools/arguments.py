"""Reading a tool call's arguments: the checks every tool shares, with errors worded for the model
that sent them (it reads the message and calls again).

Models send numbers as ``5``, ``5.0`` or ``"5"`` and leave optional arguments out or ``null``;
both are accepted. Anything that cannot be used is an ``InvalidInputError`` (an
``InvalidTypeError`` for a wrong type) before any work is done.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from navi_memory.constants import MAX_TEXT_CHARS
from navi_memory.errors import InvalidInputError, InvalidTypeError
from navi_memory.validation import check_text

__all__ = [
    "choice",
    "json_type",
    "optional_int",
    "optional_number",
    "optional_text",
    "required_text",
]

_INTEGER_TEXT: Final = re.compile(r"\s*[+-]?\d{1,12}\s*")
_NUMBER_TEXT: Final = re.compile(r"\s*[+-]?(\d{1,12}(\.\d{0,9})?|\.\d{1,9})\s*")


def json_type(value: Any) -> str:
    """How the model would name what it sent."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return _huge_int(value) or f"the number {_shown(value)}"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def required_text(
    arguments: Mapping[str, Any], name: str, *, max_chars: int = MAX_TEXT_CHARS, why: str = ""
) -> str:
    """A non-blank text argument that must be there; ``why`` says what it is for."""
    value = arguments.get(name)
    if value is None:
        raise InvalidInputError(f"{name} is required{': ' + why if why else ''}")
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be text, got {json_type(value)}")
    if not value.strip():
        raise InvalidInputError(f"{name} is empty{': ' + why if why else ''}")
    return check_text(name, value, max_chars=max_chars)


def optional_text(
    arguments: Mapping[str, Any],
    name: str,
    *,
    max_chars: int = MAX_TEXT_CHARS,
    allow_empty: bool = False,
) -> str | None:
    """A text argument that may be left out or null; blank counts as left out unless
    ``allow_empty``."""
    value = arguments.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be text, got {json_type(value)}")
    if not value.strip() and not allow_empty:
        return None
    return check_text(name, value, max_chars=max_chars, allow_empty=allow_empty)


def optional_int(
    arguments: Mapping[str, Any], name: str, *, minimum: int, maximum: int
) -> int | None:
    """A whole number from ``minimum`` to ``maximum`` (``5``, ``5.0`` or ``"5"``), or None when
    left out. Out of range is refused, not clamped: the number meant something to the model."""
    value = arguments.get(name)
    if value is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    whole_float = isinstance(value, float) and value.is_integer()
    integer_text = isinstance(value, str) and _INTEGER_TEXT.fullmatch(value) is not None
    if not (whole or whole_float or integer_text):
        raise InvalidTypeError(
            f"{name} must be a whole number from {minimum} to {maximum}, got {json_type(value)}"
        )
    number = int(value)
    if not minimum <= number <= maximum:
        raise InvalidInputError(f"{name} must be from {minimum} to {maximum}, got {_shown(number)}")
    return number


def optional_number(
    arguments: Mapping[str, Any],
    name: str,
    *,
    minimum: float,
    maximum: float,
    unit: str = "",
) -> float | None:
    """A number from ``minimum`` to ``maximum`` (``30``, ``0.5`` or ``"30"``), or None when left
    out. NaN and infinities are refused with the rest that is out of range; ``unit`` follows
    the bounds in the error."""
    value = arguments.get(name)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    number_text = isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) is not None
    if not (numeric or number_text):
        raise InvalidTypeError(f"{name} must be a number, got {json_type(value)}")
    try:
        number = float(value)
    except OverflowError:  # a whole number beyond a float's range (JSON's ints are unbounded)
        number = math.inf if value > 0 else -math.inf
    if not minimum <= number <= maximum:  # False for NaN as well
        raise InvalidInputError(
            f"{name} must be from {minimum:g} to {maximum:g}{unit}, got {_shown(value)}"
        )
    return number


def _huge_int(value: object) -> str | None:
    """A whole number too long to show (Python refuses to write out one of over 4,300 digits:
    ValueError), as its size; None for any other value."""
    if not isinstance(value, int) or value.bit_length() <= 256:
        return None
    digits = int(value.bit_length() * math.log10(2)) + 1
    return f"a number of about {digits:,} digits"


def _shown(value: object) -> str:
    """``value`` as an error shows it: its first 40 characters (a number may have hundreds)."""
    huge = _huge_int(value)
    if huge is not None:
        return huge
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}…"


def choice(
    arguments: Mapping[str, Any],
    name: str,
    choices: Sequence[str],
    *,
    default: str | None = None,
) -> str:
    """One of ``choices`` (case and surrounding blanks ignored); ``default`` when left out, and
    required when there is no default."""
    value = arguments.get(name)
    listed = ", ".join(choices)
    if value is None:
        if default is None:
            raise InvalidInputError(f"{name} is required: one of {listed}")
        return default
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be one of {listed}, got {json_type(value)}")
    folded = value.strip().lower()
    for known in choices:
        if folded == known:
            return known
    shown = value if len(value) <= 40 else value[:40] + "…"
    raise InvalidInputError(f"{name} must be one of {listed}, got {shown!r}")
