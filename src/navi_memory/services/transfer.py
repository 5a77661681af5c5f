"""Export and import of one user's memory: the rules that make export → import → export give
the same records again, except database ids.

Ids never leave the database: a fact names the fact it is hidden behind by its ``ref`` within
the export (``f1``, ``f2``, ... in id order), and the recall ledger of a session names chunks by
their refs (``c1``, ...). On import, new ids are reserved in the same order, so a second export
numbers the refs exactly as the first; every timestamp is written as it was exported.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.constants import (
    EMBEDDING_DIM,
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    FACT_CATEGORY_MAX_CHARS,
    FACT_KEY_MAX_CHARS,
    INJECTED_LEDGER_KEY,
    INT32_MAX,
    KV_KEY_MAX_CHARS,
    KV_SCOPE_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    SESSION_ID_MAX_CHARS,
    SESSION_TITLE_MAX_CHARS,
    TOOL_NAME_MAX_CHARS,
)
from navi_memory.errors import EmbeddingError, InvalidInputError, InvalidTypeError, NotFoundError
from navi_memory.llm.embedder import same_model
from navi_memory.llm.vectors import storable_vector
from navi_memory.repositories.embedding_model import EmbeddingModelRepository
from navi_memory.repositories.transfer import TransferRepository, floats
from navi_memory.schemas import (
    ChunkDraft,
    ExportChunk,
    ExportExtraction,
    ExportFact,
    ExportForgotten,
    ExportHeader,
    ExportKv,
    ExportMessage,
    ExportRecord,
    ExportSession,
    ExportSummary,
    ImportResult,
)
from navi_memory.services.chunks import checked_draft
from navi_memory.services.facts import SOURCES
from navi_memory.text.keys import category_fold
from navi_memory.validation import (
    check_aware_datetime,
    check_int,
    check_json_object,
    check_kv_entry_name,
    check_optional_session_id,
    check_optional_text,
    check_session_id,
    check_text,
    holds_nul,
)

__all__ = ["TransferService", "export_header", "import_refusals", "parse_records"]

_RECORD: TypeAdapter[ExportRecord] = TypeAdapter(ExportRecord)

R = TypeVar("R")


def parse_records(records: object) -> list[ExportRecord]:
    """Records as models, each checked as the live API checks the same values; a bad one is an
    InvalidInputError (InvalidTypeError for a wrong type) naming its position (1-based, the
    line of a JSON Lines file), its kind and the field."""
    if isinstance(records, str | bytes | bytearray | Mapping) or not isinstance(records, Iterable):
        raise InvalidTypeError(
            "records must be a list of export records (ExportRecord objects or their dicts), "
            f"got {type(records).__name__}"
        )
    parsed: list[ExportRecord] = []
    for number, record in enumerate(records, 1):
        if isinstance(record, Mapping):
            try:
                record = _RECORD.validate_python(record)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise InvalidInputError(
                    f"record {number} is not a navi-memory export record: {where}: {first['msg']}"
                ) from exc
        elif not isinstance(record, _RECORD_TYPES):
            raise InvalidTypeError(
                f"record {number} must be an export record or its dict, got {type(record).__name__}"
            )
        try:
            _check_record(record)
        except InvalidInputError as exc:
            raise type(exc)(f"record {number} ({_name(record)}): {exc}") from exc
        parsed.append(record)
    return parsed


def import_refusals(records: Sequence[ExportRecord]) -> list[str]:
    """What ``parse_records`` would refuse in ``records`` (an export just made), one line a
    record, as the import would name it. Empty for everything this package writes; rows a
    legacy table held (an empty value, blanks around a key, text over today's limits) are
    exported as they are, and an import refuses them until they are fixed."""
    refusals = []
    for number, record in enumerate(records, 1):
        try:
            _check_record(record)
        except InvalidInputError as exc:
            refusals.append(f"record {number} ({_name(record)}): {exc}")
    return refusals


_RECORD_TYPES: Final = (
    ExportHeader,
    ExportFact,
    ExportSummary,
    ExportSession,
    ExportMessage,
    ExportExtraction,
    ExportChunk,
    ExportKv,
    ExportForgotten,
)


def _name(record: ExportRecord) -> str:
    ref = getattr(record, "ref", None) or getattr(record, "id", None)
    return record.type if ref is None else f"{record.type} {ref}"


def _check_record(record: ExportRecord) -> None:
    """The values of one record, by the rules the live API applies to them (a model built
    with ``model_construct`` skipped pydantic, so the types are checked here too)."""
    for name in type(record).model_fields:
        value = getattr(record, name)
        if value is not None and (isinstance(value, datetime) or name.endswith("_at")):
            check_aware_datetime(name, value)
    match record:
        case ExportHeader():
            check_optional_text("name", record.name)
        case ExportFact():
            check_text("ref", record.ref, max_chars=SESSION_ID_MAX_CHARS)
            check_text("category", record.category, max_chars=FACT_CATEGORY_MAX_CHARS)
            check_text("key", record.key, max_chars=FACT_KEY_MAX_CHARS)
            for name, text in (("category", record.category), ("key", record.key)):
                # upsert_fact stores both trimmed: "editor " beside "editor" would be two
                # visible facts of one key, a state the live API never makes.
                if text != text.strip() or not text:
                    raise InvalidInputError(
                        f"a fact's {name} {text!r} has blanks around it (or is empty): "
                        "upsert_fact stores it trimmed; trim it in the file"
                    )
            check_text("value", record.value)
            check_optional_text("source_context", record.source_context)
            check_optional_session_id(record.session_id)
            if record.source is not None and record.source not in SOURCES:
                raise InvalidInputError(
                    f"source must be one of {', '.join(SOURCES)}; got {record.source!r}"
                )
            if record.confidence is not None:
                check_int("confidence", record.confidence, minimum=0, maximum=100)
            _check_embedding(record.embedding)
        case ExportSummary():
            check_text("content", record.content, allow_empty=True)
        case ExportChunk():
            check_text("ref", record.ref, max_chars=SESSION_ID_MAX_CHARS)
            check_session_id(record.session_id)
            draft = {name: getattr(record, name) for name in ChunkDraft.model_fields}
            checked_draft(ChunkDraft.model_construct(**draft))
            _check_embedding(record.embedding)
        case ExportSession():
            check_session_id(record.id)
            check_optional_text("title", record.title, max_chars=SESSION_TITLE_MAX_CHARS)
            check_json_object(
                "session_metadata", record.session_metadata, max_chars=MESSAGE_MAX_CHARS
            )
            ledger = record.session_metadata.get(INJECTED_LEDGER_KEY)
            if ledger is not None and (
                not isinstance(ledger, list) or not all(isinstance(ref, str) for ref in ledger)
            ):
                raise InvalidInputError(
                    f"session_metadata's recall ledger ({INJECTED_LEDGER_KEY}) must be a list "
                    "of chunk refs such as 'c1'"
                )
        case ExportMessage():
            check_session_id(record.session_id)
            check_int("seq", record.seq, minimum=0, maximum=INT32_MAX)
            check_text("content", record.content, max_chars=MESSAGE_MAX_CHARS, allow_empty=True)
            check_optional_text(
                "tool_name", record.tool_name, max_chars=TOOL_NAME_MAX_CHARS, allow_empty=False
            )
            if record.tool_args is not None:
                check_json_object("tool_args", record.tool_args, max_chars=MESSAGE_MAX_CHARS)
        case ExportExtraction():
            check_session_id(record.session_id)
            check_int("failures", record.failures, minimum=0, maximum=INT32_MAX)
        case ExportForgotten():
            # "" is a forget that named no category (it holds in every category).
            category = check_text(
                "category", record.category, max_chars=FACT_CATEGORY_MAX_CHARS, allow_empty=True
            )
            if category != category_fold(category):
                # Stored so, it would match no category an extraction looks up: a forget
                # kept that quietly does nothing.
                raise InvalidInputError(
                    f"category must be folded as the package stores a forget's (lower case, "
                    f"NFC, no surrounding blanks): {category_fold(category)!r}, not {category!r}"
                )
            check_text("key_norm", record.key_norm)
        case ExportKv():
            scope = check_text("scope", record.scope, max_chars=KV_SCOPE_MAX_CHARS)
            key = check_text("key", record.key, max_chars=KV_KEY_MAX_CHARS)
            check_text("value", record.value, allow_empty=True)
            check_kv_entry_name(scope, check_optional_session_id(record.session_id), key)


def _check_embedding(embedding: list[float] | None) -> None:
    """A vector as the embedder's are checked before they are stored (llm/vectors.py)."""
    if embedding is None:
        return
    if not isinstance(embedding, list) or len(embedding) != EMBEDDING_DIM:
        size = len(embedding) if isinstance(embedding, list) else type(embedding).__name__
        raise InvalidInputError(
            f"embedding must be {EMBEDDING_DIM} numbers, got {size}; leave it out (null) and "
            "backfill will embed the row again"
        )
    try:
        storable_vector(embedding, subject="the export")
    except EmbeddingError as exc:
        raise InvalidInputError(f"embedding: {exc}") from exc


def _of(records: Sequence[ExportRecord], kind: type[R]) -> list[R]:
    return [record for record in records if isinstance(record, kind)]


def _unique(what: str, keys: Iterable[object]) -> None:
    repeated = [key for key, count in Counter(keys).items() if count > 1]
    if repeated:
        raise InvalidInputError(f"the export repeats {what} {repeated[0]!r}")


def _no_nul(records: Sequence[ExportRecord]) -> None:
    """PostgreSQL text cannot hold NUL: refuse the import before writing anything."""
    if holds_nul([record.model_dump() for record in records]):
        raise InvalidInputError("the export holds a NUL character, which PostgreSQL refuses")


def export_header(records: Sequence[ExportRecord]) -> ExportHeader:
    """The header of parsed records, checked: first, alone, and of the format this reads."""
    if not records or not isinstance(records[0], ExportHeader):
        raise InvalidInputError("an export starts with its header record (type 'header')")
    header = records[0]
    if header.format != EXPORT_FORMAT or header.version != EXPORT_FORMAT_VERSION:
        raise InvalidInputError(
            f"this is {header.format!r} version {header.version}; this navi-memory reads "
            f"{EXPORT_FORMAT!r} version {EXPORT_FORMAT_VERSION}"
        )
    if _of(records[1:], ExportHeader):
        raise InvalidInputError("an export has exactly one header record")
    return header


class TransferService:
    """Builds an export from one user's rows, and plans and writes an import."""

    # --- export -----------------------------------------------------------------------------

    async def export(
        self, session: AsyncSession, user_id: uuid.UUID, *, with_vectors: bool
    ) -> list[ExportRecord]:
        repo = TransferRepository(session=session)
        user = await repo.user(user_id)
        if user is None:
            raise NotFoundError(f"no user {user_id}")
        model = None
        if with_vectors:
            model = await EmbeddingModelRepository(session=session).recorded()
        records: list[ExportRecord] = [
            ExportHeader(
                format=EXPORT_FORMAT,
                version=EXPORT_FORMAT_VERSION,
                user_id=user.id,
                name=user.name,
                created_at=user.created_at,
                with_vectors=with_vectors,
                embedding_model=model,
            )
        ]
        facts = await repo.facts(user_id, with_vectors=with_vectors)
        fact_refs = {row["id"]: f"f{number}" for number, row in enumerate(facts, 1)}
        for row in facts:
            fields = {k: v for k, v in row.items() if k not in ("id", "embedding", "merged_into")}
            records.append(
                ExportFact(
                    ref=fact_refs[row["id"]],
                    merged_into=fact_refs.get(row["merged_into"]),
                    embedding=floats(row.get("embedding")) if with_vectors else None,
                    **fields,
                )
            )
        summary = await repo.summary(user_id)
        if summary is not None:
            records.append(ExportSummary(**summary))
        chunks = await repo.chunks(user_id, with_vectors=with_vectors)
        chunk_refs = {row["id"]: f"c{number}" for number, row in enumerate(chunks, 1)}
        for row in chunks:
            fields = {k: v for k, v in row.items() if k not in ("id", "embedding")}
            records.append(
                ExportChunk(
                    ref=chunk_refs[row["id"]],
                    embedding=floats(row.get("embedding")) if with_vectors else None,
                    **fields,
                )
            )
        for sess in await repo.sessions(user_id):
            records.append(
                ExportSession(
                    id=sess.id,
                    title=sess.title,
                    last_active=sess.last_active,
                    session_metadata=_ledger_out(sess.session_metadata, chunk_refs),
                    created_at=sess.created_at,
                    updated_at=sess.updated_at,
                )
            )
        records += [ExportMessage(**row) for row in await repo.messages(user_id)]
        records += [ExportExtraction(**row) for row in await repo.extraction_states(user_id)]
        records += [ExportKv(**row) for row in await repo.kv(user_id)]
        records += [ExportForgotten(**row) for row in await repo.forgotten(user_id)]
        return records

    # --- import -----------------------------------------------------------------------------

    async def import_(
        self,
        session: AsyncSession,
        records: Sequence[ExportRecord],
        *,
        user_id: uuid.UUID,
        replace: bool,
        session_prefix: str | None,
        configured_model: str | None = None,
    ) -> ImportResult:
        """Write ``records`` as the memory of ``user_id`` (the caller resolved it, the header's
        user by default, and checked that the request may write into it). Vectors only when
        the export's model is this database's (``_vectors_kept``; ``configured_model``: the
        importing process's embedding model, None in text-only mode).

        Refuses (InvalidInputError, nothing written) a malformed export, a user who holds
        memory already unless ``replace`` (which deletes it first), and session ids another
        user holds (``session_prefix`` renames every session id of the import)."""
        header = export_header(records)
        _no_nul(records)
        target = user_id
        plan = _Plan(records, session_prefix)
        repo = TransferRepository(session=session)

        # First, before any row lock: the model of record is read (and held) before the
        # user's rows are deleted or written, in the order a reembed takes them, which waits
        # for this import or is waited for (never a deadlock, never old vectors after it).
        with_vectors, vectors_dropped = await _vectors_kept(session, header, configured_model)
        # Then the session ids, held from the check below to the commit: another user's first
        # chunks under one of them wait for this import and are then refused (revision 0029).
        await repo.hold_session_ids(sorted(plan.session_ids))
        # And the user: a second import into it waits, then sees this one's rows and is
        # refused (each statement of the check reads what was committed before it began).
        await repo.hold_user(target)
        existing = await repo.user(target)
        replaced = False
        if existing is not None and await repo.owns_anything(target):
            if not replace:
                raise InvalidInputError(
                    f"user {target} already holds memory in this database: replace it "
                    "(replace=True, --replace), or import as another user (user_id=..., "
                    "--as-user)"
                )
            await repo.delete_user(target)
            replaced = True
        taken = await repo.session_ids_of_others(sorted(plan.session_ids), target)
        if taken:
            more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
            raise InvalidInputError(
                f"session id {taken[0]!r}{more} belong(s) to another user in this database: "
                "import with a session prefix (session_prefix=..., --session-prefix)"
            )

        await repo.ensure_user(target, header.name, header.created_at)
        fact_ids = dict(
            zip(
                (fact.ref for fact in plan.facts),
                await repo.reserve_ids("memory_facts", len(plan.facts)),
                strict=True,
            )
        )
        for level in plan.fact_levels():
            await repo.insert_facts(
                [_fact_row(fact, target, fact_ids, with_vectors, plan) for fact in level]
            )
        if plan.summary is not None:
            await repo.insert_summary(target, plan.summary.content, plan.summary.updated_at)
        chunk_ids = dict(
            zip(
                (chunk.ref for chunk in plan.chunks),
                await repo.reserve_ids("memory_chunks", len(plan.chunks)),
                strict=True,
            )
        )
        await repo.insert_chunks(
            target,
            [
                {
                    **chunk.model_dump(exclude={"type", "ref", "embedding"}),
                    "id": chunk_ids[chunk.ref],
                    "session_id": plan.sid(chunk.session_id),
                    "embedding": chunk.embedding if with_vectors else None,
                }
                for chunk in plan.chunks
            ],
        )
        await repo.insert_sessions(
            target,
            [
                {
                    **sess.model_dump(exclude={"type", "session_metadata"}),
                    "id": plan.sid(sess.id),
                    "session_metadata": _ledger_in(sess.session_metadata, chunk_ids),
                }
                for sess in plan.sessions
            ],
        )
        await repo.insert_messages(
            [
                {**m.model_dump(exclude={"type"}), "session_id": plan.sid(m.session_id)}
                for m in plan.messages
            ]
        )
        await repo.insert_extraction_states(
            target,
            [
                {
                    "session_id": plan.sid(e.session_id),
                    "extracted_at": e.extracted_at,
                    "failed_at": e.failed_at,
                    "failures": e.failures,
                }
                for e in plan.extractions
            ],
        )
        await repo.insert_kv(
            target,
            [
                {
                    **kv.model_dump(exclude={"type"}),
                    "session_id": None if kv.session_id is None else plan.sid(kv.session_id),
                }
                for kv in plan.kv
            ],
        )
        await repo.insert_forgotten(
            target, [f.model_dump(exclude={"type"}) for f in plan.forgotten]
        )
        return ImportResult(
            user_id=target,
            rows={
                "fact": len(plan.facts),
                "summary": int(plan.summary is not None),
                "chunk": len(plan.chunks),
                "session": len(plan.sessions),
                "message": len(plan.messages),
                "extraction": len(plan.extractions),
                "kv": len(plan.kv),
                "forgotten": len(plan.forgotten),
            },
            replaced=replaced,
            vectors_dropped=vectors_dropped,
        )


class _Plan:
    """The records of one import, checked for consistency before anything is written."""

    def __init__(self, export: Sequence[ExportRecord], session_prefix: str | None) -> None:
        """``export``: every record, the header first (it numbers the records as
        ``parse_records`` does)."""
        self.prefix = session_prefix or ""
        records = export[1:]
        self.facts = _of(records, ExportFact)
        summaries = _of(records, ExportSummary)
        if len(summaries) > 1:
            raise InvalidInputError("an export holds at most one summary")
        self.summary = summaries[0] if summaries else None
        self.chunks = _of(records, ExportChunk)
        self.sessions = _of(records, ExportSession)
        self.messages = _of(records, ExportMessage)
        self.extractions = _of(records, ExportExtraction)
        self.kv = _of(records, ExportKv)
        self.forgotten = _of(records, ExportForgotten)

        _unique("the fact ref", (f.ref for f in self.facts))
        refs = {f.ref for f in self.facts}
        for fact in self.facts:
            if fact.merged_into is not None and fact.merged_into not in refs:
                raise InvalidInputError(
                    f"fact {fact.ref} is merged into {fact.merged_into!r}, which is not in the "
                    "export"
                )
        _unique(
            "the visible fact",
            ((f.category, f.key) for f in self.facts if f.merged_into is None),
        )
        _unique("the chunk ref", (c.ref for c in self.chunks))
        _unique("the chunk", ((c.session_id, c.start_seq, c.content_hash) for c in self.chunks))
        _unique("the session", (s.id for s in self.sessions))
        sessions = {s.id for s in self.sessions}
        for message in self.messages:
            if message.session_id not in sessions:
                raise InvalidInputError(
                    f"a message belongs to session {message.session_id!r}, which is not in the "
                    "export"
                )
        _unique("the message", ((m.session_id, m.seq) for m in self.messages))
        for kv in self.kv:
            # kv.set takes only a session of the user's.
            if kv.session_id is not None and kv.session_id not in sessions:
                raise InvalidInputError(
                    f"a kv entry belongs to session {kv.session_id!r}, which is not in the export"
                )
        _unique("the extraction state of session", (e.session_id for e in self.extractions))
        _unique("the kv entry", ((k.scope, k.session_id, k.key) for k in self.kv))
        _unique("the forget of", ((f.category, f.key_norm) for f in self.forgotten))
        chunk_refs = {c.ref for c in self.chunks}
        for sess in self.sessions:
            for ref in _ledger(sess.session_metadata):
                if ref not in chunk_refs:
                    raise InvalidInputError(
                        f"session {sess.id!r} recalls chunk {ref!r}, which is not in the export"
                    )
        self.session_ids = {s.id for s in self.sessions} | {e.session_id for e in self.extractions}
        # Chunks may name sessions that are no sessions row, but never another user's.
        self.session_ids |= {c.session_id for c in self.chunks}
        # And the sessions the facts were written from: upsert_fact refuses another user's
        # session there (revision 0027), so does the import.
        self.session_ids |= {f.session_id for f in self.facts if f.session_id is not None}
        self.session_ids = {self.sid(sid) for sid in self.session_ids}
        for sid in self.session_ids:
            if not sid.strip() or len(sid) > SESSION_ID_MAX_CHARS:
                raise InvalidInputError(
                    f"session id {sid[:40]!r} is blank or longer than {SESSION_ID_MAX_CHARS}"
                )
        if self.prefix:
            # The prefix lengthens the session ids parse_records checked the entries with.
            for number, record in enumerate(export, 1):
                if isinstance(record, ExportKv) and record.session_id is not None:
                    try:
                        check_kv_entry_name(record.scope, self.sid(record.session_id), record.key)
                    except InvalidInputError as exc:
                        raise InvalidInputError(
                            f"record {number} ({_name(record)}): with the session prefix "
                            f"{self.prefix[:40]!r}, {exc}"
                        ) from exc

    def sid(self, session_id: str) -> str:
        return self.prefix + session_id

    def fact_levels(self) -> list[list[ExportFact]]:
        """The facts in insert order: visible ones, then those hidden behind them, then those
        hidden behind hidden ones (legacy chains), each level in export order."""
        levels: list[list[ExportFact]] = []
        placed: set[str] = set()
        left = list(self.facts)
        while left:
            level = [f for f in left if f.merged_into is None or f.merged_into in placed]
            if not level:
                raise InvalidInputError(
                    f"facts {', '.join(f.ref for f in left[:3])} are merged into each other "
                    "in a cycle"
                )
            levels.append(level)
            placed |= {f.ref for f in level}
            left = [f for f in left if f.ref not in placed]
        return levels


async def _vectors_kept(
    session: AsyncSession, header: ExportHeader, configured_model: str | None
) -> tuple[bool, bool]:
    """(whether the export's vectors are imported, whether it had vectors that are not).

    Vectors of two models are not comparable: they are kept only when the export names the
    model that made them and it is this database's model of record — or, none recorded yet,
    the importing process's configured model (any, in text-only mode: None); the export's
    model then becomes the record, as a first vector write would make it. Dropped, the rows
    land without vectors, for backfill or reembed."""
    if not header.with_vectors:
        return False, False
    model = header.embedding_model
    if model is None:
        return False, True
    records = EmbeddingModelRepository(session=session)
    # Held until the import commits: a reembed cannot clear and record another model between
    # this check and the vectors' insert (jobs.embedding_model, replace_vectors).
    recorded = await records.recorded(held=True)
    if recorded is None and configured_model is not None:
        recorded = configured_model
    if recorded is not None and not same_model(recorded, model):
        return False, True
    await records.record_if_none(model)
    return True, False


def _fact_row(
    fact: ExportFact,
    user_id: uuid.UUID,
    ids: Mapping[str, int],
    with_vectors: bool,
    plan: _Plan,
) -> dict[str, Any]:
    row = fact.model_dump(exclude={"type", "ref", "merged_into", "embedding"})
    return {
        **row,
        "id": ids[fact.ref],
        "user_id": user_id,
        "merged_into": None if fact.merged_into is None else ids[fact.merged_into],
        "embedding": fact.embedding if with_vectors else None,
        # Provenance follows the sessions' new ids (a label, never a link: no foreign key).
        "session_id": None if fact.session_id is None else plan.sid(fact.session_id),
    }


def _ledger(metadata: Mapping[str, Any]) -> list[Any]:
    ledger = metadata.get(INJECTED_LEDGER_KEY)
    return list(ledger) if isinstance(ledger, list) else []


def _ledger_out(metadata: object, refs: Mapping[int, str]) -> dict[str, Any]:
    """The session metadata with the recall ledger's chunk ids as refs (ids of chunks that are
    gone are dropped: they name nothing). Metadata that is not a JSON object is read as empty."""
    if not isinstance(metadata, dict):
        return {}
    if INJECTED_LEDGER_KEY not in metadata:
        return dict(metadata)
    ids = _ledger(metadata)
    return {**metadata, INJECTED_LEDGER_KEY: [refs[i] for i in ids if i in refs]}


def _ledger_in(metadata: Mapping[str, Any], ids: Mapping[str, int]) -> dict[str, Any]:
    if INJECTED_LEDGER_KEY not in metadata:
        return dict(metadata)
    return {**metadata, INJECTED_LEDGER_KEY: [ids[ref] for ref in _ledger(metadata)]}
