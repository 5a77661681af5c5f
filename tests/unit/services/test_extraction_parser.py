"""parse_extracted_facts and parse_summary: what real models reply, read without failing."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navi_memory.constants import EXTRACTION_MAX_FACTS
from navi_memory.errors import ExtractionError
from navi_memory.services.extraction_parser import (
    FactDraft,
    ParsedFacts,
    parse_extracted_facts,
    parse_summary,
)
from navi_memory.services.facts import confidence_for_source

EDITOR = {"category": "preferences", "key": "editor", "value": "neovim", "source": "user_explicit"}
OS = {"category": "environment", "key": "os", "value": "Ubuntu 24.04", "source": "tool_call"}


def triples(parsed: ParsedFacts) -> list[tuple[str, str, str]]:
    return [(f.category, f.key, f.value) for f in parsed.facts]


def test_a_repeated_fact_is_kept_once_and_not_counted_as_skipped() -> None:
    """Models repeat themselves: the same category, key and value twice is one draft (the first,
    with its source), neither skipped nor taking a place under max_facts; the same key with
    another value, or in another category, is a fact of its own."""
    again = {**EDITOR, "source": "conversation"}
    other_value = {**EDITOR, "value": "helix"}
    other_category = {**EDITOR, "category": "tools"}
    reply = json.dumps([EDITOR, OS, again, EDITOR, other_value, other_category])
    parsed = parse_extracted_facts(reply, max_facts=4)
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
        ("preferences", "editor", "helix"),
        ("tools", "editor", "neovim"),
    ]
    assert parsed.facts[0].source == "user_explicit" and parsed.skipped == 0


def test_a_fact_returned_to_after_another_value_of_its_key_is_kept() -> None:
    """neovim, helix, neovim again: the third changes the fact back (written after helix it is
    no mere re-verify), so all three stay, in order, the last value last; the same when the
    value in between came under another spelling of the key (the upsert merges spellings).
    A repeat right after its first is still left out."""
    helix = {**EDITOR, "value": "helix"}
    helix_spelled = {**EDITOR, "key": "Editor", "value": "helix"}
    for between in (helix, helix_spelled):
        parsed = parse_extracted_facts(json.dumps([EDITOR, between, EDITOR, EDITOR]))
        assert [(f.key, f.value) for f in parsed.facts] == [
            ("editor", "neovim"),
            (between["key"], "helix"),
            ("editor", "neovim"),
        ]
        assert parsed.skipped == 0


def test_plain_array_gives_typed_drafts() -> None:
    """A JSON array of complete items becomes drafts with every field, nothing skipped."""
    reply = json.dumps([{**EDITOR, "source_context": "asked for LSP config"}])
    parsed = parse_extracted_facts(reply)
    assert parsed == ParsedFacts(
        facts=(
            FactDraft(
                category="preferences",
                key="editor",
                value="neovim",
                source="user_explicit",
                confidence=90,
                source_context="asked for LSP config",
            ),
        ),
        skipped=0,
    )


@pytest.mark.parametrize(
    ("source", "confidence"),
    [
        ("tool_call", 95),
        ("auto_discovery", 95),
        ("user_explicit", 90),
        ("conversation", 70),
    ],
)
def test_confidence_follows_the_source(source: str, confidence: int) -> None:
    """tool_call/auto_discovery 95, user_explicit 90, conversation 70 (spec)."""
    parsed = parse_extracted_facts(json.dumps([{**EDITOR, "source": source}]))
    assert [(f.source, f.confidence) for f in parsed.facts] == [(source, confidence)]
    assert confidence_for_source(source) == confidence


@pytest.mark.parametrize("source", ["stated_by_user", "web", "", 42, None, ["tool_call"]])
def test_unknown_or_malformed_source_becomes_conversation(source: object) -> None:
    """A source the store does not know, or one of the wrong type, is `conversation` at 70."""
    parsed = parse_extracted_facts(json.dumps([{**EDITOR, "source": source}]))
    assert [(f.source, f.confidence) for f in parsed.facts] == [("conversation", 70)]
    assert parsed.skipped == 0


def test_source_spelling_is_forgiven() -> None:
    """`User-Explicit` and `tool call` are the sources they spell."""
    reply = json.dumps([{**EDITOR, "source": "User-Explicit"}, {**OS, "source": " tool call "}])
    assert [f.source for f in parse_extracted_facts(reply).facts] == ["user_explicit", "tool_call"]


def test_missing_source_is_conversation() -> None:
    """An item without a source is `conversation`."""
    item = {k: v for k, v in EDITOR.items() if k != "source"}
    assert [f.source for f in parse_extracted_facts(json.dumps([item])).facts] == ["conversation"]


def test_code_fence_with_prose_around_it() -> None:
    """The JSON inside a ```json fence is read; the prose around it is ignored."""
    reply = f"Here you go [as requested]:\n```json\n{json.dumps([EDITOR, OS])}\n```\nAnything else?"
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert parsed.skipped == 0


def test_fence_without_language_and_in_capitals() -> None:
    """Fences tagged JSON, or not tagged, hold the reply as well."""
    for tag in ("", "JSON"):
        reply = f"```{tag}\n{json.dumps({'facts': [OS]})}\n```"
        assert triples(parse_extracted_facts(reply)) == [("environment", "os", "Ubuntu 24.04")]


def test_prose_around_bare_json() -> None:
    """A JSON value between sentences, no fence, is found."""
    reply = f"Sure! Based on the chat {{name}} said:\n{json.dumps({'facts': [EDITOR]})}\nDone."
    assert triples(parse_extracted_facts(reply)) == [("preferences", "editor", "neovim")]


def test_prose_list_before_the_facts_does_not_hide_them() -> None:
    """A JSON list in prose that holds no facts (a citation `[1]`) does not win over the facts."""
    reply = f"As noted in [1], here: {json.dumps([EDITOR])}"
    assert triples(parse_extracted_facts(reply)) == [("preferences", "editor", "neovim")]


def test_arrays_one_after_another_are_all_read() -> None:
    """A reply of several JSON values ("Preferences: [...]", then "Environment: [...]", or
    one fact object after another) is read whole, in order: none of them is lost uncounted.
    What follows that holds no facts (a citation, a count) is not read as facts."""
    reply = f"Preferences: {json.dumps([EDITOR])}\nEnvironment: {json.dumps([OS])}"
    parsed = parse_extracted_facts(reply)
    assert [f.key for f in parsed.facts] == [EDITOR["key"], OS["key"]]
    assert parsed.skipped == 0
    objects = parse_extracted_facts(f"{json.dumps(EDITOR)}\n{json.dumps(OS)}")
    assert [f.key for f in objects.facts] == [EDITOR["key"], OS["key"]]
    prose = parse_extracted_facts(f'{json.dumps([EDITOR])} (see [1]) {{"count": 1}}')
    assert (len(prose.facts), prose.skipped) == (1, 0)
    # Each in a fence of its own.
    fenced = parse_extracted_facts(
        f"```json\n{json.dumps([EDITOR])}\n```\nand\n```json\n{json.dumps([OS])}\n```"
    )
    assert [f.key for f in fenced.facts] == [EDITOR["key"], OS["key"]]
    # The second cut off: its complete items kept, the cut one counted.
    cut = parse_extracted_facts(
        f'Preferences: {json.dumps([EDITOR])}\nEnvironment: [{json.dumps(OS)}, {{"category": "en'
    )
    assert ([f.key for f in cut.facts], cut.skipped) == ([EDITOR["key"], OS["key"]], 1)


def test_one_object_instead_of_an_array() -> None:
    """A single fact object is one fact."""
    parsed = parse_extracted_facts(json.dumps(EDITOR))
    assert triples(parsed) == [("preferences", "editor", "neovim")]
    assert parsed.skipped == 0


def test_object_holding_the_array() -> None:
    """{"facts": [...]} is the array it holds, whatever the wrapper is called."""
    for wrapper in ("facts", "Facts", "items", "extracted_facts"):
        parsed = parse_extracted_facts(json.dumps({wrapper: [EDITOR, OS]}))
        assert len(parsed.facts) == 2
        assert parsed.facts[0].category == "preferences"


def test_wrapper_holding_a_single_object() -> None:
    """{"facts": {...}} is the one fact it holds."""
    assert triples(parse_extracted_facts(json.dumps({"facts": EDITOR}))) == [
        ("preferences", "editor", "neovim")
    ]


def test_metadata_beside_the_array_is_ignored_not_counted() -> None:
    """Plain values next to the list ("count": 2) are the reply's metadata, not skipped facts."""
    parsed = parse_extracted_facts(json.dumps({"facts": [EDITOR], "count": 1, "note": "ok"}))
    assert (len(parsed.facts), parsed.skipped) == (1, 0)


def test_lists_under_category_names_take_that_category() -> None:
    """{"work": [{"key": ..., "value": ...}]}: the name is the category of items without one."""
    reply = json.dumps(
        {
            "work": [{"key": "employer", "value": "Kestrel"}],
            "people": [{"key": "spouse_name", "value": "Anna", "category": "family"}],
        }
    )
    assert triples(parse_extracted_facts(reply)) == [
        ("work", "employer", "Kestrel"),
        ("family", "spouse_name", "Anna"),
    ]


def test_categories_mapping_keys_to_values() -> None:
    """{"health": {"diet": "vegetarian"}} reads as category -> key -> value."""
    reply = json.dumps(
        {
            "health": {"diet": "vegetarian", "allergy": "peanuts"},
            "preferences": {"theme": {"value": "dark", "source": "user_explicit"}},
        }
    )
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [
        ("health", "diet", "vegetarian"),
        ("health", "allergy", "peanuts"),
        ("preferences", "theme", "dark"),
    ]
    assert [f.source for f in parsed.facts] == ["conversation", "conversation", "user_explicit"]


def test_flat_mapping_of_plain_values_is_not_guessed_into_facts() -> None:
    """{"city": "Brno", "error": "none"}: no category, no fact shape; each pair is counted."""
    parsed = parse_extracted_facts(json.dumps({"city": "Brno", "error": "none"}))
    assert (parsed.facts, parsed.skipped) == ((), 2)


@pytest.mark.parametrize("reply", ["[]", '{"facts": []}', "{}", "null", "```json\n[]\n```"])
def test_empty_answers_are_zero_facts_and_zero_skipped(reply: str) -> None:
    """An empty array, an empty wrapper, an empty object or null: nothing, and nothing wrong."""
    assert parse_extracted_facts(reply) == ParsedFacts(facts=(), skipped=0)


def test_numbers_and_booleans_as_values_become_text() -> None:
    """6 → "6", 8080.0 → "8080", 3.5 → "3.5", true → "true"."""
    items = [
        {"key": "daughter_age", "value": 6},
        {"key": "port", "value": 8080.0},
        {"key": "ratio", "value": 3.5},
        {"key": "has_dog", "value": True},
    ]
    parsed = parse_extracted_facts(json.dumps(items))
    assert [f.value for f in parsed.facts] == ["6", "8080", "3.5", "true"]
    assert parsed.skipped == 0


def test_list_of_plain_values_is_joined() -> None:
    """["German", "English"] → "German, English"."""
    parsed = parse_extracted_facts(
        json.dumps([{"key": "languages", "value": ["German", "English"]}])
    )
    assert [f.value for f in parsed.facts] == ["German, English"]


def test_missing_category_defaults_to_general_and_case_is_folded() -> None:
    """No category (or null, or "") is `general`; `Preferences` is `preferences`."""
    items = [
        {"key": "a", "value": "1"},
        {"key": "b", "value": "2", "category": None},
        {"key": "c", "value": "3", "category": ""},
        {"key": "d", "value": "4", "category": " Preferences "},
    ]
    assert [f.category for f in parse_extracted_facts(json.dumps(items)).facts] == [
        "general",
        "general",
        "general",
        "preferences",
    ]


def test_field_names_in_any_case_and_extra_fields_ignored() -> None:
    """`Key`/`VALUE` are the fields; `confidence`, `reason` and the like are ignored."""
    item = {"Category": "work", "Key": "team", "VALUE": "SRE", "confidence": 0.99, "why": "said"}
    parsed = parse_extracted_facts(json.dumps([item]))
    assert triples(parsed) == [("work", "team", "SRE")]
    assert parsed.facts[0].confidence == 70


@pytest.mark.parametrize(
    "junk",
    [
        "The user likes tea",
        42,
        None,
        ["editor", "neovim"],
        {"category": "x", "value": "no key"},
        {"category": "x", "key": "no_value"},
        {"category": "x", "key": "", "value": "blank key"},
        {"category": "x", "key": "blank_value", "value": "   "},
        {"category": "x", "key": 13, "value": "number key"},
        {"category": 7, "key": "k", "value": "number category"},
        {"category": "x", "key": "k", "value": None},
        {"category": "x", "key": "k", "value": {"nested": "object"}},
        {"category": "x", "key": "k", "value": [["nested", "list"]]},
        {"category": "x", "key": "k", "value": []},
        {"category": "x", "key": "k" * 201, "value": "key too long"},
        {"category": "c" * 101, "key": "k", "value": "category too long"},
    ],
    ids=[
        "string-item",
        "number-item",
        "null-item",
        "list-item",
        "no-key",
        "no-value",
        "blank-key",
        "blank-value",
        "number-key",
        "number-category",
        "null-value",
        "object-value",
        "nested-list-value",
        "empty-list-value",
        "long-key",
        "long-category",
    ],
)
def test_each_unusable_item_is_skipped_and_counted_the_rest_kept(junk: object) -> None:
    """One bad item among good ones is skipped and counted; the batch still yields the rest."""
    parsed = parse_extracted_facts(json.dumps([EDITOR, junk, OS]))
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert parsed.skipped == 1


def test_truncated_json_keeps_the_complete_items() -> None:
    """A reply cut off mid-item keeps every finished item and counts the broken one."""
    full = json.dumps([EDITOR, OS, {"category": "work", "key": "employer", "value": "Kestrel"}])
    parsed = parse_extracted_facts(full[: full.index("Kestrel")])
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert (parsed.skipped, parsed.truncated) == (1, True)


def test_truncated_wrapper_inside_an_unclosed_fence() -> None:
    """```json {"facts": [… cut off, the fence never closed: the finished items are kept."""
    body = json.dumps({"facts": [EDITOR, OS]})
    reply = "```json\n" + body[: body.rindex("Ubuntu")]
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [("preferences", "editor", "neovim")]
    assert (parsed.skipped, parsed.truncated) == (1, True)


@pytest.mark.parametrize(
    "reply",
    [
        '{"category": "work", "key": "empl',
        '{"facts": [{"category": "preferences", "key": "edi',
        '[{"category": "work", "key": "employer", "value": "Acme"',
    ],
)
def test_a_reply_cut_off_before_its_first_complete_fact_is_a_failure(reply: str) -> None:
    """The model ran out of room before one fact was complete: that is no answer, and no
    "nothing to remember" either (the session was once marked extracted, its facts lost for
    good); the session stays for the next run."""
    with pytest.raises(ExtractionError, match="cut off before its first complete fact"):
        parse_extracted_facts(reply)


@pytest.mark.parametrize(
    "reply",
    [
        # a bad escape in a complete reply (a Windows path, unescaped)
        r'[{"category": "technical", "key": "project_path", "value": "C:\Users\me\proj"}]',
        "Nothing to remember [none].",  # a bracket in prose
        '[{"category": "a", "key": oops}]',  # a complete array, its one item unusable
    ],
)
def test_broken_json_that_is_complete_is_counted_not_a_failure(reply: str) -> None:
    """Broken but not cut off (the reply's JSON closes): no fact, the unusable item counted,
    no failure (asked again, a model writes the same). Only a reply that ends inside an open
    string or bracket was cut off by the model's output limit."""
    assert parse_extracted_facts(reply) == ParsedFacts(facts=(), skipped=1, truncated=True)


@pytest.mark.parametrize(
    "reply",
    [
        '{"facts": [{"key": "k", "value": "ends in an escaped quote \\"',
        '[{"key": "k", "value": "v"',
        '[{"key": "k", "value": ["a", "b"',
    ],
)
def test_a_reply_ending_inside_an_open_string_or_bracket_is_cut_off(reply: str) -> None:
    with pytest.raises(ExtractionError, match="cut off before its first complete fact"):
        parse_extracted_facts(reply)


@pytest.mark.parametrize("reply", ["[]", "{}", '{"facts": []}', "null"])
def test_an_empty_answer_is_nothing_to_remember(reply: str) -> None:
    """A whole, empty answer is not a failure: there was nothing to extract."""
    parsed = parse_extracted_facts(reply)
    assert (parsed.facts, parsed.skipped, parsed.truncated) == ((), 0, False)


def test_broken_item_in_the_middle_does_not_lose_the_items_after_it() -> None:
    """An item broken mid-array (a stray word) is skipped; reading resumes at the next item."""
    reply = f'[{json.dumps(EDITOR)}, {{"key": oops}}, {json.dumps(OS)}]'
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert parsed.skipped == 1


def test_python_literal_reply_is_read() -> None:
    """Single quotes, True, None and a trailing comma: a Python repr of the list is read."""
    reply = "[{'category': 'env', 'key': 'uses_mac', 'value': True, 'source': None},]"
    parsed = parse_extracted_facts(reply)
    assert [(f.key, f.value, f.source) for f in parsed.facts] == [
        ("uses_mac", "true", "conversation")
    ]


def test_json_returned_as_a_json_string() -> None:
    """A reply that is the array encoded once more as a string is unwrapped."""
    parsed = parse_extracted_facts(json.dumps(json.dumps([EDITOR])))
    assert triples(parsed) == [("preferences", "editor", "neovim")]


@pytest.mark.parametrize("reply", ['"just a sentence"', "42", "true"])
def test_a_lone_scalar_is_one_skipped_item(reply: str) -> None:
    """JSON that is a single plain value holds no fact: one skipped item."""
    assert parse_extracted_facts(reply) == ParsedFacts(facts=(), skipped=1)


@pytest.mark.parametrize(
    "reply",
    ["I could not find any facts.", "<html>502 Bad Gateway</html>", "   ", "[as requested]"],
)
def test_a_reply_without_any_json_is_an_extraction_error(reply: str) -> None:
    """No JSON at all is a model failure (the session is retried), not zero facts."""
    with pytest.raises(ExtractionError, match="no JSON"):
        parse_extracted_facts(reply)


def test_text_is_cleaned_of_nul_and_lone_surrogates() -> None:
    """NUL bytes and lone surrogates (which PostgreSQL text cannot hold) do not survive."""
    reply = '[{"key": "na\\u0000me", "value": "A\\ud800nna", "source_context": "x\\u0000"}]'
    (draft,) = parse_extracted_facts(reply).facts
    assert draft.key == "name"
    assert "\x00" not in draft.value
    draft.value.encode("utf-8")  # a lone surrogate would raise here
    assert draft.source_context == "x"


def test_whitespace_around_fields_is_trimmed() -> None:
    """Keys, values and categories lose surrounding whitespace."""
    parsed = parse_extracted_facts(json.dumps([{"category": " a ", "key": " k ", "value": " v "}]))
    assert triples(parsed) == [("a", "k", "v")]


def test_facts_past_the_cap_are_skipped_and_counted() -> None:
    """A runaway reply writes at most max_facts; the rest are counted as skipped."""
    items = [{"key": f"k{i}", "value": str(i)} for i in range(7)]
    parsed = parse_extracted_facts(json.dumps(items), max_facts=5)
    assert [f.key for f in parsed.facts] == ["k0", "k1", "k2", "k3", "k4"]
    assert parsed.skipped == 2


def test_duplicate_items_are_all_returned_in_reply_order() -> None:
    """The parser does not judge: two items for one key both come back, in order."""
    parsed = parse_extracted_facts(json.dumps([EDITOR, {**EDITOR, "value": "helix"}]))
    assert [f.value for f in parsed.facts] == ["neovim", "helix"]


def test_thousands_of_broken_starts_are_one_skipped_item() -> None:
    """A reply of 20,000 broken JSON starts is given up on after a few (each try reads to the
    end, so trying all would be quadratic): one unusable item, and with no complete fact
    before it, a failure."""
    reply = '{"a": x ' * 20_000
    started = time.process_time()  # this process's CPU: the neighbours' load never counts
    with pytest.raises(ExtractionError, match="cut off before its first complete fact"):
        parse_extracted_facts(reply)  # no complete fact: a failure, the session kept
    assert time.process_time() - started < 2.0
    # Beside a complete fact, the broken rest is one unusable item.
    parsed = parse_extracted_facts(json.dumps([EDITOR])[:-1] + ", " + reply)
    assert parsed == ParsedFacts(facts=parsed.facts, skipped=1, truncated=True)
    assert triples(parsed) == [("preferences", "editor", "neovim")]


# --- the summary reply --------------------------------------------------------------------


def test_summary_is_stripped_and_cleaned() -> None:
    """The summary is the reply's text, trimmed, without NUL bytes."""
    assert (
        parse_summary("  Maria is a tech lead\x00 in Lisbon.\n")
        == "Maria is a tech lead in Lisbon."
    )


def test_summary_in_a_fence_is_unwrapped() -> None:
    """A model that fences its prose still gives the prose."""
    assert parse_summary("```text\nMaria lives in Lisbon.\n```") == "Maria lives in Lisbon."


def test_long_summary_is_cut_in_the_middle() -> None:
    """A summary over the cap keeps head and tail (it rides in every prompt)."""
    text = "Start. " + "word " * 2000 + "End."
    summary = parse_summary(text, max_chars=500)
    assert len(summary) <= 500
    assert summary.startswith("Start.")
    assert summary.endswith("End.")


@pytest.mark.parametrize(
    "reply", ["", "   \n", "```\n\n```", "\x00", "\x00\ud800", "\ud800\udfff", "...", "?"]
)
def test_empty_summary_is_an_extraction_error(reply: str) -> None:
    """Nothing left to store: ExtractionError, so the old summary stays."""
    with pytest.raises(ExtractionError):
        parse_summary(reply)


def test_bracket_in_prose_does_not_swallow_the_json_after_it() -> None:
    """`[to be done]` before the reply's JSON is prose: the JSON after it is read whole."""
    reply = f"Notes [to be done] follow. {json.dumps({'facts': [EDITOR, OS]})}"
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert (parsed.skipped, parsed.truncated) == (0, False)


def test_broken_first_item_does_not_lose_the_items_after_it() -> None:
    """A first item the JSON reader refuses (a trailing comma beside a `true`) is skipped and
    the rest of the array is still read."""
    reply = f'[{{"key": "has_dog", "value": true,}}, {json.dumps(EDITOR)}, {json.dumps(OS)}]'
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [
        ("preferences", "editor", "neovim"),
        ("environment", "os", "Ubuntu 24.04"),
    ]
    assert parsed.skipped == 1


@pytest.mark.parametrize("reply", ["[" * 100_000, '{"a": ' * 100_000, "[{" * 50_000])
def test_absurdly_deep_nesting_is_junk_not_a_crash(reply: str) -> None:
    """JSON nested deeper than Python's stack, never closed: an ExtractionError (no complete
    fact), not a RecursionError."""
    with pytest.raises(ExtractionError, match="cut off before its first complete fact"):
        parse_extracted_facts(reply)


# --- generated replies --------------------------------------------------------------------

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["category", "key", "value", "source", "tool_call", "facts"]),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(["category", "key", "value", "source", "source_context", "facts", "x"])
            | st.text(max_size=10),
            children,
            max_size=6,
        )
    ),
    max_leaves=30,
)


def _check_drafts(parsed: ParsedFacts) -> None:
    assert parsed.skipped >= 0
    assert len(parsed.facts) <= EXTRACTION_MAX_FACTS
    for draft in parsed.facts:
        for text in (draft.category, draft.key, draft.value):
            assert text.strip() == text
            assert text
            assert "\x00" not in text
            text.encode("utf-8")
        assert draft.source in CONFIDENCE
        assert draft.confidence == CONFIDENCE[draft.source]


CONFIDENCE = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90, "conversation": 70}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_JSON_VALUES, st.sampled_from(["{}", "```json\n{}\n```", "Sure: {} Done.", "{}"]))
def test_any_json_reply_parses_to_clean_drafts(value: object, frame: str) -> None:
    """Whatever JSON a model sends, in whatever frame, the parser returns clean drafts with a
    known source and its confidence; it raises only for a lone scalar in prose (no JSON)."""
    reply = frame.replace("{}", json.dumps(value), 1)
    if isinstance(value, list | dict):
        _check_drafts(parse_extracted_facts(reply))
        return
    try:
        _check_drafts(parse_extracted_facts(reply))
    except ExtractionError:
        assert frame.startswith("Sure")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_reply_parses_or_is_an_extraction_error(reply: str) -> None:
    """Arbitrary text gives clean drafts or an ExtractionError, nothing else."""
    try:
        parsed = parse_extracted_facts(reply)
    except ExtractionError:
        return
    _check_drafts(parsed)


def test_an_integer_too_long_for_python_stays_text_and_the_rest_is_parsed() -> None:
    """Python refuses to convert more than 4,300 digits with a plain ValueError (not a
    JSONDecodeError): such a "number" is kept as the text it is, and the reply's other facts
    are read as usual."""
    digits = "9" * 5000
    reply = (
        f'[{{"category": "work", "key": "employee_id", "value": {digits}}},'
        ' {"category": "work", "key": "badge", "value": 42}]'
    )
    for text in (reply, f"Here you go:\n```json\n{reply}\n```", reply[:-1]):
        parsed = parse_extracted_facts(text)
        assert [(f.key, f.value) for f in parsed.facts] == [
            ("employee_id", digits),
            ("badge", "42"),
        ], text[:40]


def test_line_breaks_and_tabs_inside_a_category_or_key_become_one_space() -> None:
    """A category or key is a name: a newline or tab inside one (JSON escapes) would be stored
    as it is and break the `- [category] key: value` lines of the summary prompt and the
    CLI's tables. Runs of whitespace become one space."""
    reply = json.dumps(
        [{"category": "work\nprojects", "key": "main\t\tproject\r\nname", "value": "navi"}]
    )
    parsed = parse_extracted_facts(reply)
    assert triples(parsed) == [("work projects", "main project name", "navi")]
    assert parsed.skipped == 0


HUGE = 2_000_000
"""Characters of a runaway reply: a model stuck repeating itself until its context is full."""


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(
            '{"facts": [' + '{"key": "k", "value": "v"}, {"key": ' * (HUGE // 40), id="broken-items"
        ),
        pytest.param('{"' * (HUGE // 2), id="object-starts"),
        pytest.param('```\n[{"x\n```\n' * (HUGE // 14), id="fences"),
    ],
)
def test_a_runaway_reply_is_read_in_a_moment(reply: str) -> None:
    """A 2 MB reply of broken JSON took 5-10 s to parse (every broken item cost a pass over
    the reply up to it; every broken object start a Python-level walk over the rest of it;
    every code fence a search of its own). Now it is given up on after a bounded number of
    tries, and the complete items before that count. (Such a reply is parsed in a worker
    thread now, past 64 K characters; it still must not take seconds.) Measured in this
    process's CPU time: on a loaded machine the wall clock says more about the neighbours."""
    started = time.process_time()
    if reply.startswith('{"facts": [{"key": "k", "value": "v"}'):  # one complete fact first
        parsed = parse_extracted_facts(reply)
        assert len(parsed.facts) == 1 and parsed.skipped >= 1
    else:  # no complete fact in it: a failure
        with pytest.raises(ExtractionError, match="cut off before its first complete fact"):
            parse_extracted_facts(reply)
    assert time.process_time() - started < 2.0
