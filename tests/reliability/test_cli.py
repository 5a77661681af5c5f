"""The ``navi-memory`` command under hostile arguments and environment: it answers (exit 0), or
says what is wrong on one stderr line (exit 2, argparse's usage errors included) — never a
traceback — and a failed run changes no row."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navi_memory import Memory
from navi_memory.cli import main
from tests.reliability import strategies as s
from tests.reliability.snapshot import changed_tables, table_contents
from tests.reliability.strategies import HOSTILE_RUN
from tests.reliability.world import World

SETTINGS_ENV: Final = (
    "OLLAMA_HOST",
    "EMBEDDING_OLLAMA_HOST",
    "EMBEDDING_MODEL",
    "EMBEDDING_TIMEOUT_SECONDS",
    "BACKFILL_BATCH_SIZE",
    "BACKFILL_PAUSE_SECONDS",
    "DB_CONNECT_TIMEOUT_SECONDS",
    "MEMORY_SEARCH_ENABLED",
    "HNSW_EF_SEARCH",
)
"""Settings the command reads; DATABASE_URL is drawn separately (never empty: an empty one
means "start the embedded server in the data directory")."""

CONSOLE_SCRIPT: Final = Path(sys.executable).parent / "navi-memory"


def _env_text(value: Any) -> str | None:
    """``value`` as an environment variable can carry it (no NUL, encodable), else None."""
    text = value if isinstance(value, str) else str(value)
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return None
    return None if "\x00" in text else text


def _environments(db_url: str) -> st.SearchStrategy[dict[str, str]]:
    hostile_setting = st.one_of(s.hostile, st.sampled_from(["nan", "inf", "-1", "1e999", "0"]))
    url = st.one_of(
        st.just(db_url),
        st.just(db_url),
        st.sampled_from(
            [
                "postgresql://127.0.0.1:1/nothing_listens_here",
                "mysql://localhost/x",
                "not a url",
                "postgresql+asyncpg://postgres@/no_such_db?host=/nonexistent",
                db_url.replace("postgres@", "nobody@"),
                db_url + "&sslmode=verify-full",
            ]
        ),
        s.hostile,
    )
    return st.fixed_dictionaries(
        {"DATABASE_URL": url},
        optional={name: hostile_setting for name in SETTINGS_ENV},
    ).map(
        lambda env: {
            name: text
            for name, value in env.items()
            if (text := _env_text(value)) is not None and (name != "DATABASE_URL" or text)
        }
    )


def _argvs() -> st.SearchStrategy[list[str]]:
    word = st.one_of(
        st.sampled_from(
            [
                "doctor",
                "backfill",
                "migrate",
                "extract",
                "--user",
                "--json",
                "--to",
                "--sql",
                "--help",
                "-h",
                "--",
                "-",
                "0001",
            ]
        ),
        s.hostile_text,
    )
    return st.one_of(
        st.sampled_from(
            [["doctor"], ["backfill"], ["migrate"], ["migrate", "--sql"], ["extract", "--json"]]
        ),
        st.lists(word.map(str), max_size=3).filter(lambda a: all(_env_text(w) for w in a)),
    )


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in this process: exit code, stdout, stderr. SystemExit (argparse) counts as
    its code; any other exception propagates — that is the finding."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


async def check_cli(
    memory: Memory, argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = await table_contents(memory.engine)
    with monkeypatch.context() as patch:
        for name in (*SETTINGS_ENV, "DATABASE_URL"):
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        code, out, err = await asyncio.to_thread(run_cli, argv)
    where = f"navi-memory {argv} with {env}"
    # 0 done; 1 findings (doctor) or a failed operation (a database or model down); 2 usage or
    # configuration (docs/operations.md). Help for a bare `navi-memory` goes to stdout.
    assert code in (0, 1, 2), f"{where}: exit {code}\n{err}"
    assert "Traceback" not in out + err, f"{where} printed a traceback:\n{err}"
    if code != 0:
        assert (err + out).strip(), f"{where} failed without saying why"
        after = await table_contents(memory.engine)
        assert after == before, f"{where} failed but changed rows: {changed_tables(before, after)}"


@pytest.fixture
def isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No .env file where the command looks, and a data directory that is a scratch one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NAVI_MEMORY_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


@pytest.mark.slow  # ~8 s of generated command lines: make test-slow (CI)
@HOSTILE_RUN
@given(data=st.data())
async def test_the_command_answers_or_says_why_under_hostile_input(
    shared: tuple[Memory, World],
    module_db_url: str,
    isolated_cwd: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
) -> None:
    """Generated argv and settings: exit 0, or exit 2 with a message and nothing changed."""
    memory, _world = shared
    argv = data.draw(_argvs(), label="argv")
    env = data.draw(_environments(module_db_url), label="environment")
    await check_cli(memory, argv, env, monkeypatch)


@pytest.mark.soak
@settings(HOSTILE_RUN, max_examples=300, derandomize=False)
@given(data=st.data())
async def test_soak_the_command(
    shared: tuple[Memory, World],
    module_db_url: str,
    isolated_cwd: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
) -> None:
    """The same contract over many more, freshly random inputs (make soak)."""
    memory, _world = shared
    await check_cli(
        memory,
        data.draw(_argvs(), label="argv"),
        data.draw(_environments(module_db_url), label="environment"),
        monkeypatch,
    )


def _console(env: dict[str, str], *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *argv],
        env={**base, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_console_script_reports_an_unreachable_database_on_one_line(
    isolated_cwd: Path,
) -> None:
    """The installed ``navi-memory`` with a server that is not there: a command that needs it
    fails (exit 1) with one line naming the URL; doctor reports it as a finding (exit 1); no
    traceback either way."""
    env = {"DATABASE_URL": "postgresql://127.0.0.1:1/nothing", "DB_CONNECT_TIMEOUT_SECONDS": "2"}
    listing = _console(env, "facts", "list", "--all-users", cwd=isolated_cwd)
    assert listing.returncode == 1, listing.stderr
    assert len(listing.stderr.strip().splitlines()) == 1
    assert "navi-memory:" in listing.stderr and "127.0.0.1:1" in listing.stderr
    doctor = _console(env, "doctor", cwd=isolated_cwd)
    assert doctor.returncode == 1, doctor.stderr
    assert "127.0.0.1:1" in doctor.stdout
    assert "Traceback" not in listing.stderr + doctor.stderr + doctor.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting", ["BACKFILL_BATCH_SIZE=nan", "EMBEDDING_TIMEOUT_SECONDS=-1", "HNSW_EF_SEARCH=x"]
)
def test_the_console_script_reports_a_malformed_setting_on_one_line(
    isolated_cwd: Path, module_db_url: str, setting: str
) -> None:
    """A malformed setting: exit 2 and a sentence naming it, not a pydantic traceback."""
    name, value = setting.split("=")
    result = _console({"DATABASE_URL": module_db_url, name: value}, "doctor", cwd=isolated_cwd)
    assert result.returncode == 2, result.stderr
    assert name in result.stderr and "Traceback" not in result.stderr
