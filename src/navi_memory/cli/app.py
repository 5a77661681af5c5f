"""The root ``navi-memory`` app: global options, where every command group registers, and
``main()``, which turns every error into an exit code and one line on stderr."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Final

import typer
import typer.main

from navi_memory.cli import admin, doctor, extract, facts, maintenance, server, summary
from navi_memory.cli.output import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_USAGE,
    OutputError,
    configure_logging,
    discard_stdout,
    error_line,
    exit_code_for,
    guarded_stdout,
    out,
)
from navi_memory.errors import NaviMemoryError

__all__ = ["REGISTRARS", "app", "main"]

HELP: Final = """\
The operator's tool for navi-memory: schema, health, facts, export and import, the server.

It acts as an administrator: no current user, with the `navi.memory.read_all` permission, so
it can read and change every user's memory. It reads the same settings as the library
(`DATABASE_URL`, unset: the embedded PostgreSQL; docs/config.md).

Exit codes: 0 done; 1 findings (doctor) or a failed operation; 2 a usage or configuration
error, reported in one line; 130 interrupted; 141 the reader closed the output (`| head`).
"""

app = typer.Typer(
    name="navi-memory",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_debug = False


def _package_version() -> str:
    try:
        return version("navi-memory")
    except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        out.print(f"navi-memory {_package_version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Log everything, and show the traceback of an unexpected error."
        ),
    ] = False,
) -> None:
    global _debug
    _debug = debug
    configure_logging(debug)


REGISTRARS: Final[tuple[Callable[[typer.Typer], None], ...]] = (
    maintenance.register,
    extract.register,
    doctor.register,
    admin.register,
    facts.register,
    summary.register,
    server.register,
)
"""Every command group adds itself to the app here, in the order ``--help`` lists them. A
feature that brings commands of its own adds a module with a ``register(app)`` to this tuple."""

for _register in REGISTRARS:
    _register(app)


def _typer_error(exc: typer.TyperException) -> int:
    code = int(getattr(exc, "exit_code", EXIT_USAGE))
    message = exc.format_message().strip()
    if not message:
        # A group called without a command: Typer has printed its help already (on stdout).
        return code
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    error_line(f"{message}{where}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    command = typer.main.get_command(app)
    try:
        with guarded_stdout():
            result = command.main(
                args=None if argv is None else list(argv),
                prog_name="navi-memory",
                standalone_mode=False,
            )
    except OutputError as exc:
        # Nothing more can be written to stdout: what Python still holds for it goes nowhere.
        discard_stdout()
        if isinstance(exc.reason, BrokenPipeError):
            # The reader closed the pipe (`| head -1`): its choice, not an error to report.
            # Quietly, with the code a shell gives any tool a closed pipe stopped
            # (EXIT_PIPE_CLOSED says why not 0).
            return EXIT_PIPE_CLOSED
        # stdout itself failed (`> /dev/full`): say so on stderr, as the operation's failure,
        # not as a bug.
        error_line(f"cannot write the output: {exc}")
        return EXIT_FAILURE
    except typer.TyperException as exc:  # Click's usage errors (exit 2) and the like
        return _typer_error(exc)
    except typer.Abort:
        error_line("interrupted")
        return EXIT_INTERRUPTED
    except NaviMemoryError as exc:
        error_line(str(exc))
        return exit_code_for(exc)
    except Exception as exc:
        if _debug:
            raise
        error_line(
            f"unexpected {type(exc).__name__}: {exc} (a bug in navi-memory; run again with "
            "--debug to see where)"
        )
        return EXIT_FAILURE
    return result if isinstance(result, int) else EXIT_OK
