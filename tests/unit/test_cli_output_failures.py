"""The CLI's answers to input it cannot read and output it cannot write: one line and an exit
code, never "unexpected … a bug in navi-memory". No database needed: each fails before one is
opened, or writes nothing that needs one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from navi_memory.cli import main
from navi_memory.cli.output import EXIT_PIPE_CLOSED
from tests.streams import ClosedPipe, FullDisk


@pytest.fixture(autouse=True)
def no_database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings that name no real server (nothing here may reach one), no .env read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/nothing_listens_here")
    monkeypatch.setenv("EMBEDDING_MODEL", "none")


def test_an_import_line_with_an_integer_too_long_to_convert_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """json.loads raises a plain ValueError (not JSONDecodeError) for an integer of more than
    4,300 digits: `import` reported it as an unexpected ValueError, a bug, with exit 1. It is
    a corrupt file: exit 2, "line 1 is not JSON"."""
    export = tmp_path / "u.jsonl"
    export.write_text('{"type": "header", "n": ' + "9" * 5000 + "}\n", encoding="utf-8")
    assert main(["import", str(export)]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"navi-memory: {export}: line 1 is not JSON: ")
    assert "bug" not in said and said.count("\n") == 1


def test_a_full_disk_on_stdout_is_one_line_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OSError writing stdout was reported as "unexpected OSError … a bug in navi-memory".
    It is the operation's failure: one line saying why, exit 1."""
    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main(["--version"]) == 1
    said = capsys.readouterr().err
    assert said == "navi-memory: cannot write the output: No space left on device\n"


def test_a_closed_pipe_on_stdout_ends_quietly_with_141(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Click caught EPIPE itself and called sys.exit(1), so main() raised SystemExit instead
    of returning a code. A closed pipe is the reader's choice: main() returns 141 (128 +
    SIGPIPE, as a shell reports for other tools) and says nothing."""
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["--version"]) == EXIT_PIPE_CLOSED == 141
    assert capsys.readouterr().err == ""


def test_output_a_failed_write_left_is_not_printed_by_the_next_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rich kept what it failed to write, and printed it before the next output of the
    process: main() run again (a test, an application) began with the failed command's
    "navi-memory 0.1.0"."""
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", FullDisk())
        assert main(["--version"]) == 1
    capsys.readouterr()
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.count("navi-memory ") == 1
