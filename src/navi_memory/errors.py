"""The errors navi-memory raises: every one is a ``NaviMemoryError``.

Leaves also subclass the matching built-in where one fits, so ``except ValueError`` keeps working::

    NaviMemoryError
    ├── ConfigError(ValueError)           a setting is missing or malformed
    ├── InvalidInputError(ValueError)     a caller passed a value the API cannot take
    │   └── InvalidTypeError(TypeError)   ... of the wrong type
    ├── SchemaError                       the database schema or its extensions are not what we need
    ├── StorageError                      the database is down, unreachable or refused the statement
    │   └── ConnectionLostError(ConnectionError)   no connection, or it dropped: call again
    ├── PermissionDeniedError(PermissionError)   no current user / missing navi.memory.read_all
    ├── NotFoundError(LookupError)        the named row does not exist (or is not yours)
    ├── EmbeddingError                    the embedding model failed or answered junk
    │   ├── EmbeddingTimeoutError(TimeoutError)   ... did not answer in time
    │   └── BackfillIncompleteError       a backfill ran through, but the model refused some rows
    ├── ChatModelError                    the chat model failed or answered junk
    │   └── ChatModelTimeoutError(TimeoutError)   ... did not answer in time
    └── ExtractionError                   the extractor could not turn a session into facts
"""

from __future__ import annotations

__all__ = [
    "BackfillIncompleteError",
    "ChatModelError",
    "ChatModelTimeoutError",
    "ConfigError",
    "ConnectionLostError",
    "EmbeddingError",
    "EmbeddingTimeoutError",
    "ExtractionError",
    "InvalidInputError",
    "InvalidTypeError",
    "NaviMemoryError",
    "NotFoundError",
    "PermissionDeniedError",
    "SchemaError",
    "StorageError",
]


class NaviMemoryError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(NaviMemoryError, ValueError):
    """A setting is missing or malformed."""


class InvalidInputError(NaviMemoryError, ValueError):
    """A caller passed a value the API cannot take (NUL byte, too long, unknown sort column...)."""


class InvalidTypeError(InvalidInputError, TypeError):
    """A caller passed a value of the wrong type."""


class SchemaError(NaviMemoryError):
    """The database schema or its extensions are missing, too old or behind the code."""


class StorageError(NaviMemoryError):
    """The database could not be reached or refused the statement."""


class ConnectionLostError(StorageError, ConnectionError):
    """The connection to the database was lost mid-call (a server restart, a terminated backend,
    the network), or could not be made, at a point where calling again is safe: before the call
    committed anything, or in a call a repeat cannot double (a read, ``add_chunks``). A
    connection lost while a COMMIT was in flight is a plain StorageError instead: that call may
    or may not have taken effect. A ``ConnectionError`` too, so ``except ConnectionError``
    catches a database that is down."""


class PermissionDeniedError(NaviMemoryError, PermissionError):
    """The caller may not do this: no current user, or a global read without read_all."""


class NotFoundError(NaviMemoryError, LookupError):
    """The named row does not exist, or belongs to someone else."""


class EmbeddingError(NaviMemoryError):
    """The embedding model is down, timed out, or answered something that is not an embedding."""


class EmbeddingTimeoutError(EmbeddingError, TimeoutError):
    """The embedding model did not answer within EMBEDDING_TIMEOUT_SECONDS. A ``TimeoutError``
    too, so ``except TimeoutError`` catches a model that is too slow."""


class BackfillIncompleteError(EmbeddingError):
    """A backfill went through every row, but the model refused some of them (each on its own:
    junk for that text): they keep no vector, text search finds them, and a rerun retries
    them. Not a stop: ``embedded`` rows got their vector, ``left`` did not."""

    def __init__(self, message: str, *, embedded: int, left: int) -> None:
        super().__init__(message)
        self.embedded = embedded
        self.left = left


class ChatModelError(NaviMemoryError):
    """The chat model is down, timed out, or answered something unusable."""


class ChatModelTimeoutError(ChatModelError, TimeoutError):
    """The chat model did not answer within MEMORY_LLM_TIMEOUT_SECONDS. A ``TimeoutError``
    too, so ``except TimeoutError`` catches a model that is too slow."""


class ExtractionError(NaviMemoryError):
    """The extractor could not turn a session into facts."""
