"""A synthetic but plausible fact set: users of skewed sizes, each with facts drawn from a few
dozen kinds (preferences, projects, hosts, contacts, tickets, trips, notes), seeded."""

from __future__ import annotations

import math
import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "FactSeed",
    "FactSet",
    "SeededRow",
    "build_fact_set",
    "camel_spelling",
    "new_fact",
]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS: Final = _words(
    "apple amber anchor april archive autumn badge balcony bamboo banner barley basket beacon "
    "bicycle birch blanket blossom border breeze bridge bronze bucket buffer cabin cactus camera "
    "canal candle canvas canyon carbon castle cedar cellar chapter cherry circuit citrus clover "
    "cobalt comet copper coral cotton crystal cypress dawn delta desert diesel dolphin dragon "
    "ember engine falcon fennel ferry fiber fjord forest fossil fountain garden garlic glacier "
    "granite gravel harbor harvest hazel helmet hollow honey horizon island ivory jasmine jungle "
    "kettle lagoon lantern lemon lilac linen lizard maple marble meadow mercury meteor mirror "
    "mosaic mountain nectar needle nickel oasis ocean olive onyx orbit orchid paddle pepper "
    "pebble pilot pine planet plaza pocket prairie prism quartz quill radar rain raven reef "
    "ribbon river rocket saffron salmon satin scarlet shadow signal silver sketch socket "
    "spruce stream summit sunset tablet thunder timber topaz torch tulip tundra valley velvet "
    "violet walnut willow window winter yarrow zephyr"
)

EDITORS: Final = ("neovim", "vscode", "emacs", "helix", "sublime", "zed", "pycharm", "kakoune")
THEMES: Final = ("gruvbox", "solarized", "nord", "dracula", "tokyonight", "catppuccin", "monokai")
SHELLS: Final = ("zsh", "fish", "bash", "nushell", "xonsh")
LANGS: Final = ("python", "rust", "go", "typescript", "elixir", "kotlin", "haskell", "zig")
FRAMEWORKS: Final = ("django", "fastapi", "axum", "phoenix", "nextjs", "spring", "rails", "flask")
DATABASES: Final = ("postgresql", "sqlite", "redis", "clickhouse", "duckdb", "mysql", "mongodb")
FIRST_NAMES: Final = _words(
    "alice bob carol dave erin frank grace heidi ivan judy mallory niaj olivia peggy rupert "
    "sybil trent victor walter yusuf zoe amara bruno chen dmitri elena farah goran hana ines "
    "jonas kaito leila mateo nadia oskar priya quentin rosa sven tariq uma"
)
LAST_NAMES: Final = _words(
    "smith garcia muller rossi novak kowalski tanaka kim silva jensen dubois ivanova okafor "
    "nguyen haddad larsen moreau petrov santos weber"
)
CITIES: Final = _words(
    "lisbon porto berlin munich vienna prague krakow oslo bergen tokyo kyoto osaka seoul busan "
    "lima quito bogota denver austin boston montreal dublin cork edinburgh glasgow seville"
)
THINGS: Final = _words(
    "color food band movie book drink season city game sport animal flower dessert podcast"
)
HOBBIES: Final = _words(
    "climbing cycling running chess baking knitting pottery sailing birding photography "
    "woodworking gardening"
)
STATUSES: Final = ("open", "in review", "blocked", "done", "waiting on customer")
WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday")
DOMAINS: Final = ("example.com", "mail.example.org", "corp.example.net", "uni.example.edu")
TICKET_PROJECTS: Final = ("OPS", "WEB", "API", "DATA", "INFRA", "MOBILE", "SEC", "BILL")
SOURCES: Final = ("conversation", "tool_call", "auto_discovery", "user_explicit")
SOURCE_WEIGHTS: Final = (60, 15, 10, 15)

_HUMP = re.compile(r"_([a-z0-9])")


@dataclass(frozen=True, slots=True)
class FactSeed:
    """One fact as the generator makes it; ``identifier`` is an exact token a user might type
    to find it (a host, an address, a ticket), if it has one."""

    category: str
    key: str
    value: str
    identifier: str | None = None


def camel_spelling(key: str) -> str:
    """``project_apollo_repo`` as ``projectApolloRepo``: another spelling of the same key."""
    return _HUMP.sub(lambda m: m.group(1).upper(), key)


def _phrase(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _date(rng: random.Random) -> str:
    day = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=rng.randrange(900))
    return day.strftime("%Y-%m-%d")


def _host(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}-{rng.randrange(100, 10000)}"


def _preference(rng: random.Random) -> FactSeed:
    match rng.randrange(4):
        case 0:
            return FactSeed(
                "preferences",
                "editor",
                f"{rng.choice(EDITORS)} with the {rng.choice(THEMES)} theme and "
                f"{rng.choice(WORDS)} plugins",
            )
        case 1:
            return FactSeed(
                "preferences", "shell", f"{rng.choice(SHELLS)} with {_phrase(rng, 1, 3)}"
            )
        case 2:
            thing = rng.choice(THINGS)
            return FactSeed("preferences", f"favorite_{thing}", _phrase(rng, 1, 3))
        case _:
            word = rng.choice(WORDS)
            return FactSeed("preferences", f"{word}_setting", f"prefers {_phrase(rng, 2, 6)}")


def _project(rng: random.Random) -> FactSeed:
    name = f"{rng.choice(WORDS)}{rng.choice(('', '-api', '-web', '-cli', '-etl'))}"
    slug = name.replace("-", "_")
    match rng.randrange(3):
        case 0:
            org = rng.choice(WORDS)
            return FactSeed(
                "projects",
                f"project_{slug}_repo",
                f"git@github.com:{org}/{name}.git, main branch is {rng.choice(('main', 'trunk'))}",
                f"{org}/{name}",
            )
        case 1:
            return FactSeed(
                "projects",
                f"project_{slug}_deadline",
                f"due {_date(rng)}, {_phrase(rng, 3, 8)}",
            )
        case _:
            return FactSeed(
                "projects",
                f"project_{slug}_stack",
                f"{rng.choice(LANGS)} with {rng.choice(FRAMEWORKS)} on {rng.choice(DATABASES)}",
            )


def _infrastructure(rng: random.Random) -> FactSeed:
    host = _host(rng)
    slug = host.replace("-", "_")
    match rng.randrange(3):
        case 0:
            return FactSeed(
                "infrastructure",
                f"{slug}_port",
                f"{host}.internal listens on port {rng.randrange(1024, 65535)}",
                f"{host}.internal",
            )
        case 1:
            ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            return FactSeed("infrastructure", f"{slug}_ip", f"{host} has address {ip}", ip)
        case _:
            db = rng.choice(WORDS)
            url = f"postgres://app@{host}:5432/{db}"
            return FactSeed("infrastructure", f"{db}_database_url", url, url)


def _contact(rng: random.Random) -> FactSeed:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    match rng.randrange(3):
        case 0:
            email = f"{first}.{last}@{rng.choice(DOMAINS)}"
            return FactSeed("contacts", f"{first}_{last}_email", email, email)
        case 1:
            phone = f"+1 555 {rng.randrange(1000, 10000)}"
            return FactSeed("contacts", f"{first}_{last}_phone", phone, phone)
        case _:
            return FactSeed(
                "contacts",
                f"{first}_{last}_birthday",
                f"{_date(rng)[5:]}, likes {_phrase(rng, 1, 3)}",
            )


def _work(rng: random.Random) -> FactSeed:
    if rng.random() < 0.6:
        ticket = f"{rng.choice(TICKET_PROJECTS)}-{rng.randrange(100, 10000)}"
        return FactSeed(
            "work",
            f"ticket_{ticket.lower().replace('-', '_')}",
            f"{ticket}: {_phrase(rng, 3, 9)}, status {rng.choice(STATUSES)}",
            ticket,
        )
    day, topic = rng.choice(WEEKDAYS), rng.choice(WORDS)
    return FactSeed(
        "work",
        f"meeting_{day}_{topic}",
        f"{rng.randrange(8, 18)}:00 with {rng.choice(FIRST_NAMES)} about {topic} "
        f"{_phrase(rng, 1, 4)}",
    )


def _personal(rng: random.Random) -> FactSeed:
    match rng.randrange(4):
        case 0:
            return FactSeed(
                "personal", "hometown", f"{rng.choice(CITIES)}, near the {rng.choice(WORDS)}"
            )
        case 1:
            pet = rng.choice(FIRST_NAMES)
            return FactSeed("personal", f"pet_{pet}", f"a {rng.choice(WORDS)} cat called {pet}")
        case 2:
            return FactSeed("personal", f"{rng.choice(HOBBIES)}_gear", _phrase(rng, 2, 6))
        case _:
            return FactSeed("health", f"allergy_{rng.choice(WORDS)}", f"mild, {_phrase(rng, 2, 5)}")


def _travel(rng: random.Random) -> FactSeed:
    city = rng.choice(CITIES)
    flight = f"{rng.choice(('LH', 'TP', 'BA', 'NH', 'AF'))}{rng.randrange(100, 10000)}"
    return FactSeed(
        "travel",
        f"trip_{city}_{rng.randrange(2024, 2027)}",
        f"flight {flight} on {_date(rng)}, hotel {rng.choice(WORDS)} {rng.choice(WORDS)}",
        flight,
    )


def _note(rng: random.Random) -> FactSeed:
    return FactSeed(
        "notes", f"note_{rng.choice(WORDS)}_{rng.randrange(10000)}", _phrase(rng, 6, 24)
    )


KINDS: Final[tuple[tuple[Callable[[random.Random], FactSeed], int], ...]] = (
    (_preference, 10),
    (_project, 15),
    (_infrastructure, 15),
    (_contact, 12),
    (_work, 15),
    (_personal, 8),
    (_travel, 5),
    (_note, 20),
)


def new_fact(rng: random.Random, taken: set[tuple[str, str]]) -> FactSeed:
    """A fact whose (category, key) is not in ``taken`` (which it joins)."""
    makers = [maker for maker, _ in KINDS]
    weights = [weight for _, weight in KINDS]
    while True:
        seed = rng.choices(makers, weights)[0](rng)
        if (seed.category, seed.key) not in taken:
            taken.add((seed.category, seed.key))
            return seed


@dataclass(frozen=True, slots=True)
class SeededRow:
    """A row for the bulk load: a fact with its owner, provenance and times."""

    id: int
    user_id: uuid.UUID
    fact: FactSeed
    source: str
    confidence: int
    expires_at: datetime | None
    merged_into: int | None
    updated_at: datetime


@dataclass(slots=True)
class FactSet:
    users: list[uuid.UUID]
    rows: list[SeededRow]
    visible: dict[uuid.UUID, list[FactSeed]]
    """Each user's visible facts, for the upserts and queries that follow the load."""
    taken: dict[uuid.UUID, set[tuple[str, str]]]

    def sizes(self) -> list[int]:
        return sorted(len(facts) for facts in self.visible.values())


def user_sizes(rng: random.Random, users: int, total: int) -> list[int]:
    """Log-normal sizes summing to ``total``: a few users hold a lot, most hold a few dozen."""
    raw = [math.exp(rng.gauss(0.0, 1.0)) for _ in range(users)]
    scale = total / sum(raw)
    sizes = [max(3, round(r * scale)) for r in raw]
    drift = total - sum(sizes)
    order = sorted(range(users), key=lambda i: -sizes[i])
    step = 1 if drift > 0 else -1
    i = 0
    while drift:
        j = order[i % users]
        if sizes[j] + step >= 3:
            sizes[j] += step
            drift -= step
        i += 1
    return sizes


def build_fact_set(
    rng: random.Random, *, users: int, facts: int, hidden_share: float, expiring_share: float
) -> FactSet:
    """``facts`` visible facts over ``users`` users, plus ``hidden_share`` of them again as older
    spellings hidden behind the visible row; ``expiring_share`` carry an expiry (half passed)."""
    now = datetime.now(UTC)
    user_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(users)]
    visible: dict[uuid.UUID, list[FactSeed]] = {}
    taken: dict[uuid.UUID, set[tuple[str, str]]] = {}
    rows: list[SeededRow] = []
    hidden: list[SeededRow] = []
    next_id = 1
    for uid, size in zip(user_ids, user_sizes(rng, users, facts), strict=True):
        keys: set[tuple[str, str]] = set()
        mine = [new_fact(rng, keys) for _ in range(size)]
        visible[uid], taken[uid] = mine, keys
        for fact in mine:
            source = rng.choices(SOURCES, SOURCE_WEIGHTS)[0]
            expires_at = None
            if rng.random() < expiring_share:
                expires_at = now + timedelta(days=rng.uniform(-60, 60))
            updated_at = now - timedelta(days=rng.uniform(0, 700))
            row = SeededRow(
                next_id, uid, fact, source, rng.randrange(60, 100), expires_at, None, updated_at
            )
            rows.append(row)
            next_id += 1
            if rng.random() < hidden_share:
                older = FactSeed(fact.category, camel_spelling(fact.key), _phrase(rng, 2, 6))
                hidden.append(
                    SeededRow(
                        0, uid, older, source, 70, None, row.id, updated_at - timedelta(days=3)
                    )
                )
    for row in hidden:
        rows.append(
            SeededRow(
                next_id,
                row.user_id,
                row.fact,
                row.source,
                row.confidence,
                row.expires_at,
                row.merged_into,
                row.updated_at,
            )
        )
        next_id += 1
    return FactSet(users=user_ids, rows=rows, visible=visible, taken=taken)
