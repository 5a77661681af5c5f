"""A scripted chat model for extraction tests, answering through the fake Ollama server.

It tells the two prompts apart by their system message, so one handler answers both, and it
can hold an answer until the test lets it go (to act while the model "thinks").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from navi_memory.services.extraction_prompts import EXTRACTION_PROMPT, FACT_SUMMARY_PROMPT

FactsReply = str | Callable[[str], str]
"""The extraction reply, or a function of the transcript giving it."""

SummaryReply = str | Callable[[str], str]
"""The summary reply, or a function of the summary prompt's facts giving it."""


class ExtractionModel:
    """The ``chat_handler`` of a FakeOllama: extraction replies ``facts``, summaries ``summary``.

    ``hold()`` makes the next extraction calls (``hold("summary")``: summary calls) wait (in
    the server's thread) until ``release()``; ``entered`` is set when one is waiting. Calls are
    counted per kind.
    """

    def __init__(self, facts: FactsReply = "[]", summary: SummaryReply = "A summary.") -> None:
        self.facts = facts
        self.summary = summary
        self.extraction_calls = 0
        self.summary_calls = 0
        self.transcripts: list[str] = []
        self.summary_inputs: list[str] = []
        self.entered = threading.Event()
        self._gate: threading.Event | None = None
        self._holding: threading.Event | None = None
        self._held = "facts"
        self._once = False
        self._lock = threading.Lock()

    def hold(self, kind: str = "facts", *, once: bool = False) -> None:
        """Hold the calls of ``kind`` (``once``: only the next one) until ``release()``."""
        self.entered.clear()
        self._held = kind
        self._once = once
        self._gate = self._holding = threading.Event()

    def release(self) -> None:
        if self._holding is not None:
            self._holding.set()

    def _wait_if_held(self, kind: str) -> None:
        with self._lock:
            gate = self._gate
            if gate is None or self._held != kind:
                return
            if self._once:
                self._gate = None
        self.entered.set()
        gate.wait(timeout=30)

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        system, user = messages[0]["content"], messages[-1]["content"]
        if system == EXTRACTION_PROMPT:
            assert body.get("format") == "json", "facts are asked for in JSON mode"
            with self._lock:
                self.extraction_calls += 1
                self.transcripts.append(user)
            self._wait_if_held("facts")
            return self.facts(user) if callable(self.facts) else self.facts
        if system == FACT_SUMMARY_PROMPT:
            with self._lock:
                self.summary_calls += 1
                self.summary_inputs.append(user)
            self._wait_if_held("summary")
            return self.summary(user) if callable(self.summary) else self.summary
        raise AssertionError(f"unexpected prompt: {system[:80]!r}")
