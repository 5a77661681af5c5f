"""Breadcrumbs: extract_breadcrumbs, split_keys_line and merge_breadcrumbs."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navi_memory.constants import MAX_BREADCRUMBS, SUMMARY_MAX_KEYS
from navi_memory.text.breadcrumbs import (
    BREADCRUMB_MAX_CHARS,
    extract_breadcrumbs,
    merge_breadcrumbs,
    split_keys_line,
)

FOUND = [
    # links
    ("docs at https://example.com/docs/intro?x=1 today", "https://example.com/docs/intro?x=1"),
    ("(see https://example.com/a).", "https://example.com/a"),
    (
        "read https://en.wikipedia.org/wiki/Foo_(bar), then",
        "https://en.wikipedia.org/wiki/Foo_(bar)",
    ),
    ("db at postgresql://app@db:5432/navi now", "postgresql://app@db:5432/navi"),
    ("open www.python.org/downloads.", "www.python.org/downloads"),
    ("deployed to navi.example.io yesterday", "navi.example.io"),
    ("mail ops@example.org about it", "ops@example.org"),
    ("the embedder runs on 192.168.1.168:11434", "192.168.1.168:11434"),
    ("try localhost:8080/health first", "localhost:8080/health"),
    # inline code
    ("run `docker compose up -d` again", "docker compose up -d"),
    ("set `memory_recall_k` to 2", "memory_recall_k"),
    # paths and file names
    ("edit /etc/nginx/nginx.conf, then reload", "/etc/nginx/nginx.conf"),
    ("logs are in /var/log/navi/", "/var/log/navi/"),
    ("open ./src/app.py.", "./src/app.py"),
    ("see ../docs/memory.md", "../docs/memory.md"),
    ("my ~/.bashrc has it", "~/.bashrc"),
    (r"saved to C:\Users\ana\notes.txt.", r"C:\Users\ana\notes.txt"),
    # folders with spaces (Windows' own: each word after a space capitalised), "/" after a drive
    (r"edit C:\Program Files\App\config.ini now", r"C:\Program Files\App\config.ini"),
    (r"open C:\Users\bob\My Documents\report.xlsx", r"C:\Users\bob\My Documents\report.xlsx"),
    (r"C:\Program Files (x86)\Steam\steam.exe", r"C:\Program Files (x86)\Steam\steam.exe"),
    ("copy C:/Users/bob/file.txt over", "C:/Users/bob/file.txt"),
    (r"error at C:\src\main.c:42 again", r"C:\src\main.c:42"),
    (r"share \\fileserver\public\q3.xlsx here", r"\\fileserver\public\q3.xlsx"),
    ("change config.yaml and restart", "config.yaml"),
    ("the docker-compose.yml file", "docker-compose.yml"),
    ("unpack backup.tar.gz", "backup.tar.gz"),
    ("put it in .env please", ".env"),
    ("the Dockerfile builds it", "Dockerfile"),
    ("look at src/navi_memory/text/chunks.py", "src/navi_memory/text/chunks.py"),
    ("copy .ssh/config over", ".ssh/config"),
    # tickets
    ("fixed in #1234.", "#1234"),
    ("see encode/httpx#42 for context", "encode/httpx#42"),
    ("blocked by PROJ-812", "PROJ-812"),
    # identifiers
    ("raise MAX_RETRIES to 5", "MAX_RETRIES"),
    ("the server_port setting", "server_port"),
    ("ContextBuilder injects it", "ContextBuilder"),
    ("serve it over HTTP2 only", "HTTP2"),
    ("call getUserName() there", "getUserName"),
    ("define __init__ first", "__init__"),
    ("an HTTPServer subclass", "HTTPServer"),
    # amounts
    ("the disk has 4,5 GB free", "4,5 GB"),
    ("latency is 12 ms at p99", "12 ms"),
    ("CPU at 80% all day", "80%"),
    ("it costs $1,200 a year", "$1,200"),
    ("about €50 per month", "€50"),
    ("budget EUR 300 max", "EUR 300"),
    ("a 7B model", "7B"),
    ("timeout 30s then retry", "30s"),
    ("it's 20 °C outside", "20 °C"),
    # signs, and thousands grouped by a plain space
    ("it's -5 °C outside", "-5 °C"),
    ("growth -12% this year", "-12%"),
    ("−3.5% and rising", "−3.5%"),
    ("the fee is 1 234,56 € now", "1 234,56 €"),
    ("raised 1 000 000 USD", "1 000 000 USD"),
    ("worth 1\u00a0000\u00a0000\u00a0000\u00a0000\u00a0000 USD", "1 000 000 000 000 000 USD"),
    ("we need 4 cores", "4 cores"),
    ("drove at 60 km/h", "60 km/h"),
    ("link is 100 Mb/s", "100 Mb/s"),
    ("upgrade to v2.31.0 now", "v2.31.0"),
    ("pinned 1.26.3 for now", "1.26.3"),
    ("released 2024-01-15.", "2024-01-15"),
    # bare numbers
    ("moved the server to port 8099", "8099"),
    ("we have 1,200 users", "1,200"),
    ("listen on port:5432", "5432"),
    # quoted phrases
    ('he called it "the blue plan" twice', "the blue plan"),
    ("she said 'ship it friday' and left", "ship it friday"),
    ("named “Project Falcon” internally", "Project Falcon"),
    ("the „Kurzbericht“ is due", "Kurzbericht"),
    ("we call it «le plan B» now", "le plan B"),
    # French typography puts a (no-break) space inside; corner brackets sit inside CJK words
    ("le message « connexion perdue » apparaît", "connexion perdue"),
    ("il a dit «\u00a0bonjour tout le monde\u00a0» hier", "bonjour tout le monde"),
    ("エラー「接続失敗」が出た", "接続失敗"),
    ("『設定』を開く", "設定"),
    ("« connexion perdue » : oui", "connexion perdue"),
    ('{"name": "staging cluster"}', "staging cluster"),
]


@pytest.mark.parametrize(("text", "expected"), FOUND)
def test_extracts_the_expected_item(text: str, expected: str) -> None:
    assert expected in extract_breadcrumbs(text)


NOT_FOUND = [
    ("Hello, how are you? I would like a table for two at 7.", None),
    ("e.g. this, i.e. that, etc. and so on...", None),
    ("Mr. Smith met Dr. Jones in the USA with NASA, OK?", None),
    ("read and/or write over TCP/IP or UDP/IP", None),
    ("don't worry, it's fine, they're here", None),
    ("I have 3 apples and 12 pears", None),
    ("Python is a language. JavaScript is another.", "Python"),
    ("Our APIs return URLs and IDs", "APIs"),
    ("the _italic_ word", "_italic_"),
    ("the date 12/05/2024", "12/05/2024"),
    ("Release notes", "Release"),
    ('{"name": "x"}', "name"),
    ("see https://example.com/a_b/c.py", "a_b"),
    ("see https://example.com/a_b/c.py", "c.py"),
    ("the ticket PROJ-812", "812"),
    # a path's folder ends where prose (lower case) goes on, and a range is not a sign
    (r"in C:\Temp then I ran it", r"C:\Temp then"),
    ("3-5% more", "-5%"),
    ("growth -12% this year", "12%"),
    # a plain space between numbers groups thousands only before a currency
    ("buy 2 500 GB drives", "2 500 GB"),
    ("I paid $5 100 times", "$5 100"),
    # "/" after a drive letter: a capital one, and two separators at least
    ("see a:/b", "a:/b"),
    ("a </div> tag", "/div"),
]


@pytest.mark.parametrize(("text", "absent"), NOT_FOUND)
def test_does_not_extract_ordinary_words(text: str, absent: str | None) -> None:
    found = extract_breadcrumbs(text)
    if absent is None:
        assert found == []
    else:
        assert absent not in found


def test_ranks_classes_links_code_paths_tickets_identifiers_amounts_numbers_quotes() -> None:
    text = (
        '"quoted words" port 8080 costs 12 ms ContextBuilder #77 /etc/hosts `ls -la` '
        "https://example.com"
    )
    assert extract_breadcrumbs(text) == [
        "https://example.com",
        "ls -la",
        "/etc/hosts",
        "#77",
        "ContextBuilder",
        "12 ms",
        "8080",
        "quoted words",
    ]


def test_within_a_class_first_occurrence_comes_first() -> None:
    assert extract_breadcrumbs("zeta_value then alpha_value") == ["zeta_value", "alpha_value"]


def test_dedupes_ignoring_case_and_keeps_first_spelling() -> None:
    assert extract_breadcrumbs("max_retries and MAX_RETRIES and Max_Retries") == ["max_retries"]


def test_item_found_as_code_and_identifier_appears_once() -> None:
    assert extract_breadcrumbs("set `server_port` — server_port is 8099") == ["server_port", "8099"]


def test_cap_at_limit() -> None:
    text = " ".join(f"name_{i}" for i in range(100))
    assert extract_breadcrumbs(text) == [f"name_{i}" for i in range(MAX_BREADCRUMBS)]
    assert len(extract_breadcrumbs(text, limit=3)) == 3


@pytest.mark.parametrize("limit", [0, -5])
def test_non_positive_limit_gives_nothing(limit: int) -> None:
    assert extract_breadcrumbs("see /etc/hosts", limit=limit) == []


def test_trailing_punctuation_is_stripped_from_urls_and_paths() -> None:
    found = extract_breadcrumbs("Go to https://x.org/a?b=1!? or /srv/app/run.sh; or ./x.py:")
    assert found == ["https://x.org/a?b=1", "/srv/app/run.sh", "./x.py"]


def test_overlong_items_are_dropped_and_long_url_loses_its_query() -> None:
    long_path = "/" + "/".join(["segment"] * 40)
    url = "https://example.com/page?" + "q=" + "x" * 300
    found = extract_breadcrumbs(f"{long_path} {url}")
    assert long_path not in found
    assert "https://example.com/page" in found
    assert all(len(item) <= BREADCRUMB_MAX_CHARS for item in found)


def test_empty_text_gives_nothing() -> None:
    assert extract_breadcrumbs("") == []


@pytest.mark.parametrize(
    "hostile",
    [
        "a" * 100_000,
        "a." * 50_000,
        "/a" * 50_000,
        "a/" * 50_000,
        "1," * 50_000,
        "_" * 100_000,
        '"' * 100_000,
        "'a " * 30_000,
        "`" * 100_000,
        "x@" * 50_000,
        "#1" * 50_000,
        "A-1" * 30_000,
        "aB" * 50_000,
        "-a" * 50_000,
        "https://a" + ")" * 100_000,
        "see /x" + "." * 100_000,
        "1" * 100_000 + " GB",
        # a number may start after a space: groups of three after spaces are read four at most
        "123 " * 25_000,
        "123\u00a0" * 25_000,
        "-1 " * 30_000,
        "C:\\a " * 20_000,
        "C:\\A B\\" * 10_000,
        # "+" continues a relative path's first segment: each one restarted the scan
        "a+" * 50_000,
        "1+" * 50_000,
        "a.b+c-" * 16_000 + "@x",
        # unspaced scripts bound links and paths: a run of them is a run of starts
        "中" * 100_000,
        "中a" * 50_000,
        "/中" * 50_000,
        "中.pdf" * 20_000,
        "12," * 33_000,
        # a letter, then the script's punctuation: each letter after one restarted a file
        # name's run to the end (13.6 s at 40k characters)
        "报：" * 50_000,
        "报。" * 50_000,
        "例え." * 30_000,
        "a@例" * 30_000,
    ],
    ids=lambda s: repr(s[:4]),
)
def test_hostile_input_is_scanned_in_linear_time(hostile: str) -> None:
    started = time.perf_counter()
    found = extract_breadcrumbs(hostile)
    assert time.perf_counter() - started < 5
    assert len(found) <= MAX_BREADCRUMBS


FRAGMENTS = st.sampled_from(
    [
        "https://example.com/a?b=1",
        "/etc/x.conf",
        "./rel/path.py",
        "~/x",
        "C:\\x\\y.txt",
        "config.yaml",
        "`code`",
        "MAX_RETRIES",
        "snake_case",
        "CamelCase",
        "#1234",
        "4,5 GB",
        "80%",
        "$1,200",
        "8080",
        '"quoted phrase"',
        "'single'",
        "“typo”",
        "(",
        ")",
        ".",
        ",",
        " ",
        "\n",
        "\\",
        "/",
        "_",
        "#",
        "@",
        "`",
        '"',
        "'",
    ]
)
MIXED_TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=60).map("".join)


@given(text=st.text(), limit=st.integers(min_value=-3, max_value=60))
def test_never_raises_and_respects_limit_on_any_text(text: str, limit: int) -> None:
    found = extract_breadcrumbs(text, limit=limit)
    assert len(found) <= max(limit, 0)


@settings(max_examples=300)
@given(text=MIXED_TEXT, limit=st.integers(min_value=0, max_value=MAX_BREADCRUMBS))
def test_items_are_trimmed_unique_and_short_on_mixed_text(text: str, limit: int) -> None:
    found = extract_breadcrumbs(text, limit=limit)
    assert len(found) <= limit
    assert all(
        item and item == item.strip() and len(item) <= BREADCRUMB_MAX_CHARS for item in found
    )
    assert len({item.casefold() for item in found}) == len(found)


@given(
    sources=st.lists(st.lists(st.text(max_size=30), max_size=50), max_size=5),
    limit=st.integers(min_value=-1, max_value=80),
)
def test_merge_never_exceeds_the_limit(sources: list[list[str]], limit: int) -> None:
    merged = merge_breadcrumbs(*sources, limit=limit)
    assert len(merged) <= max(limit, 0)
    assert len({item.casefold() for item in merged}) == len(merged)


def test_merge_keeps_source_order_and_first_spelling() -> None:
    merged = merge_breadcrumbs(["Port 8099", "nginx.conf"], ["port 8099", "#12", " "], ["x"])
    assert merged == ["Port 8099", "nginx.conf", "#12", "x"]


def test_merge_caps_at_max_breadcrumbs_by_default() -> None:
    merged = merge_breadcrumbs([f"k{i}" for i in range(30)], [f"e{i}" for i in range(30)])
    assert len(merged) == MAX_BREADCRUMBS
    assert merged[29:31] == ["k29", "e0"]


def test_merge_of_nothing_is_empty() -> None:
    assert merge_breadcrumbs() == []


def test_keys_line_is_removed_and_split() -> None:
    summary = "We moved the port.\nIt is 8099 now.\nKEYS: server_port, 8099, nginx.conf"
    assert split_keys_line(summary) == (
        "We moved the port.\nIt is 8099 now.",
        ["server_port", "8099", "nginx.conf"],
    )


@pytest.mark.parametrize("line", ["KEYS: NONE", "keys: none", "KEYS: None.", "  Keys:NONE  "])
def test_keys_none_means_no_keys(line: str) -> None:
    assert split_keys_line(f"Nothing happened.\n{line}") == ("Nothing happened.", [])


def test_missing_keys_line_returns_stripped_summary() -> None:
    assert split_keys_line("  Just a summary.\n\n") == ("Just a summary.", [])


@pytest.mark.parametrize(
    "line",
    [
        "**KEYS:** a, b",
        "**KEYS**: a, b",
        "   KEYS: a, b",
        "keys: a, b",
        "- KEYS: a, b",
        "__KEYS:__ a, b",
        "KEYS : a, b.",
    ],
)
def test_keys_line_tolerates_case_indent_and_bold(line: str) -> None:
    assert split_keys_line(f"Summary.\n{line}") == ("Summary.", ["a", "b"])


def test_last_keys_line_wins() -> None:
    rest, keys = split_keys_line("KEYS: old\nSummary.\nKEYS: new, newer")
    assert keys == ["new", "newer"]
    assert rest == "KEYS: old\nSummary."


def test_only_the_last_non_blank_line_can_be_the_keys_line() -> None:
    """The summary ends with its KEYS line (spec): a line like it elsewhere is summary text."""
    assert split_keys_line("Top.\nKEYS: a\nBottom.") == ("Top.\nKEYS: a\nBottom.", [])
    assert split_keys_line("Top.\nKEYS: a\n\n  \n") == ("Top.", ["a"])


def test_a_prose_keys_line_stays_in_a_summary_that_has_no_keys_line() -> None:
    reply = "The user manages credentials.\nKeys: rotated every 30 days, via Vault.\nThat is all."
    assert split_keys_line(reply) == (reply, [])


def test_keys_are_trimmed_deduped_and_empties_dropped() -> None:
    _, keys = split_keys_line('KEYS:  a ,, A, `b`, "c d" ,  , b ')
    assert keys == ["a", "b", "c d"]


def test_a_comma_inside_an_item_does_not_split_it() -> None:
    """A comma between two digits is the item's: "4,5 GB", "$1,200" and a URL's "@52.5,13.4"
    stay whole; every other comma separates items."""
    line = "KEYS: port 8099, 4,5 GB, $1,200, https://maps.example.com/@52.5,13.4,12z"
    assert split_keys_line(line)[1] == [
        "port 8099",
        "4,5 GB",
        "$1,200",
        "https://maps.example.com/@52.5,13.4,12z",
    ]
    assert split_keys_line("KEYS: a,b,c")[1] == ["a", "b", "c"]
    # Only a comma between two digits is an item's: a line mixing ", " and "," splits at both.
    assert split_keys_line("KEYS: Paris,London, budget")[1] == ["Paris", "London", "budget"]
    assert split_keys_line("KEYS: $1,200")[1] == ["$1,200"]


def test_keys_are_capped_at_summary_max_keys() -> None:
    line = "KEYS: " + ", ".join(f"key{i}" for i in range(SUMMARY_MAX_KEYS + 10))
    _, keys = split_keys_line(line)
    assert keys == [f"key{i}" for i in range(SUMMARY_MAX_KEYS)]


def test_a_line_merely_mentioning_keys_is_not_a_keys_line() -> None:
    summary = "The user lost the keys: all of them."
    assert split_keys_line(summary) == (summary, [])


def test_windows_line_endings_are_kept_in_the_rest() -> None:
    assert split_keys_line("One.\r\nTwo.\r\nKEYS: x\r\n") == ("One.\r\nTwo.", ["x"])


def test_the_gap_between_two_spaced_guillemet_quotations_is_no_quotation() -> None:
    """Spaced "» … «" read as German quotes took the words between two French quotations."""
    found = extract_breadcrumbs("Il a dit « connexion perdue » puis ensuite « accès refusé » hier")
    assert "connexion perdue" in found and "accès refusé" in found
    assert "puis ensuite" not in found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Docs at “https://example.com/docs/page” today", "https://example.com/docs/page"),
        ("链接：https://example.com/a，然后再看", "https://example.com/a"),
        ("Voir https://example.fr/x» ici", "https://example.fr/x"),
        ("and then https://example.com/more… maybe", "https://example.com/more"),
        ("see ‘https://example.com/q’ there", "https://example.com/q"),
        ("siehe „https://example.de/a“ dort", "https://example.de/a"),
        ("打开www.example.com/a。好的", "www.example.com/a"),
        ("(see https://x.org/a_(b))…", "https://x.org/a_(b)"),
    ],
)
def test_a_url_ends_at_non_ascii_punctuation(text: str, expected: str) -> None:
    """Typographic quotes, guillemets, "…" and full-width punctuation end a URL; none is kept."""
    links = [item for item in extract_breadcrumbs(text) if "example." in item or "x.org" in item]
    assert links == [expected]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("详见https://example.com/guide。谢谢", "https://example.com/guide"),
        ("文件在/etc/nginx/nginx.conf里，端口8099", "/etc/nginx/nginx.conf"),
        ("代码在src/app/main.py里", "src/app/main.py"),
        ("ファイルは/etc/hosts。", "/etc/hosts"),
        ("설정은/etc/hosts에", "/etc/hosts"),
        ("邮件ops@example.org。", "ops@example.org"),
        ("服务在192.168.1.1:8080。", "192.168.1.1:8080"),
        ("访问example.com/x。", "example.com/x"),
        ("请修改config.yaml然后重启", "config.yaml"),
        ("看 ./src/app.py里", "./src/app.py"),
    ],
)
def test_unspaced_scripts_bound_links_and_paths(text: str, expected: str) -> None:
    """Han, kana, Hangul and full-width text has no spaces: a link or a path starts and ends
    where it does, not at the edges of the run of characters around it."""
    found = extract_breadcrumbs(text)
    assert expected in found
    assert not [item for item in found if expected in item and item != expected]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("端口8099已开放", ["8099"]),
        ("8099端口", ["8099"]),
        ("ポート8099を開く", ["8099"]),
        ("포트8099번", ["8099"]),
        ("修复JIRA-123的问题", ["JIRA-123"]),
        ("见#4411了", ["#4411"]),
        ("延迟5ms左右", ["5ms"]),
        ("价格$500元", ["$500"]),
        ("版本v1.2.3发布", ["v1.2.3"]),
        ("日期2026-12-07上线", ["2026-12-07"]),
        ("用camelCase写的", ["camelCase"]),
        ("服务user_service挂了", ["user_service"]),
        ("预算100万元", []),  # a million: no bare "100"
    ],
)
def test_unspaced_scripts_bound_numbers_tickets_and_identifiers(
    text: str, expected: list[str]
) -> None:
    """A number, a ticket, an amount, a version, a date or an identifier glued to Han, kana or
    Hangul letters is found alone: "端口8099" gave nothing, "服务user_service挂了" the whole run."""
    assert extract_breadcrumbs(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ПУТЬ /home/иван/документы/файл.txt", "/home/иван/документы/файл.txt"),
        ("see docs/файлы/отчёt.pdf", "docs/файлы/отчёt.pdf"),
        ("voir /srv/données/été.csv ici", "/srv/données/été.csv"),
        ("打开 报告.pdf 看看", "报告.pdf"),
    ],
)
def test_non_ascii_path_segments_stay_whole(text: str, expected: str) -> None:
    assert expected in extract_breadcrumbs(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The quote is ₹1,00,000 for the year", "₹1,00,000"),
        ("₹12,34,567.50 in total", "₹12,34,567.50"),
        ("a crore is ₹1,00,00,000", "₹1,00,00,000"),
        ("it costs $1,234,567 now", "$1,234,567"),
    ],
)
def test_indian_digit_grouping_is_one_amount(text: str, expected: str) -> None:
    found = extract_breadcrumbs(text)
    assert expected in found
    assert not [item for item in found if item != expected and expected.startswith(item)]


@pytest.mark.parametrize("text", ["pay $1.2.3 now", "pay ₹1,00,0000 now", "pay $12,3,4 now"])
def test_an_amount_is_never_cut_before_a_digit(text: str) -> None:
    """A number followed by ",digit" or ".digit" was only partly read: no amount rather than
    the wrong one."""
    assert not [item for item in extract_breadcrumbs(text) if item[:1] in "$₹"]


@pytest.mark.parametrize(
    ("text", "absent"),
    [
        ("Hosting costs 10 €/month now", "/month"),
        ("about $5/month", "/month"),
        ("growth 50%/year", "/year"),
        ("it is ¥300/day", "/day"),
    ],
)
def test_a_per_unit_price_is_not_a_path(text: str, absent: str) -> None:
    assert absent not in extract_breadcrumbs(text)


@pytest.mark.parametrize(
    "line",
    [
        "KEYS：端口8099、nginx.conf",
        "KEYS: 端口8099，nginx.conf",
        "KEYS：端口8099；nginx.conf。",
        "**KEYS：** 端口8099、 nginx.conf",
    ],
)
def test_keys_line_in_cjk_punctuation(line: str) -> None:
    """A full-width colon starts the KEYS line; "，", "、" and "；" separate its items."""
    assert split_keys_line(f"用户把端口改成8099。\n{line}") == (
        "用户把端口改成8099。",
        ["端口8099", "nginx.conf"],
    )


def test_fullwidth_keys_none_means_no_keys() -> None:
    assert split_keys_line("没有变化。\nKEYS：NONE") == ("没有变化。", [])


def test_a_comma_between_digits_stays_in_its_item_next_to_cjk_separators() -> None:
    assert split_keys_line("KEYS: 4,5 GB、$1,200，a")[1] == ["4,5 GB", "$1,200", "a"]


@pytest.mark.parametrize(
    "reply",
    [
        "```\nWe use port 8099.\nKEYS: port 8099, nginx.conf\n```",
        "```text\nWe use port 8099.\nKEYS: port 8099, nginx.conf\n```\n",
        "~~~\nWe use port 8099.\nKEYS: port 8099, nginx.conf\n~~~",
        "We use port 8099.\nKEYS: port 8099, nginx.conf\n```",
        "```\r\nWe use port 8099.\r\nKEYS: port 8099, nginx.conf\r\n```\r\n",
    ],
)
def test_keys_line_before_a_closing_code_fence_is_found(reply: str) -> None:
    """A model may wrap its whole reply in a code fence: the KEYS line is the last line inside,
    and the fence is no part of the summary."""
    assert split_keys_line(reply) == ("We use port 8099.", ["port 8099", "nginx.conf"])


def test_a_fence_wrapping_the_summary_before_its_keys_line_is_stripped() -> None:
    reply = "```markdown\nWe use port 8099.\n```\nKEYS: port 8099"
    assert split_keys_line(reply) == ("We use port 8099.", ["port 8099"])


def test_a_code_block_before_the_keys_line_is_the_summarys() -> None:
    """A fence marking a language is code the summary holds, not a wrapper."""
    reply = "```bash\nmake test && make deploy\n```\nKEYS: make deploy"
    assert split_keys_line(reply) == ("```bash\nmake test && make deploy\n```", ["make deploy"])


def test_a_code_block_inside_the_summary_is_kept() -> None:
    reply = "Ran:\n```\nmake test\n```\nKEYS: make test"
    assert split_keys_line(reply) == ("Ran:\n```\nmake test\n```", ["make test"])


def test_a_fence_wrapping_a_reply_without_keys_is_stripped() -> None:
    assert split_keys_line("```\nJust a summary.\n```") == ("Just a summary.", [])


def test_two_code_blocks_are_not_one_wrapping_fence() -> None:
    reply = "```\na\n```\nthen\n```\nb\n```"
    assert split_keys_line(reply) == (reply, [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("文件名：报告.pdf。", ["报告.pdf"]),
        ("请看。报告.pdf", ["报告.pdf"]),
        ("他说、报告.pdf", ["报告.pdf"]),
        ("下载\u3000报告.pdf", ["报告.pdf"]),
        ("见（报告.pdf）", ["报告.pdf"]),
        ("附件：设计文档.docx，请查收。", ["设计文档.docx"]),
        ("첨부：보고서.pdf", ["보고서.pdf"]),
        ("打开报告.pdf", ["打开报告.pdf"]),  # a name glued to the words before it: whole
        ("email@例え.jp", ["email@例え.jp"]),
        ("www.例え.jp/x", ["www.例え.jp/x"]),
    ],
)
def test_a_file_name_in_an_unspaced_script_starts_after_its_punctuation(
    text: str, expected: list[str]
) -> None:
    """The script's punctuation ends a name as a space does: "文件名：报告.pdf" was taken
    whole, punctuation and all. A host name may be in such a script."""
    assert extract_breadcrumbs(text) == expected
