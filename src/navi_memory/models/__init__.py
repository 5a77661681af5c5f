"""SQLAlchemy 2.0 typed declarative models, one module per table group."""

from navi_memory.models.base import NAMING_CONVENTION, Base
from navi_memory.models.chunks import (
    ChunkLexemeDfRow,
    ChunkRow,
    ChunkTermsRow,
    ChunkTextQueueRow,
    ChunkTextStatsRow,
    ChunkVectorQueueRow,
    ChunkVectorRow,
)
from navi_memory.models.embedding_model import EmbeddingModelRow
from navi_memory.models.facts import (
    FactForgottenRow,
    FactRow,
    FactVectorQueueRow,
    FactVectorRow,
    SessionMemoryStateRow,
    SummaryRow,
)
from navi_memory.models.kv import KvRow
from navi_memory.models.sessions import MessageRow, SessionRow
from navi_memory.models.users import User

__all__ = [
    "NAMING_CONVENTION",
    "Base",
    "ChunkLexemeDfRow",
    "ChunkRow",
    "ChunkTermsRow",
    "ChunkTextQueueRow",
    "ChunkTextStatsRow",
    "ChunkVectorQueueRow",
    "ChunkVectorRow",
    "EmbeddingModelRow",
    "FactForgottenRow",
    "FactRow",
    "FactVectorQueueRow",
    "FactVectorRow",
    "KvRow",
    "MessageRow",
    "SessionMemoryStateRow",
    "SessionRow",
    "SummaryRow",
    "User",
]
