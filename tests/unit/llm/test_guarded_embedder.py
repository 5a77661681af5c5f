"""GuardedEmbedder: any embedder's exception, silence or junk becomes an EmbeddingError, like an
Ollama failure; the Ollama embedder itself passes through unchanged."""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError, EmbeddingTimeoutError, InvalidInputError
from navi_memory.llm import Embedder, GuardedEmbedder, OllamaEmbedder, guard_embedder
from navi_memory.testing import FakeOllama, HashedEmbedder, hashed_embedding

TIMEOUT = 0.3
"""Short, so a test of "never answers" takes a fraction of a second."""


class CustomEmbedder:
    """An embedder whose every answer the test writes: a function of the texts asked for."""

    dim = EMBEDDING_DIM

    def __init__(self, answer: Callable[[Sequence[str]], Any]) -> None:
        self.answer = answer
        self.batches: list[list[str]] = []
        self.closed = 0

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        self.batches.append(list(texts))
        return self.answer(texts)

    async def embed_query(self, text: str) -> Any:
        """The first of the answer's vectors; an answer that is not a list, as it is."""
        self.batches.append([text])
        answer = self.answer([text])
        return answer[0] if isinstance(answer, list) and answer else answer

    async def aclose(self) -> None:
        self.closed += 1


class HangingEmbedder:
    """Never answers; records that it started and whether it was cancelled."""

    dim = EMBEDDING_DIM

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [await self.embed_query(text) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def raising(exc: BaseException) -> Callable[[Sequence[str]], Any]:
    def answer(texts: Sequence[str]) -> Any:
        raise exc

    return answer


def hashed(texts: Sequence[str]) -> list[list[float]]:
    return [hashed_embedding(text) for text in texts]


def guarded(answer: Callable[[Sequence[str]], Any], **options: Any) -> GuardedEmbedder:
    return GuardedEmbedder(CustomEmbedder(answer), timeout_seconds=TIMEOUT, **options)


async def embed(embedder: GuardedEmbedder, call: str) -> object:
    if call == "documents":
        return await embedder.embed_documents(["editor is neovim", "lives in Berlin"])
    return await embedder.embed_query("which editor")


CALLS = pytest.mark.parametrize("call", ["documents", "query"])


# --- good answers ----------------------------------------------------------------------------


async def test_good_vectors_come_back_checked_as_float32_arrays() -> None:
    """A custom embedder's lists come back as array('f') of the same values, in order."""
    embedder = guarded(hashed)
    texts = ["editor is neovim", "lives in Berlin", "allergic to peanuts"]
    vectors = await embedder.embed_documents(texts)
    assert [v.typecode for v in vectors] == ["f"] * 3
    assert vectors == [array("f", hashed_embedding(t)) for t in texts]
    assert await embedder.embed_query("editor") == array("f", hashed_embedding("editor"))
    assert isinstance(embedder, Embedder)
    assert embedder.dim == EMBEDDING_DIM


async def test_texts_go_to_the_inner_model_batch_size_at_a_time() -> None:
    """With a batch size, texts are sent in batches, each a call of its own (as Ollama's are)."""
    inner = CustomEmbedder(hashed)
    embedder = GuardedEmbedder(inner, timeout_seconds=TIMEOUT, batch_size=2)
    texts = [f"text {i}" for i in range(5)]
    vectors = await embedder.embed_documents(texts)
    assert inner.batches == [["text 0", "text 1"], ["text 2", "text 3"], ["text 4"]]
    assert vectors == [array("f", hashed_embedding(t)) for t in texts]


async def test_no_texts_ask_the_inner_model_nothing() -> None:
    """An empty list of texts is answered with [] and no call."""
    inner = CustomEmbedder(raising(RuntimeError("must not be called")))
    assert await GuardedEmbedder(inner, timeout_seconds=TIMEOUT).embed_documents([]) == []
    assert inner.batches == []


async def test_each_batch_gets_the_whole_timeout() -> None:
    """The timeout bounds one call, not the sum of a long list's batches."""
    # Five batches of 0.45 s: 2.25 s in all, past the 2 s timeout, while each batch has 1.55 s
    # to spare (a loaded machine may be late to wake a sleep).
    timeout = 2.0

    class Slow(CustomEmbedder):
        async def embed_documents(self, texts: Sequence[str]) -> Any:
            await asyncio.sleep(0.45)
            return await super().embed_documents(texts)

    inner = Slow(hashed)
    embedder = GuardedEmbedder(inner, timeout_seconds=timeout, batch_size=1)
    assert len(await embedder.embed_documents(["a", "b", "c", "d", "e"])) == 5
    assert len(inner.batches) == 5


# --- junk answers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda texts: None, "returned None instead of a"),
        (lambda texts: [None] * len(texts), "returned None instead of a vector"),
        (lambda texts: "vectors", "returned a str instead of a"),
        (lambda texts: [[0.1] * 384] * len(texts), "384-dimensional embeddings, expected 768"),
        (lambda texts: [[float("nan")] * EMBEDDING_DIM] * len(texts), "non-finite"),
        (lambda texts: [[float("inf")] * EMBEDDING_DIM] * len(texts), "non-finite"),
        (lambda texts: [[1e39] * EMBEDDING_DIM] * len(texts), "beyond float32"),
        (lambda texts: [["0.1"] * EMBEDDING_DIM] * len(texts), "non-numbers"),
        (lambda texts: [[0.0] * EMBEDDING_DIM] * len(texts), "all-zero"),
        (lambda texts: [[True, False] * (EMBEDDING_DIM // 2)] * len(texts), "of booleans"),
    ],
    ids=["none", "none-vector", "string", "dim", "nan", "inf", "huge", "text", "zero", "flags"],
)
@CALLS
async def test_junk_answers_are_embedding_errors_naming_the_model_class(
    answer: Callable[[Sequence[str]], Any], expected: str, call: str
) -> None:
    """None, the wrong count or width, NaN, inf, huge values, strings, zeros: EmbeddingError."""
    with pytest.raises(EmbeddingError, match=r"^embedding model CustomEmbedder returned") as caught:
        await embed(guarded(answer), call)
    assert expected in str(caught.value)


@pytest.mark.parametrize(("keep", "count"), [(slice(1), 1), (slice(0), 0), (slice(None), 3)])
async def test_the_wrong_number_of_vectors_is_an_embedding_error(keep: slice, count: int) -> None:
    """Too few or too many vectors for the texts asked is an error, not a silent mismatch."""

    def answer(texts: Sequence[str]) -> list[list[float]]:
        return hashed([*texts, "one more"])[keep]

    with pytest.raises(EmbeddingError, match=f"returned {count} embeddings for 2 inputs"):
        await guarded(answer).embed_documents(["a", "b"])


async def test_a_method_that_is_not_async_is_an_embedding_error() -> None:
    """A synchronous method (nothing to await) is a failure of the model, not a TypeError."""

    class Sync:
        dim = EMBEDDING_DIM

        def embed_query(self, text: str) -> list[float]:
            return hashed_embedding(text)

    with pytest.raises(EmbeddingError, match=r"^embedding model Sync failed: TypeError") as caught:
        await GuardedEmbedder(Sync(), timeout_seconds=TIMEOUT).embed_query("a")  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, TypeError)


# --- exceptions and silence -------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("connection refused"),
        RuntimeError("model crashed"),
        ValueError("bad things"),
        TypeError("NoneType is not subscriptable"),
        TimeoutError("its own timeout"),
        InvalidInputError("a navi_memory error of another kind"),
    ],
    ids=lambda exc: type(exc).__name__,
)
@CALLS
async def test_every_exception_becomes_an_embedding_error_from_it(
    exc: Exception, call: str
) -> None:
    """Whatever the model raises is an EmbeddingError naming its class, chained to the original."""
    with pytest.raises(EmbeddingError) as caught:
        await embed(guarded(raising(exc)), call)
    assert caught.value.__cause__ is exc
    assert str(caught.value).startswith("embedding model CustomEmbedder failed: ")
    assert type(exc).__name__ in str(caught.value)
    assert str(exc) in str(caught.value)


class Unprintable(Exception):
    """A host's error class whose message cannot be read."""

    def __str__(self) -> str:
        raise ValueError("cannot print me")


@CALLS
async def test_an_exception_whose_message_cannot_be_read_is_still_an_embedding_error(
    call: str,
) -> None:
    """str() of the model's exception raising: a ValueError escaped the guard itself, and
    search no longer fell back to text."""
    exc = Unprintable()
    with pytest.raises(EmbeddingError, match="Unprintable whose message cannot be read") as caught:
        await embed(guarded(raising(exc)), call)
    assert caught.value.__cause__ is exc


@CALLS
async def test_an_embedding_error_passes_through_as_it_is(call: str) -> None:
    """The model's own EmbeddingError is already the right error: it is not wrapped again."""
    original = EmbeddingError("down for maintenance")
    with pytest.raises(EmbeddingError) as caught:
        await embed(guarded(raising(original)), call)
    assert caught.value is original


@CALLS
async def test_a_model_that_never_answers_is_an_embedding_error_at_the_timeout(
    call: str,
) -> None:
    """A hang ends at timeout_seconds as an EmbeddingError that says so; the call is cancelled."""
    inner = HangingEmbedder()
    embedder = GuardedEmbedder(inner, timeout_seconds=TIMEOUT)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        await embed(embedder, call)
    elapsed = time.monotonic() - started
    assert TIMEOUT <= elapsed < TIMEOUT + 1.5
    assert str(caught.value) == (
        "embedding model HangingEmbedder did not answer within 0.3 s (EMBEDDING_TIMEOUT_SECONDS)"
    )
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert isinstance(caught.value, EmbeddingTimeoutError)
    assert isinstance(caught.value, TimeoutError)
    assert inner.cancelled


@CALLS
async def test_cancelling_the_caller_cancels_the_model_and_propagates(call: str) -> None:
    """asyncio cancellation is not turned into an EmbeddingError: it reaches the caller."""
    inner = HangingEmbedder()
    task = asyncio.create_task(embed(GuardedEmbedder(inner, timeout_seconds=30), call))
    await asyncio.wait_for(inner.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inner.cancelled


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)], ids=repr)
async def test_keyboard_interrupt_and_system_exit_propagate(exc: BaseException) -> None:
    """Exceptions that are not errors of the model are never swallowed into an EmbeddingError."""
    with pytest.raises(type(exc)) as caught:
        await guarded(raising(exc)).embed_query("a")
    assert caught.value is exc


# --- wrapping and closing ---------------------------------------------------------------------


async def test_guarding_a_guarded_embedder_wraps_the_model_once() -> None:
    """A guard around a guard guards the inner model, with the outer guard's settings."""
    inner = CustomEmbedder(hashed)
    once = GuardedEmbedder(inner, timeout_seconds=TIMEOUT, batch_size=8)
    twice = GuardedEmbedder(once, timeout_seconds=2.0)
    assert twice.inner is inner
    assert (twice.timeout_seconds, twice.batch_size) == (2.0, None)
    settings = Settings(_env_file=None)
    assert guard_embedder(once, settings) is once


async def test_guard_embedder_takes_timeout_and_batch_size_from_the_settings() -> None:
    """EMBEDDING_TIMEOUT_SECONDS bounds each call and EMBEDDING_BATCH_SIZE splits the texts."""
    settings = Settings(_env_file=None, embedding_timeout_seconds=TIMEOUT, embedding_batch_size=2)
    inner = CustomEmbedder(hashed)
    embedder = guard_embedder(inner, settings)
    assert (embedder.inner, embedder.timeout_seconds, embedder.batch_size) == (inner, TIMEOUT, 2)
    await embedder.embed_documents(["a", "b", "c"])
    assert inner.batches == [["a", "b"], ["c"]]
    with pytest.raises(EmbeddingError, match=r"within 0\.3 s"):
        await guard_embedder(HangingEmbedder(), settings).embed_query("a")


async def test_aclose_closes_the_inner_model_and_tolerates_one_without_aclose() -> None:
    """aclose passes through; a custom model that has no aclose is closed by doing nothing."""
    inner = CustomEmbedder(hashed)
    await GuardedEmbedder(inner, timeout_seconds=TIMEOUT).aclose()
    assert inner.closed == 1

    class NoClose:
        dim = EMBEDDING_DIM

        async def embed_query(self, text: str) -> list[float]:
            return hashed_embedding(text)

    bare = GuardedEmbedder(NoClose(), timeout_seconds=TIMEOUT)  # type: ignore[arg-type]
    await bare.aclose()
    assert len(await bare.embed_query("still works")) == EMBEDDING_DIM


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"timeout_seconds": 0}, "EMBEDDING_TIMEOUT_SECONDS"),
        ({"timeout_seconds": -1}, "EMBEDDING_TIMEOUT_SECONDS"),
        ({"timeout_seconds": 1, "batch_size": 0}, "EMBEDDING_BATCH_SIZE"),
    ],
)
def test_a_bad_timeout_or_batch_size_is_a_config_error(
    options: dict[str, Any], setting: str
) -> None:
    """Limits that cannot work are refused when the guard is built, naming the setting."""
    with pytest.raises(ConfigError, match=setting):
        GuardedEmbedder(HashedEmbedder(), **options)


# --- the Ollama embedder behind the guard -----------------------------------------------------


SERVER_TIMEOUT = 10.0
"""For calls to the fake server that must succeed: its answer (an HTTP round trip to another
thread) may take more than TIMEOUT on a loaded machine."""


@pytest.fixture
async def ollama_pair(
    fake: FakeOllama, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[OllamaEmbedder, GuardedEmbedder]]:
    """An OllamaEmbedder on the fake, bare and behind a guard with the same timeout: TIMEOUT
    for a test of the stall (its ``mode`` parameter), SERVER_TIMEOUT for the others."""
    params = getattr(request.node, "callspec", None)
    stall = params is not None and params.params.get("mode") == "stall"
    timeout = TIMEOUT if stall else SERVER_TIMEOUT
    bare = OllamaEmbedder(
        fake.url,
        "nomic-embed-text:latest",
        document_prefix="search_document: ",
        query_prefix="search_query: ",
        batch_size=32,
        timeout=timeout,
    )
    yield bare, GuardedEmbedder(bare, timeout_seconds=timeout)
    await bare.aclose()


async def test_ollama_vectors_pass_through_the_guard_as_float32(
    fake: FakeOllama, ollama_pair: tuple[OllamaEmbedder, GuardedEmbedder]
) -> None:
    """Through the guard, the Ollama embedder's vectors are the same values, as float32."""
    bare, guard = ollama_pair
    texts = ["editor is neovim", "lives in Berlin"]
    assert await guard.embed_documents(texts) == [
        array("f", v) for v in await bare.embed_documents(texts)
    ]
    assert await guard.embed_query("editor") == array("f", await bare.embed_query("editor"))


@pytest.mark.parametrize("mode", ["fail", "stall", "junk", "wrong_dim"])
@CALLS
async def test_ollama_failures_pass_through_the_guard_unchanged(
    fake: FakeOllama,
    ollama_pair: tuple[OllamaEmbedder, GuardedEmbedder],
    mode: str,
    call: str,
) -> None:
    """A failing, stalling, junk or wrong-width server gives the very message Ollama's client
    gives without the guard: host and model named, the guard adding nothing."""
    bare, guard = ollama_pair
    fake.mode = mode  # type: ignore[assignment]
    fake.stall_seconds = 5
    messages = []
    for embedder in (bare, guard):
        with pytest.raises(EmbeddingError) as caught:
            if call == "documents":
                await embedder.embed_documents(["a", "b"])
            else:
                await embedder.embed_query("a")
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert fake.url in messages[1]
    assert "'nomic-embed-text:latest'" in messages[1]


async def test_a_guarded_ollama_embedder_recovers_when_the_server_does(
    fake: FakeOllama, ollama_pair: tuple[OllamaEmbedder, GuardedEmbedder]
) -> None:
    """After failures of each kind the same guarded embedder works again."""
    bare, guard = ollama_pair
    fake.stall_seconds = 5
    for mode in ("fail", "stall", "junk", "wrong_dim"):
        fake.mode = mode
        # Only the stall is about time: the calls meant to succeed keep SERVER_TIMEOUT.
        bare.timeout = TIMEOUT if mode == "stall" else SERVER_TIMEOUT
        with pytest.raises(EmbeddingError):
            await guard.embed_query("a")
    fake.mode = "ok"
    assert await guard.embed_query("a") == array("f", hashed_embedding("search_query: a"))


@CALLS
async def test_a_models_own_timeout_stays_a_timeout_error(call: str) -> None:
    """A model whose own client timed out (a TimeoutError of its own, before the guard's
    deadline) came out of the guard as a plain EmbeddingError: ``except TimeoutError`` missed
    it. It is an EmbeddingTimeoutError, naming what the model raised; other failures are not."""
    timed_out = GuardedEmbedder(
        CustomEmbedder(raising(TimeoutError("read timed out"))), timeout_seconds=30
    )
    with pytest.raises(EmbeddingTimeoutError, match="failed: TimeoutError: read timed out"):
        await embed(timed_out, call)
    down = CustomEmbedder(raising(ConnectionError("refused")))
    refused = GuardedEmbedder(down, timeout_seconds=30)
    with pytest.raises(EmbeddingError) as caught:
        await embed(refused, call)
    assert not isinstance(caught.value, TimeoutError)
