"""A synthetic but plausible raw-history set for the chunks benchmark: users of Zipf-skewed sizes,
sessions per user, and chunks of verbatim "User: … / Assistant: …" text (1–4 KB) that talk
about each user's own projects — hosts, ports, paths, tickets, versions, packages — seeded.

Vectors are not made here: each chunk carries a topic of its user and three noise indices, and
the section turns those into ``l2_normalize(topic + noise)`` on the server (see chunks.py).
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from benchmarks.facts_data import CITIES, DATABASES, FIRST_NAMES, FRAMEWORKS, LANGS, WORDS
from navi_memory.constants import MAX_BREADCRUMBS
from navi_memory.text.breadcrumbs import extract_breadcrumbs
from navi_memory.text.chunks import DEFAULT_CHUNK_MAX_CHARS

__all__ = [
    "ChunkSeed",
    "Line",
    "Topic",
    "UserPlan",
    "chunk_text",
    "generate_chunks",
    "plan_users",
    "topic_lines",
    "topics_for",
    "user_chunks",
    "zipf_sizes",
]

CHUNK_MIN_CHARS: Final = 1000
CHUNK_MAX_CHARS: Final = DEFAULT_CHUNK_MAX_CHARS
"""build_chunks packs up to 4,000 characters (CHUNK_MAX_CHARS); a compression's last chunk is
shorter, so the target length is drawn between these."""

_EPOCH: Final = datetime(2025, 1, 1, tzinfo=UTC)

PACKAGES: Final = (
    "uvicorn", "gunicorn", "celery", "pydantic", "sqlalchemy", "alembic", "asyncpg", "httpx",
    "pytest", "ruff", "tokio", "serde", "webpack", "vite", "eslint", "prettier", "terraform",
    "ansible", "nginx", "traefik", "grafana", "prometheus", "kafka", "rabbitmq", "minio",
)  # fmt: skip
VERBS: Final = (
    "restarted", "deployed", "rolled back", "migrated", "profiled", "patched", "rebuilt",
    "benchmarked", "upgraded", "pinned", "debugged", "reindexed", "rotated", "archived",
)  # fmt: skip
PROBLEMS: Final = (
    "connection refused", "timeout after 30s", "permission denied", "out of memory",
    "segmentation fault", "certificate expired", "disk full", "deadlock detected",
    "too many open files", "502 bad gateway", "slow query", "stale cache",
)  # fmt: skip
TICKET_PREFIXES: Final = ("OPS", "WEB", "API", "DATA", "INFRA", "MOBILE", "SEC", "BILL", "CORE")
EXTENSIONS: Final = ("py", "toml", "yaml", "conf", "sql", "ts", "rs", "go", "json", "md", "sh")


@dataclass(frozen=True, slots=True)
class Topic:
    """What one thread of a user's history is about: a project with its own identifiers."""

    index: int
    """Global topic number (the vector centroid's id)."""
    project: str
    host: str
    port: int
    path: str
    ticket: str
    package: str
    version: str
    lang: str
    framework: str
    database: str
    person: str
    city: str
    words: tuple[str, ...]


@dataclass(slots=True)
class UserPlan:
    user_id: uuid.UUID
    size: int
    """Chunks the user holds."""
    first_topic: int
    topics: int
    sessions: list[int] = field(default_factory=list)
    """Chunks per session, summing to ``size``."""


@dataclass(frozen=True, slots=True)
class ChunkSeed:
    user_id: uuid.UUID
    session_id: str
    content: str
    content_hash: str
    start_seq: int
    end_seq: int
    started_at: datetime
    ended_at: datetime
    breadcrumbs: list[str]
    topic: int
    noise: tuple[int, int, int]


def zipf_sizes(users: int, total: int, largest: int) -> list[int]:
    """``users`` sizes summing to ``total`` with the largest close to ``largest``: size of the
    i-th user ∝ 1/i^a, the exponent found by bisection, at least one chunk each."""

    def sizes_for(a: float) -> list[int]:
        raw = [1.0 / (i**a) for i in range(1, users + 1)]
        scale = (total - users) / sum(raw)
        return [1 + math.floor(r * scale) for r in raw]

    low, high = 0.0, 3.0
    for _ in range(50):
        mid = (low + high) / 2
        if sizes_for(mid)[0] < largest:
            low = mid
        else:
            high = mid
    sizes = sizes_for((low + high) / 2)
    drift = total - sum(sizes)
    i = 0
    while drift > 0:
        sizes[i % users] += 1
        drift -= 1
        i += 1
    return sizes


def plan_users(rng: random.Random, *, users: int, chunks: int, largest: int) -> list[UserPlan]:
    """Users in random order of size; each with ≈ √size/2 topics and sessions of 1–24 chunks
    (a session's compressions)."""
    sizes = zipf_sizes(users, chunks, largest)
    rng.shuffle(sizes)
    plans: list[UserPlan] = []
    next_topic = 0
    for size in sizes:
        uid = uuid.UUID(int=rng.getrandbits(128), version=4)
        topics = max(1, min(200, round(math.sqrt(size) / 2)))
        plan = UserPlan(uid, size, next_topic, topics)
        next_topic += topics
        left = size
        while left:
            n = min(left, max(1, int(rng.expovariate(1 / 8))), 24)
            plan.sessions.append(n)
            left -= n
        plans.append(plan)
    return plans


def _host(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}-{rng.randrange(10, 1000)}"


def topics_for(plan: UserPlan, seed: int) -> list[Topic]:
    """The user's topics, reproducible from the seed and the user alone."""
    rng = random.Random(f"{seed}:{plan.user_id}")
    topics = []
    for k in range(plan.topics):
        project = f"{rng.choice(WORDS)}-{rng.choice(('api', 'web', 'etl', 'cli', 'bot', 'sync'))}"
        lang = rng.choice(LANGS)
        topics.append(
            Topic(
                index=plan.first_topic + k,
                project=project,
                host=f"{_host(rng)}.internal",
                port=rng.randrange(1024, 65535),
                path=(
                    f"/srv/{project}/{rng.choice(WORDS)}/"
                    f"{rng.choice(WORDS)}.{rng.choice(EXTENSIONS)}"
                ),
                ticket=f"{rng.choice(TICKET_PREFIXES)}-{rng.randrange(100, 10000)}",
                package=rng.choice(PACKAGES),
                version=f"{rng.randrange(0, 6)}.{rng.randrange(0, 30)}.{rng.randrange(0, 20)}",
                lang=lang,
                framework=rng.choice(FRAMEWORKS),
                database=rng.choice(DATABASES),
                person=rng.choice(FIRST_NAMES),
                city=rng.choice(CITIES),
                words=tuple(rng.sample(WORDS, 12)),
            )
        )
    return topics


def _words(rng: random.Random, topic: Topic, n: int) -> str:
    pool = topic.words
    return " ".join(rng.choice(pool) if rng.random() < 0.6 else rng.choice(WORDS) for _ in range(n))


def _user_line(rng: random.Random, t: Topic) -> str:
    match rng.randrange(8):
        case 0:
            return (
                f"{t.project} on {t.host}:{t.port} fails with {rng.choice(PROBLEMS)} again "
                f"since this morning, any idea? The {_words(rng, t, 3)} job is stuck."
            )
        case 1:
            return (
                f"Can you look at {t.path}? I changed the {_words(rng, t, 2)} part and now "
                f"{t.package} {t.version} complains."
            )
        case 2:
            return (
                f"I {rng.choice(VERBS)} {t.project} yesterday, ticket {t.ticket} is still open. "
                f"{t.person} wants it done before the trip to {t.city}."
            )
        case 3:
            return (
                f"How do I point {t.framework} at the {t.database} on {t.host} port {t.port} "
                f"without breaking the {_words(rng, t, 2)} tests?"
            )
        case 4:
            return (
                f"Remind me what we decided about {_words(rng, t, 3)} for {t.project}. "
                f"I think it was in {t.ticket}."
            )
        case 5:
            return (
                f"Here is the log: `{rng.choice(PROBLEMS)}` at line {rng.randrange(10, 900)} "
                f"of {t.path}, after upgrading {t.package} to {t.version}."
            )
        case 6:
            return f"Also, {_words(rng, t, 6)}. Does that change anything for {t.project}?"
        case _:
            return (
                f"Ok, I set PORT={t.port} and {t.package.upper()}_WORKERS={rng.randrange(2, 17)} "
                f"in {t.project}/.env, then {rng.choice(VERBS)} it."
            )


def _assistant_line(rng: random.Random, t: Topic) -> str:
    match rng.randrange(9):
        case 0:
            return (
                f"The {rng.choice(PROBLEMS)} on {t.host}:{t.port} usually means the "
                f"{t.package} worker is not listening yet; check `systemctl status "
                f"{t.project}` and the last lines of /var/log/{t.project}/error.log."
            )
        case 1:
            return (
                f"In {t.path} the {_words(rng, t, 2)} setting overrides the default, so "
                f"{t.package} {t.version} reads it before the {t.framework} app starts. "
                f"Move it below the {_words(rng, t, 2)} block."
            )
        case 2:
            return (
                f"For {t.ticket} I would {rng.choice(('split', 'batch', 'retry', 'cache'))} the "
                f"{_words(rng, t, 3)} step: it is what {t.person} measured as the slow part "
                f"({rng.randrange(40, 900)} ms per call)."
            )
        case 3:
            return (
                f"Run `{t.lang} -m {t.project.replace('-', '_')}.{rng.choice(WORDS)} "
                f"--port {t.port}` from /srv/{t.project}, then "
                f"curl http://{t.host}:{t.port}/health to see it answer."
            )
        case 4:
            return (
                f"You decided to keep {t.database} for {t.project} and to move the "
                f"{_words(rng, t, 3)} into a separate table; {t.ticket} tracks the migration."
            )
        case 5:
            return (
                f"{t.framework} reads DATABASE_URL, so set it to "
                f"postgresql://app@{t.host}:{t.port}/{t.project.split('-')[0]} and restart; "
                f"the {_words(rng, t, 2)} pool will pick it up."
            )
        case 6:
            return (
                f"Version {t.version} of {t.package} changed how {_words(rng, t, 2)} is "
                f"configured; pin it in pyproject.toml or update {t.path} to the new keys."
            )
        case 7:
            return f"{_words(rng, t, 10).capitalize()}; that is what {t.project} relies on."
        case _:
            return (
                f"Summary so far: {t.project} runs on {t.host}, port {t.port}, config in "
                f"{t.path}, open work in {t.ticket}, {_words(rng, t, 4)}."
            )


USER_LINES: Final = 10
ASSISTANT_LINES: Final = 16
"""Sentences written per topic; a chunk draws its messages' sentences from these."""


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    breadcrumbs: tuple[str, ...]


def topic_lines(rng: random.Random, t: Topic) -> tuple[list[Line], list[Line]]:
    """The sentences a topic's chunks are made of, each with its breadcrumbs: extract_breadcrumbs
    runs once over all of the topic's sentences, and each sentence keeps the items it contains
    (the extractor costs ≈ 0.25 ms a call and ≈ 2.5 ms per 2.5 KB chunk in Python: run per
    chunk it would dominate the 1M set-up)."""
    users = [_user_line(rng, t) for _ in range(USER_LINES)]
    assistants = [_assistant_line(rng, t) for _ in range(ASSISTANT_LINES)]
    found = extract_breadcrumbs("\n\n".join(users + assistants), limit=10_000)

    def lines(texts: list[str]) -> list[Line]:
        return [Line(text, tuple(c for c in found if c in text)) for text in texts]

    return lines(users), lines(assistants)


def chunk_text(
    rng: random.Random, user_lines: list[Line], assistant_lines: list[Line]
) -> tuple[str, int, list[str]]:
    """One chunk as build_chunks renders it ("User: …" / "Assistant: …" messages joined by a
    blank line), between 1 and 4 KB; how many messages it holds; its breadcrumbs (the
    sentences' own, merged in order of appearance, deduped, at most MAX_BREADCRUMBS)."""
    target = rng.randint(CHUNK_MIN_CHARS, CHUNK_MAX_CHARS)
    parts: list[str] = []
    crumbs: dict[str, str] = {}
    length = 0
    user = True
    while True:
        pool = user_lines if user else assistant_lines
        picked = rng.sample(pool, rng.randint(1, 2) if user else rng.randint(2, 4))
        message = ("User: " if user else "Assistant: ") + " ".join(line.text for line in picked)
        if parts and length + 2 + len(message) > target:
            break
        parts.append(message)
        for line in picked:
            for crumb in line.breadcrumbs:
                crumbs.setdefault(crumb.casefold(), crumb)
        length += len(message) + (2 if len(parts) > 1 else 0)
        user = not user
    return "\n\n".join(parts), len(parts), list(crumbs.values())[:MAX_BREADCRUMBS]


def user_chunks(plan: UserPlan, seed: int, *, noise_pool: int) -> Iterator[ChunkSeed]:
    """One user's chunks, session after session, in time order."""
    rng = random.Random(f"{seed}:chunks:{plan.user_id}")
    topics = topics_for(plan, seed)
    lines = [topic_lines(rng, topic) for topic in topics]
    clock = _EPOCH + timedelta(minutes=rng.randrange(0, 60 * 24 * 30))
    for s, count in enumerate(plan.sessions):
        session_id = f"s-{plan.user_id.hex[:12]}-{s}"
        seq = 0
        for _ in range(count):
            k = rng.randrange(len(topics))
            content, messages, crumbs = chunk_text(rng, *lines[k])
            started = clock
            clock += timedelta(minutes=messages * rng.uniform(0.5, 3))
            yield ChunkSeed(
                user_id=plan.user_id,
                session_id=session_id,
                content=content,
                content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest(),
                start_seq=seq,
                end_seq=seq + messages - 1,
                started_at=started,
                ended_at=clock,
                breadcrumbs=crumbs,
                topic=topics[k].index,
                noise=(
                    rng.randrange(noise_pool),
                    rng.randrange(noise_pool),
                    rng.randrange(noise_pool),
                ),
            )
            seq += messages
        clock += timedelta(hours=rng.uniform(2, 24 * 14))


def generate_chunks(
    plans: list[UserPlan], seed: int, *, noise_pool: int
) -> Iterator[tuple[int, ChunkSeed]]:
    """Every user's chunks with ids from 1, the users interleaved at random in proportion to
    what they hold (as writes arrive in production), so that a user's rows are spread over
    the table rather than packed together; each user's own chunks stay in order."""
    order = [i for i, plan in enumerate(plans) for _ in range(plan.size)]
    random.Random(f"{seed}:order").shuffle(order)
    streams = [user_chunks(plan, seed, noise_pool=noise_pool) for plan in plans]
    for chunk_id, i in enumerate(order, start=1):
        yield chunk_id, next(streams[i])
