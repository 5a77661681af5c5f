"""The console script when its stdout fails: what it says and how the process ends, interpreter
exit included (Python flushes stdout once more as it exits, which in-process tests cannot see).
`--version` needs no database."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import CLI


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_on_stdout_is_one_line_and_exit_1() -> None:
    """`navi-memory … > /dev/full`: one line on stderr and exit 1, no "unexpected OSError",
    and no "Exception ignored" when Python flushes stdout on its way out."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [str(CLI), "--version"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert done.returncode == 1
    assert done.stderr == "navi-memory: cannot write the output: No space left on device\n"


def test_a_closed_pipe_ends_quietly_with_141() -> None:
    """Output into a pipe its reader has closed (`| head -1`): exit 141, nothing on stderr —
    no traceback, and no "Exception ignored … BrokenPipeError" as Python flushes on exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: EPIPE, every time
    try:
        done = subprocess.run(
            [str(CLI), "--version"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
