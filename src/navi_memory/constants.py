"""Numbers the spec fixes: one constant, one place.

Tunables a deployment may change live in ``config.Settings``; these are part of the contract.
"""

from __future__ import annotations

from typing import Final

EMBEDDING_DIM: Final = 768
"""Width of every ``vector`` column (nomic-embed-text)."""

FACT_MAX_DISTANCE: Final = 0.3
"""search_facts: a vector hit must lie closer than this cosine distance."""

CHUNK_MAX_DISTANCE: Final = 0.45
"""search_chunks: a vector hit must lie closer than this cosine distance."""

MAX_BREADCRUMBS: Final = 40
"""Breadcrumbs attached to the chunks of one compression, most important first."""

SUMMARY_MAX_KEYS: Final = 30
"""What the summary prompt asks for on its KEYS: line."""

INJECTED_LEDGER_MAX: Final = 100
"""Automatic recall remembers this many delivered chunk ids per session."""

MIN_PGVECTOR: Final = (0, 8, 0)
"""Iterative index scans (hnsw.iterative_scan) arrived in pgvector 0.8.0."""

PERMISSION_READ_ALL: Final = "navi.memory.read_all"
"""The permission a global (all users) read needs."""

MAX_TEXT_CHARS: Final = 100_000
"""Longest category/key/value/query text accepted; longer input is refused, not truncated."""

FLOAT32_MAX: Final = 3.4028234663852886e38
"""pgvector stores single-precision floats: a larger value cannot be written."""

# --- unified search (memory.search, the memory_search tool) -----------------------------------

SEARCH_K_MIN: Final = 1
SEARCH_K_MAX: Final = 20
"""Hits per store in unified search; ``k`` outside this range is clamped, never refused."""

SEARCH_K_DEFAULT: Final = 5

SKETCH_SCOPE: Final = "scratchpad"
"""The kv_store scope unified search reads sketches from (the scratchpad's)."""

FRESHNESS_MIN_SHARED_WORDS: Final = 2
"""A raw excerpt is superseded by a newer fact sharing at least this many content words."""

HIT_TEXT_MAX_CHARS: Final = 1500
"""format_hits cuts a hit's text (a chunk's verbatim text, a long value) here, marking the cut."""

QUERY_ECHO_MAX_CHARS: Final = 200
"""format_hits echoes at most this much of the query in its header."""
