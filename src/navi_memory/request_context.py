"""Who is asking: the current user, session and permissions, as context variables.

An agent application sets them once per request (``with request_context(...)``); every
``user_id=None`` in the API resolves through here (DESIGN.md, "Identity and tenancy").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token

from navi_memory.constants import PERMISSION_MAX_CHARS, PERMISSION_READ_ALL, SESSION_ID_MAX_CHARS
from navi_memory.errors import InvalidInputError, InvalidTypeError, PermissionDeniedError
from navi_memory.validation import check_text

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


def as_user_id(value: uuid.UUID | str) -> uuid.UUID:
    """A user id as a UUID; a string must be a UUID's text form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value):,} chars)"
            raise InvalidTypeError(f"user_id must be a UUID, got {shown}") from exc
    raise InvalidTypeError(f"user_id must be a UUID, got {type(value).__name__}")


_entered: ContextVar[tuple[request_context, ...]] = ContextVar(
    "navi_memory_request_entered", default=()
)
"""The blocks entered in this context and not yet left, innermost last: the current values are
always the innermost block's (none: no user, no session, no permission)."""


class request_context(AbstractContextManager[None]):  # lower case: it replaced a function
    """Set the current user, session and permissions for the code inside the block.

    Every argument is checked when the call is made, before anything is set: a bad one raises
    InvalidInputError (InvalidTypeError for a wrong type) and the context stays as it was. On
    leaving the block, by any path, the values of the innermost block still entered come back
    (none left: no user). Blocks left out of order — two streaming generators of one task,
    each holding a block across its ``yield``s, closed in the order they started — therefore
    never leave an earlier block's user behind once every block is left.
    """

    __slots__ = ("_permissions", "_session_id", "_token", "_user_id")

    def __init__(
        self,
        user_id: uuid.UUID | str | None = None,
        session_id: str | None = None,
        permissions: Iterable[str] = (),
    ) -> None:
        self._user_id = None if user_id is None else as_user_id(user_id)
        self._session_id = (
            None
            if session_id is None
            else check_text("session_id", session_id, max_chars=SESSION_ID_MAX_CHARS)
        )
        self._permissions = _check_permissions(permissions)
        self._token: Token[tuple[request_context, ...]] | None = None

    def __enter__(self) -> None:
        if self._token is not None:
            raise InvalidInputError("a request_context(...) block cannot be entered twice")
        self._token = _entered.set((*_entered.get(), self))

    def __exit__(self, *exc_info: object) -> None:
        if self._token is None:
            raise InvalidInputError("a request_context(...) block was left without being entered")
        token, self._token = self._token, None
        entered = _entered.get()
        try:
            _entered.reset(token)  # only to learn that this is the context it was entered in
        except ValueError as exc:  # the token belongs to another context (another task's)
            self._token = token  # still entered there: its own task can still leave it
            raise InvalidInputError(
                "a request_context(...) block was left in another context than the one it was "
                "entered in: enter and leave it in the same task (a `with` block in one "
                "coroutine, not a set-up and a tear-down run by different tasks); the context "
                "it was entered in keeps its values"
            ) from exc
        # Not the values from before this block (reset's): a block entered after it may have
        # been left already, and those would be its user's. The innermost block still in.
        _entered.set(tuple(block for block in entered if block is not self))


def _innermost() -> request_context | None:
    """The innermost block entered and not left (None: none, so no user, session or
    permission)."""
    entered = _entered.get()
    return entered[-1] if entered else None


def _check_permissions(permissions: object) -> frozenset[str]:
    if isinstance(permissions, str | bytes) or not isinstance(permissions, Iterable):
        raise InvalidTypeError(
            "permissions must be an iterable of permission names such as "
            f"[{PERMISSION_READ_ALL!r}], got {type(permissions).__name__}"
        )
    checked = [
        check_text("permission", item, max_chars=PERMISSION_MAX_CHARS) for item in permissions
    ]
    return frozenset(checked)


def current_user_id() -> uuid.UUID | None:
    block = _innermost()
    return None if block is None else block._user_id


def current_session_id() -> str | None:
    block = _innermost()
    return None if block is None else block._session_id


def current_permissions() -> frozenset[str]:
    block = _innermost()
    return frozenset() if block is None else block._permissions


def has_permission(permission: str) -> bool:
    return permission in current_permissions()


def write_scope(user_id: uuid.UUID | str | None) -> uuid.UUID:
    """The user a write belongs to: the one named, else the current one; never nobody.

    Code acting for a current user cannot write into another user's memory.
    """
    current = current_user_id()
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
    current = current_user_id()
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
