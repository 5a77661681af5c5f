"""Query terms: the words a row must contain, in every script."""

from __future__ import annotations

import unicodedata

import pytest

from navi_memory.repositories.like import term_patterns
from navi_memory.text.terms import query_terms, unspaced


def test_identifiers_paths_and_addresses_stay_whole() -> None:
    assert query_terms("server_port v1.2.3 /etc/nginx.conf ops@example.com") == [
        "server_port",
        "v1.2.3",
        "etc/nginx.conf",
        "ops@example.com",
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # A number's sign is the text index's too ("-0.5" is one lexeme; "0.5" would not match).
        ("-0.5", ["-0.5"]),
        ("exit code -1", ["exit", "code", "-1"]),
        ("call +49 30", ["call", "+49", "30"]),
        # A sign only where a number starts: inner hyphens stay the identifier's.
        ("a-5 and 2026-12-07", ["a-5", "2026-12-07"]),
        # Digit groups are one term, not one-letter terms dropped ("4", "5").
        ("4,5 GB", ["4,5", "GB"]),
        ("$1,200 a year", ["1,200", "year"]),
        ("a,b", ["a", "b"]),
        # Commas between numbers that are not one number's: each number its own term (and
        # its own ILIKE pattern: "%8080,8081%" matches no stored "8080").
        ("ports 8080,8081", ["ports", "8080", "8081"]),
        ("at 52.5,13.4", ["52.5", "13.4"]),
        ("12,345,678.5 rows", ["12,345,678.5", "rows"]),
        ("10+ years", ["10", "years"]),
        # Names that are a letter and symbols are not one letter, nor dropped beside words.
        ("C++", ["C++"]),
        ("C# dev", ["C#", "dev"]),
        ("F# and .NET", ["F#", ".NET"]),
        ("g++ flags", ["g++", "flags"]),
        ("a+b", ["a", "b"]),
        ("...hello", ["hello"]),
    ],
)
def test_numbers_and_symbol_names_stay_whole(query: str, expected: list[str]) -> None:
    assert query_terms(query) == expected


def test_stop_words_and_single_letters_go_unless_nothing_else_is_left() -> None:
    assert query_terms("what is the port of x") == ["port"]
    assert query_terms("the a") == ["the"]
    assert query_terms("x") == ["x"]


def test_a_word_without_a_letter_or_digit_is_no_term() -> None:
    assert query_terms("_") == []
    assert query_terms("-_- %_ __") == []
    assert query_terms("_ config") == ["config"]
    assert query_terms("__init__ _x") == ["__init__", "_x"]


def test_a_one_digit_term_stays_beside_words() -> None:
    """ "floor 4" must tell floor 4 from floor 9: a digit is a term, a lone letter is not."""
    assert query_terms("floor 4") == ["floor", "4"]
    assert query_terms("plan b, step 2") == ["plan", "step", "2"]


def test_like_patterns_leave_one_character_terms_out_beside_longer_ones() -> None:
    """As a substring "4" is in every date: the LIKE passes match on the longer terms."""
    assert term_patterns(["floor", "4"]) == ["%floor%"]
    assert term_patterns(["4"]) == ["%4%"]


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


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        (["端口"], True),
        (["ポート"], True),
        (["서버의"], True),
        (["พอร์ต"], True),
        (["port", "8099"], False),
        (["Zürich", "порт", "हिन्दी"], False),
        ([], False),
    ],
)
def test_unspaced_tells_scripts_written_without_spaces(terms: list[str], expected: bool) -> None:
    assert unspaced(terms) is expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("服务器端口改成多少", ["服务", "务器", "器端", "端口", "口改", "改成", "成多", "多少"]),
        ("端口", ["端口"]),
        ("端口8099", ["端口", "8099"]),
        ("user_service挂了", ["user_service", "挂了"]),
        ("서버의 포트는", ["서버", "버의", "포트", "트는"]),
        ("サーバー", ["サー", "ーバ", "バー"]),
        ("เซิร์ฟเวอร์ใช้พอร์ต", ["เซิร์ฟเวอร์ใช้พอร์ต"]),
        ("deploy port", ["deploy", "port"]),
    ],
)
def test_runs_of_han_kana_and_hangul_become_overlapping_pairs(
    query: str, expected: list[str]
) -> None:
    """Such text has no spaces between words: a run of its letters is cut into pairs (what
    stood beside it a term of its own); Thai keeps its run whole (its letters take marks)."""
    assert query_terms(query) == expected
    assert len(query_terms("我们把服务器的端口改成了八千零九十九号端口然后重启了服务")) == 16


def test_pairs_holding_a_function_character_are_left_out() -> None:
    """ "的", "是", "吗", "我"…: a pair holding one crosses a word boundary or is filler, and
    such pairs made a chatty row outrank the answer; a run of nothing else keeps them. Kana and
    Hangul have none: their particles are letters of many words ("はし", "의자")."""
    assert query_terms("你还记得我们的服务器端口是多少吗") == [
        "还记",
        "记得",
        "服务",
        "务器",
        "器端",
        "端口",
        "多少",
    ]
    assert query_terms("はしはどこ") == ["はし", "しは", "はど", "どこ"]
    assert query_terms("의자가") == ["의자", "자가"]
    assert query_terms("什么是") == ["什么", "么是"]


def test_a_long_run_leaves_room_for_the_other_terms_and_keeps_its_last_pairs() -> None:
    """The 16 terms: a ticket after a long Chinese question was cut off, and a polite opening
    filled the budget before the topic ("登录密码") came."""
    mixed = query_terms(
        "我们上周讨论的那个服务器部署问题现在怎么样了呢"
        "大家都觉得这个方案还需要再讨论一下吧 JIRA-123"
    )
    assert mixed[-1] == "JIRA-123" and len(mixed) == 16
    polite = query_terms(
        "不好意思再问一下，我之前好像跟你提过一次，我们测试服务器的登录密码是什么？"
    )
    assert polite[-3:] == ["登录", "录密", "密码"] and len(polite) == 16


def test_pairs_false_keeps_each_run_whole() -> None:
    assert query_terms("服务器端口改成多少", pairs=False) == ["服务器端口改成多少"]


def test_topic_last_false_keeps_the_first_terms_in_order() -> None:
    """Recall's query is newest first (the incoming message first): its cap keeps the first
    terms, not the other terms first and the last pairs."""
    question = "部署脚本在哪里 " + " ".join(f"word{i}" for i in range(20))
    assert query_terms(question, topic_last=False)[:3] == ["部署", "署脚", "脚本"]
    assert "部署" not in query_terms(question)
