"""``summary show|set``: a user's narrative summary, the text injected into every session."""

from __future__ import annotations

import sys
import uuid
from typing import Annotated, BinaryIO

import typer

from navi_memory.cli.output import admin_memory, out, print_json, printable_lines, run
from navi_memory.config import load_settings
from navi_memory.errors import InvalidInputError, NotFoundError

__all__ = ["register"]

summary_app = typer.Typer(
    name="summary",
    help="Show or replace a user's narrative summary.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

UserOption = Annotated[uuid.UUID, typer.Option("--user", "-u", help="The user (a UUID).")]


def register(app: typer.Typer) -> None:
    app.add_typer(summary_app)


@summary_app.command("show")
def show_summary(
    user: UserOption,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the user's summary (exit code 1 when there is none)."""
    settings = load_settings()

    async def work() -> str | None:
        async with admin_memory(settings) as memory:
            return await memory.store.get_summary(user_id=user)

    content = run(work)
    if as_json:
        print_json({"user_id": str(user), "summary": content})
    elif content is not None:
        # The summary is a model's (or the application's) text: an ESC sequence in it must
        # not drive the operator's terminal (write the clipboard, clear the screen).
        out.print(printable_lines(content), markup=False)
    if content is None:
        if not as_json:
            out.print(f"user {user} has no summary", markup=False)
        raise typer.Exit(1)


@summary_app.command("set")
def set_summary(
    user: UserOption,
    text: Annotated[
        str,
        typer.Argument(
            help="The new summary; `-` reads it from stdin (its final line breaks dropped)."
        ),
    ],
) -> None:
    """Replace the user's summary; the user must exist (users are created by the application).

    From stdin (`-`) the line breaks at its end are dropped, as the shell's `$(...)` drops
    them: `echo "Prefers Dutch." | navi-memory summary set --user U -` stores the sentence.

    A summary set here is of unknown origin: the extractor leaves it as it is until it
    extracts a session of the user that gives facts, and then rewrites it from their facts.
    """
    content = _read_stdin() if text == "-" else text
    settings = load_settings()

    async def work() -> None:
        async with admin_memory(settings) as memory:
            await memory.store.set_summary(content, user_id=user)

    try:
        run(work)
    except NotFoundError as exc:
        # The library's words name a Python call (memory.users.ensure); an operator needs to
        # know where users come from instead.
        raise NotFoundError(
            f"user {user} does not exist: users are created by the application (a row in "
            "navi_users), not by this command; check the id (`navi-memory stats --user ID` "
            "says whether a user exists)"
        ) from exc
    out.print(f"summary of user {user} set ({len(content)} characters)", markup=False)


def _read_stdin() -> str:
    """stdin as UTF-8 text, decoded here from its bytes: Python's text stdin may hand bytes
    that are not UTF-8 over as lone surrogates (surrogateescape, under a C or POSIX locale),
    which the library then refuses in words about surrogates. Line ends are read as the text
    stdin reads them (universal newlines), and those at the end dropped: the one `echo` or an
    editor ends a file with is no part of the summary."""
    buffer: BinaryIO | None = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a stdin that is text only (a host's or a test's)
        return sys.stdin.read().rstrip("\n")
    data = buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"stdin is not UTF-8 text (the byte {data[exc.start : exc.start + 1]!r} at offset "
            f"{exc.start}): give the summary as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")
