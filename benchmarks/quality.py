"""`make bench-quality`: retrieval quality of search_chunks on the LoCoMo development split.

Each conversation is one user's memory, ingested session by session through the package's own
write path (build_chunks, the breadcrumbs compression would give, add_chunks). Every question
(category 5, adversarial, left out) is asked through ``search_chunks`` with no embedder (an
embedder that always fails, so the text path answers) and a hit is a returned chunk holding an
evidence turn. Beside it, in the same run and over the same chunks, a plain Okapi BM25 in
Python (k1 1.5, b 0.75, English stop words) is the baseline.

The data is read from the shared benchmark folder (``--data``), never copied into the package.

    python -m benchmarks.quality                      # every text ranking the package has
    python -m benchmarks.quality --ranking terms      # one of them
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import re
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, BenchServer, migrate, percentile
from navi_memory import open_memory
from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import EmbeddingError
from navi_memory.schemas import ChunkDraft, Message
from navi_memory.text.breadcrumbs import extract_breadcrumbs
from navi_memory.text.chunks import build_chunks, render_message

_CANDIDATES = [
    base / "shared" / "bench" / "locomo" / "locomo_dev.json" for base in ROOT.parents[:2]
]
DEFAULT_DATA = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[0])
"""The shared benchmark folder beside the checkout (or beside its worktree folder)."""
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
K = 10
_DIA = re.compile(r"D\d+:\d+")
_WORD = re.compile(r"\w+", re.UNICODE)
_NAMESPACE = uuid.UUID("6f1c9a52-6c1e-4a1f-9a57-1a0c2c6e7b10")

# The common English stop-word list (NLTK's), for the baseline only.
# fmt: off
ENGLISH_STOP_WORDS = frozenset(
    """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing a an the and
but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here
there when where why how all any both each few more most other some such no nor not only own
same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn
doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
""".split()  # noqa: SIM905 (a list literal of 179 quoted words is harder to check)
)
# fmt: on


class FailingEmbedder:
    """An embedder that is always down: search_chunks answers by its text path alone."""

    dim = EMBEDDING_DIM

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        raise EmbeddingError("no embedder in this benchmark")

    async def embed_query(self, text: str) -> Sequence[float]:
        raise EmbeddingError("no embedder in this benchmark")

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """What the benchmark knows of a chunk it wrote: its text and the turns it holds."""

    session_id: str
    start_seq: int
    end_seq: int
    text: str
    dia_ids: frozenset[str]


@dataclass(slots=True)
class Conversation:
    user_id: uuid.UUID
    sessions: list[tuple[str, list[Message]]]
    dia_by_seq: dict[tuple[str, int], str]
    questions: list[tuple[str, int, frozenset[str]]]
    chunks: list[StoredChunk] = field(default_factory=list)


@dataclass(slots=True)
class Tally:
    """hit@1, hit@5 and MRR@10 per category, and what the queries returned and cost."""

    ranks: dict[int, list[int | None]] = field(default_factory=lambda: defaultdict(list))
    chars_k1: list[int] = field(default_factory=list)
    chars_k2: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, category: int, rank: int | None) -> None:
        self.ranks[category].append(rank)

    def scores(self, categories: Sequence[int]) -> tuple[int, float, float, float]:
        ranks = [r for c in categories for r in self.ranks.get(c, [])]
        n = len(ranks)
        if not n:
            return 0, 0.0, 0.0, 0.0
        hit1 = sum(1 for r in ranks if r is not None and r <= 1) / n
        hit5 = sum(1 for r in ranks if r is not None and r <= 5) / n
        mrr = sum(1 / r for r in ranks if r is not None and r <= K) / n
        return n, hit1, hit5, mrr


def parse_when(value: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as an aware datetime (UTC)."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load(path: Path) -> tuple[list[Conversation], Counter[str]]:
    """The conversations as messages, and the questions with evidence that resolves; the
    counter says what was skipped or split."""
    faults: Counter[str] = Counter()
    conversations = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        speaker_a = conv["speaker_a"]
        uid = uuid.uuid5(_NAMESPACE, sample["sample_id"])
        numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
        sessions: list[tuple[str, list[Message]]] = []
        dia_by_seq: dict[tuple[str, int], str] = {}
        for number in numbers:
            sid = f"{sample['sample_id']}-s{number}"
            start = parse_when(conv[f"session_{number}_date_time"])
            messages = []
            for seq, turn in enumerate(conv[f"session_{number}"], start=1):
                messages.append(
                    Message(
                        session_id=sid,
                        seq=seq,
                        role="user" if turn["speaker"] == speaker_a else "assistant",
                        content=f"{turn['speaker']}: {turn['text']}",
                        created_at=start + timedelta(seconds=seq),
                    )
                )
                dia_by_seq[(sid, seq)] = turn["dia_id"]
            sessions.append((sid, messages))
        known = set(dia_by_seq.values())
        questions = []
        for qa in sample["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            found = [d for e in qa.get("evidence", []) for d in _DIA.findall(e)]
            if any(len(_DIA.findall(e)) > 1 for e in qa.get("evidence", [])):
                faults["evidence strings holding several ids (split)"] += 1
            resolved = frozenset(d for d in found if d in known)
            if len(resolved) < len(set(found)):
                faults["evidence ids resolving to no turn (dropped)"] += len(set(found)) - len(
                    resolved
                )
            if not resolved:
                faults["questions with no usable evidence (skipped)"] += 1
                continue
            questions.append((qa["question"], qa["category"], resolved))
        conversations.append(Conversation(uid, sessions, dia_by_seq, questions))
    return conversations, faults


def session_chunks(messages: Sequence[Message]) -> list[ChunkDraft]:
    """A session's messages as compression would store them: chunks, each with the breadcrumbs
    found in the whole demoted range (no model KEYS here)."""
    rendered = (render_message(m) for m in messages)
    crumbs = extract_breadcrumbs("\n\n".join(r for r in rendered if r is not None))
    return [c.model_copy(update={"breadcrumbs": crumbs}) for c in build_chunks(messages)]


# --- the baseline ---------------------------------------------------------------------------


def bm25_tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if w not in ENGLISH_STOP_WORDS]


class Bm25:
    """Okapi BM25 (k1 1.5, b 0.75) over one user's chunks, idf log(1 + (N-df+.5)/(df+.5))."""

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(bm25_tokens(d)) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg = sum(self.lengths) / max(1, len(self.lengths))
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def top(self, query: str, k: int) -> list[int]:
        terms = set(bm25_tokens(query))
        scores = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
            for t in terms:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            if s > 0:
                scores.append((-s, i))
        return [i for _, i in sorted(scores)[:k]]


# --- the run --------------------------------------------------------------------------------


def first_hit(found: Sequence[frozenset[str]], evidence: frozenset[str]) -> int | None:
    for rank, dia_ids in enumerate(found, start=1):
        if dia_ids & evidence:
            return rank
    return None


async def run_package(
    url: str, conversations: Sequence[Conversation], ranking: str | None, ingest: bool
) -> Tally:
    overrides: dict[str, Any] = {"database_url": url, "chunk_index_in_background": False}
    if ranking is not None:
        overrides["chunk_text_ranking"] = ranking
    settings = Settings(**overrides)
    tally = Tally()
    async with open_memory(settings, embedder=FailingEmbedder()) as memory:
        for conv in conversations:
            if ingest:
                await memory.users.ensure(conv.user_id)
                for sid, messages in conv.sessions:
                    drafts = session_chunks(messages)
                    await memory.store.add_chunks(drafts, user_id=conv.user_id, session_id=sid)
                    for d in drafts:
                        conv.chunks.append(
                            StoredChunk(
                                sid,
                                d.start_seq,
                                d.end_seq,
                                d.content + "\n" + "\n".join(d.breadcrumbs),
                                frozenset(
                                    conv.dia_by_seq[(sid, s)]
                                    for s in range(d.start_seq, d.end_seq + 1)
                                    if (sid, s) in conv.dia_by_seq
                                ),
                            )
                        )
                # Indexed, as the background indexer would have done by the time anyone asks:
                # queued chunks rank the same but cost their tsvector on every query.
                await memory.store.index_pending_chunks()
            by_key = {(c.session_id, c.start_seq): c for c in conv.chunks}
            for question, category, evidence in conv.questions:
                started = time.perf_counter()
                hits = await memory.store.search_chunks(question, user_id=conv.user_id, limit=K)
                tally.seconds.append(time.perf_counter() - started)
                found = [by_key[(h.session_id, h.start_seq)].dia_ids for h in hits]
                tally.add(category, first_hit(found, evidence))
                tally.chars_k1.append(sum(len(h.content) for h in hits[:1]))
                tally.chars_k2.append(sum(len(h.content) for h in hits[:2]))
    return tally


def run_bm25(conversations: Sequence[Conversation]) -> Tally:
    tally = Tally()
    for conv in conversations:
        index = Bm25([c.text for c in conv.chunks])
        for question, category, evidence in conv.questions:
            started = time.perf_counter()
            top = index.top(question, K)
            tally.seconds.append(time.perf_counter() - started)
            tally.add(category, first_hit([conv.chunks[i].dia_ids for i in top], evidence))
            tally.chars_k1.append(sum(len(conv.chunks[i].text) for i in top[:1]))
            tally.chars_k2.append(sum(len(conv.chunks[i].text) for i in top[:2]))
    return tally


def report(results: dict[str, Tally]) -> str:
    lines = [
        "| retriever | category | n | hit@1 | hit@5 | MRR@10 |",
        "|---|---|---|---|---|---|",
    ]
    groups = [(name, [c]) for c, name in CATEGORIES.items()] + [("all", list(CATEGORIES))]
    for label, tally in results.items():
        for group, cats in groups:
            n, h1, h5, mrr = tally.scores(cats)
            lines.append(f"| {label} | {group} | {n} | {h1:.3f} | {h5:.3f} | {mrr:.3f} |")
    lines += [
        "",
        "| retriever | chars at k=1 (mean) | chars at k=2 (mean) | query p50 | query p95 |",
        "|---|---|---|---|---|",
    ]
    for label, tally in results.items():
        lines.append(
            f"| {label} | {statistics.mean(tally.chars_k1):,.0f} | "
            f"{statistics.mean(tally.chars_k2):,.0f} | "
            f"{percentile(tally.seconds, 0.5) * 1000:.1f} ms | "
            f"{percentile(tally.seconds, 0.95) * 1000:.1f} ms |"
        )
    return "\n".join(lines)


def rankings() -> list[str | None]:
    """Every text ranking this version of the package offers (None: it has no setting)."""
    choices = Settings.model_fields.get("chunk_text_ranking")
    if choices is None:
        return [None]
    return ["bm25", "terms"]


async def main_async(args: argparse.Namespace) -> int:
    # Every search logs the failing embedder once; that is the point here, not news.
    logging.getLogger("navi_memory").setLevel(logging.ERROR)
    conversations, faults = load(args.data)
    asked = sum(len(c.questions) for c in conversations)
    print(f"LoCoMo dev split: {len(conversations)} conversations, {asked} questions asked")
    for what, count in sorted(faults.items()):
        print(f"  {what}: {count}")
    server = BenchServer()
    try:
        url = await server.create_database("quality")
        await migrate(url)
        results: dict[str, Tally] = {}
        chosen = [args.ranking] if args.ranking else rankings()
        for i, ranking in enumerate(chosen):
            label = "search_chunks, text path" + (f" ({ranking})" if ranking else "")
            results[label] = await run_package(url, conversations, ranking, ingest=i == 0)
        stored = sum(len(c.chunks) for c in conversations)
        print(f"  {stored} chunks stored")
        results["Okapi BM25 (Python, same chunks)"] = run_bm25(conversations)
        print(report(results))
    finally:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_dev.json")
    parser.add_argument("--ranking", help="only this CHUNK_TEXT_RANKING (default: every one)")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
