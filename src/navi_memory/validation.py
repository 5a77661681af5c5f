"""Checks at the API edge: bad input gets a clear error before it reaches SQL or a model."""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from navi_memory.constants import KV_ENTRY_NAME_MAX_BYTES, MAX_TEXT_CHARS, SESSION_ID_MAX_CHARS
from navi_memory.errors import InvalidInputError, InvalidTypeError

__all__ = [
    "check_aware_datetime",
    "check_batch_job",
    "check_bool",
    "check_int",
    "check_json_object",
    "check_kv_entry_name",
    "check_number",
    "check_optional_session_id",
    "check_optional_text",
    "check_sequence",
    "check_session_id",
    "check_shown",
    "check_text",
    "holds_nul",
    "is_blank",
]


def check_text(
    name: str, value: Any, *, max_chars: int = MAX_TEXT_CHARS, allow_empty: bool = False
) -> str:
    """``value`` as a str fit for PostgreSQL text: no NUL byte, not too long, not blank."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError(f"{name} contains a NUL byte, which PostgreSQL text cannot hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{name} is not valid Unicode text (a lone surrogate at position {exc.start})"
        ) from exc
    if len(value) > max_chars:
        raise InvalidInputError(
            f"{name} is {len(value):,} characters long; the limit is {max_chars:,}"
        )
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{name} must not be empty")
    return value


def check_shown(name: str, value: str) -> str:
    """``value`` (checked text) unless it shows nothing (``is_blank``): a fact's category, key
    or value of invisible characters alone reads as "[prefs] : x" in a prompt. Only where text
    is written to be shown: identifiers (session ids, kv keys) and lookups keep check_text's
    rule, so rows stored before this check stay reachable."""
    if is_blank(value):
        raise InvalidInputError(
            f"{name} must not be empty: invisible characters alone (a zero-width space or "
            "joiner, a byte-order mark, a soft hyphen) show nothing"
        )
    return value


# Format characters (Unicode category Cf) that are drawn: the prepended concatenation marks
# of Arabic, Syriac and Kaithi number signs, and the end-of-ayah mark.
_SHOWN_FORMAT: Final = frozenset(
    "\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
)


def is_blank(text: str) -> bool:
    """``text`` shows nothing: whitespace and invisible format characters only (zero-width
    space and joiners, the byte-order mark, the soft hyphen, bidirectional marks: Unicode
    category Cf, but for the few drawn ones)."""
    stripped = text.strip()
    if not stripped:
        return True
    if stripped[0].isascii():  # nearly every text: a visible character first
        return False
    return all(
        ch.isspace() or (unicodedata.category(ch) == "Cf" and ch not in _SHOWN_FORMAT)
        for ch in stripped
    )


def check_optional_text(
    name: str, value: Any, *, max_chars: int = MAX_TEXT_CHARS, allow_empty: bool = True
) -> str | None:
    if value is None:
        return None
    return check_text(name, value, max_chars=max_chars, allow_empty=allow_empty)


def check_int(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` as an int (bool refused) within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise InvalidInputError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool: a flag given as "no", 0 or None would be read as its truth value."""
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def check_number(name: str, value: Any, *, minimum: float, maximum: float) -> float:
    """``value`` as a finite float (an int is fine, a bool is not) within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"{name} must be a finite number, got {value}")
    if not minimum <= value <= maximum:
        raise InvalidInputError(f"{name} must be between {minimum:g} and {maximum:g}, got {value}")
    return float(value)


def check_sequence(name: str, value: Any) -> Sequence[Any]:
    """``value`` as a sequence of items (a list or tuple): not None, not a single item, and not
    a str, bytes or mapping, whose iteration yields characters, ints or keys."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise InvalidTypeError(f"{name} must be a list or tuple, got {type(value).__name__}")
    return value


def check_session_id(session_id: Any) -> str:
    """A session id as given: non-blank text without NUL, at most SESSION_ID_MAX_CHARS."""
    return check_text("session_id", session_id, max_chars=SESSION_ID_MAX_CHARS)


def check_optional_session_id(session_id: Any) -> str | None:
    return None if session_id is None else check_session_id(session_id)


def check_kv_entry_name(scope: str, session_id: str | None, key: str) -> None:
    """What names a kv entry fits one row of its unique index (KV_ENTRY_NAME_MAX_BYTES): each
    part within its character limit can still make a row PostgreSQL refuses."""
    size = sum(len(part.encode("utf-8")) for part in (scope, session_id or "", key))
    if size > KV_ENTRY_NAME_MAX_BYTES:
        raise InvalidInputError(
            f"scope, session id and key take {size:,} bytes in UTF-8 together; the limit is "
            f"{KV_ENTRY_NAME_MAX_BYTES:,}: use a shorter key"
        )


def check_aware_datetime(name: str, value: Any) -> datetime:
    """``value`` as a datetime with a time zone, one that stays within Python's range once in
    UTC (0001-01-01 at +01:00 does not: PostgreSQL would refuse it as a StorageError)."""
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInputError(f"{name} must carry a time zone (e.g. datetime.now(UTC))")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise InvalidInputError(
            f"{name} {value.isoformat()} is outside the years 1-9999 in UTC"
        ) from None
    return value


def check_json_object(name: str, value: Any, *, max_chars: int) -> dict[str, Any]:
    """``value`` as the JSON object PostgreSQL's jsonb will store: a dict of JSON values,
    finite numbers, valid Unicode, no NUL, at most ``max_chars`` as JSON text.

    What is read back has the same keys, strings, booleans and nulls, but not always the same
    numbers: jsonb keeps a number as ``numeric``, so it comes back as the decimal value its
    JSON text denotes — a float written with an exponent as an int when that value is whole
    (``1e20`` as ``100000000000000000000``, ``1e308`` as a 309-digit int), ``-0.0`` as
    ``0.0``; ``1.5e-07`` stays a float."""
    if not isinstance(value, dict):
        raise InvalidTypeError(f"{name} must be a dict, got {type(value).__name__}")
    try:
        dumped = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise InvalidTypeError(f"{name} must be JSON-serialisable: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{name} cannot be stored as JSON: {exc}") from exc
    check_text(name, dumped, max_chars=max_chars)  # a lone surrogate, anywhere, is refused here
    loaded: dict[str, Any] = json.loads(dumped)
    if holds_nul(loaded):  # jsonb refuses \u0000 anywhere, keys included
        raise InvalidInputError(f"{name} contains a NUL byte, which jsonb cannot hold")
    return loaded


def holds_nul(value: Any) -> bool:
    """Whether a str anywhere in ``value`` (dicts' keys and values, lists, nested) holds a NUL,
    which PostgreSQL's text and jsonb refuse."""
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and "\x00" in item:
            return True
    return False


def check_batch_job(
    batch_size: Any, pause_seconds: Any, progress: Any, *, batch_max: int, pause_max: float
) -> tuple[int, float]:
    """A batch job's arguments (backfill, reembed): ``batch_size`` 1..``batch_max``,
    ``pause_seconds`` 0..``pause_max``, ``progress`` None or a function."""
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=batch_max)
    pause = check_number("pause_seconds", pause_seconds, minimum=0, maximum=pause_max)
    if progress is not None and not callable(progress):
        raise InvalidTypeError(
            f"progress must be a function of BackfillProgress, got {type(progress).__name__}"
        )
    return batch_size, pause
