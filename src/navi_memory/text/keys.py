"""Key spelling: the deterministic rule that decides when two fact keys name the same thing.

Used by fact dedupe (``upsert_fact(dedupe=True)``); docs/memory.md ("Key spellings") has the rule.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Final, TypeVar

__all__ = [
    "CHOICES",
    "DROPPED_MODIFIERS",
    "PHRASES",
    "category_fold",
    "normalize_key",
    "same_key",
    "stored_category",
]

# camelCase and PascalCase humps: "preferredLanguage", "HTTPPort" -> "HTTP Port"; not after one
# lowercase letter that starts a word ("iOS", "iPhone", "eMail" are words, not "i OS").
# An acronym's plural is the acronym's ("userIDs", "bookmarkURLs", "SSDs": not "I Ds").
_CAMEL_BOUNDARY = re.compile(
    r"(?<=[a-z0-9])(?<![^a-zA-Z0-9][a-z])(?<!^[a-z])(?=[A-Z])"
    r"|(?<=[A-Z])(?=[A-Z][a-z])(?![A-Z]s(?![a-z]))"
)
# Apostrophes as keyboards and word processors write them; a possessive "'s" goes whole
# ("Marie's_birthday" is Marie's, not "maries" made singular).
_POSSESSIVE = re.compile(r"['’‘ʼ][sS](?![^\W_])")
_APOSTROPHES = re.compile(r"['’‘ʼ]")
# Language names made of one letter and a symbol, which the separators would strip to the letter.
_SHARP = re.compile(r"(?<![A-Za-z0-9])([A-Za-z])#(?![A-Za-z0-9])")
_PLUS_PLUS = re.compile(r"(?<=[A-Za-z])\+\+")
# Brands written with a hump over a table word or a modifier ("MySQL" is not "my SQL", nor
# "WhatsApp" "whats app"): read as one word before humps are split. Written apart
# ("my_sql_experience") they are words of their own.
_BRANDS = re.compile(
    r"(?<![A-Za-z])(?i:mysql|mypy|whatsapp|mongodb|mariadb|dynamodb|couchdb|influxdb|duckdb|"
    r"macos|watchos|ipados|tvos|chromeos|nodejs|vuejs|nextjs|devops|github|gitlab|linkedin|"
    r"youtube|postgresql|myspace|k8s)(?![a-z])"
)

PHRASES: Final[Mapping[tuple[str, ...], tuple[str, ...]]] = {
    # British -> American spelling
    ("colour",): ("color",),
    ("favourite",): ("favorite",),
    ("organisation",): ("organization",),
    ("licence",): ("license",),
    ("centre",): ("center",),
    ("programme",): ("program",),
    ("behaviour",): ("behavior",),
    ("flavour",): ("flavor",),
    ("honour",): ("honor",),
    ("neighbour",): ("neighbor",),
    ("neighbourhood",): ("neighborhood",),
    ("humour",): ("humor",),
    ("labour",): ("labor",),
    ("catalogue",): ("catalog",),
    ("dialogue",): ("dialog",),
    ("metre",): ("meter",),
    ("litre",): ("liter",),
    ("theatre",): ("theater",),
    ("defence",): ("defense",),
    ("grey",): ("gray",),
    ("jewellery",): ("jewelry",),
    ("travelling",): ("traveling",),
    ("mum",): ("mother",),
    ("mom",): ("mother",),
    ("dad",): ("father",),
    ("mommy",): ("mother",),
    ("daddy",): ("father",),
    ("grandma",): ("grandmother",),
    ("granny",): ("grandmother",),
    ("grandpa",): ("grandfather",),
    ("kid",): ("child",),
    ("postgresql",): ("postgres",),
    ("k8s",): ("kubernetes",),
    # abbreviations
    ("os",): ("operating", "system"),
    ("tz",): ("timezone",),
    ("lang",): ("language",),
    ("pref",): ("preference",),
    ("addr",): ("address",),
    ("tel",): ("phone",),
    ("telephone",): ("phone",),
    ("dob",): ("birth", "date"),
    ("bday",): ("birth", "date"),
    ("db",): ("database",),
    ("fav",): ("favorite",),
    ("fave",): ("favorite",),
    ("num",): ("number",),
    ("qty",): ("quantity",),
    ("dept",): ("department",),
    ("org",): ("organization",),
    ("msg",): ("message",),
    ("info",): ("information",),
    ("pw",): ("password",),
    ("passwd",): ("password",),
    ("dir",): ("directory",),
    ("repo",): ("repository",),
    ("env",): ("environment",),
    ("cfg",): ("configuration",),
    ("config",): ("configuration",),
    ("ver",): ("version",),
    ("pkg",): ("package",),
    ("yr",): ("year",),
    ("mob",): ("mobile",),
    ("cell",): ("mobile",),
    ("fname",): ("first", "name"),
    ("firstname",): ("first", "name"),
    ("forename",): ("first", "name"),
    ("lname",): ("last", "name"),
    ("lastname",): ("last", "name"),
    ("surname",): ("last", "name"),
    # one thing written as one word or two
    ("time", "zone"): ("timezone",),
    ("e", "mail"): ("email",),
    ("email", "address"): ("email",),
    ("user", "name"): ("username",),
    ("nick", "name"): ("nickname",),
    ("preferred", "name"): ("nickname",),
    # a preferred first, given or full name is the name one goes by, not the legal one: with
    # "preferred" dropped it would merge with first_name / full_name and hide it
    ("preferred", "first", "name"): ("nickname",),
    ("preferred", "given", "name"): ("nickname",),
    ("preferred", "full", "name"): ("nickname",),
    ("given", "name"): ("first", "name"),
    ("family", "name"): ("last", "name"),
    ("phone", "number"): ("phone",),
    ("cell", "phone"): ("mobile", "phone"),
    ("mobile", "number"): ("mobile", "phone"),
    ("birthdate",): ("birth", "date"),
    ("birthday",): ("birth", "date"),
    ("home", "town"): ("hometown",),
    ("web", "site"): ("website",),
    ("zip",): ("postal", "code"),
    ("zip", "code"): ("postal", "code"),
    ("zipcode",): ("postal", "code"),
    ("postcode",): ("postal", "code"),
    ("post", "code"): ("postal", "code"),
    ("mac", "os"): ("macos",),
    ("watch", "os"): ("watchos",),
    ("ipad", "os"): ("ipados",),
    ("tv", "os"): ("tvos",),
    ("chrome", "os"): ("chromeos",),
    ("mongo", "database"): ("mongodb",),
    ("maria", "database"): ("mariadb",),
    ("dynamo", "database"): ("dynamodb",),
    ("couch", "database"): ("couchdb",),
    ("influx", "database"): ("influxdb",),
    ("duck", "database"): ("duckdb",),
    ("whats", "app"): ("whatsapp",),
    ("cpp",): ("cplusplus",),
    ("phone", "no"): ("phone",),
    ("mobile", "no"): ("mobile", "phone"),
    ("passport", "no"): ("passport", "number"),
    # a modifier that is part of the name: a primary school is not the school
    ("primary", "school"): ("primaryschool",),
    ("primary", "care"): ("primarycare",),
    ("main", "course"): ("maincourse",),
    ("main", "dish"): ("maindish",),
    ("user", "agent"): ("useragent",),
    ("default", "password"): ("defaultpassword",),
    ("user", "count"): ("usercount",),
    ("user", "experience"): ("userexperience",),
    ("user", "interface"): ("userinterface",),
    ("primary", "color"): ("primarycolor",),
    ("current", "account"): ("currentaccount",),
}
"""Token phrases rewritten to one canonical spelling, longest match first, left to right.
Every right-hand side is already canonical: rewriting it again changes nothing. A phrase of
several words also holds written as one (``phonenumber`` is ``phone number``)."""

_REWRITES: Final[Mapping[tuple[str, ...], tuple[str, ...]]] = {
    **{
        ("".join(phrase),): replacement
        for phrase, replacement in PHRASES.items()
        if len(phrase) > 1 and ("".join(phrase),) != replacement
    },
    **PHRASES,
}

DROPPED_MODIFIERS: Final = frozenset(
    {
        "my",
        "the",
        "preferred",
        "preference",
        "current",
        "primary",
        "default",
        "main",
        "user",
        "usual",
    }
)
"""Tokens that qualify a key without changing what it names: ``preferred_language`` is the
language. ``favorite`` is deliberately absent: ``favorite_color`` is a taste, ``color`` may be
the color of the user's car."""

ONE_OF_SEVERAL: Final = frozenset(
    {"branch", "port", "version", "region", "profile", "key", "value"}
)
"""Settings of which the default, main or primary one is one of several: right before such a
word ending the key, ``default``, ``main`` and ``primary`` are kept (``default_branch`` is not
the branch one is on, ``postgres_default_port`` not the port in use, ``primary_key`` not a
key); ``current`` is still dropped (``python_current_version`` is the python version)."""

_KEPT_BEFORE_ONE_OF_SEVERAL: Final = frozenset({"default", "main", "primary"})

_SETTING_TAILS: Final = frozenset({"name", "number", "id"})
"""Last words that name a setting's label, not another thing: ``default_branch_name`` is the
default branch's name."""

CHOICES: Final = frozenset(
    {
        "language", "editor", "browser", "shell", "terminal", "ide", "theme", "font", "mode",
        "layout", "currency", "unit", "timezone", "airline", "tone", "format", "engine",
        "genre", "cuisine", "diet", "pronoun", "greeting", "method", "tool", "framework",
        "library", "database", "system", "locale", "notation", "indentation", "voice", "app",
        "platform", "linter", "formatter", "scheme", "keyboard", "llm", "transport", "workflow",
    }
)  # fmt: skip
"""Things one chooses, whose preferred one is the one: ``preferred_language`` and
``language_preference`` are the language. Only before or after these are ``preferred`` and
``preference`` dropped: a preferred location, salary, car or partner is a wish, not the one the
user has (``preferred_location`` is not where they live)."""

_CHOICE_PAIRS: Final = frozenset(
    {
        ("package", "manager"), ("password", "manager"), ("email", "client"),
        ("cloud", "provider"), ("streaming", "service"), ("communication", "channel"),
        ("contact", "method"), ("search", "engine"),
    }
)  # fmt: skip
"""Choices named by two words whose last alone is no choice (a manager may be a person)."""

_PREFERRED_CONTACTS: Final = frozenset({"email", "phone", "address"})
"""Contacts whose preferred one is the one to use: ``preferred_email`` is the email (but
``email_preference`` is how they like to be emailed)."""

_TWO_WORD_HEADS: Final = frozenset(
    {
        ("first", "name"), ("last", "name"), ("middle", "name"), ("full", "name"),
        ("maiden", "name"), ("birth", "date"), ("start", "date"), ("end", "date"),
        ("due", "date"), ("expiry", "date"), ("expiration", "date"), ("account", "number"),
        ("id", "number"), ("passport", "number"), ("policy", "number"), ("license", "number"),
        ("serial", "number"), ("tax", "number"), ("home", "address"), ("work", "address"),
        ("mobile", "phone"),
    }
)  # fmt: skip
"""Heads of two words that "A of B" moves whole."""

_COMMON_PLURALS: Final = frozenset(
    {
        "kids", "friends", "pets", "parents", "dogs", "cats", "siblings", "brothers", "sisters",
        "sons", "daughters", "cousins", "colleagues", "coworkers", "clients", "customers",
        "users", "employees", "students", "teachers", "projects", "skills", "hobbies",
        "languages", "movies", "books", "songs", "foods", "drinks", "allergies", "medications",
        "accounts", "devices", "cars", "vehicles", "servers", "apps", "tools", "games", "shows",
        "bands", "artists", "sports", "teams", "countries", "cities", "places", "restaurants",
        "contacts", "emails", "phones", "addresses", "names", "dates", "files", "documents",
        "orders", "subscriptions", "plants", "birthdays", "grandchildren",
        # relations in a possessive written without its apostrophe ("mothers_maiden_name")
        "mothers", "fathers", "moms", "mums", "dads", "wifes", "husbands", "partners",
        "grandmothers", "grandfathers", "grandmas", "grandpas", "aunts", "uncles", "nieces",
        "nephews", "grandkids", "girlfriends", "boyfriends", "drivers", "doctors", "bosses",
    }
)  # fmt: skip
"""Plurals made singular wherever they stand (a word before the last is otherwise left as it
is, since a name may end in "s"): "kids_names" is "kid_name"."""

_IRREGULAR_PLURALS: Final = {
    "children": "child",
    "childrens": "child",  # "childrens_names": children's, the apostrophe left out
    "people": "person",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "aliases": "alias",
    "statuses": "status",
    "buses": "bus",
    "analyses": "analysis",
    "indices": "index",
    "criteria": "criterion",
    "diagnoses": "diagnosis",
    "hypotheses": "hypothesis",
    "crises": "crisis",
    "viruses": "virus",
    "knives": "knife",
    "wives": "wife",
    "potatoes": "potato",
    "tomatoes": "tomato",
    "heroes": "hero",
    "ids": "id",
    # acronyms of two letters, which the rule's three-letter floor keeps as they are
    "ips": "ip",
    "vms": "vm",
    "pcs": "pc",
    "tvs": "tv",
    "dbs": "db",
    "lenses": "lens",
    "bonuses": "bonus",
    "menus": "menu",
    "emojis": "emoji",
    "skis": "ski",
    "taxis": "taxi",
    "yrs": "yr",
}

# Words that end in "s" without being plurals; the singular rule must leave them alone.
_NOT_PLURAL: Final = frozenset(
    {
        "news", "series", "species", "status", "physics", "mathematics", "economics", "politics",
        "ethics", "analytics", "linguistics", "genetics", "electronics", "graphics", "athletics",
        "gymnastics", "lens", "chaos", "bias", "alias", "canvas", "atlas", "gas", "bus", "plus",
        "thus", "yes", "always", "perhaps", "various", "previous", "diabetes", "glasses", "jeans",
        "pants", "shorts", "trousers", "clothes", "scissors", "macos", "ios", "windows", "aws",
        "dns", "kubernetes", "postgres", "redis", "jenkins", "sms", "gps", "mms", "https",
        "whats", "devops", "watchos", "ipados", "tvos", "chromeos", "nodejs", "vuejs", "nextjs",
        "reactjs", "expressjs",
    }
)  # fmt: skip

# Nouns whose singular ends in "ie", so "movies" is "movie", not "movy".
_IE_SINGULARS: Final = frozenset(
    {
        "movie", "cookie", "pie", "tie", "lie", "calorie", "zombie", "rookie", "selfie",
        "smoothie", "brownie", "genie", "hippie", "prairie", "goalie", "sweetie", "freebie",
        "hoodie", "foodie", "veggie", "goodie", "newbie", "techie", "roomie", "bestie",
        "indie", "birdie", "auntie", "cutie", "bookie",
    }
)  # fmt: skip

_T = TypeVar("_T")

_MAX_PHRASE = max(len(phrase) for phrase in PHRASES)
_MAX_ROUNDS: Final = 8
"""Rounds of rewriting before we stop; the table converges in two or three."""


def _singular(token: str) -> str:
    # Conservative on purpose: a wrong singular only costs a missed merge when both spellings
    # go through the same rule, but it must never turn two different words into one.
    if token in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[token]
    if len(token) <= 3 or token in _NOT_PLURAL or not token.isalpha():
        return token
    if token.endswith("ies"):
        stem = token[:-3]
        return stem + "ie" if stem + "ie" in _IE_SINGULARS else stem + "y"
    if token.endswith("aches") and not token.endswith(("eaches", "oaches")):
        return token[:-1]  # headaches, caches (but beaches, coaches below)
    if token.endswith(("sses", "shes", "ches", "xes")):
        return token[:-2]
    if token.endswith(("ss", "us", "is")) or not token.endswith("s"):
        return token
    return _IRREGULAR_PLURALS.get(token[:-1], token[:-1])


def _fold(text: str) -> str:
    # Case folding can leave text that NFKC changes again (and vice versa); repeat until
    # stable so the canonical form of a canonical form is itself.
    for _ in range(_MAX_ROUNDS):
        folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
        if folded == text:
            break
        text = folded
    return text


def _tokens(key: str) -> list[str]:
    text = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", key))
    text = _PLUS_PLUS.sub("plusplus", _SHARP.sub(r"\1sharp", _APOSTROPHES.sub("", text)))
    text = _BRANDS.sub(lambda brand: brand.group(0).lower(), text)
    text = _CAMEL_BOUNDARY.sub(" ", text)
    # Letters, digits and the combining marks inside words (a Devanagari vowel sign is part of
    # its word: "पिता" is not "पता"); anything else separates.
    kept = "".join(
        char if char.isalnum() or unicodedata.category(char)[0] == "M" else " "
        for char in _fold(text)
    )
    return kept.split()


def _reorder_of(tokens: list[str]) -> list[str]:
    # "date_of_birth" is the birth date: "A of B" reads as "B A", A the word before "of"
    # ("mom_date_of_birth" is mom's birth date; "name_of_wife_of_brother" the brother's wife's).
    # A loop, not recursion: a key of a thousand "of"s (an application's SQL) must not raise.
    heads: list[str] = []
    tails: list[list[str]] = []
    while "of" in tokens:
        at = tokens.index("of")
        # A two-word head moves whole: "first_name_of_wife" is the wife's first name.
        start = max(at - (2 if tuple(tokens[at - 2 : at]) in _TWO_WORD_HEADS else 1), 0)
        heads += tokens[:start]
        tails.append(tokens[start:at])
        tokens = tokens[at + 1 :]
        if tails[-1] == ["number"] and tokens:
            # "number_of_passports" counts them: the passport count, not the passport number
            tails[-1] = ["count"]
            tokens[-1] = _singular(tokens[-1])
    return heads + tokens + [word for tail in reversed(tails) for word in tail]


def _drop_modifiers(tokens: list[str]) -> list[str]:
    # A modifier qualifies the word after it; last, it is the thing named ("db_user" is the
    # database's user, not the database), "preference" alone excepted ("language_preference").
    last = len(tokens) - 1
    # The setting a default, main or primary one is one of: the last word, or the word before
    # a last "name", "number" or "id" ("default_branch_name", "default_port_number").
    setting = last - 1 if last > 0 and tokens[last] in _SETTING_TAILS else last
    one_of_several = setting >= 0 and tokens[setting] in ONE_OF_SEVERAL
    kept = [
        word
        for at, word in enumerate(tokens)
        if word not in DROPPED_MODIFIERS
        or (at == last and word != "preference")
        or (word == "user" and at > 0)  # "app_user_count" counts the app's users
        # anywhere before it: "default_postgres_port" as "postgres_default_port"
        or (word in _KEPT_BEFORE_ONE_OF_SEVERAL and at < setting and one_of_several)
    ]
    if one_of_several:
        # One place for it, the front: "postgres_default_port" is "default_postgres_port".
        front = [word for word in kept if word in _KEPT_BEFORE_ONE_OF_SEVERAL]  # all before it
        if front:
            rest = [word for word in kept if word not in _KEPT_BEFORE_ONE_OF_SEVERAL]
            kept = front[:1] + rest if len(set(front)) == 1 else kept
    if not kept:
        return tokens
    choice = kept[-1] in CHOICES or tuple(kept[-2:]) in _CHOICE_PAIRS
    contact = kept[-1] in _PREFERRED_CONTACTS
    if "preference" in tokens and not choice:
        if contact:  # "email_preference": how to email them
            kept = [*kept, "preference"]
        else:  # "location_preference" is a wish, the preferred location: either way, one key
            kept = ["preferred", *(word for word in kept if word != "preferred")]
    if "preferred" in tokens and not (choice or contact):
        kept = [word for word in tokens if word in kept or word == "preferred"]
    return kept


def _rewrite_phrases(tokens: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for size in range(min(_MAX_PHRASE, len(tokens) - i), 0, -1):
            replacement = _REWRITES.get(tuple(tokens[i : i + size]))
            if replacement is not None:
                out.extend(replacement)
                i += size
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def _round(tokens: list[str]) -> list[str]:
    # Only the noun the key names (its last word, once "of" has moved it there) is made
    # singular by the rule; a word before it by the irregular table and a list of common
    # plurals only: "lucas_birthday" and "birthday_of_lucas" are Lucas's, not Luca's, while
    # "kids_names" is "kid_name".
    # "num_children", "num_employees": a count, as "number_of_children" is ("num_child", a
    # singular after it, says no count; "number_plates" are plates). "no_of_children" is
    # "number_of_children".
    counted = (
        len(tokens) == 2
        and tokens[0] == "num"
        and (tokens[1] in _IRREGULAR_PLURALS or _singular(tokens[1]) != tokens[1])
    )
    tokens = [
        "number" if word == "no" and tokens[at + 1 : at + 2] == ["of"] else word
        for at, word in enumerate(tokens)
    ]
    tokens = [
        _IRREGULAR_PLURALS.get(word) or (_singular(word) if word in _COMMON_PLURALS else word)
        for word in tokens
    ]
    if counted:
        tokens = [_singular(tokens[1]), "count"]
    if len(tokens) > 1 and tokens[-1] == "no":
        tokens[-1] = "number"  # phone_no, account_no, passport_no
    # Phrases before "of" too: "phone_number_of_mom" is mom's phone, not mom's "phone number".
    tokens = _reorder_of(_rewrite_phrases(tokens))
    if tokens:
        tokens[-1] = _singular(tokens[-1])
    tokens = _drop_modifiers(_rewrite_phrases(tokens))
    if tokens and tokens[-1] == "mobile" and "preferred" not in tokens:
        # A key that ends in "mobile" ("mobile", "cell", "work_cell") names the phone: it is
        # "mobile_phone" written short. Not a preferred mobile ("mobile_preference": Android
        # or iOS, no phone number). "cell_carrier" stays "mobile_carrier".
        tokens.append("phone")
    return tokens


# Dedupe normalises every key of a category on each write: the same few keys again and again.
@functools.lru_cache(maxsize=8192)
def normalize_key(key: str) -> str:
    """The canonical spelling of a fact key: two keys name the same fact iff these are equal.

    Tokens (split on ``_ - . / space`` and camelCase humps, case-folded): phrases are
    rewritten by ``PHRASES`` (British spelling, abbreviations, compounds), ``A of B`` becomes
    ``B A`` (A the word or two-word head before "of"), the last token is made singular (others
    only by the irregular table and a list of common plurals), phrases are rewritten again, and
    ``DROPPED_MODIFIERS`` are removed where they qualify a word after them; the round repeats
    until nothing changes (a rewrite or a dropped modifier can bring two tokens of a phrase
    together). The result is the tokens joined with no separator, so a word split at a
    camelCase hump is the word written whole (``GitHub_username`` and ``github_username``);
    "_" stays between two numbers and before a last word that only looks plural; a key with no
    tokens falls back to its lowercased self. The result read as a key again gives itself:
    ``normalize_key`` is idempotent. docs/memory.md ("Key spellings") has the whole rule.
    """
    # The form read as a key again could come out otherwise (_joined keeps the cases it knows
    # from it); repeat until it is its own form.
    return _stable(_form, _form(key))


def _stable(step: Callable[[_T], _T], value: _T) -> _T:
    """``step`` applied until it changes nothing (at most ``_MAX_ROUNDS`` times)."""
    for _ in range(_MAX_ROUNDS):
        again = step(value)
        if again == value:
            break
        value = again
    return value


def _form(key: str) -> str:
    tokens = _stable(_round, _tokens(key))
    # Joined with no separator: a word split at a camelCase hump ("GitHub", "phoneNumber")
    # is the same key as the word written whole ("github", "phonenumber"). Between two
    # numbers "_" stays: server_10.1.11.1 is not server_10.11.1.1.
    return _joined(tokens) or key.strip().lower()


def _joined(tokens: list[str]) -> str:
    joined = ""
    for token in tokens:
        if joined and joined[-1].isdigit() and token[0].isdigit():
            joined += "_"
        joined += token
    # Read again, the joined word is made singular as a whole: "use_https" would become
    # "usehttp" (the http setting), the last word's protection ("https", "news", "ms" are no
    # plurals) lost. Such a last word keeps its "_".
    if len(tokens) > 1:
        last = joined.rsplit("_", 1)[-1]
        if _singular(last) != last and not joined.endswith("_" + tokens[-1]):
            joined = f"{joined[: -len(tokens[-1])]}_{tokens[-1]}"
    return joined


def same_key(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are spellings of the same fact key (equal canonical forms)."""
    return normalize_key(a) == normalize_key(b)


def category_fold(name: str) -> str:
    """A category compared but for case, surrounding blanks and Unicode form (NFC again after
    lower(): a capital can lower to a base letter and a combining mark)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).strip().lower())


async def stored_category(
    category: str,
    key: str,
    stored: Sequence[str],
    keys_of: Callable[[str], Awaitable[Collection[str]]],
) -> str:
    """The category a write of ``key`` under ``category`` goes into, of the user's ``stored``
    categories (the fullest first): ``category`` when the user holds it so or under no other
    case; else the stored spelling ("Preferences", an application's write), so the key's
    other spellings there are merged instead of left beside it; of several stored spellings,
    the one holding a spelling of ``key`` (``keys_of(name)``: that spelling's keys), else the
    fullest. The memory tool's save and the extractor both write by it. Spellings differ by
    case and by Unicode form (an application's decomposed "café" is the model's composed one)."""
    folded = category_fold(category)
    spellings = [name for name in stored if category_fold(name) == folded]
    if category in spellings or not spellings:
        return category
    if len(spellings) > 1:
        wanted = normalize_key(key)
        for name in spellings:
            if any(normalize_key(held) == wanted for held in await keys_of(name)):
                return name
    return spellings[0]
