"""``server status|start|stop|psql``: the embedded PostgreSQL (the default when DATABASE_URL is
unset). It outlives every process that starts it; ``stop`` is how it ends."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from navi_memory.cli.output import EXIT_FAILURE, err, out, print_json
from navi_memory.config import Settings, load_settings
from navi_memory.embedded import (
    EMBEDDED_DATABASE,
    EmbeddedStatus,
    embedded_psql,
    embedded_server_clients,
    embedded_server_status,
    ensure_embedded_server,
    stop_embedded_server,
)
from navi_memory.errors import StorageError

__all__ = ["register"]

server_app = typer.Typer(
    name="server",
    help="The embedded PostgreSQL in NAVI_MEMORY_DATA_DIR: status, start, stop, psql.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def register(app: typer.Typer) -> None:
    app.add_typer(server_app)


def _settings() -> Settings:
    settings = load_settings()
    if settings.database_url is not None:
        err.print(
            "navi-memory: note: DATABASE_URL is set, so navi-memory does not use the embedded "
            "server; this acts on it all the same",
            markup=False,
        )
    return settings


def _describe(status: EmbeddedStatus) -> dict[str, object]:
    return {
        "data_dir": str(status.pgdata),
        "initialised": status.initialised,
        "running": status.running,
        "pid": status.pid,
        "socket_dir": status.socket_dir,
        "started_at": status.started_at.isoformat() if status.started_at else None,
        "database": EMBEDDED_DATABASE,
        "url": status.url,
    }


@server_app.command("status")
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Say whether the embedded server runs, and where (exit code 1 when it does not)."""
    current = embedded_server_status(_settings().navi_memory_data_dir)
    if as_json:
        print_json(_describe(current))
    elif current.running:
        out.print(
            f"running   pid {current.pid}, since {current.started_at:%Y-%m-%d %H:%M:%S %Z}\n"
            f"data      {current.pgdata}\n"
            f"url       {current.url}",
            markup=False,
        )
    else:
        state = "stopped" if current.initialised else "not created yet"
        out.print(f"{state}   data {current.pgdata}", markup=False)
    if not current.running:
        raise typer.Exit(EXIT_FAILURE)


@server_app.command("start")
def start() -> None:
    """Start the embedded server (creating it on first use); a running one is left as it is."""
    settings = _settings()
    ensure_embedded_server(settings.navi_memory_data_dir)
    current = embedded_server_status(settings.navi_memory_data_dir)
    out.print(f"running   pid {current.pid}, url {current.url}", markup=False)


@server_app.command("stop")
def stop(
    force: Annotated[
        bool, typer.Option("--force", help="Stop it even while clients are connected.")
    ] = False,
) -> None:
    """Stop the embedded server. Refused while clients are connected, unless `--force`
    (their connections are then closed and open transactions rolled back)."""
    data_dir = _settings().navi_memory_data_dir
    current = embedded_server_status(data_dir)
    if not current.running:
        out.print(f"not running   data {current.pgdata}", markup=False)
        return
    try:
        clients = embedded_server_clients(current)
    except StorageError:
        if not force:
            raise
        clients = {}  # --force stops it whoever is connected: no need to know who
    if clients and not force:
        who = ", ".join(f"{name}: {count}" for name, count in clients.items())
        raise StorageError(
            f"{sum(clients.values())} client connection(s) are open ({who}): stop those "
            "processes first, or pass --force to disconnect them"
        )
    stop_embedded_server(data_dir)
    out.print(f"stopped   data {current.pgdata}", markup=False)


@server_app.command(
    "psql",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def psql(ctx: typer.Context) -> None:
    """Open psql on the embedded navi_memory database as its superuser; every argument goes
    to psql (`navi-memory server psql -c 'CREATE EXTENSION pg_trgm'`)."""
    settings = _settings()
    ensure_embedded_server(settings.navi_memory_data_dir)
    command = embedded_psql(embedded_server_status(settings.navi_memory_data_dir))
    os.execv(command[0], [*command, *ctx.args])  # noqa: S606 - psql of the wheel, our socket
