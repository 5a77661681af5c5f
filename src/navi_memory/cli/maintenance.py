"""``migrate``, ``backfill`` and ``reembed``: the schema, the vectors rows were written
without, and every vector made again after a change of embedding model."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated, Final

import typer

from navi_memory.cli.doctor import embedding_model_fix
from navi_memory.cli.output import EXIT_INTERRUPTED, TableProgress, admin_memory, err, out, run
from navi_memory.config import Settings, load_settings
from navi_memory.db import (
    SCHEMA_REVISIONS,
    create_engine,
    create_sessionmaker,
    resolve_database_url,
)
from navi_memory.errors import BackfillIncompleteError, EmbeddingError, InvalidInputError
from navi_memory.jobs.embedding_model import EmbeddingModelRecord
from navi_memory.llm.embedder import canonical_model_name
from navi_memory.migrations import current_revision, head_revision, upgrade

__all__ = ["backfill", "migrate", "reembed", "register"]


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)
    app.command("backfill")(backfill)
    app.command("reembed")(reembed)


def migrate(
    to: Annotated[str, typer.Option("--to", metavar="REV", help="The revision to reach.")] = "head",
    sql: Annotated[
        bool,
        typer.Option("--sql", help="Print the SQL instead of running it (touches no database)."),
    ] = False,
) -> None:
    """Bring the database schema to head, or to `--to REV`; say how many revisions it applied
    and which revision the database is at.

    The revisions ship with the package. Safe to run again: a database at head is left as it
    is. It only upgrades: a `--to` the database is already past is refused (exit 2). A server
    without pgvector, or a role that may not create the `vector` extension, is refused before
    anything changes.
    """
    if not to.strip():
        raise InvalidInputError(
            f"--to is empty: name the revision to reach (head, the default, or one such as "
            f"{head_revision()})"
        )
    settings = load_settings()
    if sql:
        sys.stdout.write(upgrade(settings, revision=to, sql=True))
        return
    before = current_revision(settings)
    upgrade(settings, revision=to)
    after = current_revision(settings)
    out.print(f"migrate: {applied(before, after)}", markup=False)


def applied(before: str | None, after: str | None) -> str:
    """What a migration did, from the revision it found to the one it left: how many it
    applied (another migration running meanwhile counts its own too), and where the database
    is (alone, when there was nothing to apply)."""
    reached = after or "base"
    if reached == head_revision():
        reached = f"head ({reached})"
    if before == after:
        return f"the database is at {reached}"
    known = (None, *SCHEMA_REVISIONS)
    if before not in known or after not in known:  # not one line of revisions: say no count
        return f"migrated {before or '(none)'} -> {after}; the database is at {reached}"
    steps = known.index(after) - known.index(before)
    return (
        f"applied {steps} revision(s), {before or '(none)'} -> {after}; the database is at "
        f"{reached}"
    )


def backfill() -> None:
    """Embed every fact and chunk that has no vector yet, then index the queued vectors.

    First it indexes demoted history that a failed compression left in no chunk. Rows are
    embedded `BACKFILL_BATCH_SIZE` at a time, `BACKFILL_PAUSE_SECONDS` apart, each batch
    committed: interrupt it whenever you like and run it again to resume. When the embedding
    model fails (three failures in a row stop the embedding step) the vectors already stored
    are indexed all the same, and the exit code is 1.
    """
    settings = load_settings()
    bars = TableProgress()

    async def work() -> tuple[int, int | None, EmbeddingError | None, int, int]:
        async with admin_memory(settings) as memory:
            recovered = await memory.sessions.index_dropped_history()
            embedded = None
            stopped = None
            if memory.embedder is not None:
                with bars.shown():
                    try:
                        embedded = await memory.store.backfill_embeddings(
                            settings.backfill_batch_size, progress=bars
                        )
                    except EmbeddingError as exc:
                        # The queued vectors need no model: the indexing step runs still.
                        stopped = exc
            indexed = await memory.store.index_pending_chunks()
            facts_indexed = await memory.store.index_pending_facts()
        return recovered, embedded, stopped, indexed, facts_indexed

    try:
        recovered, embedded, stopped, indexed, facts_indexed = run(work)
    except KeyboardInterrupt:
        err.print("navi-memory: interrupted; finished batches are saved, run it again to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if isinstance(stopped, BackfillIncompleteError):
        made = f"{stopped.embedded} row(s) embedded, {stopped.left} refused (the error below)"
    elif stopped is not None:
        made = (
            "the embedding step stopped (the error below; the vectors already queued were "
            "indexed all the same)"
        )
    elif embedded is None:
        made = "no vectors made (text-only mode: EMBEDDING_MODEL=none)"
    else:
        made = f"{embedded} row(s) embedded"
    # The background indexers index most of the queue while the embedding runs: what is left
    # for the end is often nothing, which is no sign that nothing was indexed (as reembed says).
    out.print(
        f"backfill: {recovered} chunk(s) of dropped history recovered, {made}, {indexed} chunk(s) "
        f"and {facts_indexed} fact vector(s) indexed at the end, the rest while it ran",
        markup=False,
    )
    if stopped is not None:
        raise stopped


def reembed() -> None:
    """Embed every fact and chunk again with the configured EMBEDDING_MODEL, after a change.

    Clears every stored vector and the vector indexes in one transaction, records the
    configured model, then runs the backfill's work (same batches and pause). Meanwhile
    search finds the rows by text. Interrupted, it says whether the vectors were cleared:
    then `navi-memory backfill` finishes it, else run it again.
    Refused in text-only mode (EMBEDDING_MODEL=none). Running app processes still set to the
    old model stop making vectors within 10 s (EMBEDDING_MODEL_RECHECK_SECONDS): restart them
    with the new EMBEDDING_MODEL.
    """
    settings = load_settings()
    bars = TableProgress()

    async def work() -> tuple[int, int, int]:
        async with admin_memory(settings) as memory:
            if memory.embedder is None:
                await memory.admin.reembed()  # refused, saying why: no progress bars drawn
            with bars.shown():
                embedded = await memory.admin.reembed(settings.backfill_batch_size, progress=bars)
            indexed = await memory.store.index_pending_chunks()
            facts_indexed = await memory.store.index_pending_facts()
        return embedded, indexed, facts_indexed

    started = time.monotonic()
    try:
        embedded, indexed, facts_indexed = run(work)
    except KeyboardInterrupt:
        left = reembed_left(settings, time.monotonic() - started)
        err.print(f"navi-memory: interrupted; {left}", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except EmbeddingError as exc:
        left = reembed_failed(settings, time.monotonic() - started)
        raise EmbeddingError(f"reembed: {exc}; {left}") from exc
    # The background indexers index most of the new vectors while the embedding runs: what is
    # left for the end is often nothing, which is no sign that nothing was indexed.
    out.print(
        f"reembed: {embedded} row(s) embedded with {settings.embedding_model}; the indexes are "
        f"up to date ({indexed} chunk(s) and {facts_indexed} fact vector(s) indexed at the end, "
        "the rest while it ran)",
        markup=False,
    )


REEMBED_LOOK_SECONDS: Final = 5.0
"""How long an interrupted reembed may take to read what it left (the model of record)."""


def reembed_left(settings: Settings, ran_seconds: float) -> str:
    """What a reembed interrupted after ``ran_seconds`` left, and what finishes it.
    Interrupted early — the first call of a newly pulled model often stalls while Ollama loads
    it — nothing was cleared, and a backfill would be refused as a model mismatch or find
    nothing to do."""
    done = reembed_cleared(settings, ran_seconds)
    if done is None:
        return (
            "could not read whether the vectors were cleared: if `navi-memory doctor` reports "
            "another model's stored vectors, nothing was cleared (run navi-memory reembed "
            "again); otherwise finished batches are saved (run navi-memory backfill to finish)"
        )
    if not done:
        return "nothing was cleared (the model had not answered yet): run navi-memory reembed again"
    return (
        "the vectors were cleared and finished batches are saved: run navi-memory backfill to "
        "finish"
    )


def reembed_failed(settings: Settings, ran_seconds: float) -> str:
    """What a reembed the embedding model failed after ``ran_seconds`` left, and the fix: it
    asks the model first, so a model that is down failed it before anything was cleared."""
    fix = embedding_model_fix(settings)
    done = reembed_cleared(settings, ran_seconds)
    if done is None:
        return (
            f"could not read whether the vectors were cleared: {fix}; then, if "
            "`navi-memory doctor` reports another model's stored vectors, nothing was cleared "
            "(run navi-memory reembed again), otherwise run navi-memory backfill to finish"
        )
    if not done:
        return f"nothing was cleared: {fix}; then run navi-memory reembed again"
    return (
        "the vectors were cleared and finished batches are saved (the rows without a vector "
        f"are found by text search): {fix}; then run navi-memory backfill to finish"
    )


def reembed_cleared(settings: Settings, ran_seconds: float) -> bool | None:
    """Whether a reembed that ran ``ran_seconds`` cleared the vectors (None: it could not be
    read). The clear records the configured model in its own transaction, so a record
    younger than the run says it committed (whatever the model's name: a reembed with the
    same model clears too)."""

    async def cleared() -> bool:
        url = await asyncio.to_thread(resolve_database_url, settings)
        engine = create_engine(settings, url)
        try:
            record = EmbeddingModelRecord(
                create_sessionmaker(engine), model=canonical_model_name(settings.embedding_model)
            )
            # A second of slack: the two clocks measure the same span from either side.
            within = record.recorded_within(ran_seconds + 1.0)
            return await asyncio.wait_for(within, REEMBED_LOOK_SECONDS)
        finally:
            await engine.dispose()

    try:
        return run(cleared)
    except (Exception, KeyboardInterrupt):
        return None
