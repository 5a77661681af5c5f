"""The CLI's log lines on stderr: `--debug` logs everything, and still no password."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest

from navi_memory.cli.output import configure_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restored_logging")
def test_debug_logs_show_no_password_of_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    """With --debug, httpx logs every request's URL as it is: an OLLAMA_HOST of
    https://user:password@host put the password on stderr. Log lines are redacted."""
    configure_logging(True)
    logging.getLogger("httpx").info(
        'HTTP Request: %s %s "%s %d %s"',
        "POST",
        "https://bob:HOST-PASS@ollama.example/api/chat",
        "HTTP/1.1",
        200,
        "OK",
    )
    logging.getLogger("navi_memory.db").debug(
        "connecting to %s", "postgresql://navi:DB-PASS@db/x?sslpassword=KEY-PASS"
    )
    logged = capsys.readouterr().err
    assert "HOST-PASS" not in logged and "DB-PASS" not in logged and "KEY-PASS" not in logged
    assert "https://bob:***@ollama.example/api/chat" in logged
    assert "postgresql://navi:***@db/x" in logged


def test_the_log_handler_writes_to_the_stderr_of_the_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """main() run in a process that swaps stderr (a test capturing it) left a handler bound to
    that stream: closed later, every log line of the process failed ("--- Logging error ---").
    The handler writes to whatever sys.stderr is when a record comes."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging(debug=False)
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("navi_memory.test").warning("after the swap")
    assert second.getvalue() == "navi-memory: WARNING after the swap\n"
