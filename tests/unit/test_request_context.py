"""Tenancy rules of DESIGN.md: who a user_id=None call means, and what needs read_all."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator

import pytest

from navi_memory import PERMISSION_READ_ALL, PermissionDeniedError, request_context
from navi_memory.errors import InvalidTypeError
from navi_memory.request_context import (
    current_permissions,
    current_session_id,
    current_user_id,
    read_scope,
    write_scope,
)

ALICE, BOB = uuid.uuid4(), uuid.uuid4()


def test_none_means_the_current_user_for_reads_and_writes() -> None:
    with request_context(user_id=ALICE):
        assert read_scope(None) == ALICE
        assert write_scope(None) == ALICE
    assert current_user_id() is None


def test_a_write_without_any_user_is_refused() -> None:
    with pytest.raises(PermissionDeniedError, match="no user for this write"):
        write_scope(None)


def test_a_global_read_needs_read_all() -> None:
    with pytest.raises(PermissionDeniedError, match=PERMISSION_READ_ALL):
        read_scope(None)
    with request_context(permissions=[PERMISSION_READ_ALL]):
        assert read_scope(None) is None


def test_acting_for_one_user_never_reads_or_writes_another() -> None:
    with request_context(user_id=ALICE):
        with pytest.raises(PermissionDeniedError):
            read_scope(BOB)
        with pytest.raises(PermissionDeniedError):
            write_scope(BOB)
    with request_context(user_id=ALICE, permissions=[PERMISSION_READ_ALL]):
        assert read_scope(BOB) == BOB


def test_user_ids_must_be_uuids() -> None:
    assert read_scope(str(ALICE)) == ALICE
    with pytest.raises(InvalidTypeError, match="UUID"):
        read_scope("alice")
    with pytest.raises(InvalidTypeError, match="UUID"):
        write_scope(42)  # type: ignore[arg-type]


def _context() -> tuple[object, object, object]:
    from navi_memory.request_context import current_permissions, current_session_id

    return current_user_id(), current_session_id(), current_permissions()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"permissions": None}, "permissions"),
        # a str, not a list of them
        pytest.param({"permissions": PERMISSION_READ_ALL}, "permissions"),
        pytest.param({"permissions": [PERMISSION_READ_ALL, 7]}, "permission"),
        pytest.param({"permissions": ["navi.memory\x00read_all"]}, "permission"),
        pytest.param({"session_id": 42}, "session_id"),
        pytest.param({"session_id": "s\x00"}, "session_id"),
        pytest.param({"session_id": "x" * 10_000}, "session_id"),
        pytest.param({"session_id": "   "}, "session_id"),
        ({"user_id": "not-a-uuid"}, "UUID"),
    ],
)
def test_bad_arguments_leave_the_context_untouched(kwargs: dict[str, object], message: str) -> None:
    """Bad arguments raise InvalidInputError before any context variable is set, so code that
    catches the error and carries on does not act as the user it named."""
    from navi_memory.errors import InvalidInputError

    arguments: dict[str, object] = {"user_id": ALICE, "session_id": "s1", **kwargs}
    with request_context(user_id=BOB, session_id="outer", permissions=["p"]):
        before = _context()
        with (
            pytest.raises(InvalidInputError, match=message),
            request_context(**arguments),  # type: ignore[arg-type]
        ):
            pytest.fail("the block must not run")
        assert _context() == before
    assert _context() == (None, None, frozenset())


def test_the_context_is_reset_on_every_exit_path() -> None:
    """An error raised inside the block, and a generator-style early exit, both restore the
    outer context."""
    with pytest.raises(RuntimeError), request_context(user_id=ALICE, session_id="s1"):
        raise RuntimeError("boom")
    assert _context() == (None, None, frozenset())
    manager = request_context(user_id=ALICE, session_id="s2", permissions=("a", "b"))
    manager.__enter__()
    assert _context() == (ALICE, "s2", frozenset({"a", "b"}))
    manager.__exit__(None, None, None)
    assert _context() == (None, None, frozenset())
    # Bad arguments are refused at the call, before entering anything.
    with pytest.raises(InvalidTypeError):
        request_context(permissions=None)  # type: ignore[arg-type]


def test_the_hosts_own_permission_names_pass_even_in_navi_memorys_namespace() -> None:
    """A host forwards its user's whole permission set: names navi-memory does not know,
    ``navi.memory.*`` ones included (a host's own ``navi.memory.write``), are carried and
    grant nothing here; only navi.memory.read_all reads across users."""
    host = ["host.admin", "navi.memory.write", "navi.memory.readall"]
    with request_context(permissions=host), pytest.raises(PermissionDeniedError):
        read_scope(None)
    with request_context(permissions=["navi.memory.write", PERMISSION_READ_ALL]):
        assert read_scope(None) is None


def test_a_garbage_user_id_gets_a_short_message() -> None:
    """The error for a huge non-UUID string quotes its start, not megabytes of it."""
    with pytest.raises(InvalidTypeError, match="UUID") as caught:
        read_scope("x" * 1_000_000)
    assert len(str(caught.value)) < 300


def test_leaving_the_block_in_another_context_is_a_navi_error() -> None:
    """A block entered in one context and left in another (a framework that runs a
    dependency's set-up and tear-down in different tasks) gets an actionable
    InvalidInputError, not the raw ValueError of ContextVar.reset, and the context that
    left it is unchanged."""
    import contextvars

    from navi_memory.errors import InvalidInputError

    manager = request_context(user_id=ALICE, session_id="s1", permissions=["p"])
    elsewhere = contextvars.copy_context()
    elsewhere.run(manager.__enter__)
    assert elsewhere.run(_context) == (ALICE, "s1", frozenset({"p"}))
    with pytest.raises(InvalidInputError, match="same task"):
        manager.__exit__(None, None, None)
    assert _context() == (None, None, frozenset())
    # the failed exit did not use the block up: its own context can still leave it
    elsewhere.run(manager.__exit__, None, None, None)
    assert elsewhere.run(_context) == (None, None, frozenset())


def test_blocks_left_out_of_order_leave_no_user_behind() -> None:
    """Entered Alice then Bob, left Alice then Bob (two blocks not nested: an ExitStack, two
    generators): while Bob's block is in Bob is current, and once both are left nobody is — a
    ContextVar reset put back the value from before Bob's block, Alice, and a write without a
    user went into her memory."""
    alice = request_context(user_id=ALICE, session_id="a", permissions=[PERMISSION_READ_ALL])
    bob = request_context(user_id=BOB, session_id="b")
    alice.__enter__()
    bob.__enter__()
    alice.__exit__(None, None, None)
    assert (current_user_id(), current_session_id(), current_permissions()) == (
        BOB,
        "b",
        frozenset(),
    )
    bob.__exit__(None, None, None)
    assert (current_user_id(), current_session_id(), current_permissions()) == (
        None,
        None,
        frozenset(),
    )
    with pytest.raises(PermissionDeniedError):
        write_scope(None)


async def test_two_streaming_generators_closed_in_the_order_they_started() -> None:
    """The same through async generators, each holding a block across its yields."""

    async def stream(user: uuid.UUID) -> AsyncGenerator[uuid.UUID | None]:
        with request_context(user_id=user):
            yield current_user_id()
            yield current_user_id()

    first, second = stream(ALICE), stream(BOB)
    assert await anext(first) == ALICE
    assert await anext(second) == BOB
    await first.aclose()
    assert current_user_id() == BOB  # Bob's block is still in
    await second.aclose()
    assert current_user_id() is None


def test_a_block_left_out_of_order_inside_an_outer_one_gives_back_the_outer_values() -> None:
    """Outer Alice; inside it two blocks left out of order: after both, Alice again."""
    with request_context(user_id=ALICE):
        inner_a, inner_b = request_context(user_id=BOB), request_context(user_id=None)
        inner_a.__enter__()
        inner_b.__enter__()
        inner_a.__exit__(None, None, None)
        assert current_user_id() is None  # inner_b's: no user
        inner_b.__exit__(None, None, None)
        assert current_user_id() == ALICE
    assert current_user_id() is None
