"""Hypothesis strategies for hostile input, one per family of docs/reliability.md, and the
per-parameter strategies the entry point table builds its arguments from.

Every family is also offered where its type does not belong (a number for a text, a text for a
number): a caller can pass anything.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES: Final = 30
"""Generated inputs per test in `make test` (a soak test raises it)."""

HOSTILE_RUN = settings(
    max_examples=EXAMPLES,
    derandomize=True,  # the same inputs on every run: a CI failure reproduces
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# --- the families -----------------------------------------------------------------------------

MEGABYTE: Final = 1_000_000

_HUGE_TEXTS: Final = (
    "x" * MEGABYTE,
    "é" * MEGABYTE,  # 2 MB of UTF-8
    "\u200b" * MEGABYTE,  # a megabyte of nothing visible
    "port 8099 " * (MEGABYTE // 10),
    "y" * 100_001,  # just over MAX_TEXT_CHARS
    "z" * 1_000_001,  # just over a message's limit
)

nul_text = st.builds(
    lambda head, tail: f"{head}\x00{tail}", st.text(max_size=8), st.text(max_size=8)
)
"""Text with a NUL byte, which PostgreSQL text cannot hold."""

lone_surrogates = st.builds(
    lambda head, surrogate, tail: f"{head}{surrogate}{tail}",
    st.text(max_size=6),
    st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
    st.text(max_size=6),
)
"""Text that is not valid Unicode: a surrogate with no partner, which UTF-8 cannot encode."""

huge_text = st.sampled_from(_HUGE_TEXTS)
"""Strings of about a megabyte (and just over each limit)."""

like_wildcards = st.one_of(
    st.sampled_from(["%", "_", "\\", "%%", "\\%", "a_b", "100%", "%_\\", "\\\\", "[%]"]),
    st.text(alphabet="%_\\ab", min_size=1, max_size=8),
)
"""LIKE's metacharacters, which must match themselves only."""

sql_text = st.sampled_from(
    [
        "'; DROP TABLE memory_facts; --",
        "' OR '1'='1",
        '"; DELETE FROM navi_users; --',
        "$$; SELECT pg_sleep(5); $$",
        "/* */ UNION SELECT * FROM memory_facts --",
        "1); TRUNCATE kv_store; --",
        ":uid",
        "%(uid)s",
        "$1",
        "::text",
        "E'\\\\x41'",
        "\\N",
    ]
)
"""Text shaped like SQL, parameter markers included."""

unicode_tricks = st.sampled_from(
    [
        "\u202eevil\u202c",  # right-to-left override
        "\u200f\u05e9\u05dc\u05d5\u05dd",  # RTL mark + Hebrew
        "\u0645\u0631\u062d\u0628\u0627",  # Arabic
        "a\u200bb\u200cc\u200dd",  # zero-width space, non-joiner, joiner
        "\ufeffbom",
        "e\u0301",  # combining acute
        "Z\u0334\u0321\u031ba\u0337l\u0336g\u0338o\u0335",
        "\U0001f469\u200d\U0001f469\u200d\U0001f467",  # a family emoji, ZWJ-joined
        "\u2028line\u2029paragraph",
        "\u0130stanbul",  # İ: case folding changes its length
        "stra\u00dfe",
        "\ufb01le",  # the "fi" ligature
        "\U0010ffff",
        "\t\r\n\x0b\x0c",
    ]
)
"""Right-to-left, zero-width, combining and case-folding characters."""

empty_text = st.sampled_from(["", " ", "\t\n", "\u3000", "\u200b"])
"""Empty and blank strings (a zero-width space is not blank to str.strip)."""

special_numbers = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        1e308,
        -1e308,
        5e-324,
        10**30,
        -(10**30),
        2**31 - 1,
        2**31,
        -(2**31) - 1,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        -1,
        0,
        1,
        True,
        False,
        Decimal("NaN"),
        Decimal("1e1000"),
    ]
)
"""NaN, infinities, huge, negative, the edges of int32 and bigint, and bools (which are ints)."""

numbers = st.one_of(special_numbers, st.integers(), st.floats())

wrong_types = st.sampled_from(
    [
        b"bytes",
        bytearray(b"bytearray"),
        [],
        ["a", "list"],
        {},
        {"a": "dict"},
        set(),
        ("a", "tuple"),
        object(),
        1.5,
        3j,
        uuid.UUID(int=7),
        datetime(2026, 1, 1, tzinfo=UTC),
        timedelta(seconds=1),
        Ellipsis,
        str,
    ]
)
"""Values of a type no parameter takes, or not the one it takes."""

none = st.none()

hostile_text = st.one_of(
    nul_text, lone_surrogates, huge_text, like_wildcards, sql_text, unicode_tricks, empty_text
)
"""Every text family."""

hostile = st.one_of(hostile_text, numbers, wrong_types, none)
"""Anything at all, from every family."""

FAMILIES: Final = {
    "NUL bytes": nul_text,
    "lone surrogates": lone_surrogates,
    "1 MB strings": huge_text,
    "% _ \\": like_wildcards,
    "SQL-looking text": sql_text,
    "RTL / zero-width / combining": unicode_tricks,
    "empty / blank strings": empty_text,
    "NaN / inf / huge / negative numbers": numbers,
    "wrong types": wrong_types,
    "None": none,
}
"""The families by the names docs/reliability.md's table uses."""

# --- parameters: the valid values, mixed with everything hostile ------------------------------

plain_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)
"""Ordinary text: any character PostgreSQL can hold."""


def text_param(*valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A text parameter: ``valid`` values (plain text by default), or anything hostile."""
    return st.one_of(*(valid or (plain_text,)), hostile)


def int_param(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, hostile)


def bool_param() -> st.SearchStrategy[Any]:
    return st.one_of(st.booleans(), hostile)


def user_param(me: uuid.UUID, other: uuid.UUID) -> st.SearchStrategy[Any]:
    """A user id: the acting user's, a foreign tenant's, one that does not exist, their text
    forms, or anything hostile."""
    return st.one_of(
        st.sampled_from([me, other, str(me), str(other).upper(), f"{{{other}}}", other.hex]),
        st.uuids(),
        st.sampled_from(["not-a-uuid", str(me)[:-1], f" {me} ", 0, me.int]),
        hostile,
    )


def session_param(*known: str) -> st.SearchStrategy[Any]:
    """A session id: the user's own, a foreign one, an unknown one, or anything hostile."""
    return st.one_of(st.sampled_from(known), plain_text, hostile)


def json_values() -> st.SearchStrategy[Any]:
    """JSON-ish trees with hostile leaves: what a tool call's arguments may hold."""
    leaves = st.one_of(
        st.none(), st.booleans(), numbers, plain_text, hostile_text, st.binary(max_size=4)
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.one_of(plain_text, hostile_text), children, max_size=3),
        ),
        max_leaves=8,
    )


def timestamps() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.datetimes(timezones=st.just(UTC)),
        st.datetimes(),  # naive
        st.sampled_from([datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]),
        hostile,
    )
