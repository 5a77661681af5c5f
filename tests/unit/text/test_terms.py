"""Query terms: the words a row must contain, in every script."""

from __future__ import annotations

import unicodedata

import pytest

from navi_memory.text.terms import query_terms


def test_identifiers_paths_and_addresses_stay_whole() -> None:
    assert query_terms("server_port v1.2.3 /etc/nginx.conf ops@example.com") == [
        "server_port",
        "v1.2.3",
        "etc/nginx.conf",
        "ops@example.com",
    ]


def test_stop_words_and_single_letters_go_unless_nothing_else_is_left() -> None:
    assert query_terms("what is the port of x") == ["port"]
    assert query_terms("the a") == ["the"]
    assert query_terms("x") == ["x"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # Decomposed Latin (macOS input, some editors): one word, read in NFC.
        ("Zu\u0308rich hotel", ["Z\u00fcrich", "hotel"]),
        ("cafe\u0301", ["caf\u00e9"]),
        # Scripts whose letters carry combining vowel signs: whole words, not letters.
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),
        ("ภาษาไทย", ["ภาษาไทย"]),
        ("مُحَمَّد", [unicodedata.normalize("NFC", "مُحَمَّد")]),
    ],
)
def test_words_with_combining_marks_are_one_term(query: str, expected: list[str]) -> None:
    assert query_terms(query) == expected


def test_a_mark_does_not_glue_two_words_or_split_an_identifier() -> None:
    assert query_terms("nai\u0308ve_flag re\u0301sume\u0301.pdf") == [
        "na\u00efve_flag",
        "r\u00e9sum\u00e9.pdf",
    ]
