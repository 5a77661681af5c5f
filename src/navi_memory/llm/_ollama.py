"""What the embedder and the chat model share about reaching Ollama: the client, and its failures.

``ollama`` is imported only when a client is first needed: importing it builds a default client.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.parse
from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import httpx
import pydantic

from navi_memory.errors import ConfigError

if TYPE_CHECKING:
    import ollama

__all__ = [
    "ClientOwner",
    "check_host",
    "describe_failure",
    "failure_types",
    "new_async_client",
    "redact_host",
    "shorten",
    "type_phrase",
]

_MAX_REASON_CHARS: Final = 300
"""Server bodies and validation errors can be long; the first lines say what went wrong."""

_IMPORT_LOCK: Final = threading.Lock()


def _import_ollama() -> None:
    """``import ollama``, whatever the environment's ``OLLAMA_HOST`` holds.

    The import builds the library's default client from ``OLLAMA_HOST``, and a malformed one
    there (``http://h:99999``) failed it, and with it every client of this package, whose host
    always comes from Settings (where keyword arguments win over the environment). Such an
    import is made again with the variable out of the environment: only that default client,
    which nothing here uses, reads it.
    """
    if "ollama" in sys.modules:
        return
    with _IMPORT_LOCK:
        try:
            import ollama
        except ValueError:  # the default client's parse of OLLAMA_HOST
            host = os.environ.pop("OLLAMA_HOST", None)
            if host is None:
                raise
            try:
                import ollama  # noqa: F401
            finally:
                os.environ["OLLAMA_HOST"] = host


class _NoAuthorization(httpx.Auth):
    """Drop an Authorization header the ollama client took from ``OLLAMA_API_KEY`` on its own.

    With no key in Settings nothing is sent: the main key must not reach a separate embedding host.
    """

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.pop("Authorization", None)
        yield request


def new_async_client(host: str, api_key: str, timeout: float) -> ollama.AsyncClient:
    """An ``ollama.AsyncClient`` for ``host`` that authenticates with ``api_key`` and nothing else.

    The host is always explicit (the client would otherwise read ``OLLAMA_HOST`` itself), and the
    key travels as ``Authorization: Bearer <key>``, which is how Ollama Cloud expects it.
    """
    _import_ollama()  # deferred on purpose: see the module docstring
    import ollama

    if api_key:
        return ollama.AsyncClient(
            host=host, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
    return ollama.AsyncClient(host=host, timeout=timeout, auth=_NoAuthorization())


def check_host(host: str, setting: str) -> str:
    """``host`` without a trailing slash; an empty host is a ConfigError naming ``setting``."""
    host = host.strip().rstrip("/")
    if not host:
        raise ConfigError(f"{setting} is empty: set it to the Ollama server's URL")
    return host


def redact_host(host: str) -> str:
    """``host`` fit for an error message: any user:password part of the URL is dropped."""
    parts = urllib.parse.urlsplit(host if "//" in host else f"//{host}")
    if parts.username is None and parts.password is None:
        return host
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)).removeprefix("//")


def failure_types() -> tuple[type[BaseException], ...]:
    """The exceptions a call through the ollama client raises when the server fails us.

    A function, not a constant: ``except failure_types()`` is evaluated once a call has raised,
    and it imports nothing (an import failing there would hide the call's error). Nothing of
    ollama's can have raised before ollama was imported (``new_async_client`` imports it).
    """
    ollama = sys.modules.get("ollama")
    ollama_errors: tuple[type[BaseException], ...] = (
        ()
        if ollama is None
        else (
            ollama.ResponseError,  # the server answered an HTTP error status
            ollama.RequestError,  # the client refused to build the request
        )
    )
    return (
        *ollama_errors,
        httpx.HTTPError,  # transport errors, httpx's own timeouts
        OSError,  # ConnectionError (the client's translation of ConnectError), TimeoutError
        ValueError,  # a 200 whose body is not JSON, or JSON of the wrong shape (pydantic)
        TypeError,  # JSON that is not an object at all: the client does cls(**body)
        RecursionError,  # JSON nested past the decoder's stack ("[" * 100_000)
    )


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a request that ran out of time (ours or httpx's)."""
    return isinstance(exc, TimeoutError | httpx.TimeoutException)


def describe_failure(exc: BaseException, timeout: float) -> str:
    """One clause saying what went wrong, for "<model> at <host> <clause>"."""
    ollama = sys.modules.get("ollama")  # as in failure_types: no import here

    if is_timeout(exc):
        return f"did not answer within {timeout:g} s (timeout)"
    if isinstance(exc, ConnectionError | httpx.ConnectError):
        return "could not be reached (connection failed: is Ollama running there?)"
    if ollama is not None and isinstance(exc, ollama.ResponseError):
        return f"answered HTTP {exc.status_code}: {shorten(str(exc.error))}"
    if isinstance(exc, json.JSONDecodeError):
        return f"answered something that is not JSON ({exc.msg})"
    if isinstance(exc, RecursionError):
        return "answered JSON nested too deeply to read"
    if isinstance(exc, pydantic.ValidationError | TypeError):
        return f"answered JSON of the wrong shape: {reason(exc)}"
    return f"failed: {type(exc).__name__}: {reason(exc)}"


def type_phrase(value: object) -> str:
    """What ``value`` is, for a message: ``None``, ``an int``, ``a str``, ``a ChatReply``."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def reason(exc: BaseException) -> str:
    """What ``exc`` says, shortened (``shorten``); an exception whose ``str()`` itself fails
    (a host's own error class) is named by its type instead of failing the message."""
    try:
        text = str(exc)
    except Exception:
        return f"(a {type(exc).__name__} whose message cannot be read)"
    return shorten(text)


def shorten(text: str) -> str:
    """``text`` on one line, cut to the first ``_MAX_REASON_CHARS`` characters."""
    text = " ".join(text.split())
    if len(text) <= _MAX_REASON_CHARS:
        return text
    return text[: _MAX_REASON_CHARS - 1] + "…"


class ClientOwner:
    """Holds the lazily opened ``ollama.AsyncClient`` of one model client, and closes it."""

    host: str
    timeout: float
    _api_key: str
    _client: ollama.AsyncClient | None = None

    def client(self) -> ollama.AsyncClient:
        """The HTTP client, opened on first use (never at import or construction)."""
        if self._client is None:
            self._client = new_async_client(self.host, self._api_key, self.timeout)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client if one was opened; the next call opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]  # ollama leaves it unannotated

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
