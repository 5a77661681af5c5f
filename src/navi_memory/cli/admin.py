"""``stats``, ``purge-expired``, ``export`` and ``import``: the operator's calls of memory.admin."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any, BinaryIO, Final

import typer
from rich.table import Table
from rich.text import Text

from navi_memory.cli.output import admin_memory, err, out, print_json, printable, run
from navi_memory.config import load_settings
from navi_memory.constants import STATS_USERS_DEFAULT
from navi_memory.errors import InvalidInputError, NaviMemoryError
from navi_memory.schemas import ExportRecord, ImportResult, MemoryStats, PurgeResult
from navi_memory.services.transfer import import_refusals

__all__ = ["export_line", "read_export", "register"]

UserOption = Annotated[uuid.UUID | None, typer.Option("--user", "-u", help="Only this user.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]

_REFUSALS_SHOWN = 5
"""How many of the records an import would refuse the export names (then a count)."""


def register(app: typer.Typer) -> None:
    app.command("stats")(stats)
    app.command("purge-expired")(purge_expired)
    app.command("export")(export)
    app.command("import")(import_)


def stats(
    user: UserOption = None,
    users: Annotated[
        int, typer.Option("--users", min=1, help="Break the counts down for this many users.")
    ] = STATS_USERS_DEFAULT,
    as_json: JsonOption = False,
) -> None:
    """Rows per table and per user, vectors missing, the vector-index backlogs, hidden and
    expired facts."""
    settings = load_settings()

    async def work() -> MemoryStats:
        async with admin_memory(settings) as memory:
            return await memory.admin.stats(user, users=users)

    result = run(work)
    if as_json:
        print_json(result)
        return
    width = max(len(name) for name in result.tables)
    out.print("rows per table", markup=False)
    for name, count in result.tables.items():
        out.print(f"  {name:<{width}}  {count}", markup=False)
    out.print(
        f"vectors missing  facts {result.vectors_missing['memory_facts']}, chunks "
        f"{result.vectors_missing['memory_chunks']}   (navi-memory backfill)",
        markup=False,
    )
    out.print(
        f"vector queue     {result.queues['memory_chunk_vector_queue']} queued, "
        f"{result.queues['unindexed']} in no index   (navi-memory backfill)",
        markup=False,
    )
    out.print(
        f"other queues     chunk text {result.queues['memory_chunk_text_queue']}, fact vectors "
        f"{result.queues['memory_fact_vector_queue']}, chunk vectors awaiting the graph "
        f"{result.queues['awaiting_graph']}   (the indexers drain them; "
        "navi-memory backfill)",
        markup=False,
    )
    out.print(
        f"facts            {result.hidden_facts} hidden (merged), {result.expired_facts} expired"
        "   (navi-memory purge-expired)",
        markup=False,
    )
    table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    columns = (
        "user",
        "name",
        "facts",
        "hidden",
        "expired",
        "no vector",
        "summary",
        "sessions",
        "messages",
        "chunks",
        "queued",
        "kv",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("user", "name") else "right")
    for u in result.per_user:
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    str(u.user_id) if u.user_id is not None else "(none)",
                    printable(u.name or ""),
                    str(u.facts),
                    str(u.hidden_facts),
                    str(u.expired_facts),
                    str(u.facts_without_vector + u.chunks_without_vector),
                    "yes" if u.summary else "",
                    str(u.sessions),
                    str(u.messages),
                    str(u.chunks),
                    str(u.chunk_vectors_queued),
                    str(u.kv_entries),
                )
            )
        )
    if user is None:
        heading = f"{result.users} user(s); the largest {len(result.per_user)}:"
    elif not result.per_user:
        # No row of the user anywhere: an empty table under "the one asked for" would read as
        # a user who holds nothing.
        out.print(f"\n{result.users} user(s); no user {user} among them.", markup=False)
        return
    else:
        # The totals above are the database's; the table is the one user asked for.
        heading = f"{result.users} user(s); the one asked for:"
    out.print(f"\n{heading}", markup=False)
    out.print(table)


def purge_expired(
    user: UserOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would go, delete nothing.")
    ] = False,
) -> None:
    """Delete the facts past their expiry (invisible already), bringing back the rows hidden
    behind them that have not expired: every user's, or one user's."""
    settings = load_settings()

    async def work() -> PurgeResult:
        async with admin_memory(settings) as memory:
            return await memory.admin.purge_expired(user, dry_run=dry_run)

    result = run(work)
    verb = "would purge" if result.dry_run else "purged"
    out.print(
        f"purge-expired: {verb} {result.expired} expired fact(s); {result.hidden} hidden "
        "row(s) behind them kept (brought back)",
        markup=False,
    )


def export_line(record: ExportRecord, *, with_vectors: bool) -> str:
    """One record as a line of JSON; the vector field only in an export made with vectors."""
    data = record.model_dump(mode="json")
    if not with_vectors:
        data.pop("embedding", None)
        data.pop("embedding_model", None)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def export(
    user: Annotated[uuid.UUID, typer.Option("--user", "-u", help="The user to export.")],
    with_vectors: Annotated[
        bool, typer.Option("--with-vectors", help="Include the embeddings (768 floats a row).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of to stdout.")
    ] = None,
) -> None:
    """Write everything a user owns as JSON Lines: facts (hidden ones too), summary, sessions
    with their messages and extraction state, chunks with breadcrumbs, sketches (kv)."""
    settings = load_settings()
    if output is not None:
        check_output(output)  # before the export is built, not after

    async def work() -> list[ExportRecord]:
        async with admin_memory(settings) as memory:
            return await memory.admin.export_user(user, with_vectors=with_vectors)

    records = run(work)
    lines = (export_line(record, with_vectors=with_vectors) + "\n" for record in records)
    if output is None:
        sys.stdout.writelines(lines)
        sys.stdout.flush()
    else:
        stream = _is_stream(output)
        write_whole(output, lines)
        # Into a stream (/dev/stdout above all) the line would be read as part of the export.
        (err if stream else out).print(
            f"export: {len(records)} record(s) of user {user} in {output}", markup=False
        )
    warn_unimportable(records)


def write_whole(output: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``output`` all or nothing: into a new file beside it (beside the file
    a symlink names), put in its place once complete, so a write that fails (a full disk, an
    interrupt) leaves no half export to be taken for a backup and the file ``output`` held
    before as it was. An ``output`` that is not a regular file (``/dev/stdout``, a pipe, a
    process substitution) is written in place, as a stream. A failure is a NaviMemoryError
    (exit 1: the operation failed, not the command line)."""
    # Not resolved first: /dev/stdout on a pipe resolves to /proc/<pid>/fd/pipe:[N], which
    # does not exist as a path, while the unresolved name opens the pipe.
    if _is_stream(output):
        descriptor = _open_descriptor(output)
        try:
            if descriptor is not None:
                sys.stdout.flush()  # what this process wrote there before comes first
                stream = os.fdopen(os.dup(descriptor), "w", encoding="utf-8")
            else:
                stream = output.open("w", encoding="utf-8")
            with stream:
                stream.writelines(lines)
        except OSError as exc:
            raise NaviMemoryError(
                f"cannot write the export to {output}: {exc.strerror or exc}"
            ) from exc
        return
    target = _resolved(output)  # a symlink's file is replaced, never the link itself
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        # O_EXCL: never through a file or link someone else put there.
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with open(descriptor, "w", encoding="utf-8") as file:
            file.writelines(lines)
        if target.exists():
            shutil.copymode(target, partial)  # a replaced export keeps its permissions
        os.replace(partial, target)
    except BaseException as exc:
        if not isinstance(exc, FileExistsError):  # not ours to remove
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        kept = f"; {output} is as it was" if target.exists() else ""
        raise NaviMemoryError(
            f"cannot write the export to {output}: {exc.strerror or exc}{kept}"
        ) from exc


def warn_unimportable(records: list[ExportRecord]) -> None:
    """Say on stderr which records an import will refuse (rows a legacy table held that break
    today's write rules), so a backup is known to need fixing when it is made, not restored."""
    refusals = import_refusals(records)
    if not refusals:
        return
    shown = "; ".join(refusals[:_REFUSALS_SHOWN])
    more = (
        f"; and {len(refusals) - _REFUSALS_SHOWN} more" if len(refusals) > _REFUSALS_SHOWN else ""
    )
    err.print(
        f"export: warning: {len(refusals)} record(s) break the rules writes follow today, and "
        f"`navi-memory import` will refuse the file until they are fixed (in the file or in the "
        f"database): {shown}{more}",
        markup=False,
    )


_DESCRIPTOR_PATH: Final = re.compile(r"/dev/fd/(\d+)|/proc/self/fd/(\d+)")


def _open_descriptor(output: Path) -> int | None:
    """The descriptor an --output names that this process holds open already (/dev/stdout,
    /dev/stderr, /dev/fd/N, /proc/self/fd/N: a process substitution is one): written through
    it, where it stands — reopened, a stdout redirected to a file (`>>`, `{ ...; } >`) was
    truncated or replaced."""
    text = str(output)
    if text in ("/dev/stdout", "/dev/stderr"):
        return 1 if text == "/dev/stdout" else 2
    match = _DESCRIPTOR_PATH.fullmatch(text)
    return None if match is None else int(match.group(1) or match.group(2))


def _is_stream(output: Path) -> bool:
    """An --output written in place: a descriptor of this process (_open_descriptor), or a
    path that exists and is not a regular file (a named pipe, a device)."""
    if _open_descriptor(output) is not None:
        return True
    return output.exists() and not output.is_file() and not output.is_dir()


def _resolved(output: Path) -> Path:
    """Where a symlink --output leads (the file write_whole replaces); a loop is refused."""
    try:
        return output.resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11: RuntimeError; later: OSError ELOOP
        raise InvalidInputError(
            f"cannot write the export to {output}: its symlinks go round in a loop"
        ) from exc


def check_output(output: Path) -> None:
    """Refuse an --output that cannot be written (an InvalidInputError naming it), before the
    export is built: a regular file is written beside where a symlink leads (write_whole), so
    that folder is the one that must exist and be writable."""
    descriptor = _open_descriptor(output)
    if descriptor is not None:
        try:
            os.fstat(descriptor)
        except OSError:
            raise InvalidInputError(
                f"cannot write the export to {output}: this process has no descriptor "
                f"{descriptor} open"
            ) from None
        return
    if output.is_socket():
        reason = "it is a socket: name a file, a pipe or /dev/stdout"
    elif output.is_dir():
        reason = "it is a folder: name a file in it"
    elif _is_stream(output):
        reason = "" if os.access(output, os.W_OK) else "permission denied"
    else:
        target = _resolved(output)
        folder = target.parent
        if not folder.is_dir():
            reason = f"there is no folder {folder}: create it first"
        elif not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            reason = "permission denied"
        else:
            reason = ""
    if reason:
        raise InvalidInputError(f"cannot write the export to {output}: {reason}")


def read_export(file: IO[str]) -> Iterator[dict[str, Any]]:
    """The records of a JSON Lines export; a line that is not a JSON object is an
    InvalidInputError naming it."""
    lines = enumerate(file, 1)
    while True:
        try:
            number, line = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise InvalidInputError(
                f"the export is not UTF-8 JSON Lines (a byte {exc.object[exc.start : exc.end]!r} "
                "that is not UTF-8): give the file navi-memory export wrote"
            ) from exc
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"line {number} is not JSON: {exc.msg}") from exc
        except ValueError as exc:
            # json raises a plain ValueError for what it parses but Python refuses to convert:
            # an integer past sys.get_int_max_str_digits() (4,300 digits by default).
            reason = str(exc).split(":", 1)[0]
            raise InvalidInputError(f"line {number} is not JSON: {reason}") from exc
        except RecursionError as exc:  # json's C decoder refuses to nest past the stack
            raise InvalidInputError(
                f"line {number} is JSON nested too deeply to be a record of an export"
            ) from exc
        if not isinstance(record, dict):
            raise InvalidInputError(f"line {number} is not a JSON object")
        yield record


def _stdin_records() -> list[dict[str, Any]]:
    """The records of an export on stdin, read as UTF-8 whatever the locale: under a C or POSIX
    locale Python's text stdin hands bytes that are not UTF-8 over as lone surrogates
    (surrogateescape), which the import then refused in words about surrogates instead of
    saying the input is not UTF-8."""
    buffer: BinaryIO | None = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a stdin that is text only (a host's or a test's)
        return list(read_export(sys.stdin))
    text = io.TextIOWrapper(buffer, encoding="utf-8")
    try:
        return list(read_export(text))
    finally:
        text.detach()  # the process's stdin stays open


def import_(
    source: Annotated[str, typer.Argument(metavar="FILE", help="The export; `-` reads stdin.")],
    as_user: Annotated[
        uuid.UUID | None,
        typer.Option("--as-user", help="Import as this user id (default: the exported one)."),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Delete the user's memory first, if they have any."),
    ] = False,
    session_prefix: Annotated[
        str | None,
        typer.Option(
            "--session-prefix",
            help="Put this before every session id (ids must be unique across users).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Restore an export into the configured database, in one transaction (all or nothing).

    Refused when the user already holds memory (unless `--replace`) or when another user holds
    one of its session ids (use `--session-prefix`).
    """
    settings = load_settings()
    if source == "-":
        records = _stdin_records()
    else:
        path = Path(source)
        if path.is_dir():
            raise InvalidInputError(f"{source} is a folder: name the export file")
        if not path.exists():
            raise InvalidInputError(f"no export file {source}")
        # A pipe (`<(gunzip -c u.jsonl.gz)`) is read as a file is.
        try:
            file = path.open(encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read the export {source}: {exc.strerror or exc}"
            ) from exc
        with file:
            try:
                records = list(read_export(file))
            except InvalidInputError as exc:
                raise InvalidInputError(f"{source}: {exc}") from exc

    async def work() -> ImportResult:
        async with admin_memory(settings) as memory:
            return await memory.admin.import_user(
                records, user_id=as_user, replace=replace, session_prefix=session_prefix
            )

    result = run(work)
    if as_json:
        print_json(result)
        return
    counts = ", ".join(f"{count} {kind}(s)" for kind, count in result.rows.items())
    note = " (their previous memory replaced)" if result.replaced else ""
    out.print(f"import: user {result.user_id}{note}: {counts}", markup=False)
    if result.vectors_dropped:
        out.print(
            "import: the export's vectors were left out (made by another embedding model than "
            "this database's, or by one the export does not name): `navi-memory backfill` "
            "gives the rows vectors of this database's model",
            markup=False,
        )
