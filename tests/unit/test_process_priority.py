"""process_priority: a server process is reniced only when it is provably a backend of the
server whose data directory is on this machine, never made less nice, and a refusal is logged
once and changes nothing. A real child process stands in for a backend, this test process for
its postmaster."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from navi_memory import process_priority
from navi_memory.process_priority import lower_backend_priority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and nice")


@pytest.fixture
def child() -> Iterator[int]:
    """A process whose parent is this test process, as a backend's is its postmaster."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def data_directory(tmp_path: Path, postmaster: int) -> str:
    """A data directory whose postmaster.pid names ``postmaster``, as PostgreSQL writes it."""
    (tmp_path / "postmaster.pid").write_text(f"{postmaster}\n{tmp_path}\n1733400000\n5432\n")
    return str(tmp_path)


def test_a_backend_of_the_local_server_is_reniced_and_never_made_less_nice(
    child: int, tmp_path: Path
) -> None:
    directory = data_directory(tmp_path, os.getpid())
    assert os.getpriority(os.PRIO_PROCESS, child) == os.getpriority(os.PRIO_PROCESS, 0)
    assert lower_backend_priority(child, directory, 7)
    assert os.getpriority(os.PRIO_PROCESS, child) == 7
    # Already nicer than asked: left as it is.
    assert lower_backend_priority(child, directory, 3)
    assert os.getpriority(os.PRIO_PROCESS, child) == 7


@pytest.mark.parametrize("case", ["other parent", "no such directory", "no directory", "nice 0"])
def test_a_process_not_proven_a_backend_here_is_left_alone(
    child: int, tmp_path: Path, case: str
) -> None:
    before = os.getpriority(os.PRIO_PROCESS, child)
    directory: str | None = data_directory(tmp_path, os.getpid())
    nice = 7
    if case == "other parent":  # another server's postmaster.pid (or another pid namespace)
        directory = data_directory(tmp_path, os.getppid())
    elif case == "no such directory":  # a server on another machine
        directory = str(tmp_path / "elsewhere")
    elif case == "no directory":  # a role that may not read data_directory
        directory = None
    else:
        nice = 0
    assert not lower_backend_priority(child, directory, nice)
    assert os.getpriority(os.PRIO_PROCESS, child) == before


def test_a_refusal_is_logged_once_and_changes_nothing(
    child: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    monkeypatch.setattr(process_priority, "_warned", set())
    directory = data_directory(tmp_path, os.getpid())
    with caplog.at_level(logging.INFO, logger="navi_memory.process_priority"):
        assert not lower_backend_priority(child, directory, 7)
        assert not lower_backend_priority(child, directory, 7)
    refused = [r for r in caplog.records if getattr(r, "event", "") == "db.indexer_nice_refused"]
    assert len(refused) == 1 and "INDEXER_NICE=0" in refused[0].getMessage()
    assert os.getpriority(os.PRIO_PROCESS, child) == os.getpriority(os.PRIO_PROCESS, 0)
