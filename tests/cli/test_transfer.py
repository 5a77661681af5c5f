"""export → import → export through the console script, across two databases; stats,
purge-expired and text-only mode as an operator sees them."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import uuid
from pathlib import Path

from navi_memory import Memory, request_context
from navi_memory.constants import EXPORT_FORMAT, EXPORT_FORMAT_VERSION, INJECTED_LEDGER_KEY
from navi_memory.testing import FakeOllama
from tests.cli.conftest import CLI, Navi
from tests.integration.factories import execute, new_user
from tests.seed import seed_user


async def test_export_import_export_across_two_databases(
    navi: Navi, memory: Memory, trgm_db_url: str, fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    """The second export is byte for byte the first; a second import is refused (exit 2, one
    line) until --replace; an export without --with-vectors carries no vectors."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-cli")
    source = {"DATABASE_URL": memory.settings.database_url or ""}
    target = {"DATABASE_URL": trgm_db_url}

    first = navi("export", "--user", str(uid), "--with-vectors", env=source)
    assert first.returncode == 0, first.stderr
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["user_id"] == str(uid)
    assert {line["type"] for line in lines} == {
        "header", "fact", "summary", "chunk", "session", "message", "extraction", "kv"
    }  # fmt: skip
    assert any(line.get("merged_into") == "f2" for line in lines)
    dump = tmp_path / "u.jsonl"
    dump.write_text(first.stdout, encoding="utf-8")

    imported = navi("import", str(dump), "--json", env=target)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["rows"]["fact"] == 3
    again = navi("export", "--user", str(uid), "--with-vectors", env=target)
    assert again.stdout == first.stdout

    refused = navi("import", str(dump), env=target)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "--replace" in refused.stderr
    replaced = navi("import", "-", "--replace", env=target, stdin=first.stdout)
    assert replaced.returncode == 0 and "replaced" in replaced.stdout

    plain = navi("export", "--user", str(uid), "--output", str(tmp_path / "p.jsonl"), env=target)
    assert plain.returncode == 0, plain.stderr
    assert all(
        "embedding" not in json.loads(line)
        for line in (tmp_path / "p.jsonl").read_text().splitlines()
    )

    stats = json.loads(navi("stats", "--json", env=target).stdout)
    (mine,) = [u for u in stats["per_user"] if u["user_id"] == str(uid)]
    assert (mine["facts"], mine["hidden_facts"], mine["sessions"]) == (2, 1, 1)
    purged = navi("purge-expired", "--dry-run", env=target)
    assert purged.returncode == 0 and "would purge 0 expired" in purged.stdout


def test_an_import_with_a_record_the_api_refuses_is_one_clean_line(
    navi: Navi, db_url: str, tmp_path: Path
) -> None:
    """A recall ledger holding an object used to end in "unexpected TypeError … a bug"; now it
    is refused (exit 2) with one line naming the record, and nothing is written."""
    now = "2024-01-01T00:00:00+00:00"
    uid = str(uuid.uuid4())
    records = [
        {"type": "header", "format": EXPORT_FORMAT, "version": EXPORT_FORMAT_VERSION,
         "user_id": uid, "created_at": now},
        {"type": "session", "id": "s-bad", "last_active": now, "created_at": now,
         "updated_at": now, "session_metadata": {INJECTED_LEDGER_KEY: [{"a": 1}]}},
    ]  # fmt: skip
    dump = tmp_path / "bad.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    refused = navi("import", str(dump), env={"DATABASE_URL": db_url})
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "record 2 (session s-bad)" in refused.stderr and "unexpected" not in refused.stderr
    stats = json.loads(navi("stats", "--json", env={"DATABASE_URL": db_url}).stdout)
    assert all(u["user_id"] != uid for u in stats["per_user"])


def test_file_mistakes_of_export_and_import_are_one_line_exit_2(navi: Navi, tmp_path: Path) -> None:
    """An --output into a missing folder or onto a folder is refused before any work (the
    database here cannot be reached, and is not what is reported); a file that is not UTF-8
    is refused by name. None of them is reported as a bug."""
    unreachable = {"DATABASE_URL": f"postgresql://u@/db?host={tmp_path}/no-server"}
    user = str(uuid.uuid4())
    # A symlink is written through: one into a missing folder is refused up front too (it
    # was refused only once the export was built, exit 1).
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone" / "u.jsonl")
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")  # was "unexpected RuntimeError"
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "out.sock"))  # was accepted, then failed once built (exit 1)
    for output, reason in (
        (tmp_path / "missing" / "u.jsonl", "no folder"),
        (tmp_path, "folder"),
        (dangling, "no folder"),
        (tmp_path / "loop-a", "loop"),
        (tmp_path / "out.sock", "socket"),
        (Path("/dev/fd/57"), "no descriptor 57"),
    ):
        done = navi("export", "--user", user, "--output", str(output), env=unreachable)
        assert done.returncode == 2, done.stdout + done.stderr
        line = done.stderr.strip()
        assert len(line.splitlines()) == 1 and reason in line and str(output) in line
        assert "unexpected" not in line and "PostgreSQL" not in line
    listening.close()
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x00\xff\xfe{}\n")
    done = navi("import", str(binary), env=unreachable)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "not UTF-8" in line and "unexpected" not in line
    # JSON nested deeper than the decoder goes (it ended in "unexpected RecursionError").
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"type": "header", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    done = navi("import", str(deep), env=unreachable)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "line 1" in line and "nested too deeply" in line
    # A path that cannot be opened for reading (a socket: ENXIO; an unreadable file alike)
    # was "unexpected PermissionError ... a bug", exit 1.
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "sock"))
        done = navi("import", str(tmp_path / "sock"), env=unreachable)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "cannot read the export" in line
    assert "unexpected" not in line


async def test_export_and_import_through_pipes(
    navi: Navi, memory: Memory, fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    """--output /dev/stdout with stdout a pipe (as here), and an import from a pipe
    (`<(...)`, a named pipe): /dev/stdout resolved to /proc/<pid>/fd/pipe:[N], which does not
    exist, and the export failed; a pipe to import from was "no export file"."""
    uid = uuid.uuid4()
    await seed_user(memory, fake_ollama, uid, "s-pipe")
    env = {"DATABASE_URL": memory.settings.database_url or ""}
    streamed = navi("export", "--user", str(uid), "--output", "/dev/stdout", env=env)
    assert streamed.returncode == 0, streamed.stderr
    whole = navi("export", "--user", str(uid), env=env)
    assert streamed.stdout == whole.stdout and whole.stdout.count("\n") > 3
    assert "record(s) of user" in streamed.stderr  # not in the stream it would corrupt
    # /dev/stdout redirected to a file by the shell: written where stdout stands. Reopened by
    # name it was truncated (what came before it lost) or, replaced by rename, an appending
    # `>>` lost the file's earlier lines and the summary went to the unlinked file.
    kept = tmp_path / "kept.jsonl"
    kept.write_text("OLD\n")
    script = (
        f"{{ echo HEADER; {CLI} export --user {uid} --output /dev/stdout; echo TRAILER; }}"
        f" >> {kept}"
    )
    shell = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", script],
        env={**os.environ, **env},
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert shell.returncode == 0, shell.stderr
    assert kept.read_text() == "OLD\nHEADER\n" + whole.stdout + "TRAILER\n"
    assert "record(s) of user" in shell.stderr
    fifo = tmp_path / "u.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("w", encoding="utf-8") as pipe:
            pipe.write(whole.stdout)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        imported = navi("import", str(fifo), "--as-user", str(uuid.uuid4()), "--session-prefix",
                        "copy-", "--json", env=env)  # fmt: skip
    finally:
        writer.join(timeout=30)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["rows"]["fact"] == 3


def test_text_only_mode_as_doctor_and_backfill_report_it(
    navi: Navi, db_url: str, fake_ollama: FakeOllama
) -> None:
    """EMBEDDING_MODEL=none: doctor notes text-only mode instead of a finding, and backfill
    makes no vectors and says why."""
    fake_ollama.default_chat_reply = "OK"
    env = {"DATABASE_URL": db_url, "OLLAMA_HOST": fake_ollama.url, "EMBEDDING_MODEL": "none"}
    doctor = navi("doctor", "--json", env=env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["embedding model"]["status"] == "note"
    assert "text-only" in checks["embedding model"]["detail"]
    backfill = navi("backfill", env=env)
    assert backfill.returncode == 0, backfill.stderr
    assert "text-only mode" in backfill.stdout
    assert fake_ollama.requests_to("/api/embed") == []


async def test_export_warns_of_the_records_an_import_would_refuse(
    navi: Navi, memory: Memory, tmp_path: Path
) -> None:
    """A legacy row that breaks today's write rules is exported as it is (exit 0), and stderr
    says which record the import will refuse, so the backup is fixed when it is made."""
    uid = await new_user(memory)
    with request_context(user_id=uid):
        await memory.store.upsert_fact("p", "editor", "vim")
    await execute(memory, "UPDATE memory_facts SET value = '' WHERE key = 'editor'")
    env = {"DATABASE_URL": memory.settings.database_url or ""}
    done = navi("export", "--user", str(uid), "--output", str(tmp_path / "u.jsonl"), env=env)
    assert done.returncode == 0, done.stderr
    assert "export: 2 record(s)" in done.stdout
    warning = " ".join(done.stderr.split())
    assert "warning: 1 record(s)" in warning
    assert "record 2 (fact f1): value must not be empty" in warning
