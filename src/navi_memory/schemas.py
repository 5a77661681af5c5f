"""The Pydantic models that cross the public API: what callers pass in and get back."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "Chunk",
    "ChunkDraft",
    "ChunkHit",
    "CompressionResult",
    "ExportChunk",
    "ExportExtraction",
    "ExportFact",
    "ExportForgotten",
    "ExportHeader",
    "ExportKv",
    "ExportMessage",
    "ExportRecord",
    "ExportSession",
    "ExportSummary",
    "ExtractionReport",
    "Fact",
    "FactHit",
    "ForgetResult",
    "ImportResult",
    "KvEntry",
    "KvHit",
    "MemoryHit",
    "MemoryStats",
    "Message",
    "MessageKind",
    "MessageRole",
    "PurgeResult",
    "SessionInfo",
    "UserInfo",
    "UserStats",
]

MessageRole = Literal["system", "user", "assistant", "tool_call", "tool"]
"""``tool_call`` is the assistant asking for a tool (``tool_name`` + ``tool_args``);
``tool`` is the tool's result (``tool_name`` + ``content``)."""

MessageKind = Literal["message", "summary", "marker"]
"""``summary`` is a compression summary standing in for demoted history; ``marker`` notes that a
compression happened. Neither is conversation, so neither is indexed as raw history."""


class _Model(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


class Message(_Model):
    """One row of a session's history."""

    id: int | None = None
    session_id: str
    seq: int
    role: MessageRole
    content: str = ""
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    kind: MessageKind = "message"
    is_context: bool = True
    created_at: datetime


class ChunkDraft(_Model):
    """A raw chunk before it is stored: verbatim text of consecutive demoted messages."""

    content: str
    content_hash: str = Field(description="sha256 hex digest of content")
    # Strict: pydantic would otherwise take True, 1.0 or "2" for a position in a session.
    start_seq: int = Field(strict=True)
    end_seq: int = Field(strict=True)
    started_at: datetime
    ended_at: datetime
    breadcrumbs: list[str] = Field(default_factory=list)


class Fact(_Model):
    """A curated fact about a user."""

    id: int
    user_id: uuid.UUID | None
    """None only on legacy rows, from before memory had owners."""
    category: str
    key: str
    value: str
    source: str | None = None
    confidence: int | None = None
    expires_at: datetime | None = None
    last_verified_at: datetime | None = None
    source_context: str | None = None
    merged_into: int | None = None
    unmerged_at: datetime | None = None
    """When the user separated it from a merge (``unmerge_fact``): a dedupe never merges it
    again. None: never separated."""
    has_embedding: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    session_id: str | None = None
    """The session the value was written from (provenance; None: outside any session, or a
    legacy row)."""


class UserInfo(_Model):
    """A row of navi_users."""

    id: uuid.UUID
    name: str | None = None
    created_at: datetime


class FactHit(Fact):
    """A fact found by search_facts, with how it was found."""

    via: Literal["vector", "text", "recent"]
    distance: float | None = None
    """Cosine distance to the query (vector hits)."""
    terms_hit: int = 0
    """Distinct query terms found in category, key or value (text hits)."""


class Chunk(_Model):
    """A stored raw chunk: verbatim demoted messages of one session."""

    id: int
    user_id: uuid.UUID
    session_id: str
    content: str
    content_hash: str
    start_seq: int
    end_seq: int
    started_at: datetime
    ended_at: datetime
    breadcrumbs: list[str] = Field(default_factory=list)
    has_embedding: bool = False
    created_at: datetime | None = None


class ChunkHit(Chunk):
    """A chunk found by search_chunks, with how it was found."""

    via: Literal["vector", "text", "recent"]
    distance: float | None = None
    """Cosine distance to the query (vector hits)."""
    terms_hit: int = 0
    """Distinct query terms found in the content or the breadcrumbs (text hits)."""
    score: float | None = None
    """The fused score that ordered the hits (CHUNK_TEXT_RANKING ``bm25``): the chunk's BM25
    score relative to the best text hit's (0–1) plus CHUNK_FUSION_VECTOR_WEIGHT times its
    cosine similarity to the query (BM25 alone when the query has no vector: no embedder, or
    the model down). Relative to this query's best hit: not comparable across queries. None
    for the spec's ranking and for recent chunks."""


class SessionInfo(_Model):
    """A row of sessions: ``id`` (the caller's session id), ``user_id`` (its owner),
    ``title``, ``last_active`` (moved by every append), ``session_metadata`` (a JSON object the
    package keeps per session: the recall ledger ``injected_chunk_ids``), ``created_at`` and
    ``updated_at``."""

    id: str
    user_id: uuid.UUID
    title: str | None = None
    last_active: datetime
    session_metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @field_validator("session_metadata", mode="before")
    @classmethod
    def _an_object_or_empty(cls, value: object) -> object:
        # The column takes any JSON a host writes; what is not an object is read as empty.
        return value if isinstance(value, dict) else {}


class CompressionResult(_Model):
    """What one ``SessionStore.compress`` call did."""

    demoted: int
    """Rows taken out of the context (the previous summary included)."""
    summary: Message | None
    """The new summary message, now first in the context; None when nothing was demoted."""
    chunks_written: int
    """Raw chunk rows written (0 with indexing off, or when all were stored already; a refused
    chunk write fails the whole compression with StorageError, an embedder failure stores the
    chunks without vectors)."""
    breadcrumbs: list[str]
    """The KEYS: line's items merged with the deterministic ones, attached to every chunk."""
    used_fallback: bool
    """True when the summary is the deterministic truncation note (no model, or it failed)."""


class ExtractionReport(_Model):
    """What one run of the extractor did (``memory.extractor``)."""

    sessions_seen: int = 0
    """Sessions looked at: stale ones for a sweep, the one named for ``extract_session``."""
    sessions_extracted: int = 0
    """Sessions whose facts were written and which are now marked extracted."""
    sessions_skipped: int = 0
    """Sessions left alone: another extractor holds or has just done them, they became active
    again, there was nothing new since their last extraction, or they were deleted meanwhile."""
    failures: int = 0
    """Sessions whose extraction failed (model down, a reply with no JSON, a database error):
    left unmarked, so the next run retries them; facts already written stay."""
    facts_written: int = 0
    """Facts inserted, updated or confirmed (the same value again)."""
    facts_merged: int = 0
    """Facts whose key merged other spellings of it for the user (``dedupe``)."""
    facts_skipped: int = 0
    """Items of the model's replies that were no usable fact."""
    facts_outdated: int = 0
    """Facts the session told that the user changed or forgot after the session's last
    activity (a newer value of the key, written elsewhere; a forget): not written, the newer
    word stands."""
    summaries_written: int = 0
    """Users' summaries regenerated from their facts."""

    def __add__(self, other: ExtractionReport) -> ExtractionReport:
        fields = type(self).model_fields
        return ExtractionReport(**{f: getattr(self, f) + getattr(other, f) for f in fields})


class KvEntry(_Model):
    """One kv_store row; ``session_id`` None is the user-wide entry."""

    user_id: uuid.UUID
    scope: str
    session_id: str | None
    key: str
    value: str
    created_at: datetime
    updated_at: datetime


class KvHit(_Model):
    """An entry found by ``search_values``: a sketch's section is its key."""

    user_id: uuid.UUID
    scope: str
    session_id: str | None
    key: str
    value: str
    updated_at: datetime
    terms_hit: int
    """Distinct search terms found in key or value."""

    @property
    def section(self) -> str:
        return self.key


class MemoryHit(_Model):
    """One hit of unified search (``memory.search``): a fact, a raw excerpt or a sketch, with
    its provenance, how it was found and, for a raw excerpt, its freshness marks."""

    source_type: Literal["fact", "raw", "sketch"]
    text: str
    """A fact's value, a raw excerpt's verbatim text, a sketch's value."""
    user_id: uuid.UUID | None = None
    """Whose memory it is (None: a legacy unowned fact, seen by a global read)."""
    session_id: str | None = None
    """The session it comes from; for a fact the session it was last written from (None when
    unknown: legacy rows, writes outside a session); None for a user-wide sketch."""
    timestamp: datetime
    """A fact's ``updated_at``, a raw excerpt's ``ended_at``, a sketch's ``updated_at``."""
    score: float = 0.0
    """How well the hit matched. Raw excerpts under CHUNK_TEXT_RANKING ``bm25``: the fused
    score that ordered them (``ChunkHit.score``: BM25 relative to the best text hit's plus
    CHUNK_FUSION_VECTOR_WEIGHT times the cosine similarity), descending. Facts, sketches and
    raw excerpts under ``terms``: vector hits their cosine similarity (1 - distance), text hits
    the distinct query terms matched (sketches of the current session come first whatever
    their score). Recent items (a query without terms): 0."""
    via: Literal["vector", "text", "recent"] = "text"
    """How it was found (a hit made by hand for format_hits: "text" unless said)."""
    distance: float | None = None
    """Cosine distance to the query (vector hits)."""
    terms_hit: int = 0
    """Distinct query terms matched (text hits); a raw excerpt of the BM25 list counts the query
    terms it holds whole (every lexeme of a term), as ``ChunkHit.terms_hit``."""
    category: str | None = None
    """A fact's category."""
    key: str | None = None
    """A fact's key; a sketch's key (its section)."""
    fact_id: int | None = None
    chunk_id: int | None = None
    start_seq: int | None = None
    """A raw excerpt's first and last message (``seq``) in its session."""
    end_seq: int | None = None
    breadcrumbs: list[str] = Field(default_factory=list)
    """A raw excerpt's breadcrumbs (the compression's KEYS line and the extracted entities)."""
    superseded_by: str | None = None
    """Raw only: the key of a newer fact that overrides this excerpt (docs/memory.md)."""
    before_summary: bool = False
    """Raw only: the excerpt ended before its session's last summary was written."""

    @property
    def section(self) -> str | None:
        """A sketch's section (its key)."""
        return self.key if self.source_type == "sketch" else None


# --- operations: stats, export / import ------------------------------------------------------


class UserStats(_Model):
    """What one user holds (``memory.admin.stats``)."""

    user_id: uuid.UUID | None
    """None: the legacy rows that belong to no user."""
    name: str | None = None
    facts: int = 0
    """Visible facts (expired ones included: they are rows until purged)."""
    hidden_facts: int = 0
    expired_facts: int = 0
    facts_without_vector: int = 0
    summary: bool = False
    sessions: int = 0
    messages: int = 0
    chunks: int = 0
    chunks_without_vector: int = 0
    chunk_vectors_queued: int = 0
    kv_entries: int = 0


class MemoryStats(_Model):
    """Row counts of the whole database (``memory.admin.stats``)."""

    tables: dict[str, int]
    """Rows per table."""
    vectors_missing: dict[str, int]
    """Rows without a vector: visible facts, chunks (backfill fills them)."""
    queues: dict[str, int]
    """Index backlogs: ``memory_chunk_vector_queue``, ``memory_chunk_text_queue`` and
    ``memory_fact_vector_queue`` (rows their indexers have still to move; search reads them
    exactly meanwhile), ``unindexed`` (chunk vectors in neither the index nor the queue:
    backfill queues them), ``awaiting_graph`` (indexed chunk vectors of users past
    CHUNK_GRAPH_FROM not yet in the HNSW graph: the chunk indexer moves them)."""
    hidden_facts: int
    expired_facts: int
    """Facts past their expiry, invisible to every read; ``purge_expired`` deletes them."""
    users: int
    per_user: list[UserStats]
    """The largest users first (all, or the one asked for)."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExportHeader(_Record):
    """The first record of an export: the format, and the user it holds."""

    type: Literal["header"] = "header"
    format: str
    version: int
    user_id: uuid.UUID
    name: str | None = None
    created_at: datetime
    with_vectors: bool = False
    embedding_model: str | None = None
    """With vectors: the embedding model that made them (the source database's model of
    record). An import keeps them only into a database whose vectors are that model's (or that
    holds none yet); an export without it (written before it was carried) imports without
    vectors, which backfill then makes."""


class ExportFact(_Record):
    """A fact, hidden ones included. ``ref`` names it within the export (``f1``, ``f2``, in id
    order); ``merged_into`` is the ref of the fact it is hidden behind, never a database id.
    ``unmerged_at``: when the user separated it from a merge (a dedupe never merges it again);
    ``session_id``: the session it was last written from. Both absent from older exports
    (read as None)."""

    type: Literal["fact"] = "fact"
    ref: str
    category: str
    key: str
    value: str
    source: str | None = None
    confidence: int | None = Field(default=None, strict=True)  # not "90", true or 90.0
    expires_at: datetime | None = None
    last_verified_at: datetime | None = None
    source_context: str | None = None
    merged_into: str | None = None
    unmerged_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    session_id: str | None = None
    embedding: list[float] | None = None


class ExportSummary(_Record):
    type: Literal["summary"] = "summary"
    content: str
    updated_at: datetime


class ExportSession(_Record):
    """A session; the recall ledger in ``session_metadata`` holds chunk refs, not ids."""

    type: Literal["session"] = "session"
    id: str
    title: str | None = None
    last_active: datetime
    session_metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


class ExportMessage(_Record):
    type: Literal["message"] = "message"
    session_id: str
    seq: int = Field(strict=True)
    role: MessageRole
    content: str = ""
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    kind: MessageKind = "message"
    is_context: bool = True
    created_at: datetime


class ExportExtraction(_Record):
    """When the extractor last processed a session (which need not be a ``sessions`` row)."""

    type: Literal["extraction"] = "extraction"
    session_id: str
    extracted_at: datetime | None = None
    failed_at: datetime | None = None
    """The extractor's last failed attempt since its last success (revision 0025): a sweep
    takes such a session after the others. Absent in exports made before it was carried."""
    failures: int = Field(default=0, ge=0, le=2_147_483_647, strict=True)  # not "3", true, 1.0
    """The extractor's failures of the session's own since its last success (revision 0030):
    sweeps leave it for a while after each. Absent in exports made before it was carried."""


class ExportChunk(_Record):
    """A raw chunk; ``ref`` (``c1``, ``c2``, in id order) is what the recall ledger names."""

    type: Literal["chunk"] = "chunk"
    ref: str
    session_id: str
    content: str
    content_hash: str
    # Strict: pydantic would otherwise take True, 1.0 or "2" for a position in a session.
    start_seq: int = Field(strict=True)
    end_seq: int = Field(strict=True)
    started_at: datetime
    ended_at: datetime
    breadcrumbs: list[str] = Field(default_factory=list)
    created_at: datetime
    embedding: list[float] | None = None


class ExportKv(_Record):
    """A key/value entry (a sketch section when ``scope`` is the scratchpad's)."""

    type: Literal["kv"] = "kv"
    scope: str
    session_id: str | None = None
    key: str
    value: str
    created_at: datetime
    updated_at: datetime


class ExportForgotten(_Record):
    """A forget the user asked for in a conversation (memory_fact_forgotten): an extraction of
    a session active before it leaves the fact out. ``category`` as folded (NFC, lower case;
    "" for a forget naming none, which holds in every category), ``key_norm`` the key's
    canonical form (text.keys.normalize_key)."""

    type: Literal["forgotten"] = "forgotten"
    category: str
    key_norm: str
    forgotten_at: datetime


ExportRecord = Annotated[
    ExportHeader
    | ExportFact
    | ExportSummary
    | ExportSession
    | ExportMessage
    | ExportExtraction
    | ExportChunk
    | ExportKv
    | ExportForgotten,
    Field(discriminator="type"),
]
"""One line of an export (JSON Lines): the header first, then the user's rows."""


class ForgetResult(_Model):
    """What ``MemoryStore.forget_facts`` deleted: all of it, not only the visible facts."""

    facts: list[Fact]
    """The visible facts deleted, as they were, by category and key."""
    expired: int
    """Rows the key named that were past their expiry: deleted too (their rows are freed), but
    no longer visible, so not among ``facts``."""
    summary_removed: bool
    """True when the user's summary was deleted with them: it may tell a forgotten fact (an
    expired one included), and prose cannot be edited; the next extraction writes it again."""

    @property
    def deleted_anything(self) -> bool:
        """Whether the call deleted any row at all (a fact, an expired row, the summary)."""
        return bool(self.facts) or self.expired > 0 or self.summary_removed


class ImportResult(_Model):
    """What ``memory.admin.import_user`` wrote."""

    user_id: uuid.UUID
    rows: dict[str, int]
    """Rows written per record type (fact, session, message, chunk, ...)."""
    replaced: bool
    """True when the user's previous memory was deleted first (``replace=True``)."""
    vectors_dropped: bool = False
    """True when the export's vectors were left out: made by another embedding model than
    this database's vectors (or by a model the export does not name). Backfill (or reembed)
    gives the rows vectors of this database's model."""


class PurgeResult(_Model):
    """What ``memory.admin.purge_expired`` deleted (or, with ``dry_run``, would delete)."""

    expired: int
    """Facts past their expiry."""
    hidden: int
    """Rows hidden behind those facts that have not expired themselves: kept and brought back
    (the newest takes the key, the others are hidden behind it), never deleted with them."""
    dry_run: bool
