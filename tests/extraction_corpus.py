"""The extraction corpus under tests/data/extraction/: short conversations, the facts a careful
reader takes from each, and a model reply in one of the shapes real models produce."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from navi_memory.schemas import Message

CORPUS_DIR = Path(__file__).parent / "data" / "extraction"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CorpusFact:
    category: str
    key: str
    value: str
    source: str
    evidence: str
    """Words of the transcript the fact rests on: the corpus cannot claim what was never said."""
    lost_in_reply: bool
    """The careful reader takes it, but the reply lost it (cut off, or in a shape not read)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    name: str
    user: str
    about: str
    messages: list[dict[str, Any]]
    facts: list[CorpusFact]
    reply: str
    skipped: int
    """Items of the reply the parser must skip."""
    not_in_transcript: list[str]

    def as_messages(self, session_id: str = "s1") -> list[Message]:
        return [
            Message(session_id=session_id, seq=i, created_at=T0 + timedelta(minutes=i), **m)
            for i, m in enumerate(self.messages, start=1)
        ]

    @property
    def expected(self) -> set[tuple[str, str, str, str]]:
        """(category, key, value, source) of every fact the reply holds."""
        return {(f.category, f.key, f.value, f.source) for f in self.facts if not f.lost_in_reply}


def load_corpus() -> list[Conversation]:
    """Every conversation, in file-name order (the order a user's sessions happened in)."""
    conversations = []
    for path in sorted(CORPUS_DIR.glob("[0-9][0-9]-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        reply = path.with_name(path.stem + ".reply.txt").read_text(encoding="utf-8")
        conversations.append(
            Conversation(
                name=path.stem,
                user=data["user"],
                about=data["about"],
                messages=data["messages"],
                facts=[
                    CorpusFact(
                        category=f["category"],
                        key=f["key"],
                        value=f["value"],
                        source=f["source"],
                        evidence=f["evidence"],
                        lost_in_reply=f.get("lost_in_reply", False),
                    )
                    for f in data["facts"]
                ],
                reply=reply,
                skipped=data["skipped"],
                not_in_transcript=data.get("not_in_transcript", []),
            )
        )
    return conversations
