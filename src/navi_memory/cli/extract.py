"""``extract``: turn every stale session into facts now, with a progress bar (make extract)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from navi_memory.cli.output import (
    EXIT_INTERRUPTED,
    admin_memory,
    err,
    out,
    print_json,
    run,
)
from navi_memory.config import load_settings
from navi_memory.jobs.stale_sessions import ExtractionProgress
from navi_memory.request_context import as_user_id
from navi_memory.schemas import ExtractionReport

__all__ = ["extract", "register"]


def register(app: typer.Typer) -> None:
    app.command("extract")(extract)


def extract(
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER_ID", help="Only this user's sessions.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Extract facts from every stale session (idle `MEMORY_STALE_MINUTES`, not extracted since).

    Each session's facts are upserted with dedupe, the user's summary is rewritten from their
    facts, and the session is marked; a summary set by hand (`navi-memory summary set`) or
    imported is replaced only by a session that gives facts. A session whose model call fails
    stays unmarked and is retried by a later run (at once after a model outage; after 5 min,
    doubling up to a day, when the reply was unusable); any failure makes the exit code 1.
    Three sessions in a row failed by the chat model stop the run (the rest wait for the next
    one: the summary line says how many, `--json` as `sessions_left`).
    """
    settings = load_settings()
    progress = Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
    )
    task = progress.add_task("sessions", total=None)
    # The sweep's last step: how many stale sessions it found, and how many it went through
    # (a sweep the chat model stopped leaves the rest; the report counts only those tried).
    last = ExtractionProgress(0, 0, "")

    def advance(step: ExtractionProgress) -> None:
        nonlocal last
        last = step
        if not as_json:
            progress.update(task, completed=step.done, total=step.total)

    async def work() -> ExtractionReport:
        # A bad --user is refused before the server is reached and the bar drawn.
        user_id = None if user is None else as_user_id(user)
        async with admin_memory(settings) as memory:
            if as_json:
                return await memory.extractor.process_stale_sessions(user_id, progress=advance)
            with progress:
                return await memory.extractor.process_stale_sessions(user_id, progress=advance)

    try:
        report = run(work)
    except KeyboardInterrupt:
        err.print("navi-memory: interrupted; extracted sessions are saved, run it again to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    left = last.total - last.done
    if as_json:
        print_json({**report.model_dump(mode="json"), "sessions_left": left})
    else:
        stale = (
            f"{last.done} of {last.total} stale session(s) tried (the sweep stopped: "
            f"{left} left for the next run)"
            if left
            else f"{report.sessions_seen} stale session(s)"
        )
        out.print(
            f"extract: {stale}, {report.sessions_extracted} "
            f"extracted, {report.sessions_skipped} skipped, {report.failures} failed; "
            f"{report.facts_written} fact(s) written, {report.facts_merged} merged, "
            f"{report.facts_skipped} unusable item(s) skipped, {report.facts_outdated} "
            "outdated (changed or forgotten since); "
            f"{report.summaries_written} summary(ies) rewritten",
            markup=False,
        )
    if report.failures:
        raise typer.Exit(1)
