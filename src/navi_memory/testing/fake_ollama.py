"""A fake Ollama server on 127.0.0.1 speaking the real JSON of ``/api/embed`` and ``/api/chat``.

Production code reaches it through the real ``ollama`` client; switches make it fail, stall or
answer junk, and every request is recorded so tests can check what the client sent.
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeAlias, get_args

from navi_memory.constants import EMBEDDING_DIM
from navi_memory.testing.hashing import hashed_embedding

__all__ = ["FakeChatReply", "FakeOllama", "FakeOllamaMode", "RecordedRequest"]

FakeOllamaMode = Literal["ok", "fail", "stall", "junk", "wrong_dim"]
"""How ``POST /api/embed`` and ``POST /api/chat`` answer (the GET health endpoints always work).

- ``ok``: proper answers.
- ``fail``: HTTP 500 with ``{"error": "..."}``, as Ollama reports a failed model.
- ``stall``: wait ``stall_seconds`` (longer than the client's timeout) before answering properly.
- ``junk``: HTTP 200 whose body is ``junk_body`` (by default not JSON at all).
- ``wrong_dim``: embeddings of ``wrong_dim`` floats instead of ``dim``; chat answers properly.
"""

FakeChatReply: TypeAlias = str | dict[str, Any]
"""A scripted chat answer: the reply's text, or the assistant message as Ollama sends it
(``{"content": ..., "tool_calls": [{"function": {"name": ..., "arguments": {...}}}]}``)."""

_MODES: Final = frozenset(get_args(FakeOllamaMode))
VERSION: Final = "0.0.0-navi-memory-fake"
DEFAULT_JUNK_BODY: Final = b"<html><body>502 Bad Gateway</body></html>"
_POLL_SECONDS: Final = 0.05
"""How often the serving loop checks for ``stop()``; short, so stopping is quick."""
_IDLE_CONNECTION_SECONDS: Final = 30.0
"""A kept-alive connection with no next request is closed after this long."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received, as sent."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased, e.g. ``headers.get("authorization")``."""
    json: Any
    """The parsed JSON body; ``None`` for a GET or a body that is not JSON."""


class FakeOllama:
    """A real HTTP server on a free port of 127.0.0.1, answering like Ollama.

    Use it as a context manager (``with FakeOllama() as fake: ... fake.url``) or with
    ``start()`` / ``stop()``. It serves from threads, so sync and async tests alike can use it.
    All switches may be changed at any time from any thread.

    Embeddings are ``hashed_embedding(text, dim)`` of each input: deterministic, and close for
    texts sharing words. Chat replies come from ``chat_replies`` (consumed in order; text, or a
    whole assistant message such as ``script_chat`` queues with tool calls), then from
    ``chat_handler(request_json)``, then ``default_chat_reply``. That default is ``""``, which
    ``OllamaChatModel`` reports as a ``ChatModelError``: a test that forgot to script a reply
    fails loudly instead of passing on an invented answer. ``chat_requests`` holds what the
    client sent to ``/api/chat`` (messages, tools, format).
    """

    def __init__(
        self,
        *,
        dim: int = EMBEDDING_DIM,
        mode: FakeOllamaMode = "ok",
        stall_seconds: float = 10.0,
        wrong_dim: int | None = None,
        junk_body: bytes = DEFAULT_JUNK_BODY,
        default_chat_reply: str = "",
        chat_handler: Callable[[dict[str, Any]], FakeChatReply] | None = None,
    ) -> None:
        if wrong_dim is None:
            wrong_dim = dim // 2 if dim > 1 else 2
        self._defaults = (
            mode,
            stall_seconds,
            wrong_dim,
            junk_body,
            default_chat_reply,
            chat_handler,
        )
        self.dim = dim
        self.wrong_dim = wrong_dim
        self.junk_body = junk_body
        self.default_chat_reply = default_chat_reply
        self.chat_handler = chat_handler
        self.chat_replies: collections.deque[FakeChatReply] = collections.deque()
        """Scripted chat replies, consumed in order (a deque: append from any thread)."""
        self._lock = threading.Lock()
        self._mode: FakeOllamaMode = "ok"
        self._stall_seconds = 0.0
        self.mode = mode
        self.stall_seconds = stall_seconds
        self._recorded: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- switches -------------------------------------------------------------------------

    @property
    def mode(self) -> FakeOllamaMode:
        with self._lock:
            return self._mode

    @mode.setter
    def mode(self, mode: FakeOllamaMode) -> None:
        if mode not in _MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(sorted(_MODES))}")
        with self._lock:
            self._mode = mode

    @property
    def stall_seconds(self) -> float:
        with self._lock:
            return self._stall_seconds

    @stall_seconds.setter
    def stall_seconds(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"stall_seconds must not be negative, got {seconds}")
        with self._lock:
            self._stall_seconds = seconds

    def script_chat(
        self, content: str = "", *, tool_calls: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        """Queue a chat reply of ``content`` and ``tool_calls``, as Ollama sends a tool call.

        Each tool call is ``{"name": ..., "arguments": {...}}``, sent as
        ``{"function": {"name": ..., "arguments": {...}}}``; one that already has a
        ``"function"`` key is sent exactly as given, so a test can script a malformed one.
        """
        message: dict[str, Any] = {"role": "assistant", "content": content}
        calls = [dict(c) if "function" in c else {"function": dict(c)} for c in tool_calls]
        if calls:
            message["tool_calls"] = calls
        self.chat_replies.append(message)

    # --- what was asked -------------------------------------------------------------------

    @property
    def requests(self) -> list[tuple[str, Any]]:
        """``(path, json)`` of every request so far, oldest first."""
        return [(r.path, r.json) for r in self.recorded]

    @property
    def recorded(self) -> list[RecordedRequest]:
        """Every request so far with its headers, oldest first (a copy)."""
        with self._lock:
            return list(self._recorded)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The recorded requests for ``path`` (such as ``"/api/embed"``), oldest first."""
        return [r for r in self.recorded if r.path == path]

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies sent to ``/api/chat`` (``messages``, ``tools``, ...), oldest first."""
        return [r.json for r in self.requests_to("/api/chat") if isinstance(r.json, dict)]

    def clear(self) -> None:
        """Forget the recorded requests and any scripted chat replies left."""
        with self._lock:
            self._recorded.clear()
        self.chat_replies.clear()

    def reset(self) -> None:
        """Back to the constructor's switches, with nothing recorded or scripted.

        For a server shared between tests: one test's ``mode = "stall"`` or ``junk_body`` must
        not leak into the next.
        """
        mode, stall_seconds, wrong_dim, junk_body, default_chat_reply, chat_handler = self._defaults
        self.mode = mode
        self.stall_seconds = stall_seconds
        self.wrong_dim = wrong_dim
        self.junk_body = junk_body
        self.default_chat_reply = default_chat_reply
        self.chat_handler = chat_handler
        self.clear()

    # --- life cycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the value for OLLAMA_HOST; only while started."""
        if self._server is None:
            raise RuntimeError("FakeOllama is not started: use start() or a with block")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Listen on a free port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("FakeOllama is already started")
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_SECONDS},
            name=f"fake-ollama-{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections; a stalled answer is abandoned at once."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- answering (called from the server's threads) -------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._recorded.append(request)

    def _stall(self) -> None:
        self._stopping.wait(self.stall_seconds)

    def _next_chat_reply(self, body: dict[str, Any]) -> FakeChatReply:
        try:
            return self.chat_replies.popleft()
        except IndexError:
            pass
        handler = self.chat_handler
        if handler is not None:
            return handler(body)
        return self.default_chat_reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a stalled answer
    # socketserver's default backlog is 5: twenty searches opening connections at once on a
    # loaded machine overflowed it and a request failed (ReadError); Ollama's Go server listens
    # with the system's (4096 on current Linux).
    request_queue_size = 128
    fake: FakeOllama

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        """Cut kept-alive connections, so a stopped fake really is unreachable."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is the point of "stall"; anything else is a bug.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Ollama does; every answer has a length
    server_version = "fake-ollama"
    timeout = _IDLE_CONNECTION_SECONDS
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        self.server.untrack(self.connection)
        with contextlib.suppress(OSError):  # the client is gone; nothing is left to flush
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read the recorded requests instead

    @property
    def fake(self) -> FakeOllama:
        return self.server.fake

    # --- GET ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self.fake._record(RecordedRequest("GET", self.path, self._headers(), None))
        if self.path == "/":
            self._send(HTTPStatus.OK, b"Ollama is running", "text/plain; charset=utf-8")
        elif self.path == "/api/version":
            self._send_json(HTTPStatus.OK, {"version": VERSION})
        else:
            self._send(HTTPStatus.NOT_FOUND, b"404 page not found", "text/plain")

    def do_HEAD(self) -> None:
        self.send_response(HTTPStatus.OK if self.path == "/" else HTTPStatus.NOT_FOUND)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # --- POST -----------------------------------------------------------------------------

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
            valid = False
        else:
            valid = isinstance(body, dict)
        self.fake._record(RecordedRequest("POST", self.path, self._headers(), body))

        if self.path not in ("/api/embed", "/api/chat"):
            self._send(HTTPStatus.NOT_FOUND, b"404 page not found", "text/plain")
            return
        if not valid:
            self._send_error(HTTPStatus.BAD_REQUEST, "invalid JSON body: expected an object")
            return

        mode = self.fake.mode
        if mode == "fail":
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "fake ollama: failing on purpose")
            return
        if mode == "junk":
            self._send(HTTPStatus.OK, self.fake.junk_body, "application/json; charset=utf-8")
            return
        if mode == "stall":
            self.fake._stall()
            if self.fake._stopping.is_set():
                return
        if self.path == "/api/embed":
            self._embed(body, self.fake.wrong_dim if mode == "wrong_dim" else self.fake.dim)
        else:
            self._chat(body)

    def _embed(self, body: dict[str, Any], dim: int) -> None:
        started = time.perf_counter_ns()
        model = body.get("model")
        if not isinstance(model, str) or not model:
            self._send_error(HTTPStatus.BAD_REQUEST, "model is required")
            return
        texts = body.get("input", [])
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            self._send_error(HTTPStatus.BAD_REQUEST, "invalid input type")
            return
        embeddings = [hashed_embedding(text, dim) for text in texts]
        self._send_json(
            HTTPStatus.OK,
            {
                "model": model,
                "embeddings": embeddings,
                "total_duration": time.perf_counter_ns() - started,
                "load_duration": 0,
                "prompt_eval_count": sum(len(text.split()) for text in texts),
            },
        )

    def _chat(self, body: dict[str, Any]) -> None:
        started = time.perf_counter_ns()
        model = body.get("model")
        if not isinstance(model, str) or not model:
            self._send_error(HTTPStatus.BAD_REQUEST, "model is required")
            return
        messages = body.get("messages")
        if not isinstance(messages, list):
            self._send_error(HTTPStatus.BAD_REQUEST, "messages must be a list")
            return
        try:
            reply = self.fake._next_chat_reply(body)
        except Exception as exc:  # a test's chat_handler broke: say so instead of hanging
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, f"chat_handler raised {exc!r}")
            return
        if isinstance(reply, str):
            message: dict[str, Any] = {"role": "assistant", "content": reply}
        elif isinstance(reply, dict):
            message = {"role": "assistant", "content": ""} | reply
        else:
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, f"chat reply {reply!r} is no reply")
            return
        text = message["content"] if isinstance(message["content"], str) else ""
        created_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        final = {
            "model": model,
            "created_at": created_at,
            "message": message,
            "done": True,
            "done_reason": "stop",
            "total_duration": time.perf_counter_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": sum(len(str(m).split()) for m in messages),
            "prompt_eval_duration": 0,
            "eval_count": len(text.split()),
            "eval_duration": 0,
        }
        if body.get("stream", True):  # Ollama streams unless told not to
            first = {"model": model, "created_at": created_at, "message": message, "done": False}
            final["message"] = {"role": "assistant", "content": ""}
            lines = b"".join(json.dumps(part).encode() + b"\n" for part in (first, final))
            self._send(HTTPStatus.OK, lines, "application/x-ndjson")
        else:
            self._send_json(HTTPStatus.OK, final)

    # --- writing --------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _send_error(self, status: HTTPStatus, message: str) -> None:
        self._send_json(status, {"error": message})

    def _send_json(self, status: HTTPStatus, payload: object) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json; charset=utf-8")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True  # the client hung up (after a stall, typically)
