"""The public surface: what `import navi_memory` gives, and the error tree's built-in bases."""

from __future__ import annotations

import navi_memory
from navi_memory import errors


def test_all_is_the_curated_public_surface() -> None:
    assert sorted(navi_memory.__all__) == sorted(
        [
            "EMBEDDING_DIM",
            "PERMISSION_READ_ALL",
            "Capabilities",
            "ChatModelError",
            "Chunk",
            "ChunkDraft",
            "ChunkHit",
            "CompressionResult",
            "ConfigError",
            "ConnectionLostError",
            "EmbeddingError",
            "ExtractionError",
            "Fact",
            "FactHit",
            "InvalidInputError",
            "InvalidTypeError",
            "KvEntry",
            "KvHit",
            "KvStore",
            "Memory",
            "MemoryStore",
            "Message",
            "NaviMemoryError",
            "NotFoundError",
            "PermissionDeniedError",
            "SchemaError",
            "SessionInfo",
            "SessionStore",
            "Settings",
            "StorageError",
            "UserInfo",
            "open_memory",
            "request_context",
        ]
    )
    for name in navi_memory.__all__:
        assert getattr(navi_memory, name) is not None


def test_every_error_is_a_navi_memory_error_with_the_matching_builtin() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.NaviMemoryError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.InvalidTypeError, TypeError)
    assert issubclass(errors.PermissionDeniedError, PermissionError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.ConnectionLostError, errors.StorageError)
