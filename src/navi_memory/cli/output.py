"""What every command shares: the consoles, JSON output, exit codes, progress bars, and the
admin context the commands act in.

Exit codes (docs/operations.md): 0 done; 1 findings (``doctor``) or a failed operation;
2 a usage or configuration error, reported as one line on stderr; 130 interrupted; 141 the
reader closed stdout (``| head``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, Final, TextIO, TypeVar, cast

from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from navi_memory.config import Settings
from navi_memory.constants import PERMISSION_READ_ALL
from navi_memory.db import redact_text
from navi_memory.errors import (
    ConfigError,
    InvalidInputError,
    NaviMemoryError,
    PermissionDeniedError,
    SchemaError,
)
from navi_memory.jobs.backfill import BackfillProgress
from navi_memory.memory import Memory, open_memory
from navi_memory.request_context import request_context

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_USAGE",
    "OutputError",
    "TableProgress",
    "admin_memory",
    "discard_stdout",
    "err",
    "error_line",
    "exit_code_for",
    "guarded_stdout",
    "out",
    "print_json",
    "printable",
    "printable_lines",
    "run",
    "when",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
"""doctor found something to fix, or the operation failed (database down, model down, ...)."""
EXIT_USAGE: Final = 2
"""Bad arguments or a bad setting: nothing was attempted; the one-line message says what."""
EXIT_INTERRUPTED: Final = 130
EXIT_PIPE_CLOSED: Final = 141
"""The reader of stdout closed it (`navi-memory export … | head -1`): the reader's choice, so
no message. 141 (128 + SIGPIPE) is what a shell reports for any Unix tool the closed pipe
stopped, and not 0 on purpose: the output was cut short, and `export | gzip > backup` whose
gzip died must not look like a whole backup (`set -o pipefail` catches it, as for other tools)."""

PIPE_WIDTH: Final = 1000
"""Columns a table may take when stdout is not a terminal: a row stays one line in a pipe or a
file (Rich would otherwise assume 80 and wrap every cell)."""

# soft_wrap: a message is one line however narrow the terminal; tables fit themselves to the
# width. No highlighting: numbers in a value are data, not syntax.
out = Console(soft_wrap=True, highlight=False)
if not out.is_terminal:
    out = Console(soft_wrap=True, highlight=False, width=PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True, highlight=False)

T = TypeVar("T")


def exit_code_for(exc: NaviMemoryError) -> int:
    """2 when the operator has to change a setting, an argument or the server's set-up before
    trying again; 1 when the operation itself failed."""
    usage = (ConfigError, InvalidInputError, SchemaError, PermissionDeniedError)
    return EXIT_USAGE if isinstance(exc, usage) else EXIT_FAILURE


def error_line(message: str) -> None:
    """``navi-memory: <message>`` on stderr, as exactly one line (never wrapped by Rich)."""
    print(f"navi-memory: {' '.join(message.split())}", file=sys.stderr, flush=True)


class OutputError(Exception):
    """Writing the command's output on stdout failed; ``reason`` is the OSError (a full disk,
    a closed pipe). Not an OSError itself, on purpose: Click takes any OSError raised in a
    command for its own and turns a closed pipe into a silent ``sys.exit(1)`` out of main()."""

    def __init__(self, reason: OSError) -> None:
        super().__init__(reason.strerror or str(reason))
        self.reason = reason


class _GuardedStdout:
    """sys.stdout while a command runs: every write that fails is an OutputError, so main()
    can tell "the output could not be written" from a bug (every other attribute is the
    stream's own: Rich and Click read its encoding, isatty(), fileno())."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _output_errors():
            return self._stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        with _output_errors():
            self._stream.writelines(lines)

    def flush(self) -> None:
        with _output_errors():
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def _output_errors() -> Iterator[None]:
    """An OSError of the stream as an OutputError."""
    try:
        yield
    except OSError as exc:
        raise OutputError(exc) from exc


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """Run a command with its stdout writes guarded (``_GuardedStdout``), and flush what it
    left buffered before the guard goes: a failure then is the command's, reported by main(),
    not one Python prints as "Exception ignored" while it exits."""
    stream = sys.stdout
    if stream is None:  # pragma: no cover - pythonw, or a host that closed stdout
        yield
        return
    sys.stdout = cast(TextIO, _GuardedStdout(stream))
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null once writing stdout has failed: what is still
    buffered then goes nowhere when Python flushes it on exit, instead of failing again as
    "Exception ignored ... BrokenPipeError" (Python's own advice, the signal module's docs).
    Nothing to do for a stdout with no descriptor (a test's capture).

    Rich's console keeps what it failed to write in its buffer, and wrote it before the next
    output of the process: main() run again in one process (a test, an application) printed
    the failed command's lines first. The buffer is emptied (Rich has no public call for it)."""
    del out._buffer[:]
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def jsonable(value: Any) -> Any:
    """A value JSON can hold: models dumped in JSON mode, everything else left to json."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def printable(text: str) -> str:
    """``text`` with its control characters (ESC, CSI, BEL, line breaks...) shown as escapes:
    a fact's text and a user's name are the host application's (or a model's) text and must
    not drive the operator's terminal (Rich passes ESC sequences through) nor forge lines of
    the output."""
    if text.isprintable():
        return text
    return "".join(
        ch if unicodedata.category(ch) != "Cc" else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def printable_lines(text: str) -> str:
    """``printable`` for a text whose line breaks are its own (a summary's paragraphs): each
    line made printable, the ``\\n`` between them kept, so it reads as it was written."""
    return "\n".join(printable(line) for line in text.split("\n"))


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout, written as it is (no Rich wrapping or colour)."""
    sys.stdout.write(json.dumps(jsonable(value), ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def when(value: datetime | None) -> str:
    """A timestamp for a table: minutes are enough to tell rows apart for a person."""
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M")


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run one command's async work on a fresh event loop."""

    async def main() -> T:
        return await work()

    return asyncio.run(main())


@asynccontextmanager
async def admin_memory(settings: Settings) -> AsyncIterator[Memory]:
    """open_memory() for an operator: no current user, and ``navi.memory.read_all``, so the
    commands may read every user's rows and name any user explicitly (DESIGN: tenancy)."""
    async with open_memory(settings) as memory:
        with request_context(permissions=[PERMISSION_READ_ALL]):
            yield memory


class _RedactingFormatter(logging.Formatter):
    """Every line with its URLs' passwords masked: other libraries log URLs as they are (httpx,
    at --debug, each request's, with an OLLAMA_HOST's user:password@ in it)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not the stream it was
    when the handler was made: main() run in a process that swaps stderr (a test capturing it,
    an application calling main()) left a handler writing to a closed stream, and every later
    log line of the process failed ("--- Logging error ---")."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass  # StreamHandler.__init__ and setStream assign it: always sys.stderr


def configure_logging(debug: bool) -> None:
    """The library's log events on stderr: warnings by default, everything with --debug; no
    password of a URL in either."""
    handler = _StderrHandler()
    handler.setFormatter(_RedactingFormatter("navi-memory: %(levelname)s %(message)s"))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, handlers=[handler], force=True
    )


class TableProgress:
    """One Rich progress bar per table a batch job reports on (``BackfillProgress``).

    On a terminal the bars redraw in place; anywhere else (a pipe, a file, a log) Rich draws
    nothing until the end and then writes each bar once, as plain lines: no carriage returns.
    """

    def __init__(self, console: Console = out) -> None:
        self._progress = Progress(
            TextColumn("{task.description:<14}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, TaskID] = {}
        self._shown = False

    def __call__(self, progress: BackfillProgress) -> None:
        task = self._tasks.get(progress.table)
        if task is None:
            if self._shown and not self._tasks:
                self._progress.start()  # at the first bar: a refusal before it draws nothing
            task = self._progress.add_task(progress.table, total=progress.total)
            self._tasks[progress.table] = task
        self._progress.update(task, completed=progress.done, total=progress.total)

    @contextmanager
    def shown(self) -> Iterator[TableProgress]:
        """The bars drawn from the first report on, and left drawn at the end. A job refused
        before its first report writes nothing to stdout (Rich wrote an empty line)."""
        self._shown = True
        try:
            yield self
        finally:
            self._shown = False
            if self._tasks:
                self._progress.stop()
