"""navi-memory: long-term memory for a chat agent on PostgreSQL + pgvector.

Start with ``async with open_memory(Settings()) as memory: ...``; see README.md.
"""

from navi_memory.config import Settings
from navi_memory.constants import EMBEDDING_DIM, PERMISSION_READ_ALL
from navi_memory.db import Capabilities
from navi_memory.errors import (
    BackfillIncompleteError,
    ChatModelError,
    ChatModelTimeoutError,
    ConfigError,
    ConnectionLostError,
    EmbeddingError,
    EmbeddingTimeoutError,
    ExtractionError,
    InvalidInputError,
    InvalidTypeError,
    NaviMemoryError,
    NotFoundError,
    PermissionDeniedError,
    SchemaError,
    StorageError,
)
from navi_memory.facades.context import ContextBuilder, ContextPrompt
from navi_memory.facades.extractor import Extractor
from navi_memory.facades.kv import KvStore
from navi_memory.facades.search import UnifiedMemorySearch
from navi_memory.facades.sessions import SessionStore
from navi_memory.facades.store import MemoryStore
from navi_memory.llm import ChatReply, ChatTurn, OllamaChatModel, ToolCall, ToolChatModel
from navi_memory.memory import Memory, open_memory
from navi_memory.request_context import request_context
from navi_memory.schemas import (
    Chunk,
    ChunkDraft,
    ChunkHit,
    CompressionResult,
    ExportRecord,
    ExtractionReport,
    Fact,
    FactHit,
    ForgetResult,
    ImportResult,
    KvEntry,
    KvHit,
    MemoryHit,
    MemoryStats,
    Message,
    PurgeResult,
    SessionInfo,
    UserInfo,
    UserStats,
)
from navi_memory.text.guidelines import MEMORY_USAGE_GUIDELINES
from navi_memory.text.hits import format_hits
from navi_memory.tools import MemoryTools, ToolContext

__all__ = [
    "EMBEDDING_DIM",
    "MEMORY_USAGE_GUIDELINES",
    "PERMISSION_READ_ALL",
    "BackfillIncompleteError",
    "Capabilities",
    "ChatModelError",
    "ChatModelTimeoutError",
    "ChatReply",
    "ChatTurn",
    "Chunk",
    "ChunkDraft",
    "ChunkHit",
    "CompressionResult",
    "ConfigError",
    "ConnectionLostError",
    "ContextBuilder",
    "ContextPrompt",
    "EmbeddingError",
    "EmbeddingTimeoutError",
    "ExportRecord",
    "ExtractionError",
    "ExtractionReport",
    "Extractor",
    "Fact",
    "FactHit",
    "ForgetResult",
    "ImportResult",
    "InvalidInputError",
    "InvalidTypeError",
    "KvEntry",
    "KvHit",
    "KvStore",
    "Memory",
    "MemoryHit",
    "MemoryStats",
    "MemoryStore",
    "MemoryTools",
    "Message",
    "NaviMemoryError",
    "NotFoundError",
    "OllamaChatModel",
    "PermissionDeniedError",
    "PurgeResult",
    "SchemaError",
    "SessionInfo",
    "SessionStore",
    "Settings",
    "StorageError",
    "ToolCall",
    "ToolChatModel",
    "ToolContext",
    "UnifiedMemorySearch",
    "UserInfo",
    "UserStats",
    "format_hits",
    "open_memory",
    "request_context",
]
