"""The extraction corpus through the transcript and the parser: realistic conversations and
replies in the shapes models produce. This checks parsing, not a model's judgement."""

from __future__ import annotations

import pytest

from navi_memory.constants import TRANSCRIPT_MAX_CHARS
from navi_memory.services.extraction_parser import parse_extracted_facts
from navi_memory.text.transcript import render_transcript
from tests.extraction_corpus import Conversation, load_corpus

CORPUS = load_corpus()
CONFIDENCE = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90, "conversation": 70}


def test_corpus_has_about_twenty_conversations_over_several_users() -> None:
    """The corpus is about twenty conversations of several users."""
    assert 18 <= len(CORPUS) <= 25
    assert len({c.user for c in CORPUS}) >= 3


@pytest.mark.parametrize("conversation", CORPUS, ids=[c.name for c in CORPUS])
def test_every_fact_rests_on_words_of_the_transcript(conversation: Conversation) -> None:
    """Each expected fact's evidence is in the rendered transcript, and what must be cut or left
    out (a long tool result's tail, a summary, the middle of a long session) is not."""
    transcript = render_transcript(conversation.as_messages())
    assert len(transcript) <= TRANSCRIPT_MAX_CHARS
    for fact in conversation.facts:
        assert fact.evidence in transcript, fact
    for absent in conversation.not_in_transcript:
        assert absent not in transcript


@pytest.mark.parametrize("conversation", CORPUS, ids=[c.name for c in CORPUS])
def test_parser_reads_every_fact_the_reply_holds(conversation: Conversation) -> None:
    """The reply yields exactly the facts it holds, with the source's confidence, and skips
    (and counts) exactly its unusable items."""
    parsed = parse_extracted_facts(conversation.reply)
    got = {(f.category, f.key, f.value, f.source) for f in parsed.facts}
    assert got == conversation.expected
    assert parsed.skipped == conversation.skipped
    assert all(f.confidence == CONFIDENCE[f.source] for f in parsed.facts)


def test_corpus_covers_the_shapes_models_produce() -> None:
    """Fences, prose, truncation, skipped items, empty answers and every source all occur."""
    parsed = {c.name: parse_extracted_facts(c.reply) for c in CORPUS}
    replies = [c.reply for c in CORPUS]
    assert any("```" in r for r in replies)
    assert any(r.lstrip()[0] not in '[{`"' for r in replies)  # prose first
    assert any(p.truncated for p in parsed.values())
    assert any(p.skipped for p in parsed.values())
    assert any(not p.facts and not p.skipped for p in parsed.values())
    sources = {f.source for p in parsed.values() for f in p.facts}
    assert sources == set(CONFIDENCE)


def test_corpus_totals(capsys: pytest.CaptureFixture[str]) -> None:
    """Report what the parser made of the corpus: facts kept, items skipped, facts lost."""
    kept = skipped = 0
    for conversation in CORPUS:
        parsed = parse_extracted_facts(conversation.reply)
        kept += len(parsed.facts)
        skipped += parsed.skipped
    careful = sum(len(c.facts) for c in CORPUS)
    lost = sum(f.lost_in_reply for c in CORPUS for f in c.facts)
    with capsys.disabled():
        print(
            f"\nextraction corpus: {len(CORPUS)} conversations, {careful} facts a careful reader "
            f"takes; parser kept {kept}, skipped {skipped} items; {lost} facts lost in replies"
        )
    # One reply repeats an item: kept once (parse_extracted_facts leaves repeats out).
    assert kept == sum(len(c.expected) for c in CORPUS)
    assert skipped == sum(c.skipped for c in CORPUS)
