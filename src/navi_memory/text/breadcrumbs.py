"""Breadcrumbs: the entities a later question will be phrased with, found in demoted history.

Pure logic: the deterministic extractor, the summarizer's KEYS: line, and their merge.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from navi_memory.constants import MAX_BREADCRUMBS, SUMMARY_MAX_KEYS

__all__ = [
    "BREADCRUMB_MAX_CHARS",
    "extract_breadcrumbs",
    "merge_breadcrumbs",
    "split_keys_line",
]

BREADCRUMB_MAX_CHARS: Final = 200
"""A longer item is dropped, not cut: a truncated URL or path points nowhere."""

_QUOTED_MIN, _QUOTED_MAX = 2, 60

# Ranks: a lower rank survives the cap first. Within a rank, first occurrence wins.
_R_LINK, _R_CODE, _R_PATH, _R_TICKET, _R_IDENT, _R_AMOUNT, _R_NUMBER, _R_QUOTED = range(8)

# --- patterns -------------------------------------------------------------------------------
# Every pattern starts with a negative lookbehind on the characters it could continue, so a
# match can only begin at the start of a run. That keeps each scan linear on hostile input
# (a 100k-character word) instead of retrying from every position inside it.

# Scripts written without spaces (Han, kana, Hangul) and the full-width forms: in such text a
# link or a path begins and ends next to a letter ("详见https://x.org/a。", "在/etc/hosts里"), so
# they bound those tokens the way a space does. _W is a word character of any other script, so
# a path keeps its Latin, Cyrillic or Greek segments ("/srv/données/été.csv").
_UNSPACED = (
    "\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f"
    "\uff00-\uffef\U00020000-\U0003ffff"
)
_W = rf"[^\W{_UNSPACED}]"
# A letter of those scripts (not their punctuation, which _UNSPACED holds too). One group: a
# quantifier after it repeats the lookahead with the class ("报：" is no run of two letters;
# without the group a run went on through the punctuation, and scanned quadratically).
_UNSPACED_LETTER = rf"(?:(?=\w)[{_UNSPACED}])"
# Punctuation no URL or path holds: typographic quotes, guillemets, "…", the CJK and full-width
# punctuation ("。" "，" "、" "；" "：" "（" "）", brackets) and the ideographic space.
_PUNCT_STOPS = (
    "“”‘’„‚«»‹›…\u3000-\u3003\u3008-\u3011\u3014-\u301f"
    "\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
)


def _not_after(chars: str) -> str:
    """A lookbehind: not after a word character of a spaced script, nor after one of ``chars``."""
    return rf"(?<!{_W})(?<![{chars}])"


def _run(chars: str) -> str:
    """One or more word characters of a spaced script or ``chars``. Possessive: a run is always
    followed by a character outside it, and one class per run rather than an alternation per
    character keeps the scan as fast as a plain character class (measured: 2.2x slower without).
    """
    return rf"(?:{_W}++|[{chars}]++)++"


# Where a name ends: before no word character of a spaced script, no "-", no ".word".
_TOKEN_END = rf"(?!{_W}|-|\.{_W})"

_URL_CHARS = rf"[^\s<>\"'`{{}}|\\^\[\]{_PUNCT_STOPS}]"
_URL = re.compile(
    _not_after(".+-") + r"(?:https?|ftps?|sftp|ssh|wss?|file|git|s3|gs|"
    r"postgres(?:ql)?|mysql|redis|mongodb(?:\+srv)?|amqps?)://" + _URL_CHARS + r"+",
    re.IGNORECASE,
)
# A host name's labels may be in an unspaced script too ("例え.jp").
_HOST_PART = rf"(?:{_W}++|{_UNSPACED_LETTER}++|-++)++"
_WWW = re.compile(
    _not_after(".@/-") + rf"www\.{_HOST_PART}(?:\.{_HOST_PART})+(?:[:/?#]{_URL_CHARS}*)?"
)
# Bare hosts only with TLDs that are rarely the tail of an ordinary "word.word" typo.
_DOMAIN = re.compile(
    _not_after(".@/-") + r"(?:[a-z0-9-]+\.)+"
    r"(?:com|org|net|io|dev|ai|app|co|gov|edu|info|xyz|cloud|tech|eu|de|uk|fr|nl|ch|se|fi|dk)"
    + _TOKEN_END
    + r"(?::\d{1,5})?(?:/"
    + _URL_CHARS
    + r"*)?",
    re.IGNORECASE,
)
_EMAIL = re.compile(
    _not_after(".+-") + _run(".+-") + rf"@{_HOST_PART}(?:\.{_HOST_PART})*\.[A-Za-z]{{2,}}(?!{_W}|-)"
)
_IPV4 = re.compile(
    _not_after(".")
    + r"(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
    r"(?::[0-9]{1,5})?(?:/[0-9]{1,2})?(?![\w.]?[0-9])"
)
_LOCALHOST = re.compile(_not_after(".-") + r"localhost:[0-9]{1,5}(?:/" + _URL_CHARS + r"*)?")

_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")

_SEG = _run(".@+~-")
# Not after a currency sign or "%" either: "10 €/month" and "50%/year" are rates, not paths.
_ABS_PATH = re.compile(_not_after(r".~/\\:<>$€£¥₹%‰-") + rf"/(?:{_SEG}/)*{_SEG}/?")
_DOT_PATH = re.compile(_not_after(r".~/\\:<>-") + rf"\.{{1,2}}/(?:{_SEG}/)*(?:{_SEG})?")
_HOME_PATH = re.compile(_not_after(r".~/\\:<>-") + rf"~(?:{_run('.-')})?/(?:{_SEG}/)*(?:{_SEG})?")
# "+" is in the lookbehind too: it continues the first segment, and a run of "a+a+…" without
# a "/" was otherwise rescanned from every "+" (quadratic: 80 s on 100k characters).
_REL_PATH = re.compile(_not_after(r".~/\\:<>@#+-") + _run(".@+-") + rf"(?:/{_SEG})+/?")
# A drive path, with "\\" or "/" ("/" only after a capital drive letter and with two
# separators at least: "a:/b" in prose is not a path): a folder's name may hold spaces
# ("Program Files", "My Documents") when a separator follows it and each word after a space
# starts with a capital, a digit or "(" (Windows' own folders; prose after a path is mostly
# lower case); at most four such words, and no ":" in a name, so a scan ends at the next
# drive and stays linear. A ":42" after the file is its line.
_WIN_CHAR = rf"[^\s\"'<>|*?`,;:\\/{_PUNCT_STOPS}]"
_WIN_NAME = rf"{_WIN_CHAR}+(?: [A-Z0-9(]{_WIN_CHAR}*){{0,4}}"
_WIN_PATH = re.compile(
    _not_after(r"\\/") + rf"(?:[A-Za-z]:\\(?:{_WIN_NAME}\\)*|[A-Z]:/(?:{_WIN_NAME}/)+)"
    rf"(?:{_WIN_CHAR}+(?::[0-9]+(?![\w:]))?)?"
)
_UNC_PATH = re.compile(
    _not_after(r"\\") + r"\\\\" + _run(".$-") + rf"\\[^\s\"'<>|*?`,;{_PUNCT_STOPS}]+"
)
_FILE_EXTENSIONS: Final = (
    "py|pyi|pyc|ipynb|js|mjs|cjs|ts|tsx|jsx|vue|svelte|json|jsonl|yaml|yml|toml|ini|cfg|conf|"
    "env|md|rst|txt|csv|tsv|log|sh|bash|zsh|fish|ps1|bat|cmd|sql|html|htm|css|scss|sass|xml|"
    "go|rs|rb|java|kt|kts|scala|c|h|cc|cpp|hpp|cs|php|swift|dart|lua|pl|r|jl|ex|exs|erl|hs|"
    "lock|pdf|png|jpe?g|gif|svg|webp|heic|ico|docx?|xlsx?|pptx?|odt|ods|rtf|epub|"
    "zip|tar|gz|tgz|bz2|xz|zst|7z|rar|whl|deb|rpm|apk|dmg|iso|img|exe|dll|so|dylib|jar|war|"
    "mp3|mp4|wav|flac|ogg|mov|mkv|avi|webm|srt|"
    "service|timer|socket|mount|desktop|plist|properties|gradle|cmake|mk|tf|tfvars|nix|"
    "proto|graphql|gql|prisma|patch|diff|pem|crt|csr|pub|key|p12|db|sqlite3?|bak|tmp|"
    "j2|jinja|tmpl|tpl|ics|vcf|eml|bib|tex|wasm|map"
)
# A name in an unspaced script cannot be told from the words before it: "打开 报告.pdf" is
# "报告.pdf" and "打开报告.pdf" is taken whole. Such a stem starts at the start of its run, so a
# long run without an extension is scanned once, not from each of its characters.
_BARE_FILE = re.compile(
    _not_after(r".@/\\~+-")
    + rf"(?:{_W}(?:{_run('+-')})?|(?<!{_UNSPACED_LETTER}){_UNSPACED_LETTER}++)"
    + rf"(?:\.{_run('+-')})*\.(?i:{_FILE_EXTENSIONS})"
    + _TOKEN_END
)
# "\w" before it, ideographs included: ".pdf" in "打开报告.pdf" is an extension, not a dotfile.
_DOTFILE = re.compile(
    r"(?<![\w.@/\\~+-])\." + rf"[a-z](?:{_run('-')})?(?:\.{_run('-')})*" + _TOKEN_END
)
_NAMED_FILE = re.compile(
    _not_after(r"./\\-") + r"(?:Makefile|Dockerfile|Containerfile|Vagrantfile|Gemfile|Procfile|"
    r"Jenkinsfile|Justfile|Rakefile|Pipfile|Brewfile|Caddyfile)" + rf"(?!{_W}|[.-])"
)

# Tickets, amounts, versions, dates, numbers and identifiers end where a word of a spaced script
# does, and at a letter of an unspaced one ("端口8099", "修复JIRA-123的问题"): _W, not \w.
_HASH_TICKET = re.compile(
    rf"{_not_after('&#/.-')}(?:{_run('.-')}/{_run('.-')})?#[0-9]{{1,9}}(?!{_W})"
)
_KEY_TICKET = re.compile(rf"{_not_after('-')}[A-Z][A-Z0-9]{{1,9}}-[0-9]{{1,7}}(?!{_W}|-|\.[0-9])")

# A number: grouped thousands (1,200 · 1.200 · 1'200 · 1 200 with a no-break space), Indian
# lakhs and crores (1,00,000 · 12,34,567) or plain, with an optional decimal part in either
# convention (4,5 · 4.5). Never followed by ",digit" or ".digit": that is a number only partly
# read ("1,00" of "1,00,000"), and no amount is better than a wrong one.
_NUM = (
    r"(?:[0-9]{1,2}(?:,[0-9]{2})+,[0-9]{3}(?:\.[0-9]+)?"
    r"|[0-9]{1,3}(?:[,.'\u00a0\u202f][0-9]{3})+(?:[.,][0-9]+)?|[0-9]+(?:[.,][0-9]+)?)"
    r"(?![.,][0-9])"
)
_SPACE = r"[ \u00a0\u202f]?"
_UNIT_WORDS = (
    # Rates first: "km" must not win over "km/h", nor "Mb" over "Mb/s".
    r"km/h|[kmg]bit/s|[kmg]b/s|req/s|requests?/s|[kmg]bps|kmh|mph|rpm|fps|rps|qps|"
    r"[kmgtpe]i?b|bytes?|bits?|"
    r"ns|µs|μs|us|ms|secs?|seconds?|mins?|minutes?|hrs?|hours?|days?|weeks?|months?|yrs?|"
    r"years?|[kmg]?hz|mm|cm|km|mi|miles?|ft|feet|inch(?:es)?|met(?:er|re)s?|"
    r"kilomet(?:er|re)s?|mg|kg|lbs?|oz|grams?|kilograms?|tonnes?|ml|lit(?:er|re)s?|"
    r"[kmg]wh?|mah|volts?|watts?|amps?|"
    r"px|pt|dpi|ppi|cores?|v?cpus?|gpus?|threads?|workers?|replicas?|tokens?"
)
_MULTIPLIER = r"(?:[kKmMbB]|bn|mn|million|billion|thousand)"
_CURRENCY_WORD = r"usd|eur|gbp|chf|dollars?|euros?|pounds?|bucks"
_CURRENCY_FIRST = (
    rf"(?:US\$|[$€£¥₹]){_SPACE}{_NUM}(?:{_SPACE}{_MULTIPLIER})?(?!{_W})"
    rf"|(?:USD|EUR|GBP|CHF|JPY|CAD|AUD){_SPACE}{_NUM}(?!{_W})"
)
_UNIT_AFTER = (
    rf"{_SPACE}(?:[€£$%‰]|°[CF]?)"
    rf"|{_SPACE}(?i:{_UNIT_WORDS}|{_CURRENCY_WORD})(?!{_W})"
    # one-letter units only when glued on (5s, 10m, 7B, 2x): "5 s" is more often prose
    rf"|[smhdwykKMBGTgLlVWx](?!{_W})"
)
# Thousands grouped by a plain space, only before a currency: in prose "2 500 GB" is more often
# two numbers. Not after "digit space": a run of "123 456 …" is read from its first group only.
_SPACED_AMOUNT = (
    rf"(?<![0-9] )[0-9]{{1,3}}(?: [0-9]{{3}})+(?![0-9])(?:[.,][0-9]+)?"
    rf"{_SPACE}(?:[€£$¥₹]|(?i:{_CURRENCY_WORD}|jpy|cad|aud))(?!{_W})"
)
# With its sign: "-5 °C", "−12%", "+3%" are not "5 °C", "12%", "3%" (a "-" after a word
# character is a range's or a date's: "3-5%" is "5%"). Never after "digit, no-break space": the
# number's own group ("1 000 000" read from its first group only, in linear time).
_AMOUNT = re.compile(
    rf"{_not_after('.,')}(?<![0-9][\u00a0\u202f])(?:[-−+](?=[0-9$€£¥₹]))?"
    rf"(?:{_CURRENCY_FIRST}|{_SPACED_AMOUNT}|{_NUM}(?:{_UNIT_AFTER}))"
)
_VERSION = re.compile(
    rf"{_not_after('.')}(?:v[0-9]+(?:\.[0-9]+)*|[0-9]+\.[0-9]+\.[0-9]+(?:\.[0-9]+)*)"
    rf"(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?!{_W}|-|\.{_W})"
)
_DATE = re.compile(rf"{_not_after('.-')}[0-9]{{4}}-[01][0-9]-[0-3][0-9](?!{_W}|-|\.[0-9])")
_BARE_NUMBER = re.compile(
    _not_after(r".,/\\#$€£¥-")
    + r"(?:[0-9]{1,2}(?:,[0-9]{2})+,[0-9]{3}|[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{3,})"
    # Not before a CJK numeral: "100万" is a million, and no number is better than a wrong one.
    + rf"(?!{_W}|[.,][0-9]|[万萬亿億千百十兆만억천])"
)

_WORD = re.compile(rf"{_W}+")
_CAMEL = re.compile(
    r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+|[A-Z]{2,}[a-z]{2,}\w*"
)
_CONSTANT_NO_UNDERSCORE = re.compile(r"[A-Z][A-Z0-9]{2,}")
_INNER_UNDERSCORE = re.compile(r"[^\W_]_+[^\W_]")
_DUNDER = re.compile(r"__[a-z][a-z0-9]*__")

# Quote pairs: straight, typographic (English, German, French), each in either direction where
# languages differ. An opening quote follows no word character and is not followed by a space;
# a closing one is not preceded by a space and is followed by no word character, so the
# apostrophes in "don't" and "it's" are never taken for quotes.
_QUOTE_PAIRS: Final = (
    ('"', '"'),
    ("'", "'"),
    ("“", "”"),
    ("„", "“"),
    ("‘", "’"),
    ("‚", "‘"),
    ("»", "«"),  # German; never spaced inside: spaced, "» puis «" is the gap between two « »
)
# Quotes no apostrophe looks like, written with a space inside in French typography
# ("« connexion perdue »", often a no-break space), and the CJK corner brackets.
_PADDED_QUOTE_PAIRS: Final = (
    ("«", "»"),
    ("‹", "›"),
)
# Corner brackets stand between words of unspaced text ("エラー「接続失敗」が出た").
_CJK_QUOTE_PAIRS: Final = (("「", "」"), ("『", "』"))


def _quoted_pattern(
    opening: str, closing: str, *, padded: bool = False, between_words: bool = False
) -> re.Pattern[str]:
    o, c = re.escape(opening), re.escape(closing)
    inner = f"[^{o}{c}\\n]"
    pad = "[ \u00a0\u202f]?" if padded else ""
    if between_words:
        before, after = f"(?<!{o})", f"(?!{c})"
    elif padded:  # no JSON key is in guillemets, and French puts a space before ":"
        before, after = f"(?<![\\w{o}])", f"(?![\\w{c}])"
    else:  # a quoted string followed by ":" is a key in JSON or a dict literal, not a phrase
        before, after = f"(?<![\\w{o}])", f"(?![\\w{c}]| ?:)"
    return re.compile(
        rf"{before}{o}{pad}(?!\s)({inner}{{{_QUOTED_MIN},{_QUOTED_MAX}}}?)(?<!\s){pad}{c}{after}"
    )


_QUOTED = (
    *(_quoted_pattern(o, c) for o, c in _QUOTE_PAIRS),
    *(_quoted_pattern(o, c, padded=True) for o, c in _PADDED_QUOTE_PAIRS),
    *(_quoted_pattern(o, c, between_words=True) for o, c in _CJK_QUOTE_PAIRS),
)

# Trailing punctuation is stripped by Unicode category: closing brackets (Pe, but ")" "]" "}"
# only when unbalanced), quotes (Pi: German quotes close with "“"; Pf) and other punctuation
# (Po: ".", "…", "。", "，"), except the ones a URL or a path may end with.
_TRAILING_CATEGORIES: Final = frozenset({"Pe", "Pi", "Pf", "Po"})
_TRAILING_KEPT: Final = frozenset("/#%&@\\")
_CLOSERS: Final = {")": "(", "]": "[", "}": "{", ">": "<"}


@dataclass(frozen=True, slots=True)
class _Found:
    rank: int
    start: int
    text: str


def _strip_trailing(item: str) -> str:
    # Sentence punctuation and closing brackets that the sentence, not the link, opened:
    # "(see https://x.org/a_(b))." keeps the balanced ")" of the URL and drops the rest.
    # Bracket counts are kept up to date rather than recounted, so a run of 50k ")" stays linear.
    opened = {closer: item.count(opener) for closer, opener in _CLOSERS.items()}
    closed = {closer: item.count(closer) for closer in _CLOSERS}
    end = len(item)
    while end:
        last = item[end - 1]
        if last in _CLOSERS:
            if closed[last] <= opened[last]:
                break
            closed[last] -= 1
        elif last in _TRAILING_KEPT or unicodedata.category(last) not in _TRAILING_CATEGORIES:
            break
        end -= 1
    return item[:end]


def _shorten_url(url: str) -> str:
    # A long query string is tracking noise more often than not; the page is the breadcrumb.
    if len(url) > BREADCRUMB_MAX_CHARS:
        url = re.split(r"[?#]", url, maxsplit=1)[0]
    return url


def _clean_item(raw: str) -> str | None:
    item = " ".join(raw.split())
    if not item or len(item) > BREADCRUMB_MAX_CHARS or not any(ch.isalnum() for ch in item):
        return None
    return item


class _Scanner:
    """Collects matches and blanks them out, so a later, coarser pattern cannot re-find a piece
    of something already found (the host of a URL, the digits of a ticket)."""

    def __init__(self, text: str) -> None:
        self.masked = text
        self.found: list[_Found] = []

    def take(
        self,
        rank: int,
        pattern: re.Pattern[str],
        *,
        accept: Callable[[str], bool] = lambda _: True,
        post: Callable[[str], str] = _strip_trailing,
    ) -> None:
        spans: list[tuple[int, int]] = []
        for match in pattern.finditer(self.masked):
            item = post(match.group(0))
            if not item or not accept(item):
                continue
            self.found.append(_Found(rank, match.start(), item))
            spans.append(match.span())
        if spans:
            self.masked = _blank(self.masked, spans)


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    parts: list[str] = []
    previous = 0
    for start, end in spans:
        parts.append(text[previous:start])
        parts.append(" " * (end - start))
        previous = end
    parts.append(text[previous:])
    return "".join(parts)


def _has_letter(item: str) -> bool:
    return any(ch.isalpha() for ch in item)


_KNOWN_EXTENSION = re.compile(r"\.(?i:" + _FILE_EXTENSIONS + r")$")


def _relative_path_ok(item: str) -> bool:
    # "and/or", "TCP/IP" and "km/h" are prose; a relative path needs depth, an extension or a
    # dot-directory before we believe it.
    if not _has_letter(item):
        return False
    body = item.rstrip("/")
    return body.count("/") >= 2 or _KNOWN_EXTENSION.search(body) is not None or body.startswith(".")


def _identifier(word: str) -> bool:
    if len(word) > BREADCRUMB_MAX_CHARS or not _has_letter(word):
        return False
    if "_" in word:
        return _INNER_UNDERSCORE.search(word) is not None or _DUNDER.fullmatch(word) is not None
    if _CAMEL.fullmatch(word):
        return True
    return _CONSTANT_NO_UNDERSCORE.fullmatch(word) is not None and any(ch.isdigit() for ch in word)


def _scan(text: str) -> Iterator[_Found]:
    for match in _INLINE_CODE.finditer(text):
        yield _Found(_R_CODE, match.start(), match.group(1))

    scanner = _Scanner(text)
    scanner.take(_R_LINK, _URL, post=lambda u: _shorten_url(_strip_trailing(u)))
    scanner.take(_R_LINK, _EMAIL)
    scanner.take(_R_LINK, _WWW, post=lambda u: _shorten_url(_strip_trailing(u)))
    scanner.take(_R_LINK, _IPV4)
    scanner.take(_R_LINK, _LOCALHOST)
    scanner.take(_R_LINK, _DOMAIN, post=lambda u: _shorten_url(_strip_trailing(u)))
    scanner.take(_R_TICKET, _HASH_TICKET)
    scanner.take(_R_TICKET, _KEY_TICKET)
    scanner.take(_R_PATH, _WIN_PATH, accept=lambda p: len(p) > 3)
    scanner.take(_R_PATH, _UNC_PATH)
    scanner.take(_R_PATH, _ABS_PATH, accept=lambda p: _has_letter(p) and len(p.rstrip("/")) > 2)
    scanner.take(_R_PATH, _DOT_PATH, accept=_has_letter)
    scanner.take(_R_PATH, _HOME_PATH, accept=_has_letter)
    scanner.take(_R_PATH, _REL_PATH, accept=_relative_path_ok)
    scanner.take(_R_PATH, _BARE_FILE)
    scanner.take(_R_PATH, _DOTFILE)
    scanner.take(_R_PATH, _NAMED_FILE)
    scanner.take(_R_AMOUNT, _DATE)
    scanner.take(_R_AMOUNT, _VERSION)
    scanner.take(_R_AMOUNT, _AMOUNT, post=lambda a: " ".join(a.split()))
    scanner.take(_R_NUMBER, _BARE_NUMBER)
    scanner.take(_R_IDENT, _WORD, accept=_identifier, post=lambda w: w)
    yield from scanner.found

    for pattern in _QUOTED:
        for match in pattern.finditer(text):
            yield _Found(_R_QUOTED, match.start(), match.group(1))


def _dedupe(items: Iterable[str], limit: int) -> list[str]:
    kept: list[str] = []
    seen: set[str] = set()
    if limit <= 0:
        return kept
    for raw in items:
        item = _clean_item(raw)
        if item is None:
            continue
        folded = item.casefold()
        if folded in seen:
            continue
        seen.add(folded)
        kept.append(item)
        if len(kept) >= limit:
            break
    return kept


def extract_breadcrumbs(text: str, *, limit: int = MAX_BREADCRUMBS) -> list[str]:
    """The deterministic breadcrumbs of ``text``, most important first, at most ``limit``.

    Classes, in rank order: links (URLs, e-mail addresses, IPs, host:port), inline code, paths
    and file names, ticket numbers, identifiers (snake_case, CONSTANT, CamelCase), amounts
    (units, currency, percentages, versions, dates), bare numbers of three or more digits,
    quoted phrases. Within a class, first occurrence first. Duplicates are dropped ignoring case,
    keeping the first spelling kept; every item is trimmed and at most 200 characters.
    """
    found = sorted(_scan(text), key=lambda f: (f.rank, f.start))
    return _dedupe((f.text for f in found), limit)


def merge_breadcrumbs(*sources: Iterable[str], limit: int = MAX_BREADCRUMBS) -> list[str]:
    """The union of ``sources`` in order (first source first), deduped ignoring case, capped.

    Items are trimmed; empty ones and ones over 200 characters are dropped.
    """
    return _dedupe((item for source in sources for item in source), limit)


_KEYS_LINE = re.compile(r"^[\s>#*_-]*keys[*_]*\s*[:：][*_]*(.*)$", re.IGNORECASE)
# A code fence line: "```" or "~~~" (three or more), an info string only on an opening one.
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[ \t]*$")
_WRAPPERS: Final = (
    ("``", "``"),
    ("`", "`"),
    ('"', '"'),
    ("'", "'"),
    ("“", "”"),
    ("‘", "’"),
    ("**", "**"),
    ("*", "*"),
)


def _unwrap(item: str) -> str:
    # Models like to dress keys as code or quotes; the breadcrumb is what is inside.
    item = item.strip()
    for opening, closing in _WRAPPERS:
        if (
            len(item) > len(opening) + len(closing)
            and item.startswith(opening)
            and item.endswith(closing)
        ):
            return item[len(opening) : len(item) - len(closing)].strip()
    return item


_KEYS_SEPARATOR = re.compile(r"[，、；]|(?<![0-9]),|,(?![0-9])")


_PROSE_FENCES: Final = frozenset({"", "text", "txt", "plaintext", "markdown", "md"})
"""A fence's info strings that mark no code: a wrapper around prose, not a code block."""


def _unfence(lines: list[str], *, prose_only: bool = False) -> list[str]:
    # A model may wrap its whole reply in one code fence: the reply is what is inside. Only
    # when the first and last non-blank lines are a matching pair with no fence between them:
    # two code blocks, or one the summary quotes, are the summary's. ``prose_only``: only a
    # fence marking no language (a ```bash block may be what the summary says).
    bare = [line.rstrip("\r\n") for line in lines]
    marked = [i for i, line in enumerate(bare) if line.strip()]
    if len(marked) < 2:
        return lines
    first, last = marked[0], marked[-1]
    opening, closing = _FENCE.match(bare[first]), _FENCE.match(bare[last])
    if (
        opening is None
        or closing is None
        or closing.group(2)
        or closing.group(1)[0] != opening.group(1)[0]
        or len(closing.group(1)) < len(opening.group(1))
        or any(_FENCE.match(line) for line in bare[first + 1 : last])
        or (prose_only and opening.group(2).lower() not in _PROSE_FENCES)
    ):
        return lines
    return lines[first + 1 : last]


def split_keys_line(summary: str) -> tuple[str, list[str]]:
    """Remove the summary's ``KEYS:`` line and return (the rest, its keys).

    The KEYS line is the one the summary ends with (spec), so only the last non-blank line
    can be it: a line like it anywhere else ("Keys: rotate them monthly") is summary text.
    The line may be indented, in markdown bold (``**KEYS:**``) or with a full-width colon
    (``KEYS：``); closing code-fence lines after it are skipped, and a fence wrapping the whole
    reply, or a fence marking no language around the summary before its KEYS line, is no
    part of the summary. Keys are the items
    separated by commas, "，", "、" or "；" (a comma between two digits, as in "4,5 GB", is the
    item's), trimmed, empties dropped, deduped ignoring case, capped at SUMMARY_MAX_KEYS;
    ``KEYS: NONE`` means no keys. Without a KEYS line the summary comes back stripped with [].
    """
    lines = _unfence(summary.splitlines(keepends=True))
    last = next(
        (
            i
            for i in range(len(lines) - 1, -1, -1)
            if lines[i].strip() and not _FENCE.match(lines[i].rstrip("\r\n"))
        ),
        None,
    )
    match = None if last is None else _KEYS_LINE.match(lines[last].rstrip("\r\n"))
    if last is None or match is None:
        return "".join(lines).strip(), []
    # A fence may wrap the summary alone, the KEYS line after it: the summary is inside.
    rest = "".join(_unfence(lines[:last], prose_only=True)).strip()
    body = match.group(1).strip()
    for bold in ("**", "__"):
        body = body.removesuffix(bold)
    body = body.strip().removesuffix(".").removesuffix("。")
    # A comma between two digits is an item's ("4,5 GB", "$1,200", a URL's "@52.5,13.4");
    # every other comma separates items.
    items = [_unwrap(item) for item in _KEYS_SEPARATOR.split(body)]
    if len(items) == 1 and items[0].casefold() == "none":
        return rest, []
    return rest, _dedupe(items, SUMMARY_MAX_KEYS)
