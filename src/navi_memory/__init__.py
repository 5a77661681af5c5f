"""navi-memory: long-term memory for a chat agent on PostgreSQL + pgvector.

Start with ``async with open_memory(Settings()) as memory: ...``; see README.md.
"""

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM, PERMISSION_READ_ALL
from navi_memory.db import Capabilities
from navi_memory.errors import (
    ChatModelError,
    ConfigError,
    EmbeddingError,
    ExtractionError,
    InvalidInputError,
    InvalidTypeError,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    SchemaError,
    StorageError,
)
from navi_memory.memory import Memory, open_memory
from navi_memory.request_context import request_context
from navi_memory.schemas import UserInfo

__all__ = [
    "EMBEDDING_DIM",
    "PERMISSION_READ_ALL",
    "Capabilities",
    "ChatModelError",
    "ConfigError",
    "EmbeddingError",
    "ExtractionError",
    "InvalidInputError",
    "InvalidTypeError",
    "Memory",
    "NaviMemoryError",
    "NotFoundError",
    "PermissionDeniedError",
    "SchemaError",
    "Settings",
    "StorageError",
    "UserInfo",
    "open_memory",
    "request_context",
]
