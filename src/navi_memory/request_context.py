"""Who is asking: the current user, session and permissions, as context variables.

An agent application sets them once per request (``with request_context(...)``); every
``user_id=None`` in the API resolves through here (DESIGN.md, "Identity and tenancy").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from navi_memory.constants import PERMISSION_READ_ALL
from navi_memory.errors import InvalidTypeError, PermissionDeniedError

__all__ = [
    "as_user_id",
    "current_permissions",
    "current_session_id",
    "current_user_id",
    "has_permission",
    "read_scope",
    "request_context",
    "write_scope",
]

_user: ContextVar[uuid.UUID | None] = ContextVar("navi_memory_user", default=None)
_session: ContextVar[str | None] = ContextVar("navi_memory_session", default=None)
_permissions: ContextVar[frozenset[str]] = ContextVar(
    "navi_memory_permissions", default=frozenset()
)


def as_user_id(value: uuid.UUID | str) -> uuid.UUID:
    """A user id as a UUID; a string must be a UUID's text form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            raise InvalidTypeError(f"user_id must be a UUID, got {value!r}") from exc
    raise InvalidTypeError(f"user_id must be a UUID, got {type(value).__name__}")


@contextmanager
def request_context(
    user_id: uuid.UUID | str | None = None,
    session_id: str | None = None,
    permissions: Iterable[str] = (),
) -> Iterator[None]:
    """Set the current user, session and permissions for the code inside the block."""
    tokens = (
        _user.set(None if user_id is None else as_user_id(user_id)),
        _session.set(session_id),
        _permissions.set(frozenset(permissions)),
    )
    try:
        yield
    finally:
        _permissions.reset(tokens[2])
        _session.reset(tokens[1])
        _user.reset(tokens[0])


def current_user_id() -> uuid.UUID | None:
    return _user.get()


def current_session_id() -> str | None:
    return _session.get()


def current_permissions() -> frozenset[str]:
    return _permissions.get()


def has_permission(permission: str) -> bool:
    return permission in _permissions.get()


def write_scope(user_id: uuid.UUID | str | None) -> uuid.UUID:
    """The user a write belongs to: the one named, else the current one; never nobody.

    Code acting for a current user cannot write into another user's memory.
    """
    current = _user.get()
    if user_id is not None:
        wanted = as_user_id(user_id)
        if current is not None and wanted != current:
            raise PermissionDeniedError(
                "this request acts for another user; a write may only go to the current user"
            )
        return wanted
    if current is None:
        raise PermissionDeniedError(
            "no user for this write: pass user_id=... or set the current user with "
            "navi_memory.request_context(user_id=...)"
        )
    return current


def read_scope(user_id: uuid.UUID | str | None) -> uuid.UUID | None:
    """The user a read is limited to; None means all users, which needs navi.memory.read_all.

    Naming another user than the current one also needs read_all: a caller acting for user A
    never reads user B's rows by passing B's id.
    """
    current = _user.get()
    if user_id is not None:
        wanted = as_user_id(user_id)
        if current is not None and wanted != current and not has_permission(PERMISSION_READ_ALL):
            raise PermissionDeniedError(
                f"reading another user's memory needs the {PERMISSION_READ_ALL} permission"
            )
        return wanted
    if current is not None:
        return current
    if not has_permission(PERMISSION_READ_ALL):
        raise PermissionDeniedError(
            "no current user, so this read would cover every user; that needs the "
            f"{PERMISSION_READ_ALL} permission (or pass user_id=...)"
        )
    return None
