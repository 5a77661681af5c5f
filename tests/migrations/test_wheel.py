"""The built wheel, installed into a fresh virtualenv outside the checkout, migrates a database
and serves a library script and the CLI (marker `wheel`: `make test-wheel`, run by .ci/run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from navi_memory.db import SCHEMA_HEAD
from navi_memory.testing import FakeOllama
from tests import dbtools

pytestmark = pytest.mark.wheel

SCRIPT = textwrap.dedent(
    """
    import asyncio, uuid
    from navi_memory import Settings, open_memory, request_context
    from navi_memory.testing import FakeOllama

    async def main() -> None:
        with FakeOllama() as fake:
            settings = Settings(ollama_host=fake.url)
            async with open_memory(settings) as memory:
                uid = uuid.uuid4()
                await memory.users.ensure(uid, "Sam")
                with request_context(user_id=uid):
                    await memory.store.upsert_fact("preferences", "editor", "neovim")
                    hits = await memory.store.search_facts("which editor")
                    print("found", hits[0].key, hits[0].value, hits[0].via)
                # A short script's exit can come before the background indexer's first batch
                # (it gathers writes for 50 ms): doctor below would then report the queued
                # vector (docs/operations.md). Wait for it, as a script should.
                await memory.store.wait_fact_indexing()

    asyncio.run(main())
    """
)


def _run(args: list[str], *, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_migrates_itself_and_runs_outside_the_checkout(
    tmp_path: Path, pg_server: dbtools.EmbeddedServer, scratch_db: str, fake_ollama: FakeOllama
) -> None:
    """pip wheel → fresh venv → `navi-memory migrate` → a library script → CLI commands."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(dbtools.ROOT),
        ],
        env=env,
        cwd=work,
    )
    wheel = next((tmp_path / "dist").glob("navi_memory-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=env, cwd=work)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", str(wheel)], env=env, cwd=work)

    env["DATABASE_URL"] = pg_server.url(scratch_db)
    cli = str(venv / "bin" / "navi-memory")
    assert "head" in _run([cli, "migrate"], env=env, cwd=work)
    with pg_server.admin(scratch_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (SCHEMA_HEAD,)

    out = _run([python, "-c", SCRIPT], env=env, cwd=work)
    assert "found editor neovim" in out
    listed = json.loads(_run([cli, "facts", "list", "--all-users", "--json"], env=env, cwd=work))
    assert [(f["key"], f["value"]) for f in listed] == [("editor", "neovim")]
    fake_ollama.default_chat_reply = "OK"
    env["OLLAMA_HOST"] = fake_ollama.url
    doctor = _run([cli, "doctor"], env=env, cwd=work)
    assert f"{SCHEMA_HEAD} (head)" in doctor and "768 dimensions" in doctor
    assert "CREATE TABLE" in _run([cli, "migrate", "--sql"], env=env, cwd=work)
    # Nothing came from the checkout: the package imported is the installed one.
    where = _run(
        [python, "-c", "import navi_memory; print(navi_memory.__file__)"], env=env, cwd=work
    )
    assert str(venv) in where
