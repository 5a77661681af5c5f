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

PERMISSION_MAX_CHARS: Final = 200
"""Longest permission name request_context accepts."""

SESSION_ID_MAX_CHARS: Final = 200
"""Longest session id accepted anywhere (a session id is caller-chosen text)."""

MAX_TEXT_CHARS: Final = 100_000
"""Longest category/key/value/query text accepted; longer input is refused, not truncated."""

FLOAT32_MAX: Final = 3.4028234663852886e38
"""pgvector stores single-precision floats: a larger value cannot be written."""
