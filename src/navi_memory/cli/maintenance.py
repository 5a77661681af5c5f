"""``migrate`` and ``backfill``: the schema, and the vectors rows were written without."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from navi_memory.cli.output import EXIT_INTERRUPTED, TableProgress, admin_memory, err, out, run
from navi_memory.config import load_settings
from navi_memory.migrations import head_revision, upgrade

__all__ = ["backfill", "migrate", "register"]


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)
    app.command("backfill")(backfill)


def migrate(
    to: Annotated[str, typer.Option("--to", metavar="REV", help="The revision to reach.")] = "head",
    sql: Annotated[
        bool,
        typer.Option("--sql", help="Print the SQL instead of running it (touches no database)."),
    ] = False,
) -> None:
    """Bring the database schema to head, or to `--to REV`.

    The revisions ship with the package. Safe to run again: a database at head is left as it
    is. A server without pgvector, or a role that may not create the `vector` extension, is
    refused before anything changes.
    """
    settings = load_settings()
    output = upgrade(settings, revision=to, sql=sql)
    if sql:
        sys.stdout.write(output)
        return
    reached = f"head ({head_revision()})" if to == "head" else to
    out.print(f"migrate: the database is at {reached}")


def backfill() -> None:
    """Embed every fact and chunk that has no vector yet, then index the queued vectors.

    First it indexes demoted history that a failed compression left in no chunk. Rows are
    embedded `BACKFILL_BATCH_SIZE` at a time, `BACKFILL_PAUSE_SECONDS` apart, each batch
    committed: interrupt it whenever you like and run it again to resume.
    """
    settings = load_settings()
    bars = TableProgress()

    async def work() -> tuple[int, int | None, int, int]:
        async with admin_memory(settings) as memory:
            recovered = await memory.sessions.index_dropped_history()
            embedded = None
            if memory.embedder is not None:
                with bars.shown():
                    embedded = await memory.store.backfill_embeddings(
                        settings.backfill_batch_size, progress=bars
                    )
            indexed = await memory.store.index_pending_chunks()
            facts_indexed = await memory.store.index_pending_facts()
        return recovered, embedded, indexed, facts_indexed

    try:
        recovered, embedded, indexed, facts_indexed = run(work)
    except KeyboardInterrupt:
        err.print("navi-memory: interrupted; finished batches are saved, run it again to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    made = (
        "no vectors made (text-only mode: EMBEDDING_MODEL=none)"
        if embedded is None
        else f"{embedded} row(s) embedded"
    )
    out.print(
        f"backfill: {recovered} chunk(s) of dropped history recovered, {made}, {indexed} chunk(s) "
        f"and {facts_indexed} fact vector(s) indexed",
        markup=False,
    )
