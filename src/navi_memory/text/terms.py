"""Query terms for the text search paths: the words a row must contain, stop words left out."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Iterable
from typing import Final

from navi_memory.constants import MAX_QUERY_TERMS

__all__ = [
    "CJK_STOP_CHARACTERS",
    "MAX_QUERY_TERMS",
    "PHRASE_MAX_CHARS",
    "STOP_WORDS",
    "cjk_pair",
    "combining_marks",
    "query_phrase",
    "query_terms",
    "unspaced",
]


# Words that match almost every row as substrings and say nothing about what is wanted.
# fmt: off
STOP_WORDS: Final = frozenset(
    {
        "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could",
        "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how",
        "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she",
        "so",
        "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
        "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why",
        "will", "with", "would", "you", "your", "yours",
    }
)
# fmt: on


@functools.cache
def combining_marks() -> str:
    """Every combining mark (Unicode category M*) as regular-expression class ranges.

    ``\\w`` leaves the marks out, yet Devanagari, Thai, Arabic with its vowel signs… write
    letters with them, and a decomposed "Zu\u0308rich" is one word: without them "हिन्दी"
    is three one-letter words. A table walk of about 0.1 s, made on the first text that is
    not ASCII."""
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(f"\\U{first:08x}-\\U{last:08x}" for first, last in ranges)


def _term_pattern(marks: str) -> re.Pattern[str]:
    """A term: a run of word characters (and ``marks``), keeping the inner punctuation of
    identifiers, paths, versions and addresses together: "server_port", "v1.2.3",
    "/etc/nginx.conf", "a@b.c", ".NET", "C++", "C#"; and a number whole, as the text index
    reads it: its sign ("-0.5", "+49": the parser's lexemes, which "0.5" would not match)
    and its digit groups ("4,5", "1,200": one term whose lexemes a chunk must all hold,
    where "4" and "5" alone would be dropped as one-letter terms)."""
    word = rf"[\w{marks}]"
    # A leading "." before a letter (".NET", ".env"); a sign before a digit.
    head = r"(?:(?<![\w.\-/@:#,+])(?:\.(?=[^\W\d_])|[-+](?=[0-9])))?"
    # Runs of inner characters, a comma only between digits (a run per group: one character
    # class a run, which keeps the scan as fast as it was without commas).
    run = rf"[\w{marks}.\-/@:#]*"
    inner = rf"{run}(?:(?<=[0-9]),(?=[0-9]){run})*"
    # Trailing "+" and "#" of a name ("C++", "C#", "F#", "g++"): without them "C" alone. After
    # a letter only: "10+ years" is 10. The text index reads such a term as it reads the chunks
    # (navi_text_spelling, revision 0023): a one-letter name with "#" or "++" is a word of its
    # own ("csharp", "cplusplus"), never the bare letter "20 °C" holds; a longer name, or
    # another tail ("A+"), is what the parser leaves of it ("notepad", "a").
    tail = r"(?:(?<=[^\W\d_])[+#]+(?![\w+#]))?"
    return re.compile(rf"{head}(?:{word}{inner}{word}|{word}){tail}")


_ASCII_TERM: Final = _term_pattern("")


@functools.cache
def _unicode_term() -> re.Pattern[str]:
    return _term_pattern(combining_marks())


# A number whose commas are its own: thousands ("1,200", "-12,345,678.5") or a decimal comma
# with one or two decimals ("4,5", "3,14"). Other commas between digits separate numbers.
_COMMA_NUMBER: Final = re.compile(
    r"[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+,[0-9]{1,2})"
)


def _numbers_apart(words: list[str]) -> list[str]:
    """``words`` with a comma-joined term that is not one number ("8080,8081", "52.5,13.4")
    split back at its commas: each number is its own term (and its own ILIKE pattern)."""
    if not any("," in word for word in words):
        return words
    apart: list[str] = []
    for word in words:
        if "," in word and _COMMA_NUMBER.fullmatch(word) is None:
            apart.extend(part for part in word.split(",") if part)
        else:
            apart.append(word)
    return apart


def query_terms(
    query: str, *, limit: int = MAX_QUERY_TERMS, pairs: bool = True, topic_last: bool = True
) -> list[str]:
    """Distinct terms of ``query`` (case-insensitive, first spelling kept), stop words dropped.

    One-letter terms are dropped unless nothing else is left (a one-digit term is kept); when
    every word is a stop word the stop words are kept, so a query is never silently empty. A
    "word" with no letter or digit (``_``, ``__``) is no term: a query of nothing else is empty,
    and reads the most recent items as ``%`` or ``?`` does.

    Text that is not ASCII is read in NFC (the form text is exchanged in: a decomposed
    "Zu\u0308rich" finds the "Zürich" a chat stored), its combining marks inside words. The
    chunk text index reads stored text in NFC too (revision 0023): a chunk stored decomposed is
    found by either form.

    A run of Han, kana or Hangul letters becomes its overlapping pairs (``_cjk_apart``), after
    the query's other terms when ``limit`` cuts (``topic_last``: the last pairs, where a long
    question puts its topic; else the first ``limit`` terms, in query order, as recall's
    newest-first query wants); ``pairs=False`` keeps each run whole (where every term must be
    found, a pair anywhere is not the word).
    """
    if query.isascii():
        words = _ASCII_TERM.findall(query)
    else:
        words = _unicode_term().findall(unicodedata.normalize("NFC", query))
    seen: set[str] = set()
    terms: list[str] = []
    words = _numbers_apart(words)
    for word in _cjk_apart(words) if pairs else words:
        if not word.strip("_"):
            continue  # "_", "__": no word of any index, and in ILIKE a match of every identifier
        # Told apart as ILIKE tells them (lower(), not casefold(): "STRASSE" is not "Straße").
        folded = word.lower()
        if folded in seen:
            continue
        seen.add(folded)
        terms.append(word)
    useful = [t for t in terms if t.casefold() not in STOP_WORDS and _not_a_letter(t)]
    chosen = useful or [t for t in terms if _not_a_letter(t)] or terms
    if pairs and topic_last and len(chosen) > limit:
        # The pairs of a long run must not crowd out the query's other terms ("…怎么样了
        # JIRA-123"): those first, then as many pairs as fit — the last ones, since a long
        # question puts its topic last ("不好意思再问一下，…我们测试服务器的登录密码是什么"),
        # after the courtesies —, all in query order.
        cjk = [cjk_pair(term) for term in chosen]
        others = [i for i, is_pair in enumerate(cjk) if not is_pair][:limit]
        room = limit - len(others)
        pairs_kept = [i for i, is_pair in enumerate(cjk) if is_pair][-room:] if room else []
        keep = {*others, *pairs_kept}
        chosen = [term for i, term in enumerate(chosen) if i in keep]
    return chosen[:limit]


# Han, kana and Hangul syllables. Such text has no spaces between words (or, in Korean, none
# between a noun and its particles), so a query's run of them is no word a row holds: "服务器端口
# 改成多少" is a question, not a substring of the answer. The run is cut into overlapping pairs,
# the usual unit of CJK search ("服务", "务器", "器端", "端口"…): a row holding most of them ranks
# first, by distinct terms hit, and the whole query still counts as the phrase. A run of one or
# two letters stays whole; so does Thai, Lao, Myanmar or Khmer, whose letters take marks.
_CJK_LETTERS: Final = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003ffff"
)
_CJK_RUN: Final = re.compile(f"([{_CJK_LETTERS}]+)")
_CJK_PAIR: Final = re.compile(f"[{_CJK_LETTERS}]{{1,2}}")


# Chinese function characters: particles, question and aspect markers, pronouns, "is". A pair
# holding one ("器的", "是什", "你还") crosses a word boundary or is a filler word: left out, as
# STOP_WORDS are, unless every pair of the run holds one. They made "你还记得我们…吗" rank a
# chatty row above the answer, and filled the 16 terms of a polite question. Characters that are
# as often part of a word (在 of 现在, 个 of 个人, 都 of 都市) are not among them; nor are kana
# or Hangul syllables: a Japanese particle is a letter of many words (はし, もの), a Korean one a
# syllable of many more (의자, 도시, 과일).
CJK_STOP_CHARACTERS: Final = frozenset("的了吗呢吧啊呀是我你他她它们这那么什怎哪谁就也很")


def cjk_pair(term: str) -> bool:
    """Whether ``term`` is one or two Han, kana or Hangul letters (what ``query_terms`` cuts
    a run of them into)."""
    return _CJK_PAIR.fullmatch(term) is not None


def _cjk_pairs(run: str) -> list[str]:
    """The overlapping pairs of a run, those holding a function character left out (all of
    them kept when every pair holds one); a run of one or two letters whole."""
    if len(run) <= 2:
        return [run]
    pairs = [run[i : i + 2] for i in range(len(run) - 1)]
    return [p for p in pairs if CJK_STOP_CHARACTERS.isdisjoint(p)] or pairs


def _cjk_apart(words: list[str]) -> list[str]:
    """``words`` with each run of Han, kana or Hangul letters cut out of its word and into
    overlapping pairs (``_cjk_pairs``); what stood beside the run ("8099" of "端口8099") is a
    term of its own."""
    if all(word.isascii() for word in words):
        return words
    apart: list[str] = []
    for word in words:
        parts = _CJK_RUN.split(word)
        if len(parts) == 1:
            apart.append(word)
            continue
        for index, part in enumerate(parts):
            if index % 2:  # a run of those letters
                apart.extend(_cjk_pairs(part))
            elif (rest := part.strip(".-/@:#,")) and any(c.isalnum() for c in rest):
                apart.append(rest)
    return apart


def _not_a_letter(term: str) -> bool:
    """A term longer than one character, or one digit: "floor 4" must tell floor 4 from floor
    9 (a one-digit lexeme is as exact as any in the chunk text index). The LIKE passes, where
    ``%4%`` matches nearly every row, leave one-character terms out (``like.term_patterns``)."""
    return len(term) > 1 or term.isdigit()


PHRASE_MAX_CHARS: Final = 200
"""The longest query whose whole text is also looked for (``query_phrase``)."""


def query_phrase(query: str) -> str | None:
    """The whole query as the text passes also look for it: a row holding it verbatim ranks
    first among the rows matching the most terms. Characters that only separate terms
    (``%`` in "100%", ``\\`` in a Windows path) count there; None for a blank query, or one
    longer than PHRASE_MAX_CHARS (a long text is matched by its terms alone). Read as
    query_terms reads it (NFC)."""
    phrase = query.strip()
    if not phrase or len(phrase) > PHRASE_MAX_CHARS:
        return None
    return phrase if phrase.isascii() else unicodedata.normalize("NFC", phrase)


# Scripts written without spaces between words: Thai and Lao, Myanmar, Khmer, Hangul jamo, the
# CJK block run (radicals, kana, ideographs), Hangul syllables, compatibility ideographs, the
# supplementary ideographs. Korean puts spaces between phrases, but its particles cling to the
# noun ("서버의" is "of the server"), so a noun is inside a word there too.
_UNSPACED_LETTER: Final = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u2e80-\u9fff\ua960-\ua97f"
    "\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003ffff]"
)


def unspaced(terms: Iterable[str]) -> bool:
    """Whether a term holds a letter of a script written without spaces (Chinese, Japanese,
    Thai, Korean…): there a word is a run of letters the text index holds whole ("服务器端口是"),
    so a term inside it ("端口") is found by substring alone, not by the index's lexemes."""
    return any(_UNSPACED_LETTER.search(term) for term in terms)
