"""The SQL character class of repositories.kv (a value that is not blank) against is_blank."""

from __future__ import annotations

import re
import sys
import unicodedata

from navi_memory.repositories.kv import SHOWS_SOMETHING
from navi_memory.validation import is_blank

# Every character is_blank counts as blank is whitespace (Cc, Zs, Zl, Zp) or an invisible
# format character (Cf): the walk tests only those categories.
_MAYBE_BLANK = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs"})


def _entry(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def derived_class() -> str:
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) in _MAYBE_BLANK and is_blank(char):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    spans = (
        _entry(first) if first == last else f"{_entry(first)}-{_entry(last)}"
        for first, last in ranges
    )
    return "[^" + "".join(spans) + "]"


def test_the_sql_class_is_is_blank_written_out() -> None:
    """One rule in SQL and in Python: the written-out class is the one is_blank gives (a new
    Unicode version, or a change of is_blank, fails here until the class is written again)."""
    assert derived_class() == SHOWS_SOMETHING


def test_the_class_reads_as_python_reads_it() -> None:
    """Python's re reads the same escapes: blank values never match, shown ones do."""
    pattern = re.compile(SHOWS_SOMETHING)
    for blank in (" \t\n", "\u200b\u200d", "\ufeff\u00ad", "\u3000", ""):
        assert pattern.search(blank) is None, repr(blank)
    for shown in ("a", "\u200bx", "\u0600", "é"):
        assert pattern.search(shown) is not None, repr(shown)
