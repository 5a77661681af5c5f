"""What every agent tool shares: who is calling (``ToolContext``), the function-calling spec, and
one ``call`` that turns bad arguments and failures into a short text the model can act on.

A tool never takes the user (or the session) as an argument: a model could name anyone's.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from navi_memory.constants import PERMISSION_READ_ALL
from navi_memory.errors import (
    InvalidInputError,
    InvalidTypeError,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
)
from navi_memory.request_context import (
    _check_permissions,  # the rule request_context applies to the same argument
    as_user_id,
    current_permissions,
    current_session_id,
    current_user_id,
    request_context,
)
from navi_memory.tools.arguments import json_type
from navi_memory.validation import check_session_id

__all__ = [
    "IDENTITY_ARGUMENTS",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "decode_arguments",
    "tool_error",
]

logger = logging.getLogger(__name__)

IDENTITY_ARGUMENTS: Final = ("user_id", "session_id")
"""Arguments every tool refuses: whose memory and which session come from the ToolContext."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who a tool call acts for. A field left None falls back to the request context
    (``navi_memory.request_context``) at the moment of the call. Inside a request context that
    acts for a user, the tool context may not name another user nor grant a permission the
    request does not hold (PermissionDeniedError, answered as the tool's error text): the
    tenancy rule of every other call (docs/architecture.md, "Identity and tenancy")."""

    user_id: uuid.UUID | str | None = None
    session_id: str | None = None
    permissions: frozenset[str] | None = None

    def resolved(self) -> ToolContext:
        """This context with every None field taken from the request context; a field of the
        wrong type or shape is an InvalidInputError (InvalidTypeError) saying which."""
        acting_for = current_user_id()
        held = current_permissions()
        user_id = acting_for if self.user_id is None else as_user_id(self.user_id)
        permissions = held if self.permissions is None else _check_permissions(self.permissions)
        session_id = (
            current_session_id() if self.session_id is None else check_session_id(self.session_id)
        )
        if acting_for is not None:
            if user_id != acting_for:
                raise PermissionDeniedError(
                    f"this request acts for user {acting_for}, and a tool call acts for it "
                    f"only: the ToolContext names user {user_id} (leave its user_id out)"
                )
            if not permissions <= held:
                raise PermissionDeniedError(
                    f"the ToolContext grants {', '.join(sorted(permissions - held))}, which "
                    "this request does not hold"
                )
        return ToolContext(
            user_id=user_id,
            session_id=session_id,
            permissions=permissions,
        )

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Run the block as this context's user, session and permissions, so the package's
        tenancy rules (``user_id=None`` is the current user) hold inside the tool."""
        ctx = self.resolved()
        with request_context(ctx.user_id, ctx.session_id, ctx.permissions or frozenset()):
            yield


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]
"""A tool's work: the decoded arguments and the resolved context in, the answer text out.
It raises navi_memory errors for bad arguments and failures; ``Tool.call`` renders them."""


def tool_error(tool: str, message: str) -> str:
    """The one-line answer of a tool call that could not be done."""
    return f"{tool} error: {message}"


def decode_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A tool call's arguments as a dict: given as a mapping or as the JSON text of an object
    (models send both; None and blank text are no arguments). Identity arguments are refused."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise InvalidInputError(
                f"the arguments are not valid JSON ({str(exc)[:80]}); send a JSON object"
            ) from exc
    if not isinstance(arguments, Mapping):
        raise InvalidTypeError(f"the arguments must be a JSON object, got {json_type(arguments)}")
    decoded: dict[str, Any] = {}
    for name, value in arguments.items():
        if not isinstance(name, str):
            raise InvalidTypeError("argument names must be text")
        if name in IDENTITY_ARGUMENTS:
            raise InvalidInputError(
                f"{name} is not an argument: the tool always acts for the user and session of "
                "this conversation; call it again without it"
            )
        decoded[name] = value
    return decoded


@dataclass(frozen=True, slots=True)
class Tool:
    """An agent tool: its function-calling spec and an async handler answering text."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """The JSON Schema (an ``object``) of the arguments."""
    handler: ToolHandler
    needs_user: bool = False
    """A call with no user (in its ToolContext or the request context) and no read_all is
    answered with one line saying no argument can help, before the handler runs: the memory
    tools' case (the host forgot the user)."""

    def spec(self) -> dict[str, Any]:
        """The tool in the function-calling shape Ollama and OpenAI accept (a fresh copy)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(dict(self.parameters)),
            },
        }

    async def call(
        self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None
    ) -> str:
        """Run the tool; never raises a navi_memory error: bad arguments, refusals and failures
        come back as one line of ``tool_error`` text (failures are also logged)."""
        try:
            decoded = decode_arguments(arguments)
            if context is None:
                context = ToolContext()
            elif not isinstance(context, ToolContext):
                raise InvalidTypeError(
                    f"context must be a navi_memory.ToolContext, got {type(context).__name__}"
                )
            resolved = context.resolved()
            held = resolved.permissions or ()
            if self.needs_user and resolved.user_id is None and PERMISSION_READ_ALL not in held:
                return self._no_user()
            return await self.handler(decoded, resolved)
        except (InvalidInputError, PermissionDeniedError, NotFoundError) as exc:
            return tool_error(self.name, str(exc))
        except StorageError as exc:
            # The model cannot fix the database; the log keeps what went wrong.
            logger.warning(
                "tools.storage_failed: %s: %s",
                self.name,
                exc,
                extra={"event": "tools.storage_failed", "tool": self.name},
            )
            return tool_error(self.name, "memory storage is unavailable right now; try later")
        except NaviMemoryError as exc:
            logger.warning(
                "tools.failed: %s: %s",
                self.name,
                exc,
                extra={"event": "tools.failed", "tool": self.name},
            )
            return tool_error(self.name, str(exc))

    def _no_user(self) -> str:
        # The host's mistake, not the model's: no argument can fix it, so the answer says so
        # (the refusal of the call underneath spoke of user_id=..., which the tool refuses).
        logger.warning(
            "tools.no_user: %s called with no user in its ToolContext nor request context",
            self.name,
            extra={"event": "tools.no_user", "tool": self.name},
        )
        return tool_error(
            self.name,
            "this conversation has no user, so there is no memory to use; no argument can change "
            "that (the application must call the tool with ToolContext(user_id=...)); go on "
            "without memory",
        )
