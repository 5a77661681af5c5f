"""EmbeddingService: a failing model is reported at most once per interval, with a count,
text-only mode (no embedder) answers "no vector" without a word, and so does a model mismatch
(the recorder says another model's vectors are stored); junk answers are no vector."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import pytest

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import EmbeddingError, StorageError
from navi_memory.llm import Embedder, GuardedEmbedder, OllamaEmbedder, storable_vector
from navi_memory.services.embedding import EmbeddingService
from navi_memory.testing import FakeOllama


class Switchable:
    """An embedder that fails while ``failing`` is set."""

    dim = 768

    def __init__(self) -> None:
        self.failing = True

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if self.failing:
            raise EmbeddingError("the model is down")
        return [[1.0] * self.dim for _ in texts]

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed_documents([text]))[0]

    async def aclose(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


async def test_failures_are_reported_once_per_interval_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Five failures inside the interval make one warning; the next one after it reports the
    four it held back; a success after failures is reported once."""
    model, clock = Switchable(), Clock()
    service = EmbeddingService(model, log_interval_seconds=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        for _ in range(5):
            assert await service.query("q") is None
            clock.now += 1
        assert [r.failures for r in events(caplog, "memory.embedding_failed")] == [1]  # type: ignore[attr-defined]
        clock.now += 60
        assert await service.documents(["a", "b"]) is None
        failed = events(caplog, "memory.embedding_failed")
        assert [r.failures for r in failed] == [1, 5]  # type: ignore[attr-defined]
        assert "5 failure(s)" in failed[1].getMessage()

        model.failing = False
        assert await service.document("a") is not None
        assert await service.query("b") is not None
        assert len(events(caplog, "memory.embedding_recovered")) == 1
        # After a recovery the next failure is reported at once.
        model.failing = True
        assert await service.query("c") is None
    assert len(events(caplog, "memory.embedding_failed")) == 3


async def test_text_only_mode_answers_no_vector_silently(caplog: pytest.LogCaptureFixture) -> None:
    """With no embedder every call is None, and nothing is logged."""
    service = EmbeddingService(None)
    with caplog.at_level(logging.DEBUG, logger="navi_memory"):
        assert await service.query("q") is None
        assert await service.documents(["a"]) is None
        assert await service.document("a") is None
    assert service.text_only and caplog.records == []


class Junk:
    """An embedder that answers a vector of the wrong width."""

    dim = 768

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] * 3 for _ in texts]

    async def embed_query(self, text: str) -> list[float]:
        return [1.0] * 3

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("guarded", [False, True], ids=["bare", "guarded"])
async def test_junk_is_no_vector_whether_or_not_a_guard_checked_it(guarded: bool) -> None:
    """The service trusts a guard's check instead of repeating it, and checks a bare embedder
    itself: either way a 3-wide answer becomes "no vector", never a stored row."""
    embedder: Embedder = GuardedEmbedder(Junk(), timeout_seconds=5) if guarded else Junk()
    service = EmbeddingService(embedder)
    assert await service.documents(["a", "b"]) is None
    assert await service.query("a") is None


@pytest.mark.parametrize("guarded", [False, True], ids=["bare", "guarded"])
async def test_good_vectors_come_back_as_float32(guarded: bool) -> None:
    inner = Switchable()
    inner.failing = False
    service = EmbeddingService(GuardedEmbedder(inner, timeout_seconds=5) if guarded else inner)
    vectors = await service.documents(["a", "b"])
    assert vectors is not None and [v.typecode for v in vectors] == ["f", "f"]
    assert vectors[1].tolist() == [1.0] * 768
    query = await service.query("a")
    assert query is not None and query.typecode == "f"


class Hanging(Switchable):
    """Fails as a guarded model does when its timeout runs out: ``seconds`` later on the
    clock. Counts the calls that reached it."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        super().__init__()
        self.clock = clock
        self.seconds = seconds
        self.calls = 0

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.failing:
            self.clock.now += self.seconds
            raise EmbeddingError(f"the model did not answer within {self.seconds:g} s")
        return [[1.0] * self.dim for _ in texts]


async def test_a_model_that_hung_is_skipped_for_the_pause_then_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call that failed only after the hang threshold pauses the model: every call of the
    pause answers "no vector" without reaching it (a healed model too), counted as failures;
    the first call after the pause asks it again."""
    clock = Clock()
    model = Hanging(clock, seconds=30)
    service = EmbeddingService(
        model, log_interval_seconds=600, clock=clock, pause_seconds=60, hang_seconds=15
    )
    with caplog.at_level(logging.INFO, logger="navi_memory"):
        assert await service.query("q") is None
        assert (model.calls, service.paused) == (1, True)
        model.failing = False
        clock.now += 59
        assert await service.query("q") is None
        assert await service.documents(["a", "b"]) is None
        assert model.calls == 1
        clock.now += 1
        assert not service.paused
        assert await service.query("q") is not None
        assert model.calls == 2
    paused = events(caplog, "memory.embedding_paused")
    assert [r.seconds for r in paused] == [60]  # type: ignore[attr-defined]
    assert "did not answer within 30 s" in paused[0].getMessage()
    # The two calls the pause answered are failures the recovery reports.
    recovered = events(caplog, "memory.embedding_recovered")
    assert [r.failures for r in recovered] == [2]  # type: ignore[attr-defined]


async def test_a_model_that_hangs_again_after_its_pause_is_paused_again() -> None:
    clock = Clock()
    model = Hanging(clock, seconds=30)
    service = EmbeddingService(model, clock=clock, pause_seconds=60, hang_seconds=15)
    assert await service.documents(["a"]) is None
    clock.now += 60
    assert await service.documents(["a"]) is None
    assert (model.calls, service.paused) == (2, True)


@pytest.mark.parametrize(
    ("seconds", "pause"),
    [(1, 60), (30, 0)],
    ids=["fails-fast", "pause-off"],
)
async def test_a_model_that_fails_fast_or_with_the_pause_off_is_asked_every_time(
    seconds: float, pause: float
) -> None:
    """Refusing at once (down, junk) is no hang; with EMBEDDING_PAUSE_SECONDS 0 even a hang
    pauses nothing: each call asks the model."""
    clock = Clock()
    model = Hanging(clock, seconds=seconds)
    service = EmbeddingService(model, clock=clock, pause_seconds=pause, hang_seconds=15)
    for _ in range(3):
        assert await service.query("q") is None
    assert (model.calls, service.paused) == (3, False)


class Recorder:
    """A model of record: ``matching`` False is a model mismatch; counts what it was asked."""

    def __init__(self, *, matching: bool = True, store: bool = True) -> None:
        self.matching = matching
        self.store = store
        self.asked = 0
        self.made = 0

    async def may_embed(self) -> bool:
        self.asked += 1
        return self.matching

    async def vectors_made(self) -> bool:
        self.made += 1
        return self.store


class Counting(Switchable):
    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.calls = 0

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return await super().embed_documents(texts)


async def test_a_model_mismatch_makes_no_vector_and_asks_no_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another model's vectors stored: documents and queries answer "no vector" without asking
    the model (rows land without one, searches are text searches), and the service logs
    nothing of its own (the record logs the mismatch, once)."""
    model, recorder = Counting(), Recorder(matching=False)
    service = EmbeddingService(model, recorder=recorder)
    with caplog.at_level(logging.DEBUG, logger="navi_memory"):
        assert await service.documents(["a", "b"]) is None
        assert await service.document("a") is None
        assert await service.query("q") is None
    assert (model.calls, recorder.asked, recorder.made) == (0, 3, 0)
    assert caplog.records == []
    recorder.matching = True  # a reembed recorded the configured model
    assert await service.documents(["a"]) is not None
    assert await service.query("q") is not None
    assert (model.calls, recorder.made) == (2, 1)


async def test_vectors_the_record_refuses_after_they_were_made_are_not_stored() -> None:
    """The record changed between the check and the vectors (a reembed elsewhere): dropped."""
    model, recorder = Counting(), Recorder(store=False)
    service = EmbeddingService(model, recorder=recorder)
    assert await service.documents(["a"]) is None
    assert model.calls == 1


def test_a_wrong_width_is_not_fixed_by_re_embedding() -> None:
    """The advice "or re-embed the stored vectors for the new model" sent the reader to a
    reembed that cannot help: the columns are vector(768)."""
    with pytest.raises(EmbeddingError) as caught:
        storable_vector([0.5] * 384)
    message = str(caught.value)
    assert "384-dimensional embeddings, expected 768" in message
    assert "re-embed" not in message and "vector(768)" in message


@pytest.mark.parametrize(
    "values",
    [[True] * EMBEDDING_DIM, [True, False] * (EMBEDDING_DIM // 2)],
    ids=["all-true", "true-false"],
)
async def test_booleans_from_ollama_are_an_embedding_error_not_a_vector(
    fake_ollama: FakeOllama, values: list[bool]
) -> None:
    """The ollama client's pydantic model turned ``true`` into 1.0 before the bool check ran:
    a vector of booleans was stored as all-1.0. Refused, like any other junk."""
    fake_ollama.mode = "junk"
    fake_ollama.junk_body = json.dumps({"model": "m", "embeddings": [values]}).encode()
    embedder = OllamaEmbedder(
        fake_ollama.url,
        "nomic-embed-text:latest",
        document_prefix="",
        query_prefix="",
        batch_size=8,
        timeout=5.0,
    )
    try:
        with pytest.raises(EmbeddingError, match="booleans"):
            await embedder.embed_query("a")
        service = EmbeddingService(GuardedEmbedder(embedder, timeout_seconds=5))
        assert await service.documents(["a"]) is None
    finally:
        await embedder.aclose()


class Unreadable(Recorder):
    """A model of record the database cannot be asked for (a lost connection)."""

    def __init__(self, *, fail_at: str) -> None:
        super().__init__()
        self.fail_at = fail_at

    async def may_embed(self) -> bool:
        if self.fail_at == "may_embed":
            raise StorageError("lost the connection to the database")
        return await super().may_embed()

    async def vectors_made(self) -> bool:
        if self.fail_at == "vectors_made":
            raise StorageError("lost the connection to the database")
        return await super().vectors_made()


@pytest.mark.parametrize("fail_at", ["may_embed", "vectors_made"])
async def test_a_model_of_record_that_cannot_be_read_is_no_vector_not_an_error(
    fail_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The recheck fails (the database): the call gets no vector and the failure is logged,
    never raised — a write through a hidden spelling asks for its vector after its value
    committed, and must not be told it failed."""
    service = EmbeddingService(Counting(), recorder=Unreadable(fail_at=fail_at))
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        assert await service.documents(["a"]) is None
        queried = await service.query("q")
    assert (queried is None) == (fail_at == "may_embed")
    assert "memory.embedding_record_unreadable" in caplog.text


async def test_an_unreadable_model_of_record_is_reported_once_an_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database outage: every call finds the record unreadable; one warning an interval,
    with the count, not one a call."""
    clock = Clock()
    service = EmbeddingService(
        Counting(), recorder=Unreadable(fail_at="may_embed"), clock=clock, log_interval_seconds=60
    )
    with caplog.at_level(logging.WARNING, logger="navi_memory"):
        for _ in range(50):
            assert await service.query("q") is None
        clock.now += 61
        assert await service.query("q") is None
    reports = events(caplog, "memory.embedding_record_unreadable")
    assert [getattr(r, "failures", None) for r in reports] == [1, 50]
