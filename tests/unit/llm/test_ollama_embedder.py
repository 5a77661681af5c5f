"""OllamaEmbedder through the real ollama client against FakeOllama: vectors, prefixes, batches,
keys and hosts from Settings, and every failure turned into an EmbeddingError."""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM
from navi_memory.errors import ConfigError, EmbeddingError, EmbeddingTimeoutError
from navi_memory.llm import Embedder, OllamaEmbedder, embedding_text_for_fact
from navi_memory.testing import FakeOllama, hashed_embedding

EMBED_MODEL = "nomic-embed-text:latest"
DOC_PREFIX = "search_document: "
QUERY_PREFIX = "search_query: "

MakeEmbedder = Callable[..., OllamaEmbedder]


@pytest.fixture
async def make_embedder() -> AsyncIterator[Callable[..., OllamaEmbedder]]:
    made: list[OllamaEmbedder] = []

    def make(host: str, **overrides: Any) -> OllamaEmbedder:
        params: dict[str, Any] = {
            "model": EMBED_MODEL,
            "document_prefix": DOC_PREFIX,
            "query_prefix": QUERY_PREFIX,
            "batch_size": 32,
            "timeout": 5.0,
        } | overrides
        embedder = OllamaEmbedder(host, **params)
        made.append(embedder)
        return embedder

    yield make
    for embedder in made:
        await embedder.aclose()


def embed_inputs(fake: FakeOllama) -> list[list[str]]:
    return [r.json["input"] for r in fake.requests_to("/api/embed")]


# --- what is sent and returned ---------------------------------------------------------------


async def test_embed_documents_returns_one_vector_of_dim_per_text_in_order(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    texts = ["editor is neovim", "lives in Berlin", "allergic to peanuts"]
    vectors = await make_embedder(fake.url).embed_documents(texts)
    assert [len(v) for v in vectors] == [EMBEDDING_DIM] * 3
    assert vectors == [hashed_embedding(DOC_PREFIX + t) for t in texts]


async def test_document_prefix_is_prepended_to_each_text(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    await make_embedder(fake.url).embed_documents(["a", "b"])
    assert embed_inputs(fake) == [["search_document: a", "search_document: b"]]
    assert fake.requests_to("/api/embed")[0].json["model"] == EMBED_MODEL


async def test_query_prefix_is_prepended_to_the_query(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    vector = await make_embedder(fake.url).embed_query("which editor")
    assert embed_inputs(fake) == [[QUERY_PREFIX + "which editor"]]
    assert vector == hashed_embedding("search_query: which editor")


@pytest.mark.parametrize(("count", "batch_size"), [(5, 2), (4, 2), (1, 32), (65, 32), (3, 1)])
async def test_documents_are_sent_in_batches_of_batch_size(
    fake: FakeOllama, make_embedder: MakeEmbedder, count: int, batch_size: int
) -> None:
    texts = [f"text number {i}" for i in range(count)]
    vectors = await make_embedder(fake.url, batch_size=batch_size).embed_documents(texts)
    batches = embed_inputs(fake)
    assert len(batches) == math.ceil(count / batch_size)
    assert all(len(batch) <= batch_size for batch in batches)
    assert [text for batch in batches for text in batch] == [DOC_PREFIX + t for t in texts]
    assert len(vectors) == count


async def test_no_texts_make_no_request(fake: FakeOllama, make_embedder: MakeEmbedder) -> None:
    assert await make_embedder(fake.url).embed_documents([]) == []
    assert fake.requests == []


async def test_an_embedder_can_be_closed_and_used_again(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    embedder = make_embedder(fake.url)
    await embedder.embed_query("one")
    await embedder.aclose()
    await embedder.aclose()  # closing twice is harmless
    assert await embedder.embed_query("two") == hashed_embedding("two")
    assert len(fake.requests_to("/api/embed")) == 2


async def test_ollama_embedder_is_an_embedder(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    embedder = make_embedder(fake.url)
    assert isinstance(embedder, Embedder)
    assert embedder.dim == EMBEDDING_DIM


def test_fact_text_is_category_slash_key_colon_value() -> None:
    assert embedding_text_for_fact("preferences", "editor", "neovim") == (
        "preferences / editor: neovim"
    )


# --- keys and hosts ----------------------------------------------------------------------------


async def test_api_key_is_sent_as_a_bearer_token(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    await make_embedder(fake.url, api_key="sk-test").embed_query("x")
    assert fake.recorded[0].headers["authorization"] == "Bearer sk-test"


async def test_without_a_key_no_authorization_is_sent_even_if_the_environment_has_one(
    fake: FakeOllama, make_embedder: MakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ollama client would read OLLAMA_API_KEY itself; Settings must be the only source
    monkeypatch.setenv("OLLAMA_API_KEY", "main-key-from-env")
    await make_embedder(fake.url).embed_query("x")
    assert "authorization" not in fake.recorded[0].headers


async def test_settings_without_embedding_host_fall_back_to_ollama_host_and_key(
    fake: FakeOllama,
) -> None:
    settings = Settings(
        _env_file=None,
        ollama_host=fake.url,
        ollama_api_key="main-key",
        embedding_ollama_host="",
        embedding_ollama_api_key="unused-because-host-is-empty",
    )
    async with OllamaEmbedder.from_settings(settings) as embedder:
        await embedder.embed_query("x")
    (request,) = fake.recorded
    assert request.headers["authorization"] == "Bearer main-key"


async def test_settings_with_embedding_host_use_it_with_its_own_key(fake: FakeOllama) -> None:
    with FakeOllama() as embedding_server:
        settings = Settings(
            _env_file=None,
            ollama_host=fake.url,
            ollama_api_key="cloud-key",
            embedding_ollama_host=embedding_server.url,
            embedding_ollama_api_key="local-key",
        )
        async with OllamaEmbedder.from_settings(settings) as embedder:
            await embedder.embed_query("x")
        assert [r.headers["authorization"] for r in embedding_server.recorded] == [
            "Bearer local-key"
        ]
    assert fake.recorded == []


async def test_dedicated_embedding_host_without_key_does_not_get_the_main_key(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_API_KEY", "cloud-key")
    settings = Settings(
        _env_file=None,
        ollama_host="https://ollama.example.invalid",
        ollama_api_key="cloud-key",
        embedding_ollama_host=fake.url,
        embedding_ollama_api_key="",
    )
    async with OllamaEmbedder.from_settings(settings) as embedder:
        await embedder.embed_query("x")
    assert "authorization" not in fake.recorded[0].headers


@pytest.mark.slow
async def test_settings_choose_model_prefixes_batch_size_and_timeout(fake: FakeOllama) -> None:
    settings = Settings(
        _env_file=None,
        ollama_host=fake.url,
        embedding_ollama_host="",
        embedding_model="other-embed:latest",
        embedding_document_prefix="doc: ",
        embedding_query_prefix="q: ",
        embedding_batch_size=2,
        # Long enough for each of the three requests' answers on a loaded machine; the stall
        # (10 s) is cut at it, as the message says.
        embedding_timeout_seconds=3.0,
    )
    fake.stall_seconds = 10
    async with OllamaEmbedder.from_settings(settings) as embedder:
        await embedder.embed_documents(["a", "b", "c"])
        await embedder.embed_query("d")
        fake.mode = "stall"
        started = time.monotonic()
        with pytest.raises(EmbeddingError, match=r"did not answer within 3 s \(timeout\)"):
            await embedder.embed_query("e")
        assert time.monotonic() - started < 9
    assert embed_inputs(fake)[:3] == [["doc: a", "doc: b"], ["doc: c"], ["q: d"]]
    assert {r.json["model"] for r in fake.requests_to("/api/embed")} == {"other-embed:latest"}


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("fail", "answered HTTP 500: fake ollama: failing on purpose"),
        ("junk", "not JSON"),
        ("stall", "did not answer within 0.3 s"),
        ("wrong_dim", "returned 384-dimensional embeddings, expected 768"),
    ],
)
@pytest.mark.parametrize("call", ["documents", "query"])
async def test_each_failure_mode_is_an_embedding_error_naming_host_and_model(
    fake: FakeOllama, make_embedder: MakeEmbedder, mode: str, expected: str, call: str
) -> None:
    fake.mode = mode  # type: ignore[assignment]
    fake.stall_seconds = 5
    # Only the stall is about time; a loaded machine must not turn the others into timeouts.
    seconds = 0.3 if mode == "stall" else 10.0
    embedder = make_embedder(fake.url, api_key="secret-key", timeout=seconds)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        if call == "documents":
            await embedder.embed_documents(["a", "b"])
        else:
            await embedder.embed_query("a")
    message = str(caught.value)
    assert expected in message
    assert fake.url in message
    assert repr(EMBED_MODEL) in message
    assert "secret-key" not in message
    assert time.monotonic() - started < 2  # a stall is cut at the timeout, not waited out
    # A stall, and only a stall, is also a TimeoutError: ``except TimeoutError`` catches it.
    assert isinstance(caught.value, TimeoutError) is (mode == "stall")
    assert isinstance(caught.value, EmbeddingTimeoutError) is (mode == "stall")
    if mode != "wrong_dim":
        assert caught.value.__cause__ is not None


async def test_wrong_dimension_says_how_to_fix_it(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    fake.mode = "wrong_dim"
    with pytest.raises(EmbeddingError) as caught:
        await make_embedder(fake.url).embed_query("a")
    assert "use a 768-dimensional model (with Ollama: set EMBEDDING_MODEL" in str(caught.value)
    assert "re-embed" not in str(caught.value)


async def test_server_not_listening_is_an_embedding_error(
    unused_url: str, make_embedder: MakeEmbedder
) -> None:
    with pytest.raises(EmbeddingError, match="could not be reached") as caught:
        await make_embedder(unused_url, timeout=2).embed_documents(["a"])
    assert unused_url in str(caught.value)
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"model": "m", "embeddings": "not a list"}', "wrong shape"),
        (b'{"model": "m"}', "wrong shape"),
        (b"[1, 2, 3]", "wrong shape"),
        (b"null", "wrong shape"),
        (json.dumps({"embeddings": [[float("nan")] * EMBEDDING_DIM]}).encode(), "non-finite"),
        (json.dumps({"embeddings": [[float("inf")] * EMBEDDING_DIM]}).encode(), "non-finite"),
        (json.dumps({"embeddings": [[0.0] * EMBEDDING_DIM]}).encode(), "all-zero"),
        (json.dumps({"embeddings": []}).encode(), "returned 0 embeddings for 1 inputs"),
        (json.dumps({"embeddings": [[0.1] * EMBEDDING_DIM] * 2}).encode(), "2 embeddings for 1"),
        # Past the JSON decoder's stack: a RecursionError, not a JSONDecodeError.
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
    ],
)
async def test_answers_that_are_not_embeddings_are_embedding_errors(
    fake: FakeOllama, make_embedder: MakeEmbedder, body: bytes, expected: str
) -> None:
    fake.mode = "junk"
    fake.junk_body = body
    with pytest.raises(EmbeddingError, match=expected) as caught:
        await make_embedder(fake.url).embed_query("a")
    assert fake.url in str(caught.value)


async def test_an_embedder_recovers_when_the_server_does(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    embedder = make_embedder(fake.url, timeout=10.0)
    fake.stall_seconds = 5
    for mode in ("fail", "stall", "junk"):
        fake.mode = mode
        # Only the stall is about time; a loaded machine must not turn the others (and the
        # last call, that must succeed) into timeouts.
        embedder.timeout = 0.3 if mode == "stall" else 10.0
        with pytest.raises(EmbeddingError):
            await embedder.embed_query("a")
    fake.mode = "ok"
    assert await embedder.embed_query("a") == hashed_embedding("a")


async def test_credentials_in_the_host_url_stay_out_of_messages(
    fake: FakeOllama, make_embedder: MakeEmbedder
) -> None:
    fake.mode = "fail"
    host = fake.url.replace("http://", "http://user:hunter2@")
    embedder = make_embedder(host)
    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed_query("a")
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(embedder)
    assert fake.url in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"batch_size": 0}, "EMBEDDING_BATCH_SIZE"),
        ({"timeout": 0}, "EMBEDDING_TIMEOUT_SECONDS"),
        ({"model": " "}, "EMBEDDING_MODEL"),
        ({"dim": 0}, "dimension"),
    ],
)
def test_bad_configuration_is_a_config_error(overrides: dict[str, object], setting: str) -> None:
    params: dict[str, object] = {
        "model": EMBED_MODEL,
        "document_prefix": DOC_PREFIX,
        "query_prefix": QUERY_PREFIX,
        "batch_size": 2,
        "timeout": 1.0,
    } | overrides
    with pytest.raises(ConfigError, match=setting):
        OllamaEmbedder("http://127.0.0.1:11434", **params)  # type: ignore[arg-type]


def test_an_empty_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OLLAMA_HOST"):
        OllamaEmbedder(
            "  ", EMBED_MODEL, document_prefix="", query_prefix="", batch_size=1, timeout=1.0
        )
