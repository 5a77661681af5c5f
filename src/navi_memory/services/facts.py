"""Facts: upsert with dedupe/merge, expiry and revival, delete, unmerge, search and listing, the
user's summary and the extraction state of a session.

The merge rule: a key that ``text.keys.same_key`` calls another spelling of a key the user
already holds in the same category is merged — the new spelling's row holds the value, the older
rows are hidden behind it (``merged_into``), never deleted. docs/memory.md has the whole rule.

An upsert, as one statement applies it (``FactUpsertRepository.upsert``: the SQL function
``navi_fact_upsert`` of revision 0007, replaced by 0017), under the (user, category) lock:

1. The target is the visible row holding exactly the key; else, when a hidden row holds it,
   the row that one was merged into (only unmerge_fact separates them again); else none.
2. With ``dedupe``, the other spellings are the category's other visible rows (expired ones
   included) whose key has the same canonical form: ``normalize_key``, stored with the row as
   ``key_norm`` (``<rules>:<form>``; a form missing or made by other rules is made again here,
   before anything is compared — ``key_norm()``). A row the user separated (``unmerged_at``,
   set by unmerge; revision 0017) is never one of them, and when it is the target there are
   none.
3. No target: a row is inserted. Target with the same value: only ``last_verified_at`` moves
   (and an expired fact gets the new expiry; a fact without a vector gets this one). Target
   with a new value: value, vector, source, confidence, context, expiry, ``updated_at``,
   ``last_verified_at`` and ``session_id`` change. The given vector embeds the key written, so
   it is stored only on a target holding that key; a target reached through a hidden spelling
   gets none (the caller embeds its own key, or backfill does).
4. The other spellings, and the rows hidden behind them, are hidden behind the written row.

Outcome: ``merged`` when other spellings were hidden, else ``inserted``, ``revived`` (the target
had expired), ``updated`` (a new value) or ``verified``.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from navi_memory.constants import DEFAULT_CONFIDENCE, FACT_MAX_DISTANCE, PERMISSION_READ_ALL
from navi_memory.errors import InvalidInputError, NotFoundError, StorageError
from navi_memory.llm.embedder import embedding_text_for_fact
from navi_memory.models import FactRow
from navi_memory.repositories.facts import (
    FACT_SORT_COLUMNS,
    FactRepository,
    FactSearchRepository,
    FactUpsertRepository,
    FactWriteRepository,
    UpsertDone,
    UpsertStatement,
)
from navi_memory.repositories.sessions import SessionRepository
from navi_memory.repositories.statements import FetchedRow, Reads
from navi_memory.request_context import current_user_id, has_permission
from navi_memory.schemas import Fact, FactHit, ForgetResult
from navi_memory.services.ranking import hit_fields, rank_hits
from navi_memory.text import keys
from navi_memory.text.keys import category_fold, normalize_key

__all__ = [
    "CONFIDENCE_BY_SOURCE",
    "FACT_SORT_KEYS",
    "SOURCES",
    "FactService",
    "FactWrite",
    "UpsertOutcome",
    "UpsertResult",
    "confidence_for_source",
    "key_norm",
    "key_rules",
    "upsert_statement",
]

UpsertOutcome = Literal["inserted", "updated", "verified", "revived", "merged"]

SOURCES: Final = ("conversation", "tool_call", "auto_discovery", "user_explicit")
"""Where a fact came from (spec: memory tool)."""

CONFIDENCE_BY_SOURCE: Final = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90}
"""Confidence when the caller gives none (spec: extractor); anything else gets
constants.DEFAULT_CONFIDENCE."""


def confidence_for_source(source: str) -> int:
    """A fact's confidence when none is given: ``tool_call`` / ``auto_discovery`` 95,
    ``user_explicit`` 90, anything else 70 (spec). One rule for upsert_fact, the memory tool
    and the extractor."""
    return CONFIDENCE_BY_SOURCE.get(source, DEFAULT_CONFIDENCE)


FACT_SORT_KEYS: Final = frozenset(FACT_SORT_COLUMNS)
"""What get_all_facts may sort by; anything else is refused before SQL is built."""

NORMALIZE_ROUNDS: Final = 3
"""Upsert statements one call may run when spellings of the category lack their canonical form
(each round fills those found; a second is needed only when another writer added more), or
when the row it wrote over was deleted meanwhile (the next round inserts)."""

SECONDS_PER_DAY: Final = 86_400


ANY_CATEGORY: Final = ""
"""The category a forget naming none is recorded under (memory_fact_forgotten): it holds in
every category (no category is empty: upsert_fact refuses one)."""


@functools.cache
def key_rules() -> str:
    """The name of the spelling rules in force: a digest of ``text/keys.py`` and of the Unicode
    version its NFKC follows. Any change to either makes every stored form outdated, so it is
    made again before it is compared (a spurious change costs that, a missed one would compare
    forms of two different rules)."""
    source = Path(keys.__file__).read_bytes() if keys.__file__ else repr(keys.PHRASES).encode()
    return hashlib.sha256(source + unicodedata.unidata_version.encode()).hexdigest()[:12]


def key_norm(key: str) -> str:
    """The key's canonical form as stored in ``memory_facts.key_norm``: ``<rules>:<form>``."""
    return f"{key_rules()}:{normalize_key(key)}"


@dataclass(frozen=True, slots=True)
class FactWrite:
    """A validated fact to write, with its embedding (None when none could be had)."""

    user_id: uuid.UUID
    category: str
    key: str
    value: str
    source: str
    confidence: int
    expires_days: float | None
    source_context: str | None
    embedding: Sequence[float] | None
    session_id: str | None = None
    """The session the fact is written from (provenance); it moves with ``updated_at``."""


@dataclass(frozen=True, slots=True)
class UpsertResult:
    """What upsert_fact did: the fact as written, the outcome, and whether its vector was set
    or changed (the fact indexer then has work)."""

    fact: Fact
    outcome: UpsertOutcome
    vector_queued: bool
    own_key_text: str | None = None
    """Written through a hidden spelling of the key with a vector made for it: the value went
    to the row it was merged into, whose vector must embed that row's own key and which the
    statement left without one. The text to embed for it (give_vector), else None."""


def to_fact(row: FactRow | FetchedRow) -> Fact:
    """A Fact from an ORM row (vector loaded) or a Core row with ``has_embedding``.

    Core rows are validated (pydantic's compiled validator), not ``model_construct``-ed: with
    pydantic 2.14 the validator builds a Fact in ~4 µs, ``model_construct``'s Python loop over
    the fields takes ~10 µs (measured; docs/benchmarks.md, "Facts")."""
    if isinstance(row, FactRow):
        return Fact.model_validate(row, from_attributes=True).model_copy(
            update={"has_embedding": row.embedding is not None}
        )
    return Fact.model_validate(dict(row))


def to_fact_hit(row: FetchedRow, **score: Any) -> FactHit:
    return FactHit.model_validate(hit_fields(row, score))


def upsert_statement(write: FactWrite, *, dedupe: bool) -> UpsertStatement:
    """What the upsert statement binds for ``write``: the key's canonical form under the rules
    in force, the expiry in seconds."""
    return UpsertStatement(
        user_id=write.user_id,
        category=write.category,
        key=write.key,
        key_norm=key_norm(write.key),
        rules=key_rules(),
        value=write.value,
        embedding=write.embedding,
        source=write.source,
        confidence=write.confidence,
        expires_seconds=(
            None if write.expires_days is None else write.expires_days * SECONDS_PER_DAY
        ),
        source_context=write.source_context,
        session_id=write.session_id,
        dedupe=dedupe,
    )


def _outcome(done: UpsertDone) -> UpsertOutcome:
    if done.merged:
        return "merged"
    if done.action == "insert":
        return "inserted"
    if done.was_expired:
        return "revived"
    return "updated" if done.action == "new value" else "verified"


def may_change(owner: uuid.UUID | None) -> bool:
    """A row found by id: the current user's own; with no current user (an admin context),
    anyone's with read_all. Acting for one user never changes another's row."""
    current = current_user_id()
    if current is not None:
        return owner == current
    return has_permission(PERMISSION_READ_ALL)


def may_read(owner: uuid.UUID | None) -> bool:
    """A row found by id: the current user's own; anyone's with read_all."""
    if has_permission(PERMISSION_READ_ALL):
        return True
    current = current_user_id()
    return current is not None and owner == current


class FactService:
    """The fact rules, on the session (or, for searches, the connection) each call is given."""

    # --- writes -----------------------------------------------------------------------------

    async def write(self, conn: Reads, write: FactWrite, *, dedupe: bool) -> UpsertResult:
        """The upsert (module docstring) in one statement, on its own (PooledStatements, an
        autocommit connection) or in the caller's transaction; a second and third only when
        spellings of the category still need their canonical form, or when the row it wrote
        over was deleted meanwhile."""
        repo = FactUpsertRepository(conn=conn)
        statement = upsert_statement(write, dedupe=dedupe)
        for _ in range(NORMALIZE_ROUNDS):
            done = await repo.upsert(statement)
            if done.foreign_session:
                raise NotFoundError(
                    f"no session {write.session_id!r} for this user: a fact's session is one "
                    "of its user's (or an id the sessions table does not hold)"
                )
            if done.row is not None:
                fact = to_fact(done.row)
                own = (
                    embedding_text_for_fact(fact.category, fact.key, fact.value)
                    if fact.key != write.key
                    and not fact.has_embedding
                    and write.embedding is not None
                    else None
                )
                return UpsertResult(
                    fact=fact,
                    outcome=_outcome(done),
                    vector_queued=done.action != "verify",
                    own_key_text=own,
                )
            if done.unnormalized:
                # Spellings the statement cannot compare yet: written by an import, the
                # application's SQL, before revision 0007, or under other rules. Their forms,
                # then the upsert again.
                await repo.set_key_norms([(i, key, key_norm(key)) for i, key in done.unnormalized])
            # Else the row it wrote over was deleted meanwhile by a writer that did not hold
            # the category lock (the application's own SQL, say; delete_fact takes it): once
            # more, which then inserts, as if the delete had come first.
        raise StorageError(
            f"the fact {write.category}/{write.key} kept changing while it was written "
            "(its category's keys renormalised, or the row deleted, each time); call again"
        )

    async def give_vector(
        self, session: AsyncSession, fact_id: int, embedded_text: str, vector: Sequence[float]
    ) -> bool:
        """Store ``vector`` (of ``embedded_text``) on a fact that has none, if the fact still
        reads as that text; whether it was stored."""
        return await FactRepository(session=session).set_embedding(fact_id, embedded_text, vector)

    async def upsert(
        self, conn: Reads, write: FactWrite, *, dedupe: bool
    ) -> tuple[Fact, UpsertOutcome]:
        """``write``, as (fact, outcome)."""
        done = await self.write(conn, write, dedupe=dedupe)
        return done.fact, done.outcome

    async def delete(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        key: str,
        category: str | None,
        *,
        in_conversation: bool = False,
    ) -> ForgetResult:
        """Delete the user's visible facts named ``key`` (directly or by a hidden spelling),
        with the rows hidden behind them; returns the visible facts deleted, as they were, and
        what else went (expired rows, the summary). ``in_conversation``: the user asked for it
        in a session (the memory tool's forget): it is remembered, and an extraction of a
        session active before it leaves the fact out (ExtractionService)."""
        facts = FactRepository(session=session)
        # The same per-category locks as upsert (taken in a fixed order, so two deletes cannot
        # deadlock): an upsert never updates a row this delete is removing, nor the other way.
        # Without a category, the key's categories are listed before they are locked; a
        # category an upsert adds meanwhile is not locked, so its row is left alone: that
        # upsert counts as after this delete.
        categories = [category] if category is not None else []
        if category is None:
            categories = await facts.categories_with_key(user_id, key)
        locks = FactWriteRepository(session=session)
        for name in sorted(categories):
            await locks.lock_category(user_id, name)
        ids = await facts.ids_for_delete(user_id, key, categories)
        # An expired fact goes too (its row is freed), but it was not visible: it is neither
        # returned nor counted. It still takes the summary with it: expiry never touched the
        # summary, which may tell the fact the user asked to forget.
        deleted = await facts.delete_with_hidden(ids)
        removed = [
            to_fact({name: value for name, value in row.items() if name != "expired"})
            for row in deleted
            if not row["expired"]
        ]
        summary_removed = False
        if deleted and in_conversation:
            # Remembered: an extraction of a session active before now leaves the fact out
            # (it would bring back what the user asked to forget). A forget naming no category
            # holds in every category (ANY_CATEGORY): a model files one fact under "personal"
            # one day and "location" the next.
            forgotten = [
                (category_fold(row["category"]), normalize_key(row["key"])) for row in deleted
            ]
            if category is None:
                forgotten += [(ANY_CATEGORY, key_form) for _, key_form in forgotten]
            await facts.record_forgotten(user_id, forgotten)
        if deleted:
            # The summary rides in every prompt and may tell the forgotten fact; prose cannot
            # be edited, so it goes too, under the lock the extractor writes it under (so no
            # summary read before this delete is written after it). The next extraction
            # writes it again from the facts left.
            await facts.lock_summary(user_id)
            summary_removed = await facts.delete_summary(user_id)
        return ForgetResult(
            facts=removed, expired=len(deleted) - len(removed), summary_removed=summary_removed
        )

    async def last_told_since(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        category: str,
        key: str,
        since: datetime,
        *,
        session_id: str,
        value: str | None = None,
    ) -> datetime | None:
        """The last time after ``since`` the user changed or forgot the key (any spelling of
        it) in ``category`` in a conversation, a change in another one than session
        ``session_id``; None when they did not. The caller holds the category's lock
        (``lock_category``), so a forget or a save committing meanwhile is seen here.

        - forgot: a forget asked for in a conversation (``delete(in_conversation=True)``),
          this one included;
        - changed: a visible row of the key written from another session (the memory tool's
          save, that session's extraction), as of when it was written, or that session's
          last activity if earlier (an extraction writes after the session it reads), unless
          it holds the same key and ``value`` (the session says it again: its write only
          confirms it). A row written outside any session (an application's own upsert_fact)
          does not count: the conversation order says nothing of it, and an extraction
          writes over it, as the spec's extractor does; nor does a row whose session is gone
          (when the user said it is no longer known: its write time is the extraction's, not
          the conversation's)."""
        facts = FactRepository(session=session)
        wanted = normalize_key(key)
        categories = (category_fold(category), ANY_CATEGORY)
        # A stored form is itself a key: spelled again it is the form of the rules in force
        # (the same form when they have not changed, normalize_key being idempotent).
        moments = [
            at
            for form, at in await facts.forgotten_since(user_id, categories, since)
            if normalize_key(form) == wanted
        ]
        rules = key_rules()
        for row in await facts.key_times(user_id, category, f"{rules}:{wanted}", rules):
            told_in = row["session_id"]
            if told_in is None or told_in == session_id or row["session_active"] is None:
                continue
            if row["key"] == key and row["value"] == value and not row["expired"]:
                # The same word said again: the write only confirms it. Not over an expired
                # row: the write would revive it without the newer session's time limit.
                continue
            if normalize_key(row["key"]) != wanted:  # a stored form of other rules
                continue
            moment = min(row["updated_at"], row["session_active"])
            if moment > since:
                moments.append(moment)
        return max(moments, default=None)

    async def lock_category(self, session: AsyncSession, user_id: uuid.UUID, category: str) -> None:
        """Serialise with the category's other writers until the transaction ends."""
        await FactWriteRepository(session=session).lock_category(user_id, category)

    async def unmerge(self, session: AsyncSession, fact_id: int) -> Fact:
        """Make a hidden row visible again, if the caller may change it (``may_change``)."""
        facts = FactRepository(session=session)
        found = await facts.get(fact_id)
        if found is None or not may_change(found.user_id):
            raise NotFoundError(f"fact {fact_id} does not exist")
        if found.user_id is not None:
            # Owner and category never change; everything else is read again once the lock
            # is held (a delete or an upsert holding it may have changed or removed the row).
            await FactWriteRepository(session=session).lock_category(found.user_id, found.category)
        row = await facts.get_fresh(fact_id)
        if row is None:
            raise NotFoundError(f"fact {fact_id} does not exist")
        if row.merged_into is None:
            raise InvalidInputError(f"fact {row.id} is not merged into another fact")
        clash = await facts.find_key(row.user_id, row.category, row.key, hidden=False)
        if clash is not None:
            raise InvalidInputError(
                f"cannot unmerge fact {row.id}: fact {clash.id} already uses the key "
                f"{row.category}/{row.key}; delete or rename that one first"
            )
        unhidden = await facts.unhide(row.id)
        refreshed = await facts.get_fresh(row.id) if unhidden else None
        if refreshed is None:  # deleted by a writer that does not take the lock (SQL)
            raise NotFoundError(f"fact {row.id} does not exist")
        return to_fact(refreshed)

    async def purge_expired(
        self, session: AsyncSession, user_id: uuid.UUID | None, *, dry_run: bool
    ) -> tuple[int, int]:
        """Delete the facts past their expiry (every user's for None); returns (expired, live
        rows hidden behind them). ``dry_run`` only counts.

        A row hidden behind an expired fact that has not expired itself is never deleted with
        it (the merge must stay undoable): behind an expired row that is hidden itself (a
        legacy chain) it goes behind the row the chain ends at; else the most recently updated
        such row takes the key back, the others are hidden behind it — or, where a visible
        row holds that key already, all of them are hidden behind that row (docs/memory.md,
        "Expiry and merges"). Under the locks of every category holding an expired fact,
        taken first and in writers' order, so no upsert or delete sees it half done, and it
        never deletes a row a writer holds while holding a lock that writer waits for (a
        deadlock with an extraction writing several categories)."""
        facts = FactRepository(session=session)
        if dry_run:
            return await facts.expired(user_id)
        locks = FactWriteRepository(session=session)
        for owner, category in await facts.categories_of_expired(user_id):
            await locks.lock_category(owner, category)
        counts = await facts.expired(user_id)
        await facts.reattach_behind_expired_links(user_id)
        heirs = await facts.rescue_behind_expired(user_id)
        await facts.delete_expired(user_id)
        await facts.settle_heirs(heirs)
        return counts

    async def owners_of_expired(self, session: AsyncSession) -> list[uuid.UUID]:
        """The users holding an expired fact: an all-users purge goes through them one by
        one, each in a transaction of its own."""
        return await FactRepository(session=session).owners_of_expired()

    # --- reads ------------------------------------------------------------------------------

    async def get(self, session: AsyncSession, fact_id: int) -> Fact:
        """One fact by id, hidden or expired alike, if the caller may read it (``may_read``)."""
        row = await FactRepository(session=session).get(fact_id)
        if row is None or not may_read(row.user_id):
            raise NotFoundError(f"fact {fact_id} does not exist")
        return to_fact(row)

    async def hidden_behind(self, session: AsyncSession, fact_id: int) -> list[Fact]:
        """The rows hidden behind one fact, expired ones too, by id, if the caller may read
        that fact (``may_read``). Only its owner's: a row is merged into its owner's facts."""
        facts = FactRepository(session=session)
        row = await facts.get(fact_id)
        if row is None or not may_read(row.user_id):
            raise NotFoundError(f"fact {fact_id} does not exist")
        return [to_fact(hidden) for hidden in await facts.hidden_behind(row.id, row.user_id)]

    async def search(
        self,
        conn: Reads,
        scope: uuid.UUID | None,
        query_vector: Sequence[float] | None,
        terms: Sequence[str],
        limit: int,
        phrase: str | None = None,
    ) -> list[FactHit]:
        """Vector hits closer than FACT_MAX_DISTANCE (nearest first), then text hits (most
        terms, then holding ``phrase``, the whole query, first); no terms: the most recently
        updated facts."""
        repo = FactSearchRepository(session=conn)
        if not terms:
            return [to_fact_hit(row, via="recent") for row in await repo.recent(scope, limit)]
        rows = await repo.search(scope, query_vector, terms, limit, FACT_MAX_DISTANCE, phrase)
        return rank_hits(rows, limit, to_fact_hit, recency="updated_at")

    async def list_facts(
        self,
        session: AsyncSession,
        scope: uuid.UUID | None,
        *,
        search: str | None,
        include_merged: bool,
        sort_by: str,
        descending: bool,
        limit: int | None,
        offset: int,
        category: str | None = None,
    ) -> list[Fact]:
        rows = await FactRepository(session=session).list_facts(
            scope,
            category=category,
            search=search,
            include_merged=include_merged,
            sort_by=sort_by,
            descending=descending,
            limit=limit,
            offset=offset,
        )
        return [to_fact(row) for row in rows]

    async def count(
        self, session: AsyncSession, scope: uuid.UUID | None, *, include_merged: bool
    ) -> int:
        return await FactRepository(session=session).count(scope, include_merged=include_merged)

    async def categories(
        self, session: AsyncSession, scope: uuid.UUID | None
    ) -> list[tuple[str, int]]:
        return await FactRepository(session=session).category_counts(scope)

    # --- summary ----------------------------------------------------------------------------

    async def get_summary(self, session: AsyncSession, scope: uuid.UUID | None) -> str | None:
        return await FactRepository(session=session).get_summary(scope)

    async def summary_digest(
        self, session: AsyncSession, user_id: uuid.UUID
    ) -> tuple[str | None] | None:
        """(``facts_digest``,) of the user's summary (None inside: of unknown origin); None
        when they have no summary."""
        return await FactRepository(session=session).summary_digest(user_id)

    async def set_summary(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        content: str,
        *,
        facts_digest: str | None = None,
    ) -> None:
        """Replace the user's summary; ``facts_digest`` names the facts it was written from
        (None: unknown, as for a summary an application sets)."""
        await FactRepository(session=session).set_summary(user_id, content, facts_digest)

    async def clear_summary(self, session: AsyncSession, user_id: uuid.UUID) -> bool:
        return await FactRepository(session=session).delete_summary(user_id)

    async def lock_summary(self, session: AsyncSession, user_id: uuid.UUID) -> None:
        """Serialise the writers of the user's summary until the transaction ends."""
        await FactRepository(session=session).lock_summary(user_id)

    # --- extraction state -------------------------------------------------------------------

    async def mark_extracted(
        self,
        session: AsyncSession,
        user_id: uuid.UUID,
        session_id: str,
        *,
        at: datetime | None = None,
    ) -> datetime:
        """Record the session as processed ``at`` (None: now); NotFoundError when it is
        someone else's."""
        repo = SessionRepository(session=session)
        await repo.lock_session_id(session_id)  # a create of the id waits, then sees the row
        owner = await repo.extraction_owner(session_id)
        if owner not in (None, user_id) or (
            # No row says whose it is: a session kept outside ``sessions`` is the user's
            # whose chunks or sketches it holds (as create reads it), not the first marker's.
            owner is None and await repo.rows_of_others(session_id, user_id)
        ):
            raise NotFoundError(f"no session {session_id!r} for this user")
        marked = await repo.mark_extracted(session_id, user_id, at=at)
        if marked is None:  # the state row is another user's (their session has this id)
            raise NotFoundError(f"no session {session_id!r} for this user")
        return marked

    async def extracted_at(
        self, session: AsyncSession, scope: uuid.UUID | None, session_id: str
    ) -> datetime | None:
        """When the session was processed; None if never — or if it is not ``scope``'s. Only
        a mark ``scope`` wrote counts: never another user's (nor a legacy one) for an id that
        is now ``scope``'s session."""
        repo = SessionRepository(session=session)
        if scope is not None and await repo.extraction_owner(session_id) != scope:
            return None
        return await repo.extracted_at(session_id, scope)
