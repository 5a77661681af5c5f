"""``facts list|show|forget|unmerge``: an operator's view of every user's curated facts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

import typer
from rich.table import Table
from rich.text import Text

from navi_memory.cli.output import admin_memory, out, print_json, printable, run, when
from navi_memory.config import load_settings
from navi_memory.errors import InvalidInputError, NotFoundError
from navi_memory.schemas import Fact, ForgetResult

__all__ = ["SortColumn", "register"]

SortColumn = Literal[
    "id",
    "category",
    "key",
    "value",
    "source",
    "confidence",
    "created_at",
    "updated_at",
    "expires_at",
    "last_verified_at",
]
"""The columns get_all_facts sorts by (a test keeps this equal to the repository's list)."""

VALUE_WIDTH: Final = 60
"""A table cell shows this much of a value; ``facts show`` and ``--json`` show all of it."""

facts_app = typer.Typer(
    name="facts",
    help="List, inspect, forget and unmerge curated facts.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

UserOption = Annotated[
    uuid.UUID | None, typer.Option("--user", "-u", help="The user (a UUID) whose facts to list.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    app.add_typer(facts_app)


@facts_app.command("list")
def list_facts(
    user: UserOption = None,
    all_users: Annotated[
        bool, typer.Option("--all-users", help="Every user's facts, and the legacy unowned ones.")
    ] = False,
    category: Annotated[
        str | None, typer.Option("--category", "-c", help="Only this category.")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option("--search", "-s", help="Only facts whose category, key or value has this."),
    ] = None,
    include_merged: Annotated[
        bool,
        typer.Option("--include-merged", help="Also the hidden rows merged into another fact."),
    ] = False,
    sort: Annotated[SortColumn, typer.Option("--sort", help="The column to sort by.")] = "category",
    order: Annotated[
        Literal["asc", "desc"], typer.Option("--order", help="Sort direction.")
    ] = "desc",
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List one user's facts (`--user`) or everyone's (`--all-users`).

    Expired facts are never listed; hidden (merged) rows only with `--include-merged`.
    """
    if (user is None) == (not all_users):
        raise InvalidInputError("name one user with --user UUID, or pass --all-users")
    settings = load_settings()

    async def work() -> list[Fact]:
        async with admin_memory(settings) as memory:
            return await memory.store.get_all_facts(
                user_id=user,
                all_users=all_users,
                category=category,
                limit=limit,
                offset=offset,
                search=search,
                sort_by=sort,
                sort_order=order,
                include_merged=include_merged,
            )

    facts = run(work)
    if as_json:
        print_json(facts)
        return
    if not facts:
        out.print("no facts", markup=False)
        return
    out.print(_table(facts, show_user=all_users))
    if len(facts) == limit:
        out.print(f"first {limit} from {offset}; --offset {offset + limit} for more", markup=False)


def _table(facts: list[Fact], *, show_user: bool) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("id", justify="right")
    if show_user:
        table.add_column("user", no_wrap=True)
    for name in ("category", "key", "value", "source", "conf", "updated", "state"):
        table.add_column(
            name,
            justify="right" if name == "conf" else "left",
            no_wrap=name not in ("value", "state"),
        )
    for fact in facts:
        value = fact.value if len(fact.value) <= VALUE_WIDTH else fact.value[: VALUE_WIDTH - 1]
        if value != fact.value:
            value += "…"
        cells = [str(fact.id)]
        if show_user:
            cells.append(str(fact.user_id) if fact.user_id is not None else "(none)")
        cells += [
            fact.category,
            fact.key,
            value,
            fact.source or "",
            "" if fact.confidence is None else str(fact.confidence),
            when(fact.updated_at),
            _state(fact),
        ]
        # Values are the user's text: Text() so that "[b]" in one is never read as markup,
        # printable() so that an ESC sequence in one never reaches the terminal.
        table.add_row(*(Text(printable(cell)) for cell in cells))
    return table


def _state(fact: Fact) -> str:
    parts = []
    if fact.merged_into is not None:
        parts.append(f"merged into #{fact.merged_into}")
    if not fact.has_embedding:
        parts.append("no vector")
    return ", ".join(parts)


@facts_app.command("show")
def show_fact(
    fact_id: Annotated[int, typer.Argument(metavar="ID", min=1, help="The fact's id.")],
    as_json: JsonOption = False,
) -> None:
    """Everything about one fact (hidden or expired alike), with the rows hidden behind it.

    An expired row behind it is shown too, marked expired: it is never visible, but forgetting
    the fact deletes it with the fact. `--json` names those in `merged_here_expired`.
    """
    settings = load_settings()

    async def work() -> tuple[Fact, list[Fact]]:
        async with admin_memory(settings) as memory:
            fact = await memory.store.get_fact(fact_id)
            return fact, await memory.store.get_merged_facts(fact_id)

    fact, merged = run(work)
    now = datetime.now(UTC)
    expired = [hidden.id for hidden in merged if _expired(hidden, now)]
    if as_json:
        print_json(
            {
                **fact.model_dump(mode="json"),
                "merged_here": [hidden.id for hidden in merged],
                "merged_here_expired": expired,
            }
        )
        return
    fields = fact.model_dump()
    width = max(len(name) for name in fields)
    for name, value in fields.items():
        shown = "" if value is None else printable(str(value))
        out.print(f"{name:<{width}}  {shown}", markup=False)
    for hidden in merged:
        mark = " (expired)" if hidden.id in expired else ""
        out.print(
            f"{'merged here':<{width}}  #{hidden.id} {printable(hidden.key)} = "
            f"{printable(hidden.value)}{mark}",
            markup=False,
        )


def _expired(fact: Fact, now: datetime) -> bool:
    """Past its expiry, by this machine's clock: no read of the memory shows it."""
    return fact.expires_at is not None and fact.expires_at <= now


@facts_app.command("forget")
def forget_fact(
    key: Annotated[str, typer.Argument(help="The fact's key (another spelling of it works too).")],
    user: Annotated[uuid.UUID, typer.Option("--user", "-u", help="The user (a UUID).")],
    category: Annotated[
        str | None, typer.Option("--category", "-c", help="Only in this category.")
    ] = None,
) -> None:
    """Delete a user's fact by key, with the hidden rows behind it.

    An expired row the key names is deleted too. Whenever a row is deleted, the user's summary
    goes with it (it may tell the forgotten fact); the next extraction writes it again. Exit
    code 1 when nothing at all was deleted.
    """
    settings = load_settings()

    async def work() -> ForgetResult:
        async with admin_memory(settings) as memory:
            return await memory.store.forget_facts(key, category, user_id=user)

    result = run(work)
    if not result.deleted_anything:
        where = f" in category {category!r}" if category else ""
        raise NotFoundError(f"user {user} has no fact {key!r}{where}")
    # The facts that went by their own keys: another spelling names the fact it was merged into.
    names = ", ".join(
        f"#{fact.id} [{printable(fact.category)}] {printable(fact.key)}" for fact in result.facts
    )
    parts = [
        f"forgot {len(result.facts)} visible fact(s) of user {user}" + (names and f": {names}")
    ]
    if result.expired:
        parts.append(f"{result.expired} expired row(s) deleted")
    if result.summary_removed:
        parts.append("the summary was removed (the next extraction rewrites it)")
    out.print("; ".join(parts), markup=False)


@facts_app.command("unmerge")
def unmerge_fact(
    fact_id: Annotated[int, typer.Argument(metavar="ID", min=1, help="The hidden row's id.")],
) -> None:
    """Make a hidden (merged) fact visible again; the fact it was merged into stays.

    A row past its expiry is unmerged all the same, but stays invisible: the output says so.
    """
    settings = load_settings()

    async def work() -> Fact:
        async with admin_memory(settings) as memory:
            return await memory.store.unmerge_fact(fact_id)

    fact = run(work)
    name = f"fact #{fact.id} [{printable(fact.category)}] {printable(fact.key)}"
    if _expired(fact, datetime.now(UTC)):
        out.print(f"{name} was unmerged but has expired (not visible)", markup=False)
    else:
        out.print(f"{name} is visible again", markup=False)
